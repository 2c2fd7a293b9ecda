package pipeline_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/stream"
)

// t0 is the start of the minute the window tests' events are in.
var t0 = time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)

// at is t0 + d.
func at(d time.Duration) time.Time { return t0.Add(d) }

// sinks collects what a task emits, by the topic of the job's sink, and
// its shuffle records.
type sinks struct {
	topics  []string // Job.Sinks()' topics, by index
	out     map[string][]stream.Record
	shuffle []stream.Record
}

func newSinks(j *stream.Job) *sinks {
	s := &sinks{out: map[string][]stream.Record{}}
	for _, k := range j.Sinks() {
		s.topics = append(s.topics, k.Topic)
	}
	return s
}

func clone(r stream.Record) stream.Record {
	c := stream.Record{Key: bytes.Clone(r.Key), Value: bytes.Clone(r.Value), Topic: r.Topic, Timestamp: r.Timestamp}
	for _, h := range r.Headers {
		c.Headers = append(c.Headers, stream.Header{Key: h.Key, Value: bytes.Clone(h.Value)})
	}
	return c
}

func (s *sinks) Emit(sink int, r stream.Record) error {
	if sink < 0 || sink >= len(s.topics) {
		return fmt.Errorf("sink %d of %d", sink, len(s.topics))
	}
	s.out[s.topics[sink]] = append(s.out[s.topics[sink]], clone(r))
	return nil
}

func (s *sinks) Shuffle(edge int, r stream.Record) error {
	if edge != 0 {
		return fmt.Errorf("shuffle %d", edge)
	}
	s.shuffle = append(s.shuffle, clone(r))
	return nil
}

// take returns, sorted, the values written to topic since the last take,
// each with its key and timestamp if withMeta.
func (s *sinks) take(topic string) []string {
	var got []string
	for _, r := range s.out[topic] {
		got = append(got, string(r.Value))
	}
	delete(s.out, topic)
	slices.Sort(got)
	return got
}

// stages is a compiled YAML job whose stages run in memory: main's
// shuffle records go straight to the stage after the key_by.
type stages struct {
	t        *testing.T
	j        *stream.Job
	main     stream.Task
	down     stream.Task // nil for a one-stage job
	out      *sinks
	late     []string // OnLate's operators
	now      time.Time
	offset   int64
	mainSink *sinks
}

func runJob(t *testing.T, job config.Job) *stages {
	t.Helper()
	j, err := pipeline.Compile(job)
	if err != nil {
		t.Fatal(err)
	}
	if !j.EventTime() && slices.ContainsFunc(job.Pipeline, func(s config.Step) bool { return s.Window != nil }) {
		t.Fatal("a job with a window does not use event time")
	}
	s := &stages{t: t, j: j, out: newSinks(j), mainSink: newSinks(j), now: t0}
	task := func(stage string) stream.Task {
		task, err := j.NewTask(stream.TaskContext{Stage: stage, Backend: openBackend(t), Task: stage + "/0",
			Now: func() time.Time { return s.now }, OnLate: func(op string) { s.late = append(s.late, op) }})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = task.Close() })
		return task
	}
	st := j.Stages()
	s.main = task(st[0].Name)
	if len(st) > 1 {
		s.down = task(st[1].Name)
	}
	return s
}

// send runs values (event time, value) through the job's stages.
func (s *stages) send(events ...any) error {
	s.t.Helper()
	var in []stream.Record
	for i := 0; i < len(events); i += 2 {
		v := []byte(events[i+1].(string))
		in = append(in, stream.Record{Key: []byte("user"), Value: v, Topic: "clicks", Offset: s.offset, Timestamp: at(events[i].(time.Duration))})
		s.offset++
	}
	if s.down == nil {
		return s.main.ProcessBatch(in, s.out)
	}
	if err := s.main.ProcessBatch(in, s.mainSink); err != nil {
		return err
	}
	for topic, recs := range s.mainSink.out { // dead letters of main
		s.out.out[topic] = append(s.out.out[topic], recs...)
	}
	clear(s.mainSink.out)
	recs := s.mainSink.shuffle
	s.mainSink.shuffle = nil
	return s.down.ProcessBatch(recs, s.out)
}

func (s *stages) mustSend(events ...any) {
	s.t.Helper()
	if err := s.send(events...); err != nil {
		s.t.Fatal(err)
	}
}

// watermark advances the watermark of the stage that holds the window.
func (s *stages) watermark(d time.Duration) {
	s.t.Helper()
	task := s.down
	if task == nil {
		task = s.main
	}
	if err := task.AdvanceWatermark(at(d), s.out); err != nil {
		s.t.Fatal(err)
	}
}

// header returns the value of r's header key.
func header(r stream.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func expect(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	slices.Sort(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s:\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func loadExample(t *testing.T, file string) config.Job {
	t.Helper()
	cfg, err := config.Load(config.Source{File: file, NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Job
}

// TestViewsPerPagePerMinute runs the job,
// examples/views-per-page-per-minute.yaml, through its two stages: clicks
// out of order and within the allowed lateness count in their minute; a
// minute's counts are emitted once, when the watermark passes its end + 10s;
// later clicks go to clicks-late, counted as late.
func TestViewsPerPagePerMinute(t *testing.T) {
	job := loadExample(t, "../examples/views-per-page-per-minute.yaml")
	s := runJob(t, job)
	src := s.j.Sources()[0]
	if src.Timestamp != (stream.TimestampSpec{Field: "ts", Format: kafkaio.TimestampUnixMs}) ||
		src.Watermark != (stream.WatermarkSpec{MaxOutOfOrderness: 5 * time.Second, IdleTimeout: 30 * time.Second, Interval: 200 * time.Millisecond}) {
		t.Fatalf("source %+v", src)
	}
	st := s.j.Stages()
	if len(st) != 2 || st[1].Name != "window-count" || !slices.Contains(s.out.topics, "clicks-late") || !slices.Contains(s.out.topics, "page-views-per-minute") {
		t.Fatalf("stages %+v, sinks %v", st, s.out.topics)
	}
	const out = "page-views-per-minute"
	s.mustSend(
		5*time.Second, `{"page":"/a","ts":0}`,
		20*time.Second, `{"page":"/b","ts":0}`,
		62*time.Second, `{"page":"/a","ts":0}`,
		59999*time.Millisecond, `{"page":"/a","ts":0}`, // out of order
		30*time.Second, `{"page":"/a","ts":0}`,
	)
	s.watermark(65 * time.Second) // the first minute is in its lateness
	expect(t, "before the first minute closes", s.out.take(out))
	s.mustSend(40*time.Second, `{"page":"/b","ts":0}`) // late, but allowed
	s.watermark(70*time.Second - time.Millisecond)
	recs := s.out.out[out]
	expect(t, "the first minute", s.out.take(out),
		`{"key":"/a","window_start":"2026-12-01T19:00:00Z","window_end":"2026-12-01T19:01:00Z","count":3}`,
		`{"key":"/b","window_start":"2026-12-01T19:00:00Z","window_end":"2026-12-01T19:01:00Z","count":2}`)
	for _, r := range recs {
		if !r.Timestamp.Equal(at(time.Minute-time.Millisecond)) || !strings.Contains(string(r.Value), `"key":"`+string(r.Key)+`"`) {
			t.Errorf("result %s: key %s, timestamp %v: want the page and the window's end − 1ms", r.Value, r.Key, r.Timestamp)
		}
	}
	s.watermark(70*time.Second - time.Millisecond) // again: nothing fires twice
	expect(t, "the same watermark again", s.out.take(out))

	s.mustSend(50*time.Second, `{"page":"/a","ts":1}`, 90*time.Second, `{"page":"/a","ts":0}`)
	if late := s.out.out["clicks-late"]; len(late) != 1 || string(late[0].Value) != `{"page":"/a","ts":1}` ||
		header(late[0], stream.LateHeaderWindowStart) != "2026-12-01T19:00:00Z" ||
		header(late[0], stream.LateHeaderWindowEnd) != "2026-12-01T19:01:00Z" ||
		header(late[0], stream.LateHeaderLateBy) != "19.999s" {
		t.Errorf("late records %+v: want the click of 19:00:50, as read, with the window's headers, 19.999s behind the watermark", late)
	}
	if !slices.Equal(s.late, []string{"window-count"}) {
		t.Errorf("late records counted for %v, want one for window-count", s.late)
	}
	s.watermark(130 * time.Second)
	expect(t, "the second minute", s.out.take(out),
		`{"key":"/a","window_start":"2026-12-01T19:01:00Z","window_end":"2026-12-01T19:02:00Z","count":2}`)
}

// windowJob is source → key_by page → window → aggregate → sink, with the
// source's on_error.
func windowJob(w config.WindowStep, a config.AggregateStep, onError string) config.Job {
	src := &config.SourceStep{Topics: []string{"clicks"}, Format: config.Format{Type: "json"}, OnError: onError,
		Watermark: &config.WatermarkSpec{MaxOutOfOrderness: 5 * time.Second}}
	if onError == "dead-letter" {
		src.DeadLetterTopic = "clicks-dlq"
	}
	return config.Job{Name: "windows", Pipeline: []config.Step{
		{Source: src},
		{KeyBy: &config.KeyByStep{Field: "page"}},
		{Window: &w},
		{Aggregate: &a},
		{Sink: &config.SinkStep{Topic: "out", Format: config.Format{Type: "json"}}},
	}}
}

// TestSlidingSum: sliding windows of 10s every 5s; each record is in two
// windows; out-of-order records count in both; a record behind every open
// window is late, and dropped without a late_topic.
func TestSlidingSum(t *testing.T) {
	s := runJob(t, windowJob(config.WindowStep{Type: "sliding", Size: 10 * time.Second, Slide: 5 * time.Second}, config.AggregateStep{Op: "sum", Field: "ms"}, "fail"))
	s.mustSend(
		1*time.Second, `{"page":"/a","ms":1.5}`,
		7*time.Second, `{"page":"/a","ms":2}`,
		3*time.Second, `{"page":"/a","ms":-0.25}`, // out of order
		12*time.Second, `{"page":"/a","ms":1e3}`,
	)
	s.watermark(10*time.Second - time.Millisecond) // [-5s,5s) and [0,10s) close
	expect(t, "at 10s", s.out.take("out"),
		`{"key":"/a","window_start":"2026-12-01T18:59:55Z","window_end":"2026-12-01T19:00:05Z","sum":1.25}`,
		`{"key":"/a","window_start":"2026-12-01T19:00:00Z","window_end":"2026-12-01T19:00:10Z","sum":3.25}`)
	s.mustSend(6*time.Second, `{"page":"/a","ms":100}`) // in [5s,15s), still open
	s.mustSend(4*time.Second, `{"page":"/a","ms":100}`) // in [-5s,5s) and [0,10s): both fired, late
	if !slices.Equal(s.late, []string{"window-sum"}) {
		t.Errorf("late records counted for %v, want one for window-sum", s.late)
	}
	s.watermark(20 * time.Second)
	expect(t, "at 20s", s.out.take("out"),
		`{"key":"/a","window_start":"2026-12-01T19:00:05Z","window_end":"2026-12-01T19:00:15Z","sum":1102}`,
		`{"key":"/a","window_start":"2026-12-01T19:00:10Z","window_end":"2026-12-01T19:00:20Z","sum":1000}`)
}

// TestSessionAvgMax: sessions with a 10s gap merge when a record bridges
// them, also out of order; avg and max are of the merged session, which
// fires once the watermark passes its merged end.
func TestSessionAvgMax(t *testing.T) {
	for _, c := range []struct {
		op            string
		first, second []string
	}{
		{"avg", []string{
			`{"key":"/a","window_start":"2026-12-01T19:00:00Z","window_end":"2026-12-01T19:00:10Z","avg":1}`,
		}, []string{
			`{"key":"/a","window_start":"2026-12-01T19:00:12Z","window_end":"2026-12-01T19:00:35Z","avg":3}`,
			`{"key":"/b","window_start":"2026-12-01T19:00:02Z","window_end":"2026-12-01T19:00:20Z","avg":7.5}`,
		}},
		{"max", []string{
			`{"key":"/a","window_start":"2026-12-01T19:00:00Z","window_end":"2026-12-01T19:00:10Z","max":1}`,
		}, []string{
			`{"key":"/a","window_start":"2026-12-01T19:00:12Z","window_end":"2026-12-01T19:00:35Z","max":4}`,
			`{"key":"/b","window_start":"2026-12-01T19:00:02Z","window_end":"2026-12-01T19:00:20Z","max":8}`,
		}},
	} {
		t.Run(c.op, func(t *testing.T) {
			s := runJob(t, windowJob(config.WindowStep{Type: "session", Gap: 10 * time.Second}, config.AggregateStep{Op: c.op, Field: "v"}, "fail"))
			s.mustSend(
				time.Duration(0), `{"page":"/a","v":1}`, // [0,10s)
				25*time.Second, `{"page":"/a","v":4}`, // [25s,35s)
				2*time.Second, `{"page":"/b","v":7}`, // [2s,12s)
				12*time.Second, `{"page":"/a","v":2}`, // [12s,22s): touches neither
			)
			s.watermark(11 * time.Second) // /a's [0,10s) fires at 10s−1ms; /b's [2s,12s) is open until 12s−1ms
			expect(t, "at 11s", s.out.take("out"), c.first...)
			s.mustSend(
				18*time.Second, `{"page":"/a","v":3}`, // [18s,28s) bridges [12s,22s) and [25s,35s)
				10*time.Second, `{"page":"/b","v":8}`, // [10s,20s) extends /b's open session
			)
			s.watermark(40 * time.Second)
			expect(t, "at 40s", s.out.take("out"), c.second...)
			if len(s.late) != 0 {
				t.Errorf("late records %v", s.late)
			}
		})
	}
}

// TestTumblingMinLateToTopic: a tumbling min with allowed lateness writes
// late records to late_topic, and its result once.
func TestTumblingMinLateToTopic(t *testing.T) {
	s := runJob(t, windowJob(config.WindowStep{Type: "tumbling", Size: 10 * time.Second, AllowedLateness: 2 * time.Second, LateTopic: "late"}, config.AggregateStep{Op: "min", Field: "v"}, "fail"))
	s.mustSend(3*time.Second, `{"page":"/a","v":5}`, 1*time.Second, `{"page":"/a","v":-2}`, 11*time.Second, `{"page":"/a","v":-9}`)
	s.watermark(11 * time.Second)
	s.mustSend(9*time.Second, `{"page":"/a","v":-3}`) // within the lateness: counts
	s.watermark(12*time.Second - time.Millisecond)
	expect(t, "the first window", s.out.take("out"),
		`{"key":"/a","window_start":"2026-12-01T19:00:00Z","window_end":"2026-12-01T19:00:10Z","min":-3}`)
	s.mustSend(8*time.Second, `{"page":"/a","v":-100}`)
	expect(t, "late", s.out.take("late"), `{"page":"/a","v":-100}`)
	s.watermark(22 * time.Second)
	expect(t, "the second window", s.out.take("out"),
		`{"key":"/a","window_start":"2026-12-01T19:00:10Z","window_end":"2026-12-01T19:00:20Z","min":-9}`)
}

// TestEarlyResults: with emit_every, an open window with new records emits
// its result so far every emit_every of processing time, marked early, and
// its final result once.
func TestEarlyResults(t *testing.T) {
	s := runJob(t, windowJob(config.WindowStep{Type: "tumbling", Size: time.Minute, EmitEvery: time.Second}, config.AggregateStep{Op: "count"}, "fail"))
	s.mustSend(time.Second, `{"page":"/a"}`, 2*time.Second, `{"page":"/a"}`)
	s.now = s.now.Add(1500 * time.Millisecond)
	if err := s.down.FireTimers(s.now, s.out); err != nil {
		t.Fatal(err)
	}
	expect(t, "early", s.out.take("out"),
		`{"key":"/a","window_start":"2026-12-01T19:00:00Z","window_end":"2026-12-01T19:01:00Z","count":2,"early":true}`)
	s.watermark(time.Minute)
	expect(t, "final", s.out.take("out"),
		`{"key":"/a","window_start":"2026-12-01T19:00:00Z","window_end":"2026-12-01T19:01:00Z","count":2}`)
}

// TestAggregateFieldErrors: a record whose field is missing or not a
// number is rejected in the source's stage, before the shuffle: the
// source's on_error applies (fail names the record; skip drops it;
// dead-letter copies it), and the window counts only the good records.
func TestAggregateFieldErrors(t *testing.T) {
	bad := map[string]string{
		`{"page":"/a"}`:             `no top-level field "v"`,
		`{"page":"/a","v":"3"}`:     `field "v" is a string, not a number`,
		`{"page":"/a","v":null}`:    `field "v" is null, not a number`,
		`{"page":"/a","v":[1]}`:     `field "v" is an array, not a number`,
		`{"page":"/a","v":{"x":1}}`: `field "v" is an object, not a number`,
		`{"page":"/a","v":true}`:    `field "v" is a boolean, not a number`,
		`{"page":"/a","v":1e400}`:   `field "v" is out of the range of a float64`,
	}
	w := config.WindowStep{Type: "tumbling", Size: 10 * time.Second}
	a := config.AggregateStep{Op: "sum", Field: "v"}
	for value, want := range bad {
		s := runJob(t, windowJob(w, a, "fail"))
		err := s.send(time.Second, value)
		var re *stream.RecordError
		if !errors.As(err, &re) || re.Topic != "clicks" || !errors.Is(err, stream.ErrDecode) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v\nwant a record error of the source stage containing %q", value, err, want)
		}
	}
	for _, policy := range []string{"skip", "dead-letter"} {
		s := runJob(t, windowJob(w, a, policy))
		var events []any
		for value := range bad {
			events = append(events, time.Second, value, 2*time.Second, `{"page":"/a","v":2}`)
		}
		s.mustSend(events...)
		if len(s.mainSink.shuffle) != 0 {
			t.Fatalf("%s: %d records left in the shuffle", policy, len(s.mainSink.shuffle))
		}
		s.watermark(time.Minute)
		expect(t, policy, s.out.take("out"), fmt.Sprintf(`{"key":"/a","window_start":"2026-12-01T19:00:00Z","window_end":"2026-12-01T19:00:10Z","sum":%d}`, 2*len(bad)))
		dlq := s.out.take("clicks-dlq")
		if policy == "skip" && len(dlq) != 0 || policy == "dead-letter" && len(dlq) != len(bad) {
			t.Errorf("%s: dead letters %v", policy, dlq)
		}
	}
}

// TestRunningAggregates: without a window, sum, min, max and avg emit each
// key's running result for every record, as count does.
func TestRunningAggregates(t *testing.T) {
	for op, want := range map[string][]string{
		"sum": {`{"key":"/a","sum":1.5}`, `{"key":"/b","sum":10}`, `{"key":"/a","sum":-1}`, `{"key":"/a","sum":1e+21}`},
		"min": {`{"key":"/a","min":1.5}`, `{"key":"/b","min":10}`, `{"key":"/a","min":-2.5}`, `{"key":"/a","min":-2.5}`},
		"max": {`{"key":"/a","max":1.5}`, `{"key":"/b","max":10}`, `{"key":"/a","max":1.5}`, `{"key":"/a","max":1e+21}`},
		"avg": {`{"key":"/a","avg":1.5}`, `{"key":"/b","avg":10}`, `{"key":"/a","avg":-0.5}`, `{"key":"/a","avg":333333333333333300000}`},
	} {
		job := config.Job{Name: "running", Pipeline: []config.Step{
			{Source: &config.SourceStep{Topics: []string{"clicks"}, Format: config.Format{Type: "json"}}},
			{KeyBy: &config.KeyByStep{Field: "page"}},
			{Aggregate: &config.AggregateStep{Op: op, Field: "v"}},
			{Sink: &config.SinkStep{Topic: "out", Format: config.Format{Type: "json"}}},
		}}
		s := runJob(t, job)
		if st := s.j.Stages(); len(st) != 2 || st[1].Name != op || s.j.EventTime() {
			t.Fatalf("%s: stages %+v, event time %v", op, st, s.j.EventTime())
		}
		var z time.Duration
		s.mustSend(z, `{"page":"/a","v":1.5}`, z, `{"page":"/b","v":10}`, z, `{"page":"/a","v":-2.5}`, z, `{"page":"/a","v":1e21}`)
		var got []string
		for _, r := range s.out.out["out"] {
			got = append(got, string(r.Value))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s:\n%s\nwant\n%s", op, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

func TestWindowCompileErrors(t *testing.T) {
	base := func() config.Job {
		return windowJob(config.WindowStep{Type: "tumbling", Size: time.Minute}, config.AggregateStep{Op: "sum", Field: "v"}, "fail")
	}
	cases := []struct {
		name   string
		mutate func(j *config.Job)
		path   string
		msg    string
	}{
		{"window without aggregate", func(j *config.Job) { j.Pipeline = append(j.Pipeline[:3], j.Pipeline[4]) }, "job.pipeline[2].window", "must be followed by an aggregate step"},
		{"window last but one", func(j *config.Job) { j.Pipeline[3], j.Pipeline[2] = j.Pipeline[2], j.Pipeline[3] }, "job.pipeline[3].window", "must be followed by an aggregate step"},
		{"unknown type", func(j *config.Job) { j.Pipeline[2].Window.Type = "hopping" }, "job.pipeline[2].window.type", `"hopping": must be tumbling, sliding or session`},
		{"sum without field", func(j *config.Job) { j.Pipeline[3].Aggregate.Field = "" }, "job.pipeline[3].aggregate.field", "required by op sum"},
		{"count with field", func(j *config.Job) { j.Pipeline[3].Aggregate.Op = "count" }, "job.pipeline[3].aggregate.field", "count reads no field"},
		{"sum of raw values", func(j *config.Job) {
			j.Pipeline[0].Source.Format.Type = "raw"
			j.Pipeline = slices.Delete(j.Pipeline, 1, 2)
		}, "job.pipeline[2].aggregate.field", "raw bytes"},
		{"sum of a field an aggregate does not emit", func(j *config.Job) {
			j.Pipeline = slices.Insert(j.Pipeline, 1, config.Step{Aggregate: &config.AggregateStep{Op: "count"}})
			j.Pipeline[2].KeyBy.Field = "key"
		}, "job.pipeline[4].aggregate.field", `"v": the values reaching this aggregate have only the number fields count`},
		{"timestamp of raw values", func(j *config.Job) {
			j.Pipeline[0].Source.Format.Type = "raw"
			j.Pipeline[0].Source.Timestamp = &config.TimestampSpec{Field: "ts"}
		}, "job.pipeline[0].source.timestamp", "raw"},
		{"bad timestamp format", func(j *config.Job) {
			j.Pipeline[0].Source.Timestamp = &config.TimestampSpec{Field: "ts", Format: "unix_ns"}
		}, "job.pipeline[0].source.timestamp.format", `"unix_ns"`},
		{"late topic is an input", func(j *config.Job) { j.Pipeline[2].Window.LateTopic = "clicks" }, "job.pipeline[2].window", "sink clicks: the topic is an input of the job"},
		{"size not in milliseconds", func(j *config.Job) { j.Pipeline[2].Window.Size = 1500 * time.Microsecond }, "job.pipeline[2].window", "size 1.5ms is not a whole number of milliseconds"},
		{"slide longer than size", func(j *config.Job) {
			*j.Pipeline[2].Window = config.WindowStep{Type: "sliding", Size: time.Second, Slide: 2 * time.Second}
		}, "job.pipeline[2].window", "slide 2s is longer than size 1s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := base()
			tc.mutate(&job)
			_, err := pipeline.Compile(job)
			var fe *config.FieldError
			if !errors.As(err, &fe) || fe.Path != tc.path || !strings.Contains(fe.Msg, tc.msg) || strings.Count(err.Error(), "\n") > 0 {
				t.Fatalf("got %v, want one problem %s: ...%s...", err, tc.path, tc.msg)
			}
		})
	}
}

// TestWindowAfterAggregate: a window's results are JSON with known fields:
// a key_by and a second window may read them.
func TestWindowAfterAggregate(t *testing.T) {
	job := windowJob(config.WindowStep{Type: "tumbling", Size: 10 * time.Second}, config.AggregateStep{Op: "count"}, "fail")
	job.Pipeline = slices.Insert(job.Pipeline, 4,
		config.Step{KeyBy: &config.KeyByStep{Field: "window_start"}},
		config.Step{Window: &config.WindowStep{Type: "tumbling", Size: time.Minute}},
		config.Step{Aggregate: &config.AggregateStep{Op: "max", Field: "count"}})
	j, err := pipeline.Compile(job)
	if err != nil {
		t.Fatal(err)
	}
	if st := j.Stages(); len(st) != 3 || st[1].Name != "window-count" || st[2].Name != "window-max" {
		t.Fatalf("stages %+v", st)
	}
	job.Pipeline[4].KeyBy.Field = "page"
	if _, err := pipeline.Compile(job); err == nil || !strings.Contains(err.Error(), `job.pipeline[4].key_by.field: "page": the values reaching this key_by have only the fields key, window_start, window_end and count`) {
		t.Fatalf("key_by a field the window does not emit: %v", err)
	}
}

// TestWindowWithoutKeyBy: a window straight after the source is keyed by
// the record key and runs in the source's stage; its field check runs
// there too, under the source's on_error.
func TestWindowWithoutKeyBy(t *testing.T) {
	job := windowJob(config.WindowStep{Type: "tumbling", Size: 10 * time.Second}, config.AggregateStep{Op: "avg", Field: "v"}, "skip")
	job.Pipeline = slices.Delete(job.Pipeline, 1, 2)
	s := runJob(t, job)
	if st := s.j.Stages(); len(st) != 1 || fmt.Sprint(st[0].Operators) != `[From([clicks]) Filter Window("window-avg") Map To(out)]` {
		t.Fatalf("stages %+v", st)
	}
	s.mustSend(time.Second, `{"v":1}`, 2*time.Second, `{"v":"x"}`, 3*time.Second, `{"v":4}`, 11*time.Second, `{}`)
	s.watermark(20 * time.Second)
	expect(t, "results", s.out.take("out"),
		`{"key":"user","window_start":"2026-12-01T19:00:00Z","window_end":"2026-12-01T19:00:10Z","avg":2.5}`)
}
