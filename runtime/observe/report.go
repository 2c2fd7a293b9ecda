package observe

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/weir-stream/weir/control"
)

// FigureSource gives the figures of the tasks running on this replica. It
// is the one way the API and the reports read per-task figures, so that a
// new figure is added in one place.
type FigureSource interface {
	TaskFigures(now time.Time) []control.TaskFigures
}

// The metrics a GatheredFigures reads, by task (label "task", "<stage>/<i>").
const (
	MetricWatermark     = "weir_task_watermark_seconds"
	MetricRecordsIn     = "weir_task_records_in_total"
	MetricRecordsOut    = "weir_task_records_out_total"
	MetricBusy          = "weir_task_busy_ms_per_second"
	MetricBackpressured = "weir_task_backpressured_ms_per_second"
	MetricIdle          = "weir_task_idle_ms_per_second"
	// MetricLag is by topic and partition: a source task reads partition
	// i of every input topic (label "partition").
	MetricLag = "weir_source_lag_records"
)

// GatheredFigures reads the tasks' figures from the replica's Prometheus
// registry: every task with a weir_task_watermark_seconds series (every
// running task has one) and whatever else its task metrics say; a metric
// the registry lacks leaves its figure at 0. Rates are per second since
// the previous call. It is used by one goroutine at a time.
type GatheredFigures struct {
	Gatherer prometheus.Gatherer
	// SourceStage returns the name the job's source stage runs under, to
	// put a partition's lag on its task.
	SourceStage func() string
	Logger      *slog.Logger

	last   map[control.TaskID][2]float64 // records in, out at lastAt
	lastAt time.Time
}

// TaskFigures implements FigureSource.
func (g *GatheredFigures) TaskFigures(now time.Time) []control.TaskFigures {
	mfs, err := g.Gatherer.Gather()
	if err != nil && len(mfs) == 0 {
		g.Logger.Warn("gather the task metrics for the job's view", "err", err)
		return nil
	}
	byTask := map[control.TaskID]*control.TaskFigures{}
	totals := map[control.TaskID][2]float64{}
	var lag []*dto.Metric
	for _, mf := range mfs {
		name := mf.GetName()
		if name == MetricLag {
			lag = mf.GetMetric()
			continue
		}
		switch name {
		case MetricWatermark, MetricRecordsIn, MetricRecordsOut, MetricBusy, MetricBackpressured, MetricIdle:
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			id, err := control.ParseTaskID(label(m, "task"))
			if err != nil {
				continue
			}
			f := byTask[id]
			if f == nil {
				f = &control.TaskFigures{Task: id}
				byTask[id] = f
			}
			v := value(m)
			switch name {
			case MetricWatermark:
				f.WatermarkMS = int64(v * 1000)
			case MetricBusy:
				f.BusyMSPerSecond = v
			case MetricBackpressured:
				f.BackpressuredMSPerSecond = v
			case MetricIdle:
				f.IdleMSPerSecond = v
			case MetricRecordsIn:
				t := totals[id]
				t[0] = v
				totals[id] = t
			case MetricRecordsOut:
				t := totals[id]
				t[1] = v
				totals[id] = t
			}
		}
	}
	if g.SourceStage != nil {
		stage := g.SourceStage()
		for _, m := range lag {
			p, err := strconv.Atoi(label(m, "partition"))
			if err != nil {
				continue
			}
			if f := byTask[control.TaskID{Stage: stage, Index: p}]; f != nil {
				f.LagRecords += int64(value(m))
			}
		}
	}
	secs := now.Sub(g.lastAt).Seconds()
	out := make([]control.TaskFigures, 0, len(byTask))
	for id, f := range byTask {
		if prev, ok := g.last[id]; ok && secs > 0 {
			cur := totals[id]
			f.RecordsInPerSecond = max(0, cur[0]-prev[0]) / secs
			f.RecordsOutPerSecond = max(0, cur[1]-prev[1]) / secs
		}
		f.LagRecords = max(0, f.LagRecords)
		f.WatermarkMS = max(0, f.WatermarkMS)
		for _, x := range []*float64{&f.RecordsInPerSecond, &f.RecordsOutPerSecond, &f.BusyMSPerSecond, &f.BackpressuredMSPerSecond, &f.IdleMSPerSecond} {
			if math.IsNaN(*x) || math.IsInf(*x, 0) || *x < 0 {
				*x = 0
			}
		}
		out = append(out, *f)
	}
	g.last, g.lastAt = totals, now
	slices.SortFunc(out, func(a, b control.TaskFigures) int { return a.Task.Compare(b.Task) })
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// Self is what a Reporter says of its own replica.
type Self interface {
	ReplicaID() string
	Generation() uint64
	Coordinator() bool
}

// Sender sends a record to the ack topic (controltopic.AckWriter).
type Sender interface {
	Send(ctx context.Context, m control.Message) error
}

// Reporter writes this replica's control.ReplicaReport to the ack topic
// every Interval, until its context ends.
type Reporter struct {
	Self     Self
	Figures  FigureSource
	Sender   Sender
	Interval time.Duration
	Logger   *slog.Logger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Report builds one report.
func (r *Reporter) Report() control.ReplicaReport {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	t := now()
	rep := control.ReplicaReport{Replica: r.Self.ReplicaID(), TS: t.UnixMilli(), Gen: r.Self.Generation(), Coordinator: r.Self.Coordinator()}
	if fs := r.Figures.TaskFigures(t); len(fs) > 0 {
		rep.Tasks = fs
	}
	return rep
}

// Run reports every Interval until ctx ends, from the replica's first
// generation on (before it, the control topics may not exist yet). A
// failed send is logged (at most once a minute) and the next report tried
// in time.
func (r *Reporter) Run(ctx context.Context) {
	tick := time.NewTicker(r.Interval)
	defer tick.Stop()
	var warned time.Time
	for {
		var err error
		if r.Self.Generation() > 0 {
			sctx, cancel := context.WithTimeout(ctx, r.Interval)
			err = r.Sender.Send(sctx, r.Report())
			cancel()
		}
		if err != nil && ctx.Err() == nil && time.Since(warned) > time.Minute {
			warned = time.Now()
			r.Logger.Warn("replica report not written to the ack topic; the job's view on other replicas misses this replica's figures", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
