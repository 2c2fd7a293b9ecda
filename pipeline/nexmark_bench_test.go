package pipeline_test

import (
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/kafkaio/source"
	"github.com/weir-stream/weir/nexmark"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/stream"
)

// BenchmarkNexmarkQ0 and BenchmarkNexmarkQ1 run the jobs of
// examples/nexmark/q0.yaml and q1.yaml over 1000 generated events (about
// 92 % bids) per batch, without Kafka: each record's value is checked by
// the source's decoder (format: json), as the source does, then the batch
// goes through the job's operator chain to a sink that discards. The
// figures are per event (ns/event, allocs/event, B/event), read from the
// runtime's counters, so they count every allocation of the chain.
func BenchmarkNexmarkQ0(b *testing.B) { benchNexmark(b, "q0") }

// BenchmarkNexmarkQ1 is BenchmarkNexmarkQ0 for q1.
func BenchmarkNexmarkQ1(b *testing.B) { benchNexmark(b, "q1") }

func benchNexmark(b *testing.B, q string) {
	cfg, err := config.Load(config.Source{File: "../examples/nexmark/" + q + ".yaml", NoEnv: true})
	if err != nil {
		b.Fatal(err)
	}
	j, err := pipeline.Compile(cfg.Job)
	if err != nil {
		b.Fatal(err)
	}
	task := newTask(b, j)
	in := nexmarkBatch(b, 1000)
	dec := source.DecodeJSON{}
	var out stream.EmitterFunc = func(int, stream.Record) error { return nil }
	run := func() {
		for i := range in {
			kr := kgo.Record{Value: in[i].Value}
			if err := dec.Decode(&kr); err != nil {
				b.Fatal(err)
			}
		}
		if err := task.ProcessBatch(in, out); err != nil {
			b.Fatal(err)
		}
	}
	run()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		run()
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	n := float64(b.N) * float64(len(in))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/event")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/event")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "B/event")
}

// nexmarkBatch is n generated Nexmark events as records of the topic
// nexmark, keyed and valued as `processor nexmark` writes them.
func nexmarkBatch(tb testing.TB, n int) []stream.Record {
	tb.Helper()
	g, err := nexmark.NewGenerator(nexmark.Config{Seed: 1, Events: int64(n)})
	if err != nil {
		tb.Fatal(err)
	}
	var in []stream.Record
	for e, ok := g.Next(); ok; e, ok = g.Next() {
		in = append(in, stream.Record{Topic: "nexmark", Offset: int64(len(in)), Key: nexmark.Key(e), Value: nexmark.AppendJSON(nil, e)})
	}
	if len(in) != n {
		tb.Fatalf("%d events generated, want %d", len(in), n)
	}
	return in
}
