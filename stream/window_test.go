package stream_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/keygroup"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// TestEventTimeBuildErrors: bad windowings and timestamp settings are
// refused by Build with what is wrong and where.
func TestEventTimeBuildErrors(t *testing.T) {
	src := stream.KafkaSource{Topics: []string{"in"}}
	win := func(w stream.Windowing[[]byte]) func(j *stream.Job) {
		return func(j *stream.Job) {
			r := stream.Window(stream.From(j, src, stream.RawCodec{}), "w", w, stream.Int64Codec{}, stream.CountAgg[[]byte]())
			stream.To(stream.Map(r, func(r stream.WindowResult[int64]) (int64, error) { return r.Value, nil }), stream.KafkaSink{Topic: "out"}, stream.Int64Codec{})
		}
	}
	source := func(s stream.KafkaSource) func(j *stream.Job) {
		return func(j *stream.Job) {
			stream.To(stream.From(j, s, stream.RawCodec{}), stream.KafkaSink{Topic: "out"}, stream.RawCodec{})
		}
	}
	cases := []struct {
		name  string
		build func(j *stream.Job)
		msg   string
	}{
		{"no kind", win(stream.Windowing[[]byte]{Size: time.Minute}), `Window("w"): unknown window kind 0`},
		{"tumbling without size", win(stream.Windowing[[]byte]{Kind: stream.Tumbling}), "a tumbling window needs a size"},
		{"tumbling with gap", win(stream.Windowing[[]byte]{Kind: stream.Tumbling, Size: time.Minute, Gap: time.Second}), "a tumbling window has a size only"},
		{"sub-millisecond", win(stream.Windowing[[]byte]{Kind: stream.Tumbling, Size: 1500 * time.Microsecond}), "size 1.5ms is not a whole number of milliseconds"},
		{"slide longer than size", win(stream.Windowing[[]byte]{Kind: stream.Sliding, Size: time.Minute, Slide: 2 * time.Minute}), "slide 2m0s is longer than size 1m0s"},
		{"sliding without slide", win(stream.Windowing[[]byte]{Kind: stream.Sliding, Size: time.Minute}), "a sliding window needs a size and a slide"},
		{"session without gap", win(stream.Windowing[[]byte]{Kind: stream.Session}), "a session window needs a gap"},
		{"negative lateness", win(stream.Windowing[[]byte]{Kind: stream.Session, Gap: time.Second, AllowedLateness: -time.Second}), "negative allowed lateness -1s"},
		{"bad late topic", win(stream.Windowing[[]byte]{Kind: stream.Session, Gap: time.Second, LateTopic: "a b"}), `late topic "a b" is not a valid topic name`},
		{"late topic is the input", win(stream.Windowing[[]byte]{Kind: stream.Session, Gap: time.Second, LateTopic: "in"}), "must not read its own output"},
		{"late codec without topic", win(stream.Windowing[[]byte]{Kind: stream.Session, Gap: time.Second, LateCodec: stream.RawCodec{}}), "LateCodec set without a LateTopic"},
		{"late topic without codec", func(j *stream.Job) {
			w := stream.Windowing[string]{Kind: stream.Tumbling, Size: time.Minute, LateTopic: "late"}
			r := stream.Window(stream.From(j, src, str), "w", w, stream.Int64Codec{}, stream.CountAgg[string]())
			stream.To(stream.Map(r, func(r stream.WindowResult[int64]) (int64, error) { return r.Value, nil }), stream.KafkaSink{Topic: "out"}, stream.Int64Codec{})
		}, "late topic late needs a LateCodec for string"},
		{"nil aggregate", func(j *stream.Job) {
			r := stream.Window[[]byte, int64, int64](stream.From(j, src, stream.RawCodec{}), "w", stream.Windowing[[]byte]{Kind: stream.Tumbling, Size: time.Minute}, stream.Int64Codec{}, nil)
			stream.To(stream.Map(r, func(r stream.WindowResult[int64]) (int64, error) { return r.Value, nil }), stream.KafkaSink{Topic: "out"}, stream.Int64Codec{})
		}, "nil codec or aggregate function"},
		{"timestamp field of raw records", source(stream.KafkaSource{Topics: []string{"in"}, Timestamp: stream.TimestampSpec{Field: "ts"}}), "a timestamp field (ts) needs format json"},
		{"timestamp format", source(stream.KafkaSource{Topics: []string{"in"}, Format: stream.FormatJSON, Timestamp: stream.TimestampSpec{Field: "ts", Format: "unix_ns"}}), `timestamp format "unix_ns": want unix_ms, unix_s or rfc3339`},
		{"timestamp format without field", source(stream.KafkaSource{Topics: []string{"in"}, Timestamp: stream.TimestampSpec{Format: "unix_s"}}), `timestamp format "unix_s" without a field`},
		{"negative out-of-orderness", source(stream.KafkaSource{Topics: []string{"in"}, Watermark: stream.WatermarkSpec{MaxOutOfOrderness: -time.Second}}), "negative watermark max out-of-orderness -1s"},
		{"negative idle timeout", source(stream.KafkaSource{Topics: []string{"in"}, Watermark: stream.WatermarkSpec{IdleTimeout: -time.Second}}), "negative watermark idle timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := stream.NewJob("bad")
			tc.build(j)
			err := j.Build()
			if !errors.Is(err, stream.ErrInvalidJob) || !strings.Contains(err.Error(), tc.msg) || !strings.Contains(err.Error(), "window_test.go:") {
				t.Fatalf("Build: %v\nwant ErrInvalidJob containing %q and the place", err, tc.msg)
			}
		})
	}
}

// TestEventTimeDeclared: Job.EventTime is true for a job with a Window or
// a Process WithEventTime, false otherwise; an event-time timer in an
// operator not declared fails loudly instead of never firing; sources get
// their defaults.
func TestEventTimeDeclared(t *testing.T) {
	plain := stream.NewJob("plain")
	s := stream.From(plain, stream.KafkaSource{Topics: []string{"in"}, Format: stream.FormatJSON, Timestamp: stream.TimestampSpec{Field: "ts"}}, str)
	p := stream.Process(s, "p", func() stream.KeyedProcessFunction[string, string] { return &etProbe{} })
	stream.To(p, stream.KafkaSink{Topic: "out"}, str)
	if err := plain.Build(); err != nil {
		t.Fatal(err)
	}
	if plain.EventTime() {
		t.Fatal("EventTime of a job without event-time operators")
	}
	got := plain.Sources()[0]
	if got.Timestamp.Format != kafkaio.TimestampUnixMs || got.Watermark.Interval != stream.DefaultWatermarkInterval {
		t.Fatalf("source defaults: %+v", got)
	}
	task := newTask(t, plain, openBackend(t, t.TempDir()), nil)
	err := task.ProcessBatch([]stream.Record{{Topic: "in", Key: []byte("a"), Value: []byte("set 12:00:00"), Timestamp: t0}}, discard{})
	if err == nil || !strings.Contains(err.Error(), "not defined WithEventTime") {
		t.Fatalf("event-time timer without WithEventTime: %v", err)
	}
	if !probeJob().EventTime() {
		t.Fatal("EventTime of a job with a Process WithEventTime")
	}
	w := stream.NewJob("w")
	r := stream.Window(stream.From(w, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{}), "w", stream.Windowing[[]byte]{Kind: stream.Tumbling, Size: time.Minute}, stream.Int64Codec{}, stream.CountAgg[[]byte]())
	stream.To(stream.Map(r, func(r stream.WindowResult[int64]) (int64, error) { return r.Value, nil }), stream.KafkaSink{Topic: "out"}, stream.Int64Codec{})
	if !w.EventTime() {
		t.Fatal("EventTime of a job with a Window")
	}
}

// TestWindowAfterKeyBy: a Window after a KeyBy is a shuffle point, like
// Process; its late topic is a sink of the job written by the window's
// stage, and the late record keeps the new key and its headers.
func TestWindowAfterKeyBy(t *testing.T) {
	j := stream.NewJob("pages")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"clicks"}}, stream.RawCodec{})
	k := stream.KeyBy(s, func(v []byte) ([]byte, error) { return v, nil })
	w := stream.Windowing[[]byte]{Kind: stream.Tumbling, Size: time.Minute, LateTopic: "clicks-late"}
	r := stream.Window(k, "per-minute", w, stream.Int64Codec{}, stream.CountAgg[[]byte]())
	stream.To(stream.Map(r, func(r stream.WindowResult[int64]) (int64, error) { return r.Value, nil }), stream.KafkaSink{Topic: "counts"}, stream.Int64Codec{})
	if err := j.Build(); err != nil {
		t.Fatal(err)
	}
	stages := j.Stages()
	if len(stages) != 2 || stages[1].Name != "per-minute" {
		t.Fatalf("stages: %+v", stages)
	}
	sinks := j.Sinks()
	late := slices.IndexFunc(sinks, func(s stream.KafkaSink) bool { return s.Topic == "clicks-late" })
	if late < 0 || sinks[late].Delivery != kafkaio.DeliveryExactlyOnce || !slices.Contains(stages[1].Sinks, late) || slices.Contains(stages[0].Sinks, late) {
		t.Fatalf("late sink %d of %+v; stages' sinks %v, %v", late, sinks, stages[0].Sinks, stages[1].Sinks)
	}
	task, err := j.NewTask(stream.TaskContext{Backend: openBackend(t, t.TempDir()), Stage: "per-minute"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = task.Close() })
	var c collector
	if err := task.AdvanceWatermark(t0.Add(time.Minute), &c); err != nil {
		t.Fatal(err)
	}
	in := []stream.Record{{Key: []byte("/home"), Value: []byte("/home"), Timestamp: t0, Headers: []stream.Header{{Key: "h", Value: []byte("1")}}}}
	if err := task.ProcessBatch(in, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.recs) != 1 || c.recs[0].sink != late || c.recs[0].key != "/home" || c.recs[0].topic != "clicks-late" ||
		c.recs[0].headers != "h=1,weir-late-window-start=2026-11-29T12:00:00Z,weir-late-window-end=2026-11-29T12:01:00Z,weir-late-by=1m0s" {
		t.Fatalf("late output: %+v", c.recs)
	}
}

// TestKeyGroupsKeepTheirWatermark: a task whose key groups come with
// different stored watermarks (as after key groups moved between tasks of
// different watermarks) applies each group's own to its keys until the
// task's watermark passes them: a window that fired in a group's old task
// stays fired.
func TestKeyGroupsKeepTheirWatermark(t *testing.T) {
	b := openKeyGroupBackend(t, state.Config{Dir: t.TempDir(), Task: "task-0"}, 128, [2]int{0, 128})
	ga, gb := keygroup.Of([]byte("a"), 128), keygroup.Of([]byte("b"), 128)
	if ga == gb {
		t.Fatal("a and b share a key group")
	}
	wm, err := state.NewValueState(b, stream.WatermarkStateName, state.Codec[int64](state.Int64Codec{}))
	if err != nil {
		t.Fatal(err)
	}
	for g := range 128 {
		b.SetCurrentKeyInGroup(nil, g)
		v := t0.UnixMilli() // 12:00
		if g == ga {
			v = t0.Add(time.Minute).UnixMilli() // 12:01: a's window of 12:00 fired
		}
		if err := wm.Put(v); err != nil {
			t.Fatal(err)
		}
	}
	late := 0
	j := stream.NewJob("w")
	r := stream.Window(stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{}), "w",
		stream.Windowing[[]byte]{Kind: stream.Tumbling, Size: time.Minute}, stream.Int64Codec{}, stream.CountAgg[[]byte]())
	stream.To(stream.Map(r, func(r stream.WindowResult[int64]) (string, error) {
		return fmt.Sprint(r.Start.Format("15:04"), " ", r.Value), nil
	}), stream.KafkaSink{Topic: "out"}, str)
	task, err := j.NewTask(stream.TaskContext{Backend: b, OnLate: func(string) { late++ }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = task.Close() })
	var c collector
	in := []stream.Record{
		{Topic: "in", Key: []byte("a"), Timestamp: t0.Add(30 * time.Second)},
		{Topic: "in", Key: []byte("b"), Timestamp: t0.Add(30 * time.Second)},
		{Topic: "in", Key: []byte("a"), Timestamp: t0.Add(90 * time.Second)},
	}
	if err := task.ProcessBatch(in, &c); err != nil {
		t.Fatal(err)
	}
	if late != 1 {
		t.Fatalf("%d late records, want 1 (a at 12:00:30)", late)
	}
	if err := task.AdvanceWatermark(t0.Add(2*time.Minute), &c); err != nil {
		t.Fatal(err)
	}
	equal(t, "fired", c.take(), []string{"0:b=12:00 1", "0:a=12:01 1"})
	// The task's watermark has passed every group's: a's group follows it.
	if err := task.ProcessBatch([]stream.Record{{Topic: "in", Key: []byte("a"), Timestamp: t0.Add(150 * time.Second)}}, &c); err != nil {
		t.Fatal(err)
	}
	if err := task.AdvanceWatermark(t0.Add(3*time.Minute), &c); err != nil {
		t.Fatal(err)
	}
	equal(t, "fired", c.take(), []string{"0:a=12:02 1"})
}
