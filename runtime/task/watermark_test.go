package task

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/eventtime"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/kafkaio/source"
	"github.com/weir-stream/weir/stream"
)

// TestSourceConfigTimestampField: a source's timestamp field becomes the
// decoder step that sets each record's timestamp, after the JSON check;
// a field on a raw source is refused.
func TestSourceConfigTimestampField(t *testing.T) {
	cfg, err := sourceConfig(stream.KafkaSource{Topics: []string{"in"}, Format: stream.FormatJSON,
		Timestamp: stream.TimestampSpec{Field: "at", Format: kafkaio.TimestampUnixS}})
	if err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Value: []byte(`{"at":1700000000.5}`)}
	if err := cfg.Decoder.Decode(r); err != nil || r.Timestamp.UnixMilli() != 1700000000500 {
		t.Fatalf("Decode = %v, timestamp %d; want 1700000000500", err, r.Timestamp.UnixMilli())
	}
	if err := cfg.Decoder.Decode(&kgo.Record{Value: []byte(`{"at":`)}); !errors.Is(err, source.ErrDecodeInvalidJSON) {
		t.Fatalf("Decode(invalid JSON) = %v, want the JSON check's error", err)
	}
	if err := cfg.Decoder.Decode(&kgo.Record{Value: []byte(`{"ts":1}`)}); !errors.Is(err, source.ErrDecodeTimestamp) {
		t.Fatalf("Decode(no field) = %v, want ErrDecodeTimestamp", err)
	}
	// The default format is unix_ms.
	cfg, err = sourceConfig(stream.KafkaSource{Topics: []string{"in"}, Format: stream.FormatJSON,
		Timestamp: stream.TimestampSpec{Field: "at"}})
	if err != nil {
		t.Fatal(err)
	}
	r = &kgo.Record{Value: []byte(`{"at":1700000000123}`)}
	if err := cfg.Decoder.Decode(r); err != nil || r.Timestamp.UnixMilli() != 1700000000123 {
		t.Fatalf("Decode = %v, timestamp %d; want 1700000000123", err, r.Timestamp.UnixMilli())
	}
	if _, err := sourceConfig(stream.KafkaSource{Topics: []string{"in"}, Timestamp: stream.TimestampSpec{Field: "at"}}); err == nil {
		t.Fatal("a timestamp field on a raw source was accepted")
	}
}

// TestSourceWatermarks: a source task's watermark is the minimum over its
// partitions' (max event time − bound − 1 ms), an idle partition excluded;
// restored from a snapshot it never goes back.
func TestSourceWatermarks(t *testing.T) {
	now := time.UnixMilli(0)
	spec := stream.WatermarkSpec{MaxOutOfOrderness: 10 * time.Millisecond, IdleTimeout: time.Second}
	w, err := newSourceWatermarks(spec, []string{"a", "b"}, 3, now)
	if err != nil {
		t.Fatal(err)
	}
	if w.interval != stream.DefaultWatermarkInterval {
		t.Fatalf("interval %v, want the default", w.interval)
	}
	rec := func(topic string, ms int64) *kgo.Record {
		return &kgo.Record{Topic: topic, Timestamp: time.UnixMilli(ms)}
	}
	w.observe([]*kgo.Record{rec("a", 100), rec("a", 90), rec("b", 50), rec("a", 120)}, now)
	if wm, idle := w.output(now); wm != 50-11 || idle {
		t.Fatalf("output %d idle %v, want %d (b's)", wm, idle, 50-11)
	}
	// b idle: a alone.
	now = now.Add(1500 * time.Millisecond)
	w.observe([]*kgo.Record{rec("a", 200)}, now.Add(-time.Millisecond))
	if wm, idle := w.output(now); wm != 200-11 || idle || w.idleInputs() != 1 {
		t.Fatalf("output %d idle %v (%d idle inputs), want %d with b idle", wm, idle, w.idleInputs(), 200-11)
	}
	w.current = 200 - 11
	snap := w.snapshot()

	// Restored into new generators: a's maximum is back, and the output
	// is at least what it was, even while b's record says less.
	r, err := newSourceWatermarks(spec, []string{"a", "b"}, 3, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.restore(snap); err != nil {
		t.Fatal(err)
	}
	r.observe([]*kgo.Record{rec("b", 60)}, now)
	if wm, _ := r.output(now); wm != 200-11 || r.current != 200-11 {
		t.Fatalf("restored output %d current %d, want %d", wm, r.current, 200-11)
	}
	if g := r.gens[0].Watermark(); g != 200-11 {
		t.Fatalf("a's restored watermark %d, want %d", g, 200-11)
	}
}

// TestRestoredPartitionsIdleTogether: a restored source task whose
// partitions read nothing new goes idle on all of them at one instant (their
// idle timeouts all run from the task's start). Its watermark must then
// reach what the most advanced partition had reached, not stay at the
// least advanced one's, or no window after that one ever closes (the
// TestYAMLLanguageUnderKills stall: a table's partition at its rows' time,
// the orders' partition far ahead, both idle after a restart).
func TestRestoredPartitionsIdleTogether(t *testing.T) {
	spec := stream.WatermarkSpec{MaxOutOfOrderness: 10 * time.Millisecond, IdleTimeout: time.Second}
	now := time.UnixMilli(0)
	w, err := newSourceWatermarks(spec, []string{"orders", "table"}, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	w.observe([]*kgo.Record{{Topic: "table", Timestamp: time.UnixMilli(50)}, {Topic: "orders", Timestamp: time.UnixMilli(900)}}, now)
	if wm, _ := w.output(now); wm != 50-11 {
		t.Fatalf("output %d, want the table's %d", wm, 50-11)
	}
	w.current = 50 - 11
	snap := w.snapshot()

	r, err := newSourceWatermarks(spec, []string{"orders", "table"}, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.restore(snap); err != nil {
		t.Fatal(err)
	}
	if wm, idle := r.output(now); wm != 50-11 || idle {
		t.Fatalf("restored output %d idle %v, want %d, active", wm, idle, 50-11)
	}
	now = now.Add(1500 * time.Millisecond) // nothing read: both idle at once
	if wm, idle := r.output(now); wm != 900-11 || !idle {
		t.Fatalf("output %d idle %v with every partition idle, want the orders' %d, idle", wm, idle, 900-11)
	}
}

// TestShuffleWatermarks: a downstream task's valve takes watermark records
// by (partition, upstream) pair; idle pairs are left out, and a data
// record makes its pair active again.
func TestShuffleWatermarks(t *testing.T) {
	w := newShuffleWatermarks(stream.WatermarkSpec{}, 4, 6, 2) // partitions 4, 5; upstreams 0, 1
	for p := int32(4); p < 6; p++ {
		w.shuffleWatermark(p, 0, 100, false)
	}
	w.shuffleWatermark(4, 1, 70, false)
	if wm, _ := w.output(time.Time{}); wm != eventtime.MinWatermark {
		t.Fatalf("output %d before pair (5, 1) has a watermark, want none", wm)
	}
	if w.moved {
		t.Fatal("moved before every pair has a watermark")
	}
	w.shuffleWatermark(5, 1, 80, false)
	if !w.moved {
		t.Fatal("the valve's output advanced, but moved is not set: the task would wait for its interval")
	}
	if wm, _ := w.output(time.Time{}); wm != 70 {
		t.Fatalf("output %d, want 70", wm)
	}
	w.current, w.moved = 70, false       // the task advanced
	w.shuffleWatermark(5, 0, 110, false) // (4, 1) at 70 still holds the output
	if w.moved {
		t.Fatal("moved, though the output stays at the task's 70")
	}
	w.shuffleWatermark(4, 1, 75, false)
	if wm, _ := w.valve.Output(); !w.moved || wm != 75 {
		t.Fatalf("output %d moved %v, want 75 and moved", wm, w.moved)
	}
	w.current, w.moved = 75, false
	w.shuffleWatermark(4, 1, 0, true)
	w.shuffleWatermark(5, 1, 0, true)
	if wm, idle := w.output(time.Time{}); wm != 100 || idle || w.idleInputs() != 2 {
		t.Fatalf("output %d idle %v (%d idle), want 100 with upstream 1 idle", wm, idle, w.idleInputs())
	}
	w.shuffleData(5, 1)
	if _, idle := w.valve.Input(w.pair(5, 1)); idle || w.idleInputs() != 1 {
		t.Fatal("a data record did not make its idle pair active")
	}
	if wm, _ := w.output(time.Time{}); wm != 100 {
		t.Fatalf("output %d after the pair's return, want 100 (never back)", wm)
	}
}

// TestTaskMetrics: every task's watermark series exist from its start; a
// task's Stop removes them unless a newer generation's task took them
// over; late records are counted by operator.
func TestTaskMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	old := m.forTask("main", "main/0", 1)
	if n := testutil.CollectAndCount(m.watermark); n != 1 {
		t.Fatalf("%d watermark series after open, want 1", n)
	}
	old.publish(eventtime.MinWatermark, 2, time.UnixMilli(5000))
	if v := testutil.ToFloat64(m.watermark.WithLabelValues("main/0")); v != 0 {
		t.Fatalf("watermark %v with none known, want 0", v)
	}
	old.publish(3000, 0, time.UnixMilli(5000))
	if w, l := testutil.ToFloat64(m.watermark.WithLabelValues("main/0")), testutil.ToFloat64(m.watermarkLag.WithLabelValues("main/0")); w != 3 || l != 2 {
		t.Fatalf("watermark %v lag %v, want 3 and 2", w, l)
	}
	next := m.forTask("main", "main/0", 2)
	old.remove()
	if n := testutil.CollectAndCount(m.idleInputs); n != 1 {
		t.Fatal("the old generation's Stop removed the new one's series")
	}
	next.remove()
	if n := testutil.CollectAndCount(m.idleInputs); n != 0 {
		t.Fatalf("%d series after the last Stop, want 0", n)
	}
	next.onLate("w")
	next.onLate("w")
	next.onLate("x")
	if a, b := testutil.ToFloat64(m.late.WithLabelValues("w")), testutil.ToFloat64(m.late.WithLabelValues("x")); a != 2 || b != 1 {
		t.Fatalf("late records %v and %v, want 2 and 1", a, b)
	}
}

// TestWatermarksPerRecordAllocateNothing: what a record costs the
// watermarks (a source batch's observe, a shuffle data record) allocates
// nothing.
func TestWatermarksPerRecordAllocateNothing(t *testing.T) {
	now := time.UnixMilli(0)
	w, err := newSourceWatermarks(stream.WatermarkSpec{}, []string{"a", "b"}, 0, now)
	if err != nil {
		t.Fatal(err)
	}
	batch := make([]*kgo.Record, 0, 200)
	for i := range 200 {
		topic := "a"
		if i >= 100 {
			topic = "b"
		}
		batch = append(batch, &kgo.Record{Topic: topic, Timestamp: time.UnixMilli(int64(i))})
	}
	if n := testing.AllocsPerRun(100, func() { w.observe(batch, now) }); n != 0 {
		t.Errorf("observe allocates %v times per batch", n)
	}
	s := newShuffleWatermarks(stream.WatermarkSpec{}, 0, 8, 2)
	s.shuffleWatermark(3, 1, 0, true)
	if n := testing.AllocsPerRun(100, func() { s.shuffleData(3, 1); s.shuffleData(4, 0) }); n != 0 {
		t.Errorf("shuffleData allocates %v times per record", n)
	}
}
