package stream_test

import (
	"bytes"
	"fmt"
	"runtime"
	"testing"
	"time"

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
