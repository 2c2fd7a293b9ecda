package pipeline_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/stream"
)

// aggBenchJob is the multi-aggregate: six aggregates over the
// record key, in the source's stage (no shuffle: the benchmark measures the
// aggregate, not the shuffle), windowed or not.
func aggBenchJob(b *testing.B, window string) *stream.Job {
	b.Helper()
	yaml := fmt.Sprintf(`kafka: {brokers: [127.0.0.1:9092]}
job:
  name: bench
  pipeline:
    - source: {topics: [orders]}
%s    - aggregate:
        count: true
        total: {sum: value.amount}
        biggest: {max: value.amount}
        people: {count_distinct: value.customer}
        firstseen: {first: value.id}
        recent: {collect: value.id, limit: 10}
    - sink: {topic: out}
`, window)
	return compileBenchJob(b, yaml)
}

// compileBenchJob loads a job file's text (no environment) and compiles
// its job.
func compileBenchJob(b *testing.B, yaml string) *stream.Job {
	b.Helper()
	cfg, err := config.Load(config.Source{YAML: []byte(yaml), NoEnv: true})
	if err != nil {
		b.Fatal(err)
	}
	j, err := pipeline.Compile(cfg.Job)
	if err != nil {
		b.Fatal(err)
	}
	return j
}

type discard struct{}

func (discard) Emit(int, stream.Record) error    { return nil }
func (discard) Shuffle(int, stream.Record) error { return nil }

// benchAggregate runs batches of 100 records of 100 keys (each with 20
// customers) through the job's one task and reports per record.
func benchAggregate(b *testing.B, j *stream.Job) {
	task, err := j.NewTask(stream.TaskContext{Stage: j.Stages()[0].Name, Backend: openBackend(b), Task: "bench/0", Now: func() time.Time { return t0 }})
	if err != nil {
		b.Fatal(err)
	}
	defer task.Close()
	batch := make([]stream.Record, 100)
	for i := range batch {
		batch[i] = stream.Record{Key: fmt.Appendf(nil, "k%d", i), Topic: "orders", Offset: int64(i), Timestamp: t0.Add(time.Duration(i) * time.Millisecond),
			Value: fmt.Appendf(nil, `{"id":"o-%d","customer":"c-%d","amount":%d.95,"currency":"EUR","country":"DE"}`, i, i%20, i)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := task.ProcessBatch(batch, discard{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(batch)), "ns/record")
}

// BenchmarkMultiAggregate: decode, six aggregates' arguments, the fold on
// the key's value state (count_distinct in map state), the result encoded
// by the sink's codec; per record. allocs/op is per batch of 100.
func BenchmarkMultiAggregate(b *testing.B) { benchAggregate(b, aggBenchJob(b, "")) }

// BenchmarkMultiAggregateWindow: the same in a tumbling minute (the
// window's state holds the accumulator with its distinct set).
func BenchmarkMultiAggregateWindow(b *testing.B) {
	benchAggregate(b, aggBenchJob(b, "    - window: {type: tumbling, size: 1m}\n"))
}

// BenchmarkCountLegacy is the one-aggregate {op: count} on the same path,
// for comparison.
func BenchmarkCountLegacy(b *testing.B) {
	j := compileBenchJob(b, `kafka: {brokers: [127.0.0.1:9092]}
job:
  name: bench
  pipeline:
    - source: {topics: [orders]}
    - aggregate: {op: count}
    - sink: {topic: out}
`)
	benchAggregate(b, j)
}

// yamlBenchJob is the job of `make bench ARGS=-yaml`
// (internal/tools/bench/yaml.go): filter → map → key_by expr →
// count+sum+max, in two stages.
func yamlBenchJob(b *testing.B) *stream.Job {
	b.Helper()
	return compileBenchJob(b, `kafka: {brokers: [127.0.0.1:9092]}
job:
  name: bench
  pipeline:
    - source: {topics: [clicks], format: json}
    - filter: {where: "value.amount > 0"}
    - map: {value: {page: value.page, user: value.user, amount: value.amount}}
    - key_by: {expr: value.page}
    - aggregate: {count: true, total: {sum: value.amount}, biggest: {max: value.amount}}
    - sink: {topic: out, format: json}
`)
}

// BenchmarkYAMLBenchJob runs the -yaml bench job's two stages in memory,
// per batch of 100 clicks of 100 users over 50 pages: the upstream stage's
// shuffle records are the downstream stage's input, so the figures are the
// per-record processing cost of the job without Kafka (ns/record).
func BenchmarkYAMLBenchJob(b *testing.B) {
	j := yamlBenchJob(b)
	stages := j.Stages()
	if len(stages) != 2 {
		b.Fatalf("%d stages, want 2", len(stages))
	}
	up, down := stageTask(b, j, stages[0].Name), stageTask(b, j, stages[1].Name)
	in := make([]stream.Record, 100)
	for i := range in {
		in[i] = stream.Record{Key: fmt.Appendf(nil, "user-%d", i), Topic: "clicks", Offset: int64(i), Timestamp: t0,
			Value: fmt.Appendf(nil, `{"i":%d,"user":"user-%d","page":"/p/%d","amount":%d}`, i, i, i%50, 1+i*7%1000)}
	}
	var sh shuffler
	b.ReportAllocs()
	for b.Loop() {
		sh.recs = sh.recs[:0]
		if err := up.ProcessBatch(in, &sh); err != nil {
			b.Fatal(err)
		}
		if err := down.ProcessBatch(sh.recs, discard{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(in)), "ns/record")
}
