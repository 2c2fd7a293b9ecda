package stream

import (
	"fmt"
	"slices"
)

// Stream is a stream of elements of type T in a job's definition. Each
// element carries the key, timestamp and headers of the record it came
// from. Builder functions never return nil.
type Stream[T any] struct {
	job  *Job
	node *node
	// outs build, per task, the consumers of this stream's elements.
	outs []func(tb *taskBuilder) (func(T) error, error)
}

// consumer returns the task's function that takes this stream's elements:
// it hands each to every operator that consumes the stream, in definition
// order. It is built once per task (memoized, for Merge).
func (s *Stream[T]) consumer(tb *taskBuilder) (func(T) error, error) {
	if f, ok := tb.memo[s.node]; ok {
		return f.(func(T) error), nil
	}
	fs := make([]func(T) error, 0, len(s.outs))
	for _, o := range s.outs {
		f, err := o(tb)
		if err != nil {
			return nil, err
		}
		fs = append(fs, f)
	}
	var f func(T) error
	switch len(fs) {
	case 0:
		f = func(T) error { return nil }
	case 1:
		f = fs[0]
	default:
		f = func(v T) error {
			for _, g := range fs {
				if err := g(v); err != nil {
					return err
				}
			}
			return nil
		}
	}
	tb.memo[s.node] = f
	return f, nil
}

// derive defines a stream computed from s: connect builds, per task, the
// function that takes s's elements given the consumer of the new stream's.
// It reports problems on s's job and returns an inert stream then.
func derive[T, U any](s *Stream[T], what, where string, check func(j *Job) bool,
	connect func(tb *taskBuilder, next func(U) error) (func(T) error, error)) *Stream[U] {
	if s == nil || s.job == nil {
		return &Stream[U]{}
	}
	j := s.job
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.begin(what) || (check != nil && !check(j)) {
		return &Stream[U]{job: j, node: &node{}}
	}
	if s.node == nil {
		return &Stream[U]{job: j, node: &node{}}
	}
	out := &Stream[U]{job: j, node: j.addNode(what, where, s.node.rekeys)}
	s.node.outs++
	s.outs = append(s.outs, func(tb *taskBuilder) (func(T) error, error) {
		next, err := out.consumer(tb)
		if err != nil {
			return nil, err
		}
		return connect(tb, next)
	})
	return out
}

// opError wraps the error of a user function with the operator that
// returned it.
func opError(what, where string, err error) error {
	return fmt.Errorf("stream: %s (%s): %w", what, where, err)
}

// From defines a source: the records of src's topics, their values decoded
// by codec. A record that codec rejects follows src.OnError.
func From[T any](j *Job, src KafkaSource, codec Codec[T]) *Stream[T] {
	where := caller(1)
	if j == nil {
		return &Stream[T]{}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	what := fmt.Sprintf("From(%v)", src.Topics)
	if !j.begin(what) {
		return &Stream[T]{job: j, node: &node{}}
	}
	src.Topics = slices.Clone(src.Topics)
	if src.Format == "" {
		src.Format = FormatRaw
	}
	if src.OnError == "" {
		src.OnError = OnErrorFail
	}
	if !j.checkSource(src, codec == nil, where) {
		return &Stream[T]{job: j, node: &node{}}
	}
	dlq := -1
	if src.OnError == OnErrorDeadLetter {
		dlq = j.addSink(KafkaSink{Topic: src.DeadLetterTopic, Delivery: DeliveryExactlyOnce}, true, where)
	}
	s := &Stream[T]{job: j, node: j.addNode(what, where, false)}
	def := &sourceDef{src: src, where: where}
	def.connect = func(tb *taskBuilder) (func(*Record) error, error) {
		next, err := s.consumer(tb)
		if err != nil {
			return nil, err
		}
		t := tb.t
		policy := src.OnError
		dlqTopic := src.DeadLetterTopic
		return func(r *Record) error {
			v, err := codec.Decode(r.Value)
			if err != nil {
				return t.decodeFailed(r, policy, dlq, dlqTopic, err)
			}
			return next(v)
		}, nil
	}
	j.sources = append(j.sources, def)
	return s
}

func (j *Job) checkSource(src KafkaSource, nilCodec bool, where string) bool {
	if len(src.Topics) == 0 {
		j.failf(where, "source: no topics")
		return false
	}
	for i, t := range src.Topics {
		if !validTopic(t) {
			j.failf(where, "source: topics[%d]: %q is not a valid topic name", i, t)
			return false
		}
		if slices.Contains(src.Topics[:i], t) {
			j.failf(where, "source: topic %s listed twice", t)
			return false
		}
		for _, other := range j.sources {
			if slices.Contains(other.src.Topics, t) {
				j.failf(where, "source: topic %s is already read by the source defined at %s", t, other.where)
				return false
			}
		}
		for _, k := range j.sinks {
			if k.Topic == t {
				j.failf(where, "source: topic %s is also a sink of the job: a job must not read its own output", t)
				return false
			}
		}
	}
	switch {
	case nilCodec:
		j.failf(where, "source %v: nil codec", src.Topics)
	case src.Format != FormatRaw && src.Format != FormatJSON:
		j.failf(where, "source %v: format %q: want %s or %s", src.Topics, src.Format, FormatRaw, FormatJSON)
	case src.Start.Kind < StartEarliest || src.Start.Kind > StartTimestamp:
		j.failf(where, "source %v: unknown start kind %d", src.Topics, int(src.Start.Kind))
	case src.Start.Kind == StartTimestamp && src.Start.Time.IsZero():
		j.failf(where, "source %v: start at a timestamp with a zero time", src.Topics)
	case src.OnError != OnErrorFail && src.OnError != OnErrorSkip && src.OnError != OnErrorDeadLetter:
		j.failf(where, "source %v: on_error %q: want fail, skip or dead-letter", src.Topics, src.OnError)
	case src.OnError == OnErrorDeadLetter && src.DeadLetterTopic == "":
		j.failf(where, "source %v: on_error dead-letter needs a dead-letter topic", src.Topics)
	case src.OnError != OnErrorDeadLetter && src.DeadLetterTopic != "":
		j.failf(where, "source %v: dead-letter topic %s set, but on_error is %s", src.Topics, src.DeadLetterTopic, src.OnError)
	case src.DeadLetterTopic != "" && !validTopic(src.DeadLetterTopic):
		j.failf(where, "source %v: dead-letter topic %q is not a valid topic name", src.Topics, src.DeadLetterTopic)
	case slices.Contains(src.Topics, src.DeadLetterTopic):
		j.failf(where, "source %v: the dead-letter topic is an input topic", src.Topics)
	default:
		return true
	}
	return false
}

// Map defines the stream of fn(v) for each element v. The key, timestamp
// and headers stay those of v. fn must not modify v in place (other
// operators may share it).
func Map[T, U any](s *Stream[T], fn func(T) (U, error)) *Stream[U] {
	where := caller(1)
	return derive(s, "Map", where, nilFunc(fn == nil, "Map", where),
		func(tb *taskBuilder, next func(U) error) (func(T) error, error) {
			return func(v T) error {
				u, err := fn(v)
				if err != nil {
					return opError("Map", where, err)
				}
				return next(u)
			}, nil
		})
}

// Filter defines the stream of the elements v for which keep(v) is true.
func Filter[T any](s *Stream[T], keep func(T) (bool, error)) *Stream[T] {
	where := caller(1)
	return derive(s, "Filter", where, nilFunc(keep == nil, "Filter", where),
		func(tb *taskBuilder, next func(T) error) (func(T) error, error) {
			return func(v T) error {
				ok, err := keep(v)
				if err != nil {
					return opError("Filter", where, err)
				}
				if !ok {
					return nil
				}
				return next(v)
			}, nil
		})
}

// FlatMap defines the stream of every element fn emits for each element v,
// with v's key, timestamp and headers. emit is valid only during fn's call;
// if downstream fails, later emits of that call are dropped and FlatMap
// returns the error.
func FlatMap[T, U any](s *Stream[T], fn func(v T, emit func(U)) error) *Stream[U] {
	where := caller(1)
	return derive(s, "FlatMap", where, nilFunc(fn == nil, "FlatMap", where),
		func(tb *taskBuilder, next func(U) error) (func(T) error, error) {
			var derr error
			emit := func(u U) {
				if derr == nil {
					derr = next(u)
				}
			}
			return func(v T) error {
				derr = nil
				if err := fn(v, emit); err != nil {
					if err == derr {
						return err
					}
					return opError("FlatMap", where, err)
				}
				err := derr
				derr = nil
				return err
			}, nil
		})
}

// KeyBy defines the stream of s's elements, each keyed by key(v) instead of
// its record key. Sinks write that key. Weir runs a job as one stage, so a
// keyed operator (Process, Aggregate, Reduce, Count) downstream of KeyBy
// would need a shuffle: Build fails with ErrShuffle then. To key by a field,
// produce the input topic partitioned by it.
//
// key's result must stay valid until the element is processed (it may
// alias v, or a buffer the function reuses for the next element).
func KeyBy[T any](s *Stream[T], key func(T) ([]byte, error)) *Stream[T] {
	where := caller(1)
	out := derive(s, "KeyBy", where, nilFunc(key == nil, "KeyBy", where),
		func(tb *taskBuilder, next func(T) error) (func(T) error, error) {
			t := tb.t
			return func(v T) error {
				k, err := key(v)
				if err != nil {
					return opError("KeyBy", where, err)
				}
				saved := t.key
				t.key = k
				err = next(v)
				t.key = saved
				return err
			}, nil
		})
	if out.node != nil {
		out.node.rekeys = true
	}
	return out
}

// Merge defines the union of streams of one job: every element of each.
// Their elements interleave in the order their records are processed.
func Merge[T any](streams ...*Stream[T]) *Stream[T] {
	where := caller(1)
	if len(streams) == 0 || streams[0] == nil || streams[0].job == nil {
		return &Stream[T]{}
	}
	j := streams[0].job
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.begin("Merge") {
		return &Stream[T]{job: j, node: &node{}}
	}
	rekeys := false
	for i, s := range streams {
		if s == nil || s.job != j || s.node == nil {
			j.failf(where, "Merge: stream %d is nil, inert or of another job", i)
			return &Stream[T]{job: j, node: &node{}}
		}
		rekeys = rekeys || s.node.rekeys
	}
	out := &Stream[T]{job: j, node: j.addNode("Merge", where, rekeys)}
	for _, s := range streams {
		s.node.outs++
		s.outs = append(s.outs, out.consumer)
	}
	return out
}

// To defines a sink: each element of s, encoded by codec, is written to
// sink.Topic with the element's key, timestamp and headers.
func To[T any](s *Stream[T], sink KafkaSink, codec Codec[T]) {
	where := caller(1)
	if s == nil || s.job == nil {
		return
	}
	j := s.job
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.begin("To") || s.node == nil {
		return
	}
	if codec == nil {
		j.failf(where, "sink %s: nil codec", sink.Topic)
		return
	}
	if sink.Delivery == "" {
		sink.Delivery = DeliveryExactlyOnce
	}
	idx := j.addSink(sink, false, where)
	if idx < 0 {
		return
	}
	s.node.outs++
	topic := sink.Topic
	s.outs = append(s.outs, func(tb *taskBuilder) (func(T) error, error) {
		t := tb.t
		var buf []byte
		return func(v T) error {
			var err error
			if buf, err = codec.Append(buf[:0], v); err != nil {
				return fmt.Errorf("stream: sink %s (%s): encode: %w", topic, where, err)
			}
			return t.out.Emit(idx, Record{Key: t.key, Value: buf, Timestamp: t.ts, Headers: t.headers, Topic: topic})
		}, nil
	})
}

// addSink returns the index of sink, adding it if no sink of its topic
// exists, or -1 after recording a problem. Sinks of one topic are shared if
// their settings agree.
func (j *Job) addSink(sink KafkaSink, deadLetter bool, where string) int {
	switch {
	case !validTopic(sink.Topic):
		j.failf(where, "sink: %q is not a valid topic name", sink.Topic)
		return -1
	case sink.Delivery != DeliveryExactlyOnce && sink.Delivery != DeliveryAtLeastOnce:
		j.failf(where, "sink %s: delivery %q: want %s or %s", sink.Topic, sink.Delivery, DeliveryExactlyOnce, DeliveryAtLeastOnce)
		return -1
	case sink.TransactionTimeout < 0:
		j.failf(where, "sink %s: negative transaction timeout", sink.Topic)
		return -1
	}
	for _, src := range j.sources {
		if slices.Contains(src.src.Topics, sink.Topic) {
			j.failf(where, "sink %s: the topic is an input of the job (source at %s): a job must not read its own output", sink.Topic, src.where)
			return -1
		}
	}
	for i, k := range j.sinks {
		if k.Topic != sink.Topic {
			continue
		}
		if k != sink && !(deadLetter && k.Delivery == DeliveryExactlyOnce) {
			j.failf(where, "sink %s: defined twice with different settings", sink.Topic)
			return -1
		}
		if _, dl := j.dlqSink[sink.Topic]; dl && !deadLetter {
			delete(j.dlqSink, sink.Topic) // also a regular sink now
		}
		return i
	}
	j.sinks = append(j.sinks, sink)
	if deadLetter {
		j.dlqSink[sink.Topic] = len(j.sinks) - 1
	}
	return len(j.sinks) - 1
}

// nilFunc returns a check that fails if isNil.
func nilFunc(isNil bool, what, where string) func(j *Job) bool {
	return func(j *Job) bool {
		if isNil {
			j.failf(where, "%s: nil function", what)
			return false
		}
		return true
	}
}
