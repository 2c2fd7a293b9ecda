package pipeline_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

func countJob() config.Job {
	return config.Job{
		Name: "clicks-per-user",
		Pipeline: []config.Step{
			{Source: &config.SourceStep{Topics: []string{"clicks"}, Format: config.Format{Type: "json"}, Start: "earliest"}},
			{Aggregate: &config.AggregateStep{Op: "count"}},
			{Sink: &config.SinkStep{Topic: "clicks-per-user", Format: config.Format{Type: "json"}, Delivery: "exactly-once"}},
		},
	}
}

type collector struct{ recs []stream.Record }

func (c *collector) Emit(sink int, r stream.Record) error {
	if sink != 0 {
		return fmt.Errorf("sink %d", sink)
	}
	c.recs = append(c.recs, stream.Record{Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value), Topic: r.Topic, Timestamp: r.Timestamp})
	return nil
}

func (c *collector) Shuffle(edge int, r stream.Record) error {
	return fmt.Errorf("shuffle %d: a single-stage job", edge)
}

// openBackend opens an empty state backend in a temporary directory.
func openBackend(t testing.TB) *state.Backend {
	t.Helper()
	b, err := state.Open(context.Background(), state.Config{Dir: t.TempDir(), Task: "clicks-0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

func newTask(t testing.TB, j *stream.Job) stream.Task {
	t.Helper()
	task, err := j.NewTask(stream.TaskContext{Backend: openBackend(t), Task: "clicks-0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = task.Close() })
	return task
}

func TestCountExactOutput(t *testing.T) {
	j, err := pipeline.Compile(countJob())
	if err != nil {
		t.Fatal(err)
	}
	if src := j.Sources(); len(src) != 1 || src[0].Format != stream.FormatJSON || src[0].Start.Kind != kafkaio.StartEarliest || src[0].OnError != kafkaio.OnErrorFail {
		t.Fatalf("sources %+v", src)
	}
	if sinks := j.Sinks(); len(sinks) != 1 || sinks[0].Topic != "clicks-per-user" || sinks[0].Delivery != kafkaio.DeliveryExactlyOnce {
		t.Fatalf("sinks %+v", sinks)
	}
	task := newTask(t, j)
	keys := []string{"alice", "bob", "alice", `quo"te`, `back\slash`, "new\nline", "<html>&", "", "alice", "é☃", "\x00\x1f", "bad\xffutf8", "\u2028", `quo"te`, ""}
	ts := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var in []stream.Record
	for i, k := range keys {
		in = append(in, stream.Record{Key: []byte(k), Value: []byte(`{"page":"/"}`), Topic: "clicks", Offset: int64(i), Timestamp: ts})
	}
	var c collector
	if err := task.ProcessBatch(in[:5], &c); err != nil {
		t.Fatal(err)
	}
	if err := task.ProcessBatch(in[5:], &c); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"key":"alice","count":1}`,
		`{"key":"bob","count":1}`,
		`{"key":"alice","count":2}`,
		`{"key":"quo\"te","count":1}`,
		`{"key":"back\\slash","count":1}`,
		`{"key":"new\nline","count":1}`,
		`{"key":"<html>&","count":1}`,
		`{"key":"","count":1}`,
		`{"key":"alice","count":3}`,
		`{"key":"é☃","count":1}`,
		`{"key":"\u0000\u001f","count":1}`,
		`{"key":"bad\ufffdutf8","count":1}`,
		`{"key":"\u2028","count":1}`,
		`{"key":"quo\"te","count":2}`,
		`{"key":"","count":2}`,
	}
	if len(c.recs) != len(want) {
		t.Fatalf("%d records, want %d", len(c.recs), len(want))
	}
	for i, r := range c.recs {
		if string(r.Value) != want[i] || string(r.Key) != keys[i] || r.Topic != "clicks-per-user" || !r.Timestamp.Equal(ts) {
			t.Errorf("record %d: key %q value %s topic %s, want key %q value %s", i, r.Key, r.Value, r.Topic, keys[i], want[i])
		}
		var v struct {
			Key   string `json:"key"`
			Count int64  `json:"count"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil || v.Key != strings.ToValidUTF8(keys[i], "\ufffd") {
			t.Errorf("record %d: %s does not decode to its key: %v %q", i, r.Value, err, v.Key)
		}
	}
}

// TestJSONStringMatchesEncodingJSON compares AppendJSONString with
// encoding/json (HTML escaping off) on random byte strings.
func TestJSONStringMatchesEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "\"", "\\", "\n", "\b", "\f", "\t", "\r", "\x00", "\x7f", "é", "\u2028", "\u2029", "\xff", "\xe2\x80", "☃", "😀", "<", "&", "/"}
	for i := range 20000 {
		var sb strings.Builder
		for range rng.IntN(12) {
			if rng.IntN(4) == 0 {
				sb.WriteByte(byte(rng.IntN(256)))
			} else {
				sb.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
		}
		s := sb.String()
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		want := strings.TrimSuffix(buf.String(), "\n")
		got := string(pipeline.AppendJSONString(nil, []byte(s)))
		if got != want {
			t.Fatalf("case %d %q: got %s, want %s", i, s, got, want)
		}
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8 output %q", got)
		}
	}
}

func TestCompileErrors(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(j *config.Job)
		path   string
		msg    string
	}{
		{"no pipeline", func(j *config.Job) { j.Pipeline = nil }, "job.pipeline", "required"},
		{"bad name", func(j *config.Job) { j.Name = "a b" }, "job.name", "job name"},
		{"two kinds", func(j *config.Job) { j.Pipeline[1].Sink = j.Pipeline[2].Sink }, "job.pipeline[1]", "exactly one"},
		{"sink missing", func(j *config.Job) { j.Pipeline = j.Pipeline[:2] }, "job.pipeline[1].aggregate", "the last step must be a sink"},
		{"source missing", func(j *config.Job) { j.Pipeline = j.Pipeline[1:] }, "job.pipeline[0].aggregate", "the first step must be a source"},
		{"unknown op", func(j *config.Job) { j.Pipeline[1].Aggregate.Op = "mean" }, "job.pipeline[1].aggregate.op", `"mean": must be count, sum, min, max or avg`},
		{"bad start", func(j *config.Job) { j.Pipeline[0].Source.Start = "yesterday" }, "job.pipeline[0].source.start", "RFC 3339"},
		{"dead letter without topic", func(j *config.Job) { j.Pipeline[0].Source.OnError = "dead-letter" }, "job.pipeline[0].source.dead_letter_topic", "required"},
		{"raw values to a json sink", func(j *config.Job) {
			j.Pipeline[0].Source.Format.Type = "raw"
			j.Pipeline = append(j.Pipeline[:1], j.Pipeline[2])
		}, "job.pipeline[1].sink.format", "raw bytes"},
		{"read own output", func(j *config.Job) { j.Pipeline[2].Sink.Topic = "clicks" }, "job.pipeline[2].sink", "must not read its own output"},
		{"bad delivery", func(j *config.Job) { j.Pipeline[2].Sink.Delivery = "twice" }, "job.pipeline[2].sink.delivery", "exactly-once or at-least-once"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := countJob()
			tc.mutate(&job)
			_, err := pipeline.Compile(job)
			var fe *config.FieldError
			if !errors.As(err, &fe) || fe.Path != tc.path || !strings.Contains(fe.Msg, tc.msg) {
				t.Fatalf("got %v, want %s: ...%s...", err, tc.path, tc.msg)
			}
		})
	}
}

func TestCompileSourceSettings(t *testing.T) {
	job := countJob()
	job.Pipeline[0].Source = &config.SourceStep{Topics: []string{"a", "b"}, Format: config.Format{Type: "raw"}, Start: "2026-01-02T03:04:05Z", OnError: "dead-letter", DeadLetterTopic: "dlq"}
	job.Pipeline[2].Sink.Delivery = "at-least-once"
	job.Pipeline[2].Sink.TransactionTimeout = time.Minute
	j, err := pipeline.Compile(job)
	if err != nil {
		t.Fatal(err)
	}
	src := j.Sources()[0]
	if src.Format != stream.FormatRaw || src.Start.String() != "2026-01-02T03:04:05Z" || src.OnError != kafkaio.OnErrorDeadLetter || src.DeadLetterTopic != "dlq" || len(src.Topics) != 2 {
		t.Fatalf("source %+v", src)
	}
	sinks := j.Sinks()
	if len(sinks) != 2 || sinks[0].Topic != "dlq" || sinks[1] != (stream.KafkaSink{Topic: "clicks-per-user", Delivery: kafkaio.DeliveryAtLeastOnce, TransactionTimeout: time.Minute}) {
		t.Fatalf("sinks %+v", sinks)
	}
}

// TestExampleCompiles loads examples/clicks-per-user.yaml as the processor
// does and compiles it.
func TestExampleCompiles(t *testing.T) {
	cfg, err := config.Load(config.Source{File: "../examples/clicks-per-user.yaml", NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	j, err := pipeline.Compile(cfg.Job)
	if err != nil {
		t.Fatal(err)
	}
	if j.Name() != "clicks-per-user" || j.Sources()[0].Topics[0] != "clicks" || j.Sinks()[0].Topic != "clicks-per-user" {
		t.Fatalf("job %s: %+v -> %+v", j.Name(), j.Sources(), j.Sinks())
	}
}

// BenchmarkCountPipeline runs the YAML count job's chain over 1000 keys.
func BenchmarkCountPipeline(b *testing.B) {
	j, err := pipeline.Compile(countJob())
	if err != nil {
		b.Fatal(err)
	}
	task := newTask(b, j)
	in := make([]stream.Record, 1000)
	for i := range in {
		in[i] = stream.Record{Key: fmt.Appendf(nil, "user-%d", i), Value: []byte(`{"page":"/"}`), Topic: "clicks", Offset: int64(i)}
	}
	var discard stream.EmitterFunc = func(int, stream.Record) error { return nil }
	if err := task.ProcessBatch(in, discard); err != nil {
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for b.Loop() {
		if err := task.ProcessBatch(in, discard); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	n := float64(b.N) * float64(len(in))
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/record")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/record")
}

// TestCompileErrorsNameNoGoSource: a problem the stream package finds is
// reported at the step's key path, without stream's Go call site (which is
// this package's source, meaningless to a YAML user).
func TestCompileErrorsNameNoGoSource(t *testing.T) {
	job := config.Job{Name: "x", Pipeline: []config.Step{
		{Source: &config.SourceStep{Topics: []string{"in", "in"}}},
		{Aggregate: &config.AggregateStep{Op: "count"}},
		{Sink: &config.SinkStep{Topic: "out"}},
	}}
	_, err := pipeline.Compile(job)
	if err == nil || !strings.Contains(err.Error(), "job.pipeline[0].source: source: topic in listed twice") || strings.Contains(err.Error(), ".go:") {
		t.Fatalf("want the source step's problem without a Go position: %v", err)
	}
}
