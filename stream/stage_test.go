package stream_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/stream"
)

// pageOf keys a click by its page.
func pageOf(c Click) ([]byte, error) { return []byte(c.Page), nil }

// viewsJob counts views per page of clicks keyed by user: a KeyBy before
// Count, so two stages. Main also writes the clicks it drops to a sink.
func viewsJob(opts ...stream.ShuffleOption) *stream.Job {
	j := stream.NewJob("views")
	clicks := stream.From(j, stream.KafkaSource{Topics: []string{"clicks"}, OnError: kafkaio.OnErrorDeadLetter, DeadLetterTopic: "clicks-dlq"}, stream.JSONCodec[Click]{})
	health := stream.Filter(clicks, func(c Click) (bool, error) { return c.Page == "/health", nil })
	stream.To(health, stream.KafkaSink{Topic: "health"}, stream.JSONCodec[Click]{})
	pages := stream.Filter(clicks, func(c Click) (bool, error) { return c.Page != "/health", nil })
	byPage := stream.KeyBy(pages, pageOf, append([]stream.ShuffleOption{stream.ShuffleCodec(stream.JSONCodec[Click]{})}, opts...)...)
	views := stream.Count(byPage, "views")
	text := stream.Map(views, func(n int64) (string, error) { return fmt.Sprint(n), nil })
	stream.To(text, stream.KafkaSink{Topic: "views"}, stream.StringCodec{})
	return j
}

func TestTwoStagesInMemory(t *testing.T) {
	j := viewsJob(stream.Parallelism(3))
	if err := j.Build(); err != nil {
		t.Fatal(err)
	}
	sinks := j.Sinks()
	if len(sinks) != 3 || sinks[0].Topic != "clicks-dlq" || sinks[1].Topic != "health" || sinks[2].Topic != "views" {
		t.Fatalf("sinks %+v", sinks)
	}
	stages := j.Stages()
	edge := stream.ShuffleEdge{Index: 0, From: "main", To: "views", Where: stages[1].Input.Where}
	if len(stages) != 2 || !strings.HasPrefix(edge.Where, "stage_test.go:") {
		t.Fatalf("stages %+v", stages)
	}
	want := []stream.StageDef{
		{Name: "main", Index: 0, Kafka: true, Outputs: []stream.ShuffleEdge{edge}, Sinks: []int{0, 1},
			Operators: []string{"From([clicks])", "Filter", "To(health)", "Filter", "KeyBy"}},
		{Name: "views", Index: 1, Input: &edge, Sinks: []int{2}, Parallelism: 3,
			Operators: []string{`Count("views")`, "Map", "To(views)"}},
	}
	if got, _ := json.Marshal(stages); !bytes.Equal(got, must(json.Marshal(want))) {
		t.Fatalf("stages\ngot  %s\nwant %s", got, must(json.Marshal(want)))
	}
	if sh := j.Shuffles(); len(sh) != 1 || sh[0] != edge {
		t.Fatalf("shuffles %+v", sh)
	}
	g := j.Graph()
	if len(g.Nodes) != 8 || g.Nodes[4].What != "KeyBy" || g.Nodes[4].Stage != "main" || fmt.Sprint(g.Nodes[4].Inputs) != "[3]" ||
		g.Nodes[5].Stage != "views" || fmt.Sprint(g.Nodes[5].Inputs) != "[4]" || len(g.Stages) != 2 || len(g.Shuffles) != 1 {
		t.Fatalf("graph %+v", g)
	}

	// Main: clicks keyed by user in, shuffle records keyed by page out.
	upstream := newTask(t, j, nil, nil)
	in := recs("clicks",
		`ann={"user":"ann","page":"/a"}`, `bob={"user":"bob","page":"/b"}`, `ann={"user":"ann","page":"/health"}`,
		`cid={"user":"cid","page":"/a"}`, `bob=not json`, `bob={"user":"bob","page":"/a"}`)
	in[0].Headers = []stream.Header{{Key: "trace", Value: []byte("t0")}}
	var up collector
	if err := upstream.ProcessBatch(in, &up); err != nil {
		t.Fatal(err)
	}
	equal(t, "main's sinks", up.take(), []string{`1:ann={"user":"ann","page":"/health"}`, "0:bob=not json"})
	if len(up.shuffled) != 4 {
		t.Fatalf("shuffled %+v", up.shuffled)
	}
	first := up.shuffled[0]
	if first.sink != 0 || first.key != "/a" || first.value != `{"user":"ann","page":"/a"}` || !first.ts.Equal(t0) || first.headers != "trace=t0" || first.topic != "" {
		t.Fatalf("first shuffle record %+v", first)
	}

	// The downstream stage reads the shuffle records (from any topic the
	// runtime names) and counts per page, the new key.
	downstream, err := j.NewTask(stream.TaskContext{Stage: "views", Backend: openBackend(t, t.TempDir()), Task: "views/0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = downstream.Close() })
	var shuffle []stream.Record
	for i, r := range up.shuffled {
		shuffle = append(shuffle, stream.Record{Key: []byte(r.key), Value: []byte(r.value), Timestamp: r.ts, Topic: "_weir.views.shuffle.views", Offset: int64(i)})
	}
	shuffle[0].Headers = []stream.Header{{Key: "trace", Value: []byte("t0")}}
	var down collector
	if err := downstream.ProcessBatch(shuffle, &down); err != nil {
		t.Fatal(err)
	}
	if r := down.recs[0]; r.topic != "views" || !r.ts.Equal(t0) || r.headers != "trace=t0" {
		t.Fatalf("first output %+v", r)
	}
	equal(t, "views per page", down.take(), []string{"2:/a=1", "2:/b=1", "2:/a=2", "2:/a=3"})
	if len(down.shuffled) != 0 {
		t.Fatalf("the last stage shuffled %+v", down.shuffled)
	}

	// A shuffle record that does not decode is the task's error, named.
	err = downstream.ProcessBatch([]stream.Record{{Key: []byte("/a"), Value: []byte("{"), Topic: "x", Partition: 7, Offset: 9}}, &down)
	var re *stream.RecordError
	if !errors.As(err, &re) || re.Partition != 7 || re.Offset != 9 || !errors.Is(err, stream.ErrDecode) || !strings.Contains(err.Error(), "the shuffle of the KeyBy at stage_test.go:") {
		t.Fatalf("undecodable shuffle record: %v", err)
	}

	if _, err := j.NewTask(stream.TaskContext{Stage: "nope"}); err == nil || !strings.Contains(err.Error(), `no stage "nope" (its stages: main, views)`) {
		t.Fatalf("unknown stage: %v", err)
	}
	// Main's task opens no keyed operator: it needs no backend.
	if _, err := j.NewTask(stream.TaskContext{Stage: "main"}); err != nil {
		t.Fatalf("main without a backend: %v", err)
	}
	if _, err := j.NewTask(stream.TaskContext{Stage: "views"}); err == nil || !strings.Contains(err.Error(), "no state backend") {
		t.Fatalf("views without a backend: %v", err)
	}
}

// TestThreeStages: a second shuffle point downstream makes a third stage,
// named by Named; a KeyBy that reaches no keyed operator stays in its
// stage and only re-keys what its sink writes.
func TestThreeStages(t *testing.T) {
	j := stream.NewJob("three")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{})
	byValue := stream.KeyBy(s, func(v []byte) ([]byte, error) { return v, nil }) // []byte: RawCodec by default
	counts := stream.Count(byValue, "per-value")
	text := stream.Map(counts, func(n int64) ([]byte, error) { return fmt.Append(nil, n), nil })
	byCount := stream.KeyBy(text, func(v []byte) ([]byte, error) { return v, nil }, stream.Named("histogram"), stream.Parallelism(2))
	hist := stream.Count(byCount, "values-per-count")
	stream.To(hist, stream.KafkaSink{Topic: "hist"}, stream.Int64Codec{})
	// Stays in main: KeyBy → To.
	rekeyed := stream.KeyBy(s, func(v []byte) ([]byte, error) { return append([]byte("k-"), v...), nil })
	stream.To(rekeyed, stream.KafkaSink{Topic: "rekeyed"}, stream.RawCodec{})
	if err := j.Build(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, st := range j.Stages() {
		in := "-"
		if st.Input != nil {
			in = fmt.Sprintf("%d:%s->%s", st.Input.Index, st.Input.From, st.Input.To)
		}
		got = append(got, fmt.Sprintf("%s p=%d in=%s outs=%d sinks=%v ops=%s", st.Name, st.Parallelism, in, len(st.Outputs), st.Sinks, strings.Join(st.Operators, ",")))
	}
	equal(t, "stages", got, []string{
		"main p=0 in=- outs=1 sinks=[1] ops=From([in]),KeyBy,KeyBy,To(rekeyed)",
		`per-value p=0 in=0:main->per-value outs=1 sinks=[] ops=Count("per-value"),Map,KeyBy`,
		`histogram p=2 in=1:per-value->histogram outs=0 sinks=[0] ops=Count("values-per-count"),To(hist)`,
	})

	run := func(stage string, in []stream.Record) *collector {
		t.Helper()
		task, err := j.NewTask(stream.TaskContext{Stage: stage, Backend: openBackend(t, t.TempDir())})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = task.Close() })
		var c collector
		if err := task.ProcessBatch(in, &c); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	toRecords := func(outs []out) []stream.Record {
		var rs []stream.Record
		for _, o := range outs {
			rs = append(rs, stream.Record{Key: []byte(o.key), Value: []byte(o.value), Timestamp: o.ts})
		}
		return rs
	}
	main := run("main", recs("in", "u1=x", "u2=y", "u3=x", "u4=z", "u5=x", "u6=y"))
	equal(t, "main's sink", main.take(), []string{"1:k-x=x", "1:k-y=y", "1:k-x=x", "1:k-z=z", "1:k-x=x", "1:k-y=y"})
	mid := run("per-value", toRecords(main.shuffled))
	var keys []string
	for _, o := range mid.shuffled {
		keys = append(keys, fmt.Sprintf("%d:%s", o.sink, o.key))
	}
	equal(t, "per-value's shuffle", keys, []string{"1:1", "1:1", "1:2", "1:1", "1:3", "1:2"})
	last := run("histogram", toRecords(mid.shuffled))
	var hist2 []string
	for _, o := range last.recs {
		hist2 = append(hist2, fmt.Sprintf("%s=%d", o.key, must(stream.Int64Codec{}.Decode([]byte(o.value)))))
	}
	// How many values reached each count: 1 three times (x, y, z), 2 twice, 3 once.
	equal(t, "histogram", hist2, []string{"1=1", "1=2", "2=1", "1=3", "3=1", "2=2"})
}

func TestStageErrors(t *testing.T) {
	src := stream.KafkaSource{Topics: []string{"in"}}
	sink := stream.KafkaSink{Topic: "out"}
	key := func(v string) ([]byte, error) { return []byte(v), nil }
	codec := stream.ShuffleCodec(str)
	count := func(s *stream.Stream[string], name string) {
		stream.To(stream.Count(s, name), stream.KafkaSink{Topic: "out-" + name}, stream.Int64Codec{})
	}
	cases := []struct {
		name  string
		build func(j *stream.Job)
		msg   string
	}{
		{"no codec", func(j *stream.Job) {
			count(stream.KeyBy(stream.From(j, src, str), key), "n")
		}, "KeyBy (stage_test.go:NN): its string elements go through a shuffle to the keyed operators after it, and need a codec: pass stream.ShuffleCodec(c), c a stream.Codec[string]"},
		{"wrong codec", func(j *stream.Job) {
			count(stream.KeyBy(stream.From(j, src, str), key, stream.ShuffleCodec(stream.Int64Codec{})), "n")
		}, "KeyBy: ShuffleCodec: state.Int64Codec is not a stream.Codec[string] (stage_test.go:NN)"},
		{"named main", func(j *stream.Job) {
			count(stream.KeyBy(stream.From(j, src, str), key, codec, stream.Named("main")), "n")
		}, `KeyBy: Named: stage name "main" is reserved for the source stage (stage_test.go:NN)`},
		{"bad name", func(j *stream.Job) {
			count(stream.KeyBy(stream.From(j, src, str), key, codec, stream.Named("By Page")), "n")
		}, `KeyBy: Named: stage name "By Page": use lower-case letters`},
		{"bad derived name", func(j *stream.Job) {
			count(stream.KeyBy(stream.From(j, src, str), key, codec), "Views")
		}, `KeyBy (stage_test.go:NN): the stage after it takes its name from its first keyed operator, but stage name "Views": use lower-case letters, digits, '_' and '-', starting with a letter or digit; name the stage with stream.Named`},
		{"zero parallelism", func(j *stream.Job) {
			count(stream.KeyBy(stream.From(j, src, str), key, codec, stream.Parallelism(0)), "n")
		}, "KeyBy: Parallelism(0): must be at least 1 (stage_test.go:NN)"},
		{"options without a shuffle", func(j *stream.Job) {
			stream.To(stream.KeyBy(stream.From(j, src, str), key, stream.Parallelism(4)), sink, str)
		}, "KeyBy (stage_test.go:NN): Named or Parallelism set, but the KeyBy reaches no keyed operator"},
		{"duplicate stage names", func(j *stream.Job) {
			s := stream.From(j, src, str)
			count(stream.KeyBy(s, key, codec, stream.Named("pages")), "a")
			count(stream.KeyBy(s, key, codec, stream.Named("pages")), "b")
		}, `KeyBy (stage_test.go:NN): stage name "pages" is also the name of the stage after the KeyBy at stage_test.go:NN: name one with stream.Named`},
		{"merge of main and a shuffle", func(j *stream.Job) {
			s := stream.From(j, src, str)
			k := stream.KeyBy(s, key, codec)
			count(k, "n")
			stream.To(stream.Merge(s, k), sink, str)
		}, "Merge (stage_test.go:NN): reads streams of two stages, main and the stage after the KeyBy at stage_test.go:NN: a stream that went through a shuffle"},
		{"merge of two shuffles", func(j *stream.Job) {
			s := stream.From(j, src, str)
			a := stream.KeyBy(s, key, codec)
			b := stream.KeyBy(s, key, codec)
			count(a, "a")
			count(b, "b")
			stream.To(stream.Merge(a, b), sink, str)
		}, "Merge (stage_test.go:NN): reads streams of two stages, the stage after the KeyBy at stage_test.go:NN and the stage after the KeyBy at stage_test.go:NN"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := stream.NewJob("bad")
			tc.build(j)
			err := j.Build()
			if err == nil {
				t.Fatal("Build succeeded")
			}
			msg := lineRE.ReplaceAllString(err.Error(), "stage_test.go:NN")
			if !errors.Is(err, stream.ErrInvalidJob) || !strings.Contains(msg, tc.msg) {
				t.Fatalf("Build: %v\nwant containing %q", msg, tc.msg)
			}
			if j.Stages() != nil || j.Shuffles() != nil || j.Graph().Nodes != nil {
				t.Fatal("a job that does not build has stages")
			}
		})
	}
	// A non-[]byte KeyBy without a codec is fine where it needs no shuffle.
	j := stream.NewJob("ok")
	stream.To(stream.KeyBy(stream.From(j, src, str), key), sink, str)
	if err := j.Build(); err != nil || len(j.Stages()) != 1 {
		t.Fatalf("KeyBy → To: %v, %d stages", err, len(j.Stages()))
	}
}

var lineRE = regexp.MustCompile(`stage_test\.go:\d+`)

// TestOperatorRejectsRecord: a key function of the source stage that
// rejects its record with ErrDecode puts it under the source's OnError.
func TestOperatorRejectsRecord(t *testing.T) {
	run := func(policy kafkaio.OnError, dlq string) ([]out, []out, error) {
		j := stream.NewJob("reject")
		s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}, OnError: policy, DeadLetterTopic: dlq}, stream.RawCodec{})
		k := stream.KeyBy(s, func(v []byte) ([]byte, error) {
			if string(v) == "bad" {
				return nil, fmt.Errorf("%w: no key in %q", stream.ErrDecode, v)
			}
			return v, nil
		})
		stream.To(stream.Count(k, "n"), stream.KafkaSink{Topic: "out"}, stream.Int64Codec{})
		task := newTask(t, j, nil, nil)
		var c collector
		err := task.ProcessBatch(recs("in", "a=x", "b=bad", "c=y"), &c)
		return c.recs, c.shuffled, err
	}
	_, shuffled, err := run(kafkaio.OnErrorFail, "")
	var re *stream.RecordError
	if !errors.As(err, &re) || re.Offset != 1 || !errors.Is(err, stream.ErrDecode) || len(shuffled) != 1 {
		t.Fatalf("fail: %v, %v", err, shuffled)
	}
	sinks, shuffled, err := run(kafkaio.OnErrorSkip, "")
	if err != nil || len(sinks) != 0 || len(shuffled) != 2 || shuffled[1].key != "y" {
		t.Fatalf("skip: %v, %v, %v", err, sinks, shuffled)
	}
	sinks, shuffled, err = run(kafkaio.OnErrorDeadLetter, "in-dlq")
	if err != nil || len(shuffled) != 2 || len(sinks) != 1 {
		t.Fatalf("dead-letter: %v, %v, %v", err, sinks, shuffled)
	}
	if d := sinks[0]; d.sink != 0 || d.topic != "in-dlq" || d.key != "b" || d.value != "bad" ||
		!strings.Contains(d.headers, `weir-dlq-error=stream: KeyBy (stage_test.go:`) || !strings.Contains(d.headers, `no key in "bad"`) {
		t.Fatalf("dead letter %+v", d)
	}
}

// TestPoisonErrorNamesItsRecord: a Transform's *PoisonError is ErrPoison
// in ProcessBatch's *RecordError, which names the input record the
// PoisonError names (past a shuffle, the job's input record), or else the
// record the task was processing; the skip policy still applies to it, and
// a plain error is no ErrPoison.
func TestPoisonErrorNamesItsRecord(t *testing.T) {
	run := func(policy kafkaio.OnError, fail error) error {
		j := stream.NewJob("poison")
		s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{})
		m := stream.Transform(s, "m", func(_ stream.Elem, v []byte, emit func([]byte) error) error {
			if string(v) == "bad" {
				return fail
			}
			return emit(v)
		}, stream.OnErrorPolicy[[]byte](policy, "", nil))
		stream.To(m, stream.KafkaSink{Topic: "out"}, stream.RawCodec{})
		var c collector
		return newTask(t, j, nil, nil).ProcessBatch(recs("in", "a=x", "b=bad"), &c)
	}
	origin := &stream.PoisonError{Topic: "orders", Partition: 3, Offset: 17, Err: errors.New("int(abc)")}
	err := run(kafkaio.OnErrorFail, origin)
	var re *stream.RecordError
	if !errors.As(err, &re) || re.Topic != "orders" || re.Partition != 3 || re.Offset != 17 || !errors.Is(err, stream.ErrPoison) ||
		!strings.Contains(err.Error(), "record orders/3@17: ") || !strings.HasSuffix(err.Error(), ": int(abc)") {
		t.Fatalf("poison with an origin: %v", err)
	}
	err = run(kafkaio.OnErrorFail, &stream.PoisonError{Err: errors.New("int(abc)")})
	if !errors.As(err, &re) || re.Topic != "in" || re.Offset != 1 || !errors.Is(err, stream.ErrPoison) {
		t.Fatalf("poison without an origin: %v", err)
	}
	if err := run(kafkaio.OnErrorSkip, origin); err != nil {
		t.Fatalf("poison under skip: %v", err)
	}
	if err := run(kafkaio.OnErrorFail, errors.New("int(abc)")); !errors.As(err, &re) || errors.Is(err, stream.ErrPoison) {
		t.Fatalf("a plain error: %v", err)
	}
}
