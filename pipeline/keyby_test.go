package pipeline_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/stream"
)

func viewsJob(parallelism int) config.Job {
	return config.Job{
		Name: "views-per-page",
		Pipeline: []config.Step{
			{Source: &config.SourceStep{Topics: []string{"clicks"}, Format: config.Format{Type: "json"}}},
			{KeyBy: &config.KeyByStep{Field: "page", Parallelism: parallelism}},
			{Aggregate: &config.AggregateStep{Op: "count"}},
			{Sink: &config.SinkStep{Topic: "views-per-page", Format: config.Format{Type: "json"}, Delivery: "exactly-once"}},
		},
	}
}

// shuffler collects the shuffle records of an upstream stage, copied.
type shuffler struct{ recs []stream.Record }

func (s *shuffler) Emit(sink int, _ stream.Record) error {
	return fmt.Errorf("sink %d written by the upstream stage", sink)
}

func (s *shuffler) Shuffle(edge int, r stream.Record) error {
	if edge != 0 {
		return fmt.Errorf("shuffle %d", edge)
	}
	s.recs = append(s.recs, stream.Record{Key: []byte(string(r.Key)), Value: []byte(string(r.Value)), Timestamp: r.Timestamp})
	return nil
}

func stageTask(t testing.TB, j *stream.Job, stage string) stream.Task {
	t.Helper()
	task, err := j.NewTask(stream.TaskContext{Stage: stage, Backend: openBackend(t), Task: stage + "/0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = task.Close() })
	return task
}

// TestViewsPerPage runs the job of examples/views-per-page.yaml in memory:
// main's shuffle records go to the count stage, which counts per page.
func TestViewsPerPage(t *testing.T) {
	j, err := pipeline.Compile(viewsJob(6))
	if err != nil {
		t.Fatal(err)
	}
	stages := j.Stages()
	if len(stages) != 2 || stages[1].Name != "count" || stages[1].Parallelism != 6 || stages[1].Input == nil ||
		fmt.Sprint(stages[0].Operators) != `[From([clicks]) Transform("key_by") KeyBy]` || fmt.Sprint(stages[1].Operators) != `[Process("count") To(views-per-page)]` {
		t.Fatalf("stages %+v", stages)
	}
	var up shuffler
	in := []stream.Record{
		{Key: []byte("ann"), Value: []byte(`{"user":"ann","page":"/a"}`)},
		{Key: []byte("bob"), Value: []byte(`{"page":"/b","user":"bob"}`)},
		{Key: []byte("ann"), Value: []byte(`{"user":"ann","page":"\u002fa","ref":{"page":"x"}}`)}, // escaped: "/a"
		{Key: []byte("cid"), Value: []byte(`{"user":"cid","page":42}`)},
		{Key: []byte("bob"), Value: []byte(` { "page" : "/a" } `)},
		{Key: []byte("dan"), Value: []byte(`{"page":4.2e1}`)},
	}
	for i := range in {
		in[i].Topic, in[i].Offset = "clicks", int64(i)
	}
	if err := stageTask(t, j, "main").ProcessBatch(in, &up); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, r := range up.recs {
		keys = append(keys, string(r.Key))
	}
	if got := strings.Join(keys, " "); got != "/a /b /a 42 /a 42" { // a number as JSON writes it: 4.2e1 is 42
		t.Fatalf("shuffle keys %s", got)
	}
	var down collector
	if err := stageTask(t, j, "count").ProcessBatch(up.recs, &down); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range down.recs {
		got = append(got, string(r.Key)+" "+string(r.Value))
	}
	want := []string{
		`/a {"key":"/a","count":1}`,
		`/b {"key":"/b","count":1}`,
		`/a {"key":"/a","count":2}`,
		`42 {"key":"42","count":1}`,
		`/a {"key":"/a","count":3}`,
		`42 {"key":"42","count":2}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("output\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestKeyByFieldErrors: a value without the field, or with a field that is
// no string or number, fails the task naming the record and the field,
// with stream.ErrDecode (a permanent failure for the runtime, as a record
// that fails the source's format check under on_error: fail).
func TestKeyByFieldErrors(t *testing.T) {
	j, err := pipeline.Compile(viewsJob(0))
	if err != nil {
		t.Fatal(err)
	}
	for value, want := range map[string]string{
		`{"user":"ann"}`:         `no top-level field "page"`,
		`{"user":{"page":"/a"}}`: `no top-level field "page"`,
		`null`:                   `no top-level field "page"`,
		`[{"page":"/a"}]`:        `no top-level field "page"`,
		`{"page":null}`:          `field "page" is null, not a string or a number`,
		`{"page":{"path":"/a"}}`: `field "page" is an object`,
		`{"page":["/a"]}`:        `field "page" is an array`,
		`{"page":true}`:          `field "page" is a boolean`,
	} {
		task := stageTask(t, j, "main")
		err := task.ProcessBatch([]stream.Record{{Key: []byte("ann"), Value: []byte(value), Topic: "clicks", Partition: 3, Offset: 17}}, &shuffler{})
		var re *stream.RecordError
		if !errors.As(err, &re) || re.Topic != "clicks" || re.Partition != 3 || re.Offset != 17 || !errors.Is(err, stream.ErrDecode) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v\nwant a record error containing %q", value, err, want)
		}
	}
}

func TestKeyByCompileErrors(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(j *config.Job)
		path   string
		msg    string
	}{
		{"no field", func(j *config.Job) { j.Pipeline[1].KeyBy.Field = "" }, "job.pipeline[1].key_by.field", "required"},
		{"raw values", func(j *config.Job) { j.Pipeline[0].Source.Format.Type = "raw" }, "job.pipeline[1].key_by.field", "raw bytes"},
		{"negative parallelism", func(j *config.Job) { j.Pipeline[1].KeyBy.Parallelism = -1 }, "job.pipeline[1].key_by.parallelism", "at least 1"},
		{"parallelism without a shuffle", func(j *config.Job) {
			j.Pipeline = append(j.Pipeline[:2], j.Pipeline[3])
			j.Pipeline[1].KeyBy.Parallelism = 3
		}, "job.pipeline[1].key_by.parallelism", "no aggregate follows this key_by"},
		{"two kinds", func(j *config.Job) { j.Pipeline[1].Aggregate = j.Pipeline[2].Aggregate }, "job.pipeline[1]", "exactly one of source, filter, map, flat_map, key_by, window, aggregate, dedupe, join, route and sink (has 2)"},
		{"field an aggregate does not emit", func(j *config.Job) {
			j.Pipeline = append(j.Pipeline[:3], config.Step{KeyBy: &config.KeyByStep{Field: "page"}}, j.Pipeline[2], j.Pipeline[3])
		}, "job.pipeline[3].key_by.field", `"page": the values reaching this key_by have only the fields key and count`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := viewsJob(2)
			tc.mutate(&job)
			_, err := pipeline.Compile(job)
			var fe *config.FieldError
			if !errors.As(err, &fe) || fe.Path != tc.path || !strings.Contains(fe.Msg, tc.msg) {
				t.Fatalf("got %v, want %s: ...%s...", err, tc.path, tc.msg)
			}
		})
	}
}

// TestKeyByWithoutAggregate: key_by straight to the sink re-keys the
// output in one stage.
func TestKeyByWithoutAggregate(t *testing.T) {
	job := viewsJob(0)
	job.Pipeline = append(job.Pipeline[:2], job.Pipeline[3])
	j, err := pipeline.Compile(job)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(j.Stages()); n != 1 {
		t.Fatalf("%d stages", n)
	}
	var c collector
	if err := stageTask(t, j, "").ProcessBatch([]stream.Record{{Key: []byte("ann"), Value: []byte(`{"page":"/a"}`), Topic: "clicks"}}, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.recs) != 1 || string(c.recs[0].Key) != "/a" || string(c.recs[0].Value) != `{"page":"/a"}` {
		t.Fatalf("output %+v", c.recs)
	}
}

// TestViewsExampleCompiles loads examples/views-per-page.yaml as the
// processor does and compiles it into two stages.
func TestViewsExampleCompiles(t *testing.T) {
	cfg, err := config.Load(config.Source{File: "../examples/views-per-page.yaml", NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	j, err := pipeline.Compile(cfg.Job)
	if err != nil {
		t.Fatal(err)
	}
	if st := j.Stages(); len(st) != 2 || st[1].Name != "count" || st[1].Input.From != "main" {
		t.Fatalf("stages %+v", st)
	}
}

// TestKeyByOnError: under the source's on_error skip or dead-letter, a
// record without the field is skipped, or written to the dead-letter
// topic, and the job goes on.
func TestKeyByOnError(t *testing.T) {
	in := []stream.Record{
		{Key: []byte("ann"), Value: []byte(`{"page":"/a"}`), Topic: "clicks", Offset: 0},
		{Key: []byte("bob"), Value: []byte(`{"user":"bob"}`), Topic: "clicks", Offset: 1},
		{Key: []byte("cid"), Value: []byte(`{"page":"/b"}`), Topic: "clicks", Offset: 2},
	}
	job := viewsJob(0)
	job.Pipeline[0].Source.OnError = "skip"
	j, err := pipeline.Compile(job)
	if err != nil {
		t.Fatal(err)
	}
	var up shuffler
	if err := stageTask(t, j, "main").ProcessBatch(in, &up); err != nil || len(up.recs) != 2 || string(up.recs[1].Key) != "/b" {
		t.Fatalf("skip: %v, %+v", err, up.recs)
	}

	job.Pipeline[0].Source.OnError, job.Pipeline[0].Source.DeadLetterTopic = "dead-letter", "clicks-dlq"
	if j, err = pipeline.Compile(job); err != nil {
		t.Fatal(err)
	}
	if sinks := j.Sinks(); len(sinks) != 2 || sinks[0].Topic != "clicks-dlq" || fmt.Sprint(j.Stages()[0].Sinks) != "[0]" {
		t.Fatalf("sinks %+v, main writes %v", sinks, j.Stages()[0].Sinks)
	}
	var dl deadLetters
	if err := stageTask(t, j, "main").ProcessBatch(in, &dl); err != nil || len(dl.shuffled) != 2 || len(dl.dead) != 1 {
		t.Fatalf("dead-letter: %v, %d shuffled, dead letters %+v", err, len(dl.shuffled), dl.dead)
	}
	d := dl.dead[0]
	var why string
	for _, h := range d.Headers {
		if h.Key == stream.DeadLetterHeaderError {
			why = string(h.Value)
		}
	}
	if string(d.Key) != "bob" || string(d.Value) != `{"user":"bob"}` || d.Topic != "clicks-dlq" || !strings.Contains(why, `no top-level field "page"`) {
		t.Fatalf("dead letter %s=%s to %s, error %q", d.Key, d.Value, d.Topic, why)
	}
}

// deadLetters collects sink 0 (the dead-letter topic) and counts shuffle
// records.
type deadLetters struct {
	shuffled [][]byte
	dead     []stream.Record
}

func (d *deadLetters) Emit(sink int, r stream.Record) error {
	if sink != 0 {
		return fmt.Errorf("sink %d", sink)
	}
	hs := make([]stream.Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = stream.Header{Key: h.Key, Value: []byte(string(h.Value))}
	}
	d.dead = append(d.dead, stream.Record{Key: []byte(string(r.Key)), Value: []byte(string(r.Value)), Topic: r.Topic, Headers: hs})
	return nil
}

func (d *deadLetters) Shuffle(edge int, r stream.Record) error {
	d.shuffled = append(d.shuffled, r.Key)
	return nil
}

// nop drops everything.
type nop struct{}

func (nop) Emit(int, stream.Record) error    { return nil }
func (nop) Shuffle(int, stream.Record) error { return nil }

// BenchmarkKeyByStage is the upstream stage of views-per-page (the
// decoding, the field read, the shuffle write) per batch of 100 records.
// Decoding a record into the value model allocates (its map, its strings):
// the stage no longer runs without allocations.
func BenchmarkKeyByStage(b *testing.B) {
	j, err := pipeline.Compile(viewsJob(0))
	if err != nil {
		b.Fatal(err)
	}
	task := stageTask(b, j, "main")
	in := make([]stream.Record, 100)
	for i := range in {
		in[i] = stream.Record{Key: fmt.Appendf(nil, "user-%d", i), Value: fmt.Appendf(nil, `{"user":"user-%d","page":"/p/%d","n":%d}`, i, i%7, i), Topic: "clicks", Offset: int64(i)}
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := task.ProcessBatch(in, nop{}); err != nil {
			b.Fatal(err)
		}
	}
}
