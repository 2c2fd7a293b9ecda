package task

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// The event-time job of these tests: two input partitions (main/0,
// main/1) re-keyed by value into a shuffle of 8 key groups read by two
// tasks of stage by-window, which count each key's records per tumbling
// window of one second of event time with an event-time timer at the
// window's end, and emit the count when the watermark passes it.
const (
	etStage  = "by-window"
	etWindow = time.Second
)

// etBase is the event time of window 0's start.
var etBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// windowEnd returns the last millisecond of ts's window.
func windowEnd(ts time.Time) time.Time {
	d := ts.Sub(etBase)
	start := d.Truncate(etWindow)
	if start > d { // before etBase: the window starts below
		start -= etWindow
	}
	return etBase.Add(start + etWindow - time.Millisecond)
}

// windowCount counts the current key's records of the open window, and
// emits the count at its end. The job's keys each belong to one window.
type windowCount struct{ n *state.ValueState[int64] }

func (w *windowCount) Open(oc stream.OpenContext) error {
	var err error
	w.n, err = state.NewValueState(oc.Backend, oc.StateName("n"), stream.Int64Codec{})
	return err
}

func (w *windowCount) ProcessElement(ctx *stream.Context[string], _ []byte) error {
	n, _, err := w.n.Get()
	if err != nil {
		return err
	}
	if err := w.n.Put(n + 1); err != nil {
		return err
	}
	return ctx.RegisterEventTimeTimer(windowEnd(ctx.Timestamp()))
}

func (w *windowCount) OnTimer(ctx *stream.Context[string], _ time.Time) error {
	n, _, err := w.n.Get()
	if err != nil {
		return err
	}
	if err := w.n.Clear(); err != nil {
		return err
	}
	return ctx.Emit(strconv.FormatInt(n, 10))
}

func eventTimeJob(name, in, out string) *stream.Job {
	j := stream.NewJob(name)
	src := stream.KafkaSource{Topics: []string{in}, Watermark: stream.WatermarkSpec{
		IdleTimeout: 500 * time.Millisecond, Interval: 20 * time.Millisecond,
	}}
	s := stream.From(j, src, stream.RawCodec{})
	byValue := stream.KeyBy(s, func(v []byte) ([]byte, error) { return v, nil }, stream.Named(etStage), stream.Parallelism(2))
	n := stream.Process(byValue, "window", func() stream.KeyedProcessFunction[[]byte, string] { return &windowCount{} }, stream.WithEventTime())
	stream.To(n, stream.KafkaSink{Topic: out, TransactionTimeout: testTxnTimeout}, stream.StringCodec{})
	return j
}

var etDownstream = []control.TaskID{{Stage: etStage, Index: 0}, {Stage: etStage, Index: 1}}

// produceWindow writes n records to input partition p for window w: each
// of keys keys ("w<w>-k<i>") gets n/keys records, at event times spread
// over the window, and adds them to counts.
func (r *rig) produceWindow(ctx context.Context, counts map[string]int, p int32, w, n, keys int) {
	r.t.Helper()
	cl := r.c.Client(r.t, kgo.DefaultProduceTopic(r.in), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	start := etBase.Add(time.Duration(w) * etWindow)
	recs := make([]*kgo.Record, n)
	for i := range recs {
		k := fmt.Sprintf("w%d-k%d", w, i%keys)
		// Out of order within the window: later records may be earlier.
		ts := start.Add(time.Duration((i*379)%1000) * time.Millisecond)
		recs[i] = &kgo.Record{Key: []byte(k), Value: []byte(k), Partition: p, Timestamp: ts}
		counts[k]++
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		r.t.Fatalf("produce: %v", err)
	}
}

// gauge returns metric name's value for task on reg (NaN if absent).
func gauge(t *testing.T, reg *prometheus.Registry, name string, task control.TaskID) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "task" && l.GetValue() == task.String() {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

// waitWatermark waits until each of tasks of generation g reports a
// watermark at or after wm.
func (r *rig) waitWatermark(ctx context.Context, g *gen, wm time.Time, tasks ...control.TaskID) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, id := range tasks {
		for {
			got, _ := gauge(r.t, g.reg, "weir_task_watermark_seconds", id)
			if got*1000 >= float64(wm.UnixMilli()) {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				r.t.Fatalf("%s (generation %d): watermark %s after a minute, want %s", id, g.n, time.UnixMilli(int64(got*1000)).UTC(), wm)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// verifyWindows checks that the committed output holds exactly one count
// per key of want, equal to it, and nothing else.
func (r *rig) verifyWindows(ctx context.Context, want map[string]int) {
	r.t.Helper()
	got := r.committed(ctx)
	for k, n := range want {
		if len(got[k]) != 1 || got[k][0] != n {
			r.t.Errorf("window %s: committed counts %v, want once [%d]", k, got[k], n)
		}
	}
	for k, seq := range got {
		if _, ok := want[k]; !ok {
			r.t.Errorf("window %s: committed counts %v, want none", k, seq)
		}
	}
	if r.t.Failed() {
		r.t.FailNow()
	}
	r.t.Logf("output: %d windows, each exactly once", len(want))
}

// TestEventTimeThroughShuffle runs the event-time job with input on
// partition 0 only: main/1 goes idle and must not hold back the downstream
// tasks' watermark, which advances through the shuffle and fires the
// window timers. Checkpoint 1 commits window 0's counts; window 1 fires in
// generation 1 and crashes uncommitted; generation 2 restores checkpoint 1
// with a watermark not below it, and fires window 1 again but window 0
// never twice: every window's count is committed exactly once. On kfake
// and on the real broker.
func TestEventTimeThroughShuffle(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		r := newRig(t, ctx, c, rigConfig{inParts: 2, outParts: 2, maxParallelism: twoStageMax, build: eventTimeJob})
		if !r.job.EventTime() {
			t.Fatal("the job does not use event time")
		}
		committed := map[string]int{}

		g1 := r.newGen(1)
		tasks1 := r.openAll(ctx, g1, 0)
		for _, id := range r.plan.Tasks() {
			if _, ok := gauge(t, g1.reg, "weir_task_idle_inputs", id); !ok {
				t.Fatalf("no weir_task_idle_inputs series of %s at start", id)
			}
		}
		window0, window1 := map[string]int{}, map[string]int{}
		r.produceWindow(ctx, window0, 0, 0, 60, 12)
		// A record at window 1's start moves main/0's watermark to window
		// 0's end.
		r.produceWindow(ctx, window1, 0, 1, 1, 1)
		r.waitConsumed(ctx, pick(tasks1, upstreamIDs)...)
		// main/1 read nothing: it is idle, and the downstream tasks'
		// watermark is main/0's.
		r.waitWatermark(ctx, g1, windowEnd(etBase), etDownstream...)
		if n, _ := gauge(t, g1.reg, "weir_task_idle_inputs", upstreamIDs[1]); n != 1 {
			t.Fatalf("main/1 reports %v idle inputs, want 1", n)
		}
		r.checkpoint(ctx, 1, 1, tasks1)
		for k, n := range window0 {
			committed[k] = n
		}
		r.verifyWindows(ctx, committed)

		// Window 1 fires in generation 1's open transactions (a record at
		// window 2's start moves the watermark to its end), then
		// generation 1 dies without a checkpoint.
		r.produceWindow(ctx, window1, 0, 1, 36, 6)
		r.produceWindow(ctx, map[string]int{}, 0, 2, 1, 1)
		r.waitConsumed(ctx, pick(tasks1, upstreamIDs)...)
		r.waitWatermark(ctx, g1, windowEnd(etBase.Add(etWindow)), etDownstream...)
		for _, tk := range tasks1 {
			r.stop(tk)
		}

		g2 := r.newGen(2)
		tasks2 := map[control.TaskID]*Task{}
		for _, id := range r.plan.Tasks() {
			tasks2[id] = r.open(ctx, g2, id, 1)
		}
		// The watermark each downstream task had at checkpoint 1, or more
		// (its last advance may have preceded the barrier).
		for _, id := range etDownstream {
			if wm := tasks2[id].wm.current; wm < windowEnd(etBase).UnixMilli() {
				t.Fatalf("%s restored watermark %s, below checkpoint 1's %s", id, time.UnixMilli(wm).UTC(), windowEnd(etBase))
			}
		}
		for _, tk := range tasks2 {
			tk.Run()
		}
		r.waitConsumed(ctx, pick(tasks2, upstreamIDs)...)
		r.waitWatermark(ctx, g2, windowEnd(etBase.Add(etWindow)), etDownstream...)
		r.checkpoint(ctx, 2, 2, tasks2)
		for k, n := range window1 {
			committed[k] = n
		}
		r.verifyWindows(ctx, committed)
	})
}

// windowJob counts the input per value and tumbling window of etWindow
// with stream.Window in stage by-window, each count written as decimal
// text; late records are dropped and counted.
func windowJob(name, in, out string) *stream.Job {
	j := stream.NewJob(name)
	src := stream.KafkaSource{Topics: []string{in}, Watermark: stream.WatermarkSpec{
		IdleTimeout: 500 * time.Millisecond, Interval: 20 * time.Millisecond,
	}}
	s := stream.From(j, src, stream.RawCodec{})
	byValue := stream.KeyBy(s, func(v []byte) ([]byte, error) { return v, nil }, stream.Named(etStage), stream.Parallelism(2))
	counts := stream.Window(byValue, "per-second", stream.Windowing[[]byte]{Kind: stream.Tumbling, Size: etWindow},
		stream.Int64Codec{}, stream.CountAgg[[]byte]())
	text := stream.Map(counts, func(r stream.WindowResult[int64]) (string, error) { return strconv.FormatInt(r.Value, 10), nil })
	stream.To(text, stream.KafkaSink{Topic: out, TransactionTimeout: testTxnTimeout}, stream.StringCodec{})
	return j
}

// TestWindowLateRecordsCounted: a record whose window the watermark has
// passed (it fired) is late: the window's committed count leaves it out,
// and weir_late_records_total{operator} counts it (TaskContext.OnLate).
// On kfake and on the real broker.
func TestWindowLateRecordsCounted(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		r := newRig(t, ctx, c, rigConfig{inParts: 2, outParts: 2, maxParallelism: twoStageMax, build: windowJob})
		g1 := r.newGen(1)
		tasks := r.openAll(ctx, g1, 0)
		window0 := map[string]int{}
		r.produceWindow(ctx, window0, 0, 0, 40, 8)
		r.produceWindow(ctx, map[string]int{}, 0, 1, 1, 1) // moves the watermark to window 0's end
		r.waitConsumed(ctx, pick(tasks, upstreamIDs)...)
		r.waitWatermark(ctx, g1, windowEnd(etBase), etDownstream...)
		// Two records of window 0, now late.
		r.produceWindow(ctx, map[string]int{}, 0, 0, 2, 2)
		r.waitConsumed(ctx, pick(tasks, upstreamIDs)...)
		deadline := time.Now().Add(time.Minute)
		for late(t, g1.reg, "per-second") < 2 {
			if time.Now().After(deadline) {
				t.Fatalf("weir_late_records_total{operator=\"per-second\"} = %v after a minute, want 2", late(t, g1.reg, "per-second"))
			}
			time.Sleep(10 * time.Millisecond)
		}
		r.checkpoint(ctx, 1, 1, tasks)
		r.verifyWindows(ctx, window0)
		if n := late(t, g1.reg, "per-second"); n != 2 {
			t.Fatalf("%v late records counted, want 2", n)
		}
	})
}

// late returns weir_late_records_total of operator on reg.
func late(t *testing.T, reg *prometheus.Registry, operator string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "weir_late_records_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "operator" && l.GetValue() == operator {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
