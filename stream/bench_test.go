package stream_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

// benchBatch is the number of records per ProcessBatch in benchmarks.
const benchBatch = 1000

// benchRecords returns a batch of records over keys distinct keys.
func benchRecords(keys int) []stream.Record {
	in := make([]stream.Record, benchBatch)
	for i := range in {
		in[i] = stream.Record{
			Key:       fmt.Appendf(nil, "user-%d", i%keys),
			Value:     fmt.Appendf(nil, `{"user":"user-%d","page":"/p/%d"}`, i%keys, i),
			Timestamp: t0.Add(time.Duration(i) * time.Millisecond),
			Topic:     "in",
			Offset:    int64(i),
		}
	}
	return in
}

// runBatches runs b.N batches through task and reports ns/record and
// allocs/record.
func runBatches(b *testing.B, task stream.Task, in []stream.Record, out stream.Emitter) {
	b.Helper()
	if err := task.ProcessBatch(in, out); err != nil { // warm the buffers
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		if err := task.ProcessBatch(in, out); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	n := float64(b.N) * benchBatch
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/record")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/record")
}

// BenchmarkMapFilter runs a Map → Filter → sink chain on []byte values.
func BenchmarkMapFilter(b *testing.B) {
	j := stream.NewJob("bench")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{})
	m := stream.Map(s, func(v []byte) ([]byte, error) { return bytes.TrimPrefix(v, []byte(`{"user":`)), nil })
	f := stream.Filter(m, func(v []byte) (bool, error) { return len(v) > 0 && v[0] == '"', nil })
	stream.To(f, stream.KafkaSink{Topic: "out"}, stream.RawCodec{})
	task := newTask(b, j, nil, nil)
	runBatches(b, task, benchRecords(100), discard{})
}

// BenchmarkCount runs the keyed Count aggregate (state on Pebble) over
// 1000 keys.
func BenchmarkCount(b *testing.B) {
	j := stream.NewJob("bench")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{})
	stream.To(stream.Count(s, "count"), stream.KafkaSink{Topic: "out"}, stream.Int64Codec{})
	task := newTask(b, j, openBackend(b, b.TempDir()), nil)
	runBatches(b, task, benchRecords(1000), discard{})
}

// shuffleJob re-keys []byte values by their first 8 bytes and counts them
// per new key: main writes the shuffle, stage "count" counts.
func shuffleJob() *stream.Job {
	j := stream.NewJob("bench")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{})
	k := stream.KeyBy(s, func(v []byte) ([]byte, error) { return v[:min(len(v), 16)], nil })
	stream.To(stream.Count(k, "count"), stream.KafkaSink{Topic: "out"}, stream.Int64Codec{})
	return j
}

// BenchmarkShuffleWrite runs the upstream side of a shuffle: KeyBy, encode,
// Emitter.Shuffle.
func BenchmarkShuffleWrite(b *testing.B) {
	task := newTask(b, shuffleJob(), nil, nil)
	runBatches(b, task, benchRecords(100), discard{})
}

// TestShuffleWriteAllocatesNothing: the upstream side of a shuffle reuses
// its encoding buffer, as To does.
func TestShuffleWriteAllocatesNothing(t *testing.T) {
	task := newTask(t, shuffleJob(), nil, nil)
	in := benchRecords(100)
	if n := testing.AllocsPerRun(20, func() {
		if err := task.ProcessBatch(in, discard{}); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per batch of %d records", n, len(in))
	}
}

// windowJob1m counts records per key in tumbling windows of a minute.
func windowJob1m() *stream.Job {
	j := stream.NewJob("bench")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{})
	w := stream.Window(s, "w", stream.Windowing[[]byte]{Kind: stream.Tumbling, Size: time.Minute}, stream.Int64Codec{}, stream.CountAgg[[]byte]())
	c := stream.Map(w, func(r stream.WindowResult[int64]) (int64, error) { return r.Value, nil })
	stream.To(c, stream.KafkaSink{Topic: "out"}, stream.Int64Codec{})
	return j
}

// BenchmarkTumblingWindow adds records of 1000 keys to their open windows.
func BenchmarkTumblingWindow(b *testing.B) {
	task := newTask(b, windowJob1m(), openBackend(b, b.TempDir()), nil)
	runBatches(b, task, benchRecords(1000), discard{})
}

// TestWindowAddAllocatesNothing: adding a record to its open window reads
// and writes its accumulator with the state's buffers: no allocation per
// record (a new window also sets its timer, which does not allocate either).
func TestWindowAddAllocatesNothing(t *testing.T) {
	task := newTask(t, windowJob1m(), openBackend(t, t.TempDir()), nil)
	in := benchRecords(100)
	if err := task.ProcessBatch(in, discard{}); err != nil { // opens the windows
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(20, func() {
		if err := task.ProcessBatch(in, discard{}); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per batch of %d records", n, len(in))
	}
}

// benchWindows is the number of open windows of BenchmarkCheckpointOpenWindows.
const benchWindows = 1_000_000

// BenchmarkCheckpointOpenWindows measures a checkpoint (state snapshot
// and its upload to an in-memory store) of a task with one million open
// tumbling windows (one per key), after 10 000 records updated some.
func BenchmarkCheckpointOpenWindows(b *testing.B) {
	ctx := context.Background()
	store, err := objstore.Open(ctx, "mem://", "bench", objstore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	be, err := state.Open(ctx, state.Config{Dir: b.TempDir(), Task: "task-0", Store: store})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close(ctx) })
	task := newTask(b, windowJob1m(), be, nil)
	windows, batch := benchWindows, 10_000
	in := make([]stream.Record, batch)
	for i := range in {
		in[i] = stream.Record{Topic: "in", Timestamp: t0, Value: []byte("v")}
	}
	fill := func(from int) {
		for i := range in {
			in[i].Key = fmt.Appendf(in[i].Key[:0], "key-%07d", (from+i)%windows)
		}
		if err := task.ProcessBatch(in, discard{}); err != nil {
			b.Fatal(err)
		}
	}
	for k := 0; k < windows; k += batch {
		fill(k)
	}
	id := ckpt.ID(0)
	checkpoint := func() {
		id++
		s, err := be.Snapshot(id, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Run(ctx); err != nil {
			b.Fatal(err)
		}
		if err := be.NotifyComplete(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
	checkpoint() // the first uploads everything
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		fill(i * batch)
		b.StartTimer()
		checkpoint()
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/checkpoint")
}
