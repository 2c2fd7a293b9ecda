package observe

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/control"
)

// TestGatheredFigures reads a registry shaped like a replica's: per-task
// counters become rates between two calls, the watermark milliseconds, a
// source partition's lag its task's, a gauge the registry lacks 0, and a
// series of another label shape is ignored.
func TestGatheredFigures(t *testing.T) {
	reg := prometheus.NewRegistry()
	in := prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRecordsIn}, []string{"task"})
	out := prometheus.NewCounterVec(prometheus.CounterOpts{Name: MetricRecordsOut}, []string{"task"})
	wm := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricWatermark}, []string{"task"})
	busy := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricBusy}, []string{"task"})
	lag := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricLag}, []string{"topic", "partition"})
	other := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "weir_task_idle_inputs"}, []string{"task"})
	reg.MustRegister(in, out, wm, busy, lag, other)
	wm.WithLabelValues("main/0").Set(1700000000.5)
	wm.WithLabelValues("main/1").Set(0)
	wm.WithLabelValues("count/0").Set(0)
	in.WithLabelValues("main/0").Add(100)
	busy.WithLabelValues("count/0").Set(420)
	lag.WithLabelValues("a", "0").Set(5)
	lag.WithLabelValues("b", "0").Set(7)
	lag.WithLabelValues("a", "1").Set(3)
	other.WithLabelValues("main/0").Set(9)

	g := &GatheredFigures{Gatherer: reg, SourceStage: func() string { return "main" }, Logger: slog.Default()}
	t0 := time.Unix(1000, 0)
	first := g.TaskFigures(t0)
	if len(first) != 3 || first[0].Task.String() != "count/0" || first[0].BusyMSPerSecond != 420 || first[0].LagRecords != 0 {
		t.Fatalf("first: %+v", first)
	}
	if f := first[1]; f.Task.String() != "main/0" || f.WatermarkMS != 1700000000500 || f.LagRecords != 12 || f.RecordsInPerSecond != 0 {
		t.Fatalf("main/0, first call (no rate yet): %+v", f)
	}
	in.WithLabelValues("main/0").Add(50)
	out.WithLabelValues("main/0").Add(20)
	second := g.TaskFigures(t0.Add(5 * time.Second))
	if f := second[1]; f.RecordsInPerSecond != 10 || f.RecordsOutPerSecond != 4 {
		t.Fatalf("main/0, rates over 5s: %+v", f)
	}
	if f := second[2]; f.Task.String() != "main/1" || f.LagRecords != 3 {
		t.Fatalf("main/1: %+v", f)
	}
	// Every figure passes the report's validation.
	if err := control.Validate(control.ReplicaReport{Replica: "r", TS: 1, Tasks: second}); err != nil {
		t.Fatal(err)
	}
}

type self struct{ gen uint64 }

func (s self) ReplicaID() string  { return "r0" }
func (s self) Generation() uint64 { return s.gen }
func (s self) Coordinator() bool  { return true }

type sent struct{ ms chan control.Message }

func (s sent) Send(_ context.Context, m control.Message) error { s.ms <- m; return nil }

// TestReporter: no report before the replica's first generation, then one
// every interval with the replica's figures.
func TestReporter(t *testing.T) {
	reg := prometheus.NewRegistry()
	wm := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: MetricWatermark}, []string{"task"})
	reg.MustRegister(wm)
	wm.WithLabelValues("main/0").Set(0)
	s := sent{ms: make(chan control.Message, 10)}
	me := &self{}
	r := &Reporter{Self: me, Figures: &GatheredFigures{Gatherer: reg, Logger: slog.Default()}, Sender: s, Interval: 10 * time.Millisecond,
		Logger: slog.Default(), Now: func() time.Time { return time.UnixMilli(777) }}
	if rep := r.Report(); rep.Replica != "r0" || rep.TS != 777 || !rep.Coordinator || len(rep.Tasks) != 1 || rep.Tasks[0].Task.String() != "main/0" {
		t.Fatalf("report: %+v", rep)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	r.Self = self{gen: 0}
	go func() { r.Run(ctx); close(done) }()
	select {
	case m := <-s.ms:
		t.Fatalf("a report before the first generation: %+v", m)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	<-done
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	r.Self = self{gen: 3}
	go r.Run(ctx)
	for range 2 {
		select {
		case m := <-s.ms:
			if rep := m.(control.ReplicaReport); rep.Gen != 3 {
				t.Fatalf("report: %+v", rep)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no report")
		}
	}
}
