package stream_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/stream"
)

// TestTransformEmitsAndSeesTheRecord: a Transform emits 0..n elements per
// input, each with the input's key, timestamp and headers, and its Elem
// reads the record's context and origin.
func TestTransformEmitsAndSeesTheRecord(t *testing.T) {
	j := stream.NewJob("tr")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.StringCodec{})
	var seen []string
	words := stream.Transform(s, "split", func(e stream.Elem, v string, emit func(string) error) error {
		seen = append(seen, fmt.Sprintf("%s@%s/%d@%d ts=%s h=%d", e.Key(), e.Topic(), e.Partition(), e.Offset(), e.Timestamp().Sub(t0), len(e.Headers())))
		for w := range strings.FieldsSeq(v) {
			if err := emit(w); err != nil {
				return err
			}
		}
		return nil
	})
	stream.To(words, stream.KafkaSink{Topic: "out"}, stream.StringCodec{})
	task := newTask(t, j, nil, nil)
	in := recs("in", "a=x y", "b=", "c=z")
	in[0].Headers = []stream.Header{{Key: "h", Value: []byte("1")}}
	in[2].Partition = 3
	var c collector
	if err := task.ProcessBatch(in, &c); err != nil {
		t.Fatal(err)
	}
	if r := c.recs[1]; r.key != "a" || !r.ts.Equal(t0) || r.headers != "h=1" {
		t.Fatalf("second output %+v", r)
	}
	equal(t, "output", c.take(), []string{"0:a=x", "0:a=y", "0:c=z"})
	equal(t, "elems", seen, []string{"a@in/0@0 ts=0s h=1", "b@in/0@1 ts=1s h=0", "c@in/3@2 ts=2s h=0"})
}

// TestTransformElemDownstream: in a downstream stage, Elem names the
// shuffle record the task read, and the key is the KeyBy's.
func TestTransformElemDownstream(t *testing.T) {
	j := stream.NewJob("trdown")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.StringCodec{})
	k := stream.KeyBy(s, func(v string) ([]byte, error) { return []byte("k-" + v), nil }, stream.ShuffleCodec(str), stream.Named("down"))
	n := stream.Count(k, "n")
	tagged := stream.Transform(n, "tag", func(e stream.Elem, v int64, emit func(string) error) error {
		return emit(fmt.Sprintf("%d %s %s/%d@%d", v, e.Key(), e.Topic(), e.Partition(), e.Offset()))
	})
	stream.To(tagged, stream.KafkaSink{Topic: "out"}, stream.StringCodec{})
	down, err := j.NewTask(stream.TaskContext{Stage: "down", Backend: openBackend(t, t.TempDir()), Task: "down/0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = down.Close() })
	shuffle := recs("_weir.trdown.shuffle.down", "k-a=a", "k-a=a")
	shuffle[1].Partition = 5
	var c collector
	if err := down.ProcessBatch(shuffle, &c); err != nil {
		t.Fatal(err)
	}
	equal(t, "output", c.take(), []string{
		"0:k-a=1 k-a _weir.trdown.shuffle.down/0@0",
		"0:k-a=2 k-a _weir.trdown.shuffle.down/5@1",
	})
}

// TestTransformSetKey: with ChangesKey, SetKey keys what the function
// emits next (and what follows it in the stage), while the other branches
// of the input see its key unchanged; without ChangesKey, SetKey fails the
// task.
func TestTransformSetKey(t *testing.T) {
	j := stream.NewJob("rekey")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.StringCodec{})
	re := stream.Transform(s, "rekey", func(e stream.Elem, v string, emit func(string) error) error {
		if err := emit(v + "-before"); err != nil {
			return err
		}
		e.SetKey([]byte("new-" + string(e.Key())))
		return emit(v + "-after")
	}, stream.ChangesKey())
	stream.To(re, stream.KafkaSink{Topic: "rekeyed"}, stream.StringCodec{})
	stream.To(s, stream.KafkaSink{Topic: "same"}, stream.StringCodec{})
	task := newTask(t, j, nil, nil)
	var c collector
	if err := task.ProcessBatch(recs("in", "a=1", "b=2"), &c); err != nil {
		t.Fatal(err)
	}
	equal(t, "output", c.take(), []string{"0:a=1-before", "0:new-a=1-after", "1:a=1", "0:b=2-before", "0:new-b=2-after", "1:b=2"})

	j = stream.NewJob("badkey")
	s = stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.StringCodec{})
	bad := stream.Transform(s, "undeclared", func(e stream.Elem, v string, emit func(string) error) error {
		e.SetKey([]byte("x"))
		return emit(v)
	})
	stream.To(bad, stream.KafkaSink{Topic: "out"}, stream.StringCodec{})
	task = newTask(t, j, nil, nil)
	err := task.ProcessBatch(recs("in", "a=1"), &c)
	if err == nil || !strings.Contains(err.Error(), `Transform("undeclared")`) || !strings.Contains(err.Error(), "ChangesKey") {
		t.Fatalf("SetKey without ChangesKey: %v", err)
	}
	equal(t, "SetKey without ChangesKey keeps the key", c.take(), []string{"0:a=1"})
}

// TestTransformChangesKeyBeforeKeyed: Build rejects a key-changing
// Transform that reaches a keyed operator in its stage, and takes it with
// KeyByCurrent in between, which shuffles by the new key.
func TestTransformChangesKeyBeforeKeyed(t *testing.T) {
	define := func(shuffle bool) *stream.Job {
		j := stream.NewJob("ck")
		s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.StringCodec{})
		re := stream.Transform(s, "rekey", func(e stream.Elem, v string, emit func(string) error) error {
			e.SetKey([]byte(v))
			return emit(v)
		}, stream.ChangesKey())
		f := stream.Filter(re, func(string) (bool, error) { return true, nil })
		if shuffle {
			f = stream.KeyByCurrent(f, stream.ShuffleCodec(str))
		}
		stream.To(stream.Count(f, "n"), stream.KafkaSink{Topic: "out"}, stream.Int64Codec{})
		return j
	}
	err := define(false).Build()
	if !errors.Is(err, stream.ErrInvalidJob) || !strings.Contains(err.Error(), `Transform("rekey") (transform_test.go:`) || !strings.Contains(err.Error(), "KeyByCurrent") {
		t.Fatalf("Build: %v", err)
	}
	j := define(true)
	if err := j.Build(); err != nil {
		t.Fatal(err)
	}
	task := newTask(t, j, nil, nil)
	var c collector
	if err := task.ProcessBatch(recs("in", "a=x", "b=y"), &c); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range c.shuffled {
		got = append(got, r.String())
	}
	equal(t, "shuffled by the new key", got, []string{"0:x=x", "0:y=y"})
	if g := j.Graph(); g.Nodes[3].What != "KeyByCurrent" || g.Nodes[3].Stage != "main" || g.Nodes[4].Stage != "n" {
		t.Fatalf("graph %+v", g.Nodes)
	}
}

// policyJob fails its Transform on values "bad", and Map after it on
// values "down".
func policyJob(t *testing.T, opts ...stream.TransformOption) (*stream.Job, *[]string) {
	t.Helper()
	j := stream.NewJob("pol")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.StringCodec{})
	tr := stream.Transform(s, "check", func(e stream.Elem, v string, emit func(string) error) error {
		if err := emit(v + "!"); err != nil {
			return err
		}
		if v == "bad" {
			return errors.New("bad value")
		}
		return nil
	}, opts...)
	m := stream.Map(tr, func(v string) (string, error) {
		if v == "down!" {
			return "", errors.New("downstream failed")
		}
		return v, nil
	})
	stream.To(m, stream.KafkaSink{Topic: "out"}, stream.StringCodec{})
	var counted []string
	if err := j.Build(); err != nil {
		t.Fatal(err)
	}
	return j, &counted
}

func policyTask(t *testing.T, j *stream.Job, counted *[]string) stream.Task {
	t.Helper()
	task, err := j.NewTask(stream.TaskContext{Task: "main/0", OnRecordError: func(op string, p kafkaio.OnError) {
		*counted = append(*counted, op+":"+string(p))
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = task.Close() })
	return task
}

func TestTransformOnErrorFail(t *testing.T) {
	j, counted := policyJob(t)
	task := policyTask(t, j, counted)
	var c collector
	err := task.ProcessBatch(recs("in", "k=ok", "k=bad", "k=never"), &c)
	var re *stream.RecordError
	if !errors.As(err, &re) || re.Offset != 1 || !strings.Contains(err.Error(), `Transform("check") (transform_test.go:`) || !strings.Contains(err.Error(), "bad value") {
		t.Fatalf("error %v", err)
	}
	// What the function emitted before it failed went downstream.
	equal(t, "output", c.take(), []string{"0:k=ok!", "0:k=bad!"})
	if len(*counted) != 0 {
		t.Fatalf("counted %v", *counted)
	}
}

func TestTransformOnErrorSkip(t *testing.T) {
	j, counted := policyJob(t, stream.OnErrorPolicy[string](kafkaio.OnErrorSkip, "", nil))
	task := policyTask(t, j, counted)
	var c collector
	if err := task.ProcessBatch(recs("in", "k=ok", "k=bad", "k=next"), &c); err != nil {
		t.Fatal(err)
	}
	equal(t, "output", c.take(), []string{"0:k=ok!", "0:k=bad!", "0:k=next!"})
	equal(t, "counted", *counted, []string{"check:skip"})
}

func TestTransformOnErrorDeadLetter(t *testing.T) {
	j, counted := policyJob(t, stream.OnErrorPolicy(kafkaio.OnErrorDeadLetter, "dlq", str))
	if sinks := j.Sinks(); len(sinks) != 2 || sinks[0].Topic != "dlq" || sinks[0].Delivery != kafkaio.DeliveryExactlyOnce {
		t.Fatalf("sinks %+v", sinks)
	}
	if st := j.Stages(); len(st) != 1 || fmt.Sprint(st[0].Sinks) != "[0 1]" || !strings.Contains(strings.Join(st[0].Operators, " "), `Transform("check")`) {
		t.Fatalf("stages %+v", st)
	}
	task := policyTask(t, j, counted)
	var c collector
	in := recs("in", "k=ok", "k=bad")
	in[1].Headers = []stream.Header{{Key: "trace", Value: []byte("t1")}}
	in[1].Partition = 2
	if err := task.ProcessBatch(in, &c); err != nil {
		t.Fatal(err)
	}
	dl := c.recs[2]
	if dl.sink != 0 || dl.topic != "dlq" || dl.key != "k" || dl.value != "bad" || !dl.ts.Equal(in[1].Timestamp) ||
		dl.headers != "trace=t1,weir-dlq-topic=in,weir-dlq-partition=2,weir-dlq-offset=1,weir-dlq-error=bad value,weir-dlq-operator=check" {
		t.Fatalf("dead letter %+v", dl)
	}
	equal(t, "output", c.take(), []string{"1:k=ok!", "1:k=bad!", "0:k=bad"})
	equal(t, "counted", *counted, []string{"check:dead-letter"})
}

// TestTransformDownstreamErrorIsNotItsOwn: an error of the operators after
// a Transform fails the task whatever the policy, and is not counted.
func TestTransformDownstreamErrorIsNotItsOwn(t *testing.T) {
	for _, opt := range []stream.TransformOption{
		stream.OnErrorPolicy[string](kafkaio.OnErrorSkip, "", nil),
		stream.OnErrorPolicy(kafkaio.OnErrorDeadLetter, "dlq", str),
	} {
		j, counted := policyJob(t, opt)
		task := policyTask(t, j, counted)
		var c collector
		err := task.ProcessBatch(recs("in", "k=down", "k=never"), &c)
		if err == nil || !strings.Contains(err.Error(), "downstream failed") || !strings.Contains(err.Error(), "Map (transform_test.go:") || strings.Contains(err.Error(), "Transform") {
			t.Fatalf("error %v", err)
		}
		if len(c.recs) != 0 || len(*counted) != 0 {
			t.Fatalf("output %v, counted %v", c.recs, *counted)
		}
	}
}

// TestTransformDefinitionErrors: Build reports bad names and policies.
func TestTransformDefinitionErrors(t *testing.T) {
	id := func(e stream.Elem, v string, emit func(string) error) error { return emit(v) }
	for _, tc := range []struct {
		name string
		def  func(s *stream.Stream[string]) *stream.Stream[string]
		want string
	}{
		{"nil", func(s *stream.Stream[string]) *stream.Stream[string] {
			return stream.Transform[string, string](s, "t", nil)
		}, `Transform("t"): nil function`},
		{"empty name", func(s *stream.Stream[string]) *stream.Stream[string] { return stream.Transform(s, "", id) }, "empty operator name"},
		{"duplicate", func(s *stream.Stream[string]) *stream.Stream[string] {
			return stream.Transform(stream.Transform(s, "t", id), "t", id)
		}, `Transform("t"): operator name already used at transform_test.go:`},
		{"duplicate of a keyed operator", func(s *stream.Stream[string]) *stream.Stream[string] {
			n := stream.Map(stream.Count(s, "t"), func(n int64) (string, error) { return fmt.Sprint(n), nil })
			return stream.Transform(n, "t", id)
		}, "operator name already used"},
		{"keyed duplicate of a transform", func(s *stream.Stream[string]) *stream.Stream[string] {
			n := stream.Count(stream.Transform(s, "t", id), "t")
			return stream.Map(n, func(n int64) (string, error) { return fmt.Sprint(n), nil })
		}, `Count("t"): operator name already used`},
		{"unknown policy", func(s *stream.Stream[string]) *stream.Stream[string] {
			return stream.Transform(s, "t", id, stream.OnErrorPolicy[string]("retry", "", nil))
		}, `on_error "retry"`},
		{"dead letter without topic", func(s *stream.Stream[string]) *stream.Stream[string] {
			return stream.Transform(s, "t", id, stream.OnErrorPolicy(kafkaio.OnErrorDeadLetter, "", str))
		}, "needs a dead-letter topic"},
		{"dead letter without codec", func(s *stream.Stream[string]) *stream.Stream[string] {
			return stream.Transform(s, "t", id, stream.OnErrorPolicy[string](kafkaio.OnErrorDeadLetter, "dlq", nil))
		}, "needs a codec of the input type string"},
		{"codec of another type", func(s *stream.Stream[string]) *stream.Stream[string] {
			return stream.Transform(s, "t", id, stream.OnErrorPolicy[int64](kafkaio.OnErrorDeadLetter, "dlq", stream.Int64Codec{}))
		}, "is not a stream.Codec[string]"},
		{"topic without dead letter", func(s *stream.Stream[string]) *stream.Stream[string] {
			return stream.Transform(s, "t", id, stream.OnErrorPolicy(kafkaio.OnErrorSkip, "dlq", str))
		}, "dead-letter topic dlq set, but on_error is skip"},
		{"dead letter to the input", func(s *stream.Stream[string]) *stream.Stream[string] {
			return stream.Transform(s, "t", id, stream.OnErrorPolicy(kafkaio.OnErrorDeadLetter, "in", str))
		}, "the topic is an input of the job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := stream.NewJob("bad")
			s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.StringCodec{})
			stream.To(tc.def(s), stream.KafkaSink{Topic: "out"}, stream.StringCodec{})
			if err := j.Build(); !errors.Is(err, stream.ErrInvalidJob) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Build: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestTransformDeadLetterDownstreamStage: the dead-letter sink of a
// Transform in a downstream stage is written by that stage, and shared
// with a source's dead-letter sink of the same topic.
func TestTransformDeadLetterDownstreamStage(t *testing.T) {
	j := stream.NewJob("dlqdown")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}, OnError: kafkaio.OnErrorDeadLetter, DeadLetterTopic: "dlq"}, stream.StringCodec{})
	n := stream.Count(stream.KeyBy(s, func(v string) ([]byte, error) { return []byte(v), nil }, stream.ShuffleCodec(str)), "n")
	tr := stream.Transform(n, "odd", func(e stream.Elem, v int64, emit func(int64) error) error {
		if v%2 == 0 {
			return errors.New("even")
		}
		return emit(v)
	}, stream.OnErrorPolicy(kafkaio.OnErrorDeadLetter, "dlq", stream.Codec[int64](stream.Int64Codec{})))
	stream.To(tr, stream.KafkaSink{Topic: "out"}, stream.Int64Codec{})
	err := j.Build()
	st := j.Stages()
	if err != nil || len(st) != 2 || fmt.Sprint(st[0].Sinks) != "[0]" || fmt.Sprint(st[1].Sinks) != "[0 1]" {
		t.Fatalf("stages %+v (%v), sinks %+v", st, err, j.Sinks())
	}
}

// transformChain is a source → Transform → Transform (ChangesKey) →
// sink job over bytes.
func transformChain() *stream.Job {
	j := stream.NewJob("bench")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{})
	a := stream.Transform(s, "a", func(e stream.Elem, v []byte, emit func([]byte) error) error {
		if e.Offset() < 0 || len(e.Topic()) == 0 {
			return nil
		}
		return emit(v)
	}, stream.OnErrorPolicy[[]byte](kafkaio.OnErrorSkip, "", nil))
	b := stream.Transform(a, "b", func(e stream.Elem, v []byte, emit func([]byte) error) error {
		e.SetKey(v[:min(len(v), 4)])
		if err := emit(v); err != nil {
			return err
		}
		return emit(v)
	}, stream.ChangesKey())
	stream.To(b, stream.KafkaSink{Topic: "out"}, stream.RawCodec{})
	return j
}

// TestTransformAllocatesNothing: a Transform chain's hot path allocates
// nothing per record.
func TestTransformAllocatesNothing(t *testing.T) {
	task := newTask(t, transformChain(), nil, nil)
	in := benchRecords(100)
	if n := testing.AllocsPerRun(20, func() {
		if err := task.ProcessBatch(in, discard{}); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per batch of %d records", n, len(in))
	}
}

// BenchmarkTransformChain runs two Transforms and a sink per record.
func BenchmarkTransformChain(b *testing.B) {
	task := newTask(b, transformChain(), nil, nil)
	runBatches(b, task, benchRecords(100), discard{})
}
