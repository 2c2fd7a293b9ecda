package task

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/eventtime"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/kafkaio/shuffle"
	"github.com/weir-stream/weir/runtime/input"
)

// Metrics are the metrics of a replica's tasks beyond their sources, sinks
// and state: shuffles and alignment. One value is shared by the replica's
// tasks; a nil *Metrics records nothing.
type Metrics struct {
	Shuffle    *shuffle.Metrics
	alignment  *prometheus.HistogramVec
	startDelay *prometheus.HistogramVec
	dropped    *prometheus.CounterVec

	watermark, watermarkLag, idleInputs *prometheus.GaugeVec   // task
	recordsIn, recordsOut               *prometheus.CounterVec // task
	busy, backpressured, idleTime       *prometheus.GaugeVec   // stage, task
	late                                *prometheus.CounterVec // operator
	recordErrors                        *prometheus.CounterVec // operator, policy

	mu sync.Mutex
	// owner is the generation whose task holds a task's series: a task's
	// Stop removes them only if no newer generation's task has them.
	owner map[string]uint64
}

// NewMetrics registers the task metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	sm, err := shuffle.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	m := &Metrics{
		Shuffle: sm,
		alignment: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "weir_task_alignment_duration_seconds",
			Help:    "Time from the first barrier of a checkpoint to the last one, in a downstream task that aligns barriers from its upstream tasks.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"stage"}),
		startDelay: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "weir_task_checkpoint_start_delay_seconds",
			Help:    "Time from the coordinator's trigger of a checkpoint to its barrier reaching a task (Flink's checkpoint start delay): in a source task the wait for the current batch, downstream also the records queued in the shuffle ahead of the barrier and the alignment.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18),
		}, []string{"stage"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_shuffle_dropped_records_total",
			Help: "Shuffle records a downstream task read and dropped, by reason: stale (an older generation's), replayed (read again after a seek back, already processed), skipped (of an input held by alignment: read again later).",
		}, []string{"stage", "reason"}),
		watermark: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weir_task_watermark_seconds",
			Help: "The task's current watermark, Unix seconds: no more records with an event time at or before it are expected. 0 until the task knows one, and for the tasks of a job without event time.",
		}, []string{"task"}),
		watermarkLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weir_task_watermark_lag_seconds",
			Help: "Wall clock minus the task's watermark, in seconds, updated every watermark interval. 0 until the task knows a watermark, and for the tasks of a job without event time.",
		}, []string{"task"}),
		idleInputs: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weir_task_idle_inputs",
			Help: "The task's inputs that are idle (a source partition without records for its idle timeout, a shuffle partition's upstream task whose inputs are all idle): they do not hold the watermark back.",
		}, []string{"task"}),
		recordsIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_task_records_in_total",
			Help: "Records the task's operator chain received: from its Kafka sources, or from its shuffle input (data records only, after the generation and alignment filters).",
		}, []string{"task"}),
		recordsOut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_task_records_out_total",
			Help: "Records the task's operator chain emitted, to its sinks and its shuffle outputs.",
		}, []string{"task"}),
		busy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weir_task_busy_ms_per_second",
			Help: "Milliseconds per second the task spent working (decoding, operators, state, timers, checkpoints): neither idle nor backpressured. Updated every second while the task runs.",
		}, []string{"stage", "task"}),
		backpressured: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weir_task_backpressured_ms_per_second",
			Help: "Milliseconds per second the task was blocked writing its output (a sink's or shuffle writer's produce buffer full): a stage downstream or the brokers hold it back. One write in 16 is timed. Updated every second.",
		}, []string{"stage", "task"}),
		idleTime: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weir_task_idle_ms_per_second",
			Help: "Milliseconds per second the task waited for input (its source partition or shuffle partitions had nothing to read). Updated every second.",
		}, []string{"stage", "task"}),
		late: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_late_records_total",
			Help: "Records an event-time operator (a window) dropped or sent to its late topic because every window they belong to had fired, by operator.",
		}, []string{"operator"}),
		recordErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_record_errors_total",
			Help: "Elements whose operator function failed and that the operator's error policy skipped (policy skip) or wrote to its dead-letter topic (policy dead-letter), by operator and policy. A failure under policy fail fails the task instead.",
		}, []string{"operator", "policy"}),
		owner: map[string]uint64{},
	}
	for _, c := range []prometheus.Collector{m.alignment, m.startDelay, m.dropped, m.watermark, m.watermarkLag, m.idleInputs, m.recordsIn, m.recordsOut, m.busy, m.backpressured, m.idleTime, m.late, m.recordErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) shuffleMetrics() *shuffle.Metrics {
	if m == nil {
		return nil
	}
	return m.Shuffle
}

// stageMetrics are the metrics of one downstream task, bound to its stage.
type stageMetrics struct {
	alignment                prometheus.Observer
	stale, replayed, skipped prometheus.Counter
	last                     input.Stats
}

func (m *Metrics) forStage(stage string) *stageMetrics {
	if m == nil {
		return nil
	}
	return &stageMetrics{
		alignment: m.alignment.WithLabelValues(stage),
		stale:     m.dropped.WithLabelValues(stage, "stale"),
		replayed:  m.dropped.WithLabelValues(stage, "replayed"),
		skipped:   m.dropped.WithLabelValues(stage, "skipped"),
	}
}

func (m *stageMetrics) observeAlignment(d time.Duration) {
	if m != nil {
		m.alignment.Observe(d.Seconds())
	}
}

// publish adds the core's counts since the last call (once per poll).
func (m *stageMetrics) publish(s input.Stats) {
	if m == nil {
		return
	}
	m.stale.Add(float64(s.Stale - m.last.Stale))
	m.replayed.Add(float64(s.Replayed - m.last.Replayed))
	m.skipped.Add(float64(s.Skipped - m.last.Skipped))
	m.last = s
}

// taskMetrics are the event-time metrics of one task.
type taskMetrics struct {
	m                    *Metrics
	stage, task          string
	gen                  uint64
	watermark, lag, idle prometheus.Gauge
	in, out              prometheus.Counter
	startDelay           prometheus.Observer
	lastLate             string
	lastLateCounter      prometheus.Counter
	// The counter of the last record error's operator and policy.
	lastErrOp      string
	lastErrPolicy  kafkaio.OnError
	lastErrCounter prometheus.Counter
}

// forTask returns the metrics of task (of stage), its event-time series
// present (at 0) from now on, whether or not the job uses event time, so
// that a dashboard has them from the start.
func (m *Metrics) forTask(stage, task string, gen uint64) *taskMetrics {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	m.owner[task] = max(m.owner[task], gen)
	m.mu.Unlock()
	tm := &taskMetrics{
		m: m, stage: stage, task: task, gen: gen,
		watermark:  m.watermark.WithLabelValues(task),
		lag:        m.watermarkLag.WithLabelValues(task),
		idle:       m.idleInputs.WithLabelValues(task),
		in:         m.recordsIn.WithLabelValues(task),
		out:        m.recordsOut.WithLabelValues(task),
		startDelay: m.startDelay.WithLabelValues(stage),
	}
	tm.watermark.Set(0)
	tm.lag.Set(0)
	tm.idle.Set(0)
	return tm
}

// busyTime returns the task's busy-time account, publishing to its gauges
// (present at 0 from now on).
func (tm *taskMetrics) busyTime() busyTime {
	if tm == nil {
		return busyTime{}
	}
	b := busyTime{
		on:       true,
		busyG:    tm.m.busy.WithLabelValues(tm.stage, tm.task),
		blockedG: tm.m.backpressured.WithLabelValues(tm.stage, tm.task),
		idleG:    tm.m.idleTime.WithLabelValues(tm.stage, tm.task),
	}
	b.busyG.Set(0)
	b.blockedG.Set(0)
	b.idleG.Set(0)
	return b
}

// publish sets the watermark gauges: wm in Unix ms (MinWatermark: none
// known), idle inputs, and the lag behind now.
func (tm *taskMetrics) publish(wm int64, idle int, now time.Time) {
	if tm == nil {
		return
	}
	tm.idle.Set(float64(idle))
	if wm == eventtime.MinWatermark {
		return
	}
	tm.watermark.Set(float64(wm) / 1000)
	tm.lag.Set(float64(now.UnixMilli()-wm) / 1000)
}

// count adds the records a batch brought in and the records emitted since
// the last call (*out, which it resets): once per batch, not per record.
func (tm *taskMetrics) count(in int, out *int) {
	if tm == nil {
		*out = 0
		return
	}
	if in > 0 {
		tm.in.Add(float64(in))
	}
	if *out > 0 {
		tm.out.Add(float64(*out))
		*out = 0
	}
}

// observeStartDelay observes the time a barrier took from the trigger to
// the task.
func (tm *taskMetrics) observeStartDelay(d time.Duration) {
	if tm == nil {
		return
	}
	tm.startDelay.Observe(max(d, 0).Seconds())
}

// onLate counts a late record of operator: stream.TaskContext.OnLate.
func (tm *taskMetrics) onLate(operator string) {
	if tm == nil {
		return
	}
	if operator != tm.lastLate || tm.lastLateCounter == nil {
		tm.lastLate, tm.lastLateCounter = operator, tm.m.late.WithLabelValues(operator)
	}
	tm.lastLateCounter.Inc()
}

// onRecordError counts an element that operator's policy skipped or sent
// to its dead-letter topic: stream.TaskContext.OnRecordError.
func (tm *taskMetrics) onRecordError(operator string, policy kafkaio.OnError) {
	if tm == nil {
		return
	}
	if operator != tm.lastErrOp || policy != tm.lastErrPolicy || tm.lastErrCounter == nil {
		tm.lastErrOp, tm.lastErrPolicy = operator, policy
		tm.lastErrCounter = tm.m.recordErrors.WithLabelValues(operator, string(policy))
	}
	tm.lastErrCounter.Inc()
}

// remove deletes the task's series, unless a newer generation's task of
// the same ID has taken them over (a replica may open it before the old
// one has stopped).
func (tm *taskMetrics) remove() {
	if tm == nil {
		return
	}
	m := tm.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.owner[tm.task] != tm.gen {
		return
	}
	delete(m.owner, tm.task)
	for _, v := range []*prometheus.GaugeVec{m.watermark, m.watermarkLag, m.idleInputs} {
		v.DeleteLabelValues(tm.task)
	}
	for _, v := range []*prometheus.CounterVec{m.recordsIn, m.recordsOut} {
		v.DeleteLabelValues(tm.task)
	}
	for _, v := range []*prometheus.GaugeVec{m.busy, m.backpressured, m.idleTime} {
		v.DeleteLabelValues(tm.stage, tm.task)
	}
}
