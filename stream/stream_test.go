package stream_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

func TestMapFilterFlatMap(t *testing.T) {
	j := stream.NewJob("words")
	lines := stream.From(j, stream.KafkaSource{Topics: []string{"lines"}}, stream.StringCodec{})
	upper := stream.Map(lines, func(s string) (string, error) { return strings.ToUpper(s), nil })
	nonEmpty := stream.Filter(upper, func(s string) (bool, error) { return s != "", nil })
	words := stream.FlatMap(nonEmpty, func(s string, emit func(string)) error {
		for w := range strings.FieldsSeq(s) {
			emit(w)
		}
		return nil
	})
	stream.To(words, stream.KafkaSink{Topic: "words"}, stream.StringCodec{})
	if err := j.Build(); err != nil {
		t.Fatal(err)
	}
	task := newTask(t, j, nil, nil)
	var c collector
	in := recs("lines", "a=hello world", "b=", "c=x")
	in[0].Headers = []stream.Header{{Key: "h", Value: []byte("1")}}
	if err := task.ProcessBatch(in, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.recs) != 3 {
		t.Fatalf("got %v", c.recs)
	}
	r := c.recs[1]
	if r.key != "a" || r.value != "WORLD" || !r.ts.Equal(t0) || r.headers != "h=1" || r.topic != "words" || r.sink != 0 {
		t.Fatalf("second record: %+v", r)
	}
	equal(t, "output", c.take(), []string{"0:a=HELLO", "0:a=WORLD", "0:c=X"})
	if got := j.Sinks(); len(got) != 1 || got[0].Topic != "words" || got[0].Delivery != kafkaio.DeliveryExactlyOnce {
		t.Fatalf("sinks %+v", got)
	}
	if got := j.Sources(); len(got) != 1 || got[0].Topics[0] != "lines" || got[0].OnError != kafkaio.OnErrorFail || got[0].Format != stream.FormatRaw {
		t.Fatalf("sources %+v", got)
	}
	if err := task.ProcessBatch(recs("other", "k=v"), &c); err == nil || !strings.Contains(err.Error(), "not an input of the job") {
		t.Fatalf("a record of another topic: %v", err)
	}
}

func TestUserErrorsNameTheRecordAndOperator(t *testing.T) {
	j := stream.NewJob("errs")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.StringCodec{})
	boom := errors.New("boom")
	m := stream.Map(s, func(v string) (string, error) {
		if v == "bad" {
			return "", boom
		}
		return v, nil
	})
	stream.To(m, stream.KafkaSink{Topic: "out"}, stream.StringCodec{})
	task := newTask(t, j, nil, nil)
	var c collector
	err := task.ProcessBatch(recs("in", "k=ok", "k=bad", "k=never"), &c)
	var re *stream.RecordError
	if !errors.As(err, &re) || re.Offset != 1 || re.Topic != "in" || !errors.Is(err, boom) || !strings.Contains(err.Error(), "Map (stream_test.go:") {
		t.Fatalf("error %v", err)
	}
	equal(t, "output before the error", c.take(), []string{"0:k=ok"})
}

func TestFanOutKeyByAndMerge(t *testing.T) {
	j := stream.NewJob("fan")
	a := stream.From(j, stream.KafkaSource{Topics: []string{"a1", "a2"}}, stream.StringCodec{})
	b := stream.From(j, stream.KafkaSource{Topics: []string{"b"}}, stream.StringCodec{})
	all := stream.Merge(a, b)
	// Branch 1: re-keyed by value, to sink 0.
	byValue := stream.KeyBy(all, func(v string) ([]byte, error) { return []byte("v-" + v), nil })
	stream.To(byValue, stream.KafkaSink{Topic: "by-value"}, stream.StringCodec{})
	// Branch 2: still keyed by the record key: counted.
	n := stream.Count(all, "n")
	stream.To(n, stream.KafkaSink{Topic: "counts"}, stream.Int64Codec{})
	task := newTask(t, j, openBackend(t, t.TempDir()), nil)
	var c collector
	in := append(recs("a1", "k=x", "k=y"), recs("b", "k=z")...)
	in = append(in, recs("a2", "q=w")...)
	if err := task.ProcessBatch(in, &c); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range c.recs {
		v := r.value
		if r.sink == 1 {
			v = fmt.Sprint(must(stream.Int64Codec{}.Decode([]byte(r.value))))
		}
		got = append(got, fmt.Sprintf("%d:%s=%s", r.sink, r.key, v))
	}
	equal(t, "output", got, []string{"0:v-x=x", "1:k=1", "0:v-y=y", "1:k=2", "0:v-z=z", "1:k=3", "0:v-w=w", "1:q=1"})
	if err := task.ProcessBatch(recs("other", "k=v"), &c); err == nil {
		t.Fatal("a record of an unknown topic was accepted")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestAggregateReduceCount(t *testing.T) {
	j := stream.NewJob("agg")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.JSONCodec[int64]{})
	sum := stream.Reduce(s, "sum", stream.Int64Codec{}, func(a, b int64) int64 { return a + b })
	stream.To(sum, stream.KafkaSink{Topic: "sum"}, stream.JSONCodec[int64]{})
	avg := stream.Aggregate(s, "avg", stream.JSONCodec[[2]int64]{}, avgAgg{})
	stream.To(avg, stream.KafkaSink{Topic: "avg"}, stream.JSONCodec[float64]{})
	cnt := stream.Count(s, "count")
	stream.To(cnt, stream.KafkaSink{Topic: "count"}, stream.JSONCodec[int64]{})
	task := newTask(t, j, openBackend(t, t.TempDir()), nil)
	var c collector
	if err := task.ProcessBatch(recs("in", "a=1", "b=10", "a=2", "a=6"), &c); err != nil {
		t.Fatal(err)
	}
	equal(t, "output", c.take(), []string{
		"0:a=1", "1:a=1", "2:a=1",
		"0:b=10", "1:b=10", "2:b=1",
		"0:a=3", "1:a=1.5", "2:a=2",
		"0:a=9", "1:a=3", "2:a=3",
	})
}

// avgAgg averages int64s: the accumulator is (sum, count).
type avgAgg struct{}

func (avgAgg) CreateAccumulator() [2]int64        { return [2]int64{} }
func (avgAgg) Add(acc [2]int64, v int64) [2]int64 { return [2]int64{acc[0] + v, acc[1] + 1} }
func (avgAgg) Result(acc [2]int64) float64        { return float64(acc[0]) / float64(acc[1]) }

// session sums the values of a key and emits the sum 10s (processing time)
// after the key's last record.
type session struct {
	sum    *state.ValueState[int64]
	last   *state.ValueState[int64] // the timer set, Unix ns
	opened bool
	closed *bool
}

func (s *session) Open(oc stream.OpenContext) error {
	s.opened = true
	var err error
	if s.sum, err = state.NewValueState(oc.Backend, oc.StateName("sum"), state.Codec[int64](state.Int64Codec{})); err != nil {
		return err
	}
	s.last, err = state.NewValueState(oc.Backend, oc.StateName("timer"), state.Codec[int64](state.Int64Codec{}))
	return err
}

func (s *session) ProcessElement(ctx *stream.Context[string], v int64) error {
	sum, _, err := s.sum.Get()
	if err != nil {
		return err
	}
	if err := s.sum.Put(sum + v); err != nil {
		return err
	}
	if old, ok, err := s.last.Get(); err != nil {
		return err
	} else if ok {
		if err := ctx.DeleteProcessingTimeTimer(time.Unix(0, old)); err != nil {
			return err
		}
	}
	at := ctx.Now().Add(10 * time.Second)
	// Registering twice must fire once.
	for range 2 {
		if err := ctx.RegisterProcessingTimeTimer(at); err != nil {
			return err
		}
	}
	return s.last.Put(at.UnixNano())
}

func (s *session) OnTimer(ctx *stream.Context[string], at time.Time) error {
	sum, _, err := s.sum.Get()
	if err != nil {
		return err
	}
	if err := s.sum.Clear(); err != nil {
		return err
	}
	if err := s.last.Clear(); err != nil {
		return err
	}
	return ctx.Emit(fmt.Sprintf("%d@%s", sum, at.Format("15:04:05")))
}

func (s *session) Close() error { *s.closed = true; return nil }

func sessionJob(closed *bool) *stream.Job {
	j := stream.NewJob("sessions")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.JSONCodec[int64]{})
	sums := stream.Process(s, "session", func() stream.KeyedProcessFunction[int64, string] { return &session{closed: closed} })
	stream.To(sums, stream.KafkaSink{Topic: "sums"}, stream.StringCodec{})
	return j
}

func TestProcessStateAndTimers(t *testing.T) {
	closed := false
	j := sessionJob(&closed)
	clk := &clock{now: t0}
	task := newTask(t, j, openBackend(t, t.TempDir()), clk)
	var c collector
	step := func(d time.Duration, in ...string) {
		t.Helper()
		clk.now = clk.now.Add(d)
		if len(in) > 0 {
			if err := task.ProcessBatch(recs("in", in...), &c); err != nil {
				t.Fatal(err)
			}
		}
		if err := task.FireTimers(clk.now, &c); err != nil {
			t.Fatal(err)
		}
	}
	step(0, "b=1", "a=1")      // timers b@10, a@10
	step(5*time.Second, "a=2") // a moves to @15
	step(5 * time.Second)      // b fires at 10
	equal(t, "at 10s", c.take(), []string{"0:b=1@12:00:10"})
	step(4 * time.Second) // 14s: nothing
	equal(t, "at 14s", c.take(), nil)
	step(0, "c=7")         // c@24
	step(20 * time.Second) // 34s: a@15 then c@24, in time order
	equal(t, "at 34s", c.take(), []string{"0:a=3@12:00:15", "0:c=7@12:00:24"})
	step(time.Hour)
	equal(t, "fired once", c.take(), nil)
	// The timestamp of a timer's output is the timer's time.
	step(0, "d=1")
	step(10 * time.Second)
	if len(c.recs) != 1 || !c.recs[0].ts.Equal(clk.now) || c.recs[0].headers != "" {
		t.Fatalf("timer output %+v", c.recs)
	}
	if err := task.Close(); err != nil || !closed {
		t.Fatalf("close: %v, closed %v", err, closed)
	}
	if err := task.ProcessBatch(recs("in", "a=1"), &c); err == nil {
		t.Fatal("ProcessBatch after Close succeeded")
	}
}

// keeper keeps its context, to use it after the call.
type keeper struct{ ctx **stream.Context[string] }

func (k keeper) ProcessElement(ctx *stream.Context[string], v string) error {
	*k.ctx = ctx
	if !bytes.Equal(ctx.Key(), []byte("k")) {
		return fmt.Errorf("key %q", ctx.Key())
	}
	return ctx.Emit(v)
}

func TestContextExpires(t *testing.T) {
	var kept *stream.Context[string]
	j := stream.NewJob("ctx")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.StringCodec{})
	p := stream.Process(s, "keep", func() stream.KeyedProcessFunction[string, string] { return keeper{&kept} })
	stream.To(p, stream.KafkaSink{Topic: "out"}, stream.StringCodec{})
	task := newTask(t, j, openBackend(t, t.TempDir()), nil)
	var c collector
	if err := task.ProcessBatch(recs("in", "k=v"), &c); err != nil {
		t.Fatal(err)
	}
	if err := kept.Emit("late"); !errors.Is(err, stream.ErrContextExpired) {
		t.Fatalf("Emit after the call: %v", err)
	}
	if err := kept.RegisterProcessingTimeTimer(t0); !errors.Is(err, stream.ErrContextExpired) {
		t.Fatalf("timer after the call: %v", err)
	}
	if kept.Key() != nil {
		t.Fatal("Key after the call")
	}
}

func TestDecodeErrorPolicies(t *testing.T) {
	run := func(policy kafkaio.OnError, dlq string) (*stream.Job, []out, error) {
		j := stream.NewJob("decode")
		s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}, OnError: policy, DeadLetterTopic: dlq}, stream.JSONCodec[int]{})
		stream.To(s, stream.KafkaSink{Topic: "out"}, stream.JSONCodec[int]{})
		task := newTask(t, j, nil, nil)
		var c collector
		in := recs("in", "a=1", "b=oops", "c=3")
		in[1].Headers = []stream.Header{{Key: "trace", Value: []byte("t1")}}
		err := task.ProcessBatch(in, &c)
		return j, c.recs, err
	}
	_, got, err := run("", "")
	if !errors.Is(err, stream.ErrDecode) || len(got) != 1 {
		t.Fatalf("fail: %v, %v", err, got)
	}
	var re *stream.RecordError
	if !errors.As(err, &re) || re.Offset != 1 {
		t.Fatalf("fail: %v", err)
	}
	_, got, err = run(kafkaio.OnErrorSkip, "")
	if err != nil || len(got) != 2 {
		t.Fatalf("skip: %v, %v", err, got)
	}
	j, got, err := run(kafkaio.OnErrorDeadLetter, "in-dlq")
	if err != nil || len(got) != 3 {
		t.Fatalf("dead-letter: %v, %v", err, got)
	}
	if sinks := j.Sinks(); len(sinks) != 2 || sinks[0].Topic != "in-dlq" || sinks[1].Topic != "out" {
		t.Fatalf("sinks %+v", sinks)
	}
	d := got[1]
	if d.sink != 0 || d.topic != "in-dlq" || d.key != "b" || d.value != "oops" ||
		!strings.HasPrefix(d.headers, "trace=t1,weir-dlq-topic=in,weir-dlq-partition=0,weir-dlq-offset=1,weir-dlq-error=") {
		t.Fatalf("dead letter %+v", d)
	}
}

func TestBuildErrors(t *testing.T) {
	src := stream.KafkaSource{Topics: []string{"in"}}
	sink := stream.KafkaSink{Topic: "out"}
	id := func(v string) (string, error) { return v, nil }
	cases := []struct {
		name  string
		build func(j *stream.Job)
		is    error
		msg   string
	}{
		{"merge across a shuffle", func(j *stream.Job) {
			s := stream.From(j, src, str)
			k := stream.KeyBy(s, func(v string) ([]byte, error) { return []byte(v), nil }, stream.ShuffleCodec(str))
			stream.To(stream.Process(stream.Merge(s, k), "p", func() stream.KeyedProcessFunction[string, string] { return keeper{} }), sink, str)
		}, stream.ErrInvalidJob, "Merge (stream_test.go:"},
		{"no sink", func(j *stream.Job) {
			stream.Map(stream.From(j, src, str), id)
		}, stream.ErrInvalidJob, "has no sink"},
		{"no source", func(j *stream.Job) {}, stream.ErrInvalidJob, "has no source"},
		{"dangling", func(j *stream.Job) {
			s := stream.From(j, src, str)
			stream.To(s, sink, str)
			stream.Filter(s, func(string) (bool, error) { return true, nil })
		}, stream.ErrInvalidJob, "the stream of Filter (stream_test.go:"},
		{"nil map", func(j *stream.Job) {
			stream.To(stream.Map[string, string](stream.From(j, src, str), nil), sink, str)
		}, stream.ErrInvalidJob, "Map: nil function"},
		{"nil codec", func(j *stream.Job) {
			stream.To(stream.From[string](j, src, nil), sink, str)
		}, stream.ErrInvalidJob, "nil codec"},
		{"duplicate operator", func(j *stream.Job) {
			s := stream.From(j, src, str)
			stream.To(stream.Count(s, "n"), sink, stream.Int64Codec{})
			stream.To(stream.Count(s, "n"), stream.KafkaSink{Topic: "out2"}, stream.Int64Codec{})
		}, stream.ErrInvalidJob, `Count("n"): operator name already used at stream_test.go:`},
		{"read own output", func(j *stream.Job) {
			stream.To(stream.From(j, src, str), stream.KafkaSink{Topic: "in"}, str)
		}, stream.ErrInvalidJob, "must not read its own output"},
		{"topic twice", func(j *stream.Job) {
			stream.To(stream.Merge(stream.From(j, src, str), stream.From(j, src, str)), sink, str)
		}, stream.ErrInvalidJob, "topic in is already read"},
		{"dead letter without topic", func(j *stream.Job) {
			stream.To(stream.From(j, stream.KafkaSource{Topics: []string{"in"}, OnError: kafkaio.OnErrorDeadLetter}, str), sink, str)
		}, stream.ErrInvalidJob, "needs a dead-letter topic"},
		{"bad delivery", func(j *stream.Job) {
			stream.To(stream.From(j, src, str), stream.KafkaSink{Topic: "out", Delivery: "maybe"}, str)
		}, stream.ErrInvalidJob, `delivery "maybe"`},
		{"merge of two jobs", func(j *stream.Job) {
			other := stream.From(stream.NewJob("other"), src, str)
			stream.To(stream.Merge(stream.From(j, src, str), other), sink, str)
		}, stream.ErrInvalidJob, "of another job"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := stream.NewJob("bad")
			tc.build(j)
			err := j.Build()
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Build: %v\nwant %v containing %q", err, tc.is, tc.msg)
			}
			if _, err2 := j.NewTask(stream.TaskContext{}); err2 == nil || err2.Error() != err.Error() {
				t.Fatalf("NewTask: %v", err2)
			}
		})
	}
	if err := stream.NewJob("a/b").Err(); !errors.Is(err, stream.ErrInvalidJob) {
		t.Fatalf("bad job name: %v", err)
	}
	j := stream.NewJob("frozen")
	stream.To(stream.From(j, src, str), sink, str)
	if err := j.Build(); err != nil {
		t.Fatal(err)
	}
	stream.To(stream.From(j, stream.KafkaSource{Topics: []string{"late"}}, str), stream.KafkaSink{Topic: "x"}, str)
	if err := j.Build(); !errors.Is(err, stream.ErrInvalidJob) || !strings.Contains(err.Error(), "after Build") {
		t.Fatalf("definition after Build: %v", err)
	}
}

func TestKeyedOperatorNeedsBackend(t *testing.T) {
	j := stream.NewJob("nb")
	stream.To(stream.Count(stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, str), "n"), stream.KafkaSink{Topic: "o"}, stream.Int64Codec{})
	if _, err := j.NewTask(stream.TaskContext{}); err == nil || !strings.Contains(err.Error(), "no state backend") {
		t.Fatalf("NewTask without backend: %v", err)
	}
}
