package stream

import (
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/weir-stream/weir/kafkaio"
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

// jobOrNil returns s's job, nil if s is nil.
func (s *Stream[T]) jobOrNil() *Job {
	if s == nil {
		return nil
	}
	return s.job
}

// mergeJob returns the job of Merge's first stream, nil if none.
func mergeJob[T any](streams []*Stream[T]) *Job {
	if len(streams) == 0 {
		return nil
	}
	return streams[0].jobOrNil()
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
func derive[T, U any](s *Stream[T], kind nodeKind, what, where string, check func(j *Job) bool,
	connect func(tb *taskBuilder, next func(U) error) (func(T) error, error)) *Stream[U] {
	return define(s, kind, what, where, check, func(out *Stream[U]) connector[T] {
		return func(tb *taskBuilder) (func(T) error, error) {
			next, err := out.consumer(tb)
			if err != nil {
				return nil, err
			}
			return connect(tb, next)
		}
	})
}

// connector builds, per task, the function that takes a stream's elements
// for one of its consumers.
type connector[T any] func(tb *taskBuilder) (func(T) error, error)

// define defines a stream computed from s by a node of kind: if the job
// takes the definition and check passes, it adds the node and gives s the
// connector that newConnector returns for the new stream (called once,
// now). It reports problems on s's job and returns an inert stream then.
func define[T, U any](s *Stream[T], kind nodeKind, what, where string, check func(j *Job) bool,
	newConnector func(out *Stream[U]) connector[T]) *Stream[U] {
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
	out := &Stream[U]{job: j, node: j.addNode(kind, what, where, s.node)}
	s.outs = append(s.outs, newConnector(out))
	return out
}

// opError wraps the error of a user function with the operator that
// returned it.
func opError(what, where string, err error) error {
	return fmt.Errorf("stream: %s (%s): %w", what, where, err)
}

// From defines a source: the records of src's topics, their values decoded
// by codec. A record that codec rejects follows src.OnError, and so does one
// that an operator of the source stage rejects with an error wrapping
// ErrDecode (see there).
func From[T any](j *Job, src KafkaSource, codec Codec[T]) *Stream[T] {
	where := siteOf(j, 1)
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
		src.OnError = kafkaio.OnErrorFail
	}
	if !j.checkSource(src, codec == nil, where) || !j.checkEventTime(&src, where) {
		return &Stream[T]{job: j, node: &node{}}
	}
	dlq := -1
	if src.OnError == kafkaio.OnErrorDeadLetter {
		dlq = j.addSink(KafkaSink{Topic: src.DeadLetterTopic, Delivery: kafkaio.DeliveryExactlyOnce}, true, where)
		j.sourceDLQ = append(j.sourceDLQ, dlq)
	}
	s := &Stream[T]{job: j, node: j.addNode(kindSource, what, where)}
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
			err = next(v)
			if err != nil && policy != kafkaio.OnErrorFail && errors.Is(err, ErrDecode) {
				// An operator of the stage rejected the record (see
				// ErrDecode): the source's policy applies.
				return t.decodeFailed(r, policy, dlq, dlqTopic, err)
			}
			return err
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
	case !src.Start.Valid():
		j.failf(where, "source %v: unknown start kind %d", src.Topics, int(src.Start.Kind))
	case src.Start.Kind == kafkaio.StartTimestamp && src.Start.Time.IsZero():
		j.failf(where, "source %v: start at a timestamp with a zero time", src.Topics)
	case src.OnError != kafkaio.OnErrorFail && src.OnError != kafkaio.OnErrorSkip && src.OnError != kafkaio.OnErrorDeadLetter:
		j.failf(where, "source %v: on_error %q: want fail, skip or dead-letter", src.Topics, src.OnError)
	case src.OnError == kafkaio.OnErrorDeadLetter && src.DeadLetterTopic == "":
		j.failf(where, "source %v: on_error dead-letter needs a dead-letter topic", src.Topics)
	case src.OnError != kafkaio.OnErrorDeadLetter && src.DeadLetterTopic != "":
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
	where := siteOf(s.jobOrNil(), 1)
	return derive(s, kindStateless, "Map", where, nilFunc(fn == nil, "Map", where),
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
	where := siteOf(s.jobOrNil(), 1)
	return derive(s, kindStateless, "Filter", where, nilFunc(keep == nil, "Filter", where),
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
	where := siteOf(s.jobOrNil(), 1)
	return derive(s, kindStateless, "FlatMap", where, nilFunc(fn == nil, "FlatMap", where),
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
// its record key.
//
// If the stream reaches a keyed operator (Process, Aggregate, Reduce,
// Count), directly or through stateless operators, the KeyBy is a shuffle
// point: the job is cut there into two stages (DESIGN.md section 9). The
// upstream stage runs key and writes each element, encoded with the
// shuffle codec, with its new key to a shuffle topic partitioned by key
// group; the downstream stage, whose tasks each own a range of key groups,
// reads it, and runs everything after the KeyBy with the new key as the
// record key. The element's timestamp and headers cross the shuffle. A
// KeyBy that reaches no keyed operator (KeyBy → To) stays in its stage: it
// only changes the key that sinks write.
//
// key's result must stay valid until the element is processed (it may
// alias v, or a buffer the function reuses for the next element).
func KeyBy[T any](s *Stream[T], key func(T) ([]byte, error), opts ...ShuffleOption) *Stream[T] {
	var keyOf func(*task, T) ([]byte, error)
	if key != nil {
		keyOf = func(_ *task, v T) ([]byte, error) { return key(v) }
	}
	return keyBy(s, "KeyBy", siteOf(s.jobOrNil(), 1), key == nil, keyOf, opts)
}

// keyBy defines a KeyBy (what names it) by keyOf, which reads the task's
// current element context if it needs to.
func keyBy[T any](s *Stream[T], what, where string, nilKey bool, keyOf func(*task, T) ([]byte, error), opts []ShuffleOption) *Stream[T] {
	var o shuffleOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	kb := &keyByDef{name: o.name, keyDesc: o.keyDesc, parallelism: o.parallelism, elem: reflect.TypeFor[T]().String(), shuffle: -1, down: -1}
	var codec Codec[T]
	check := func(j *Job) bool {
		switch {
		case nilKey:
			j.failf(where, "%s: nil function", what)
			return false
		case o.nameSet && checkStageName(o.name) != "":
			j.failf(where, "%s: Named: %s", what, checkStageName(o.name))
			return false
		case o.parallelismSet && o.parallelism < 1:
			j.failf(where, "%s: Parallelism(%d): must be at least 1", what, o.parallelism)
			return false
		}
		if o.codecSet {
			c, ok := o.codec.(Codec[T])
			if !ok || c == nil {
				j.failf(where, "%s: ShuffleCodec: %T is not a stream.Codec[%s]", what, o.codec, kb.elem)
				return false
			}
			codec = c
		} else if c, ok := any(RawCodec{}).(Codec[T]); ok {
			codec = c // []byte elements
		}
		kb.hasCodec = codec != nil
		return true
	}
	return define(s, kindKeyBy, what, where, check, func(out *Stream[T]) connector[T] {
		out.node.keyBy = kb
		kb.input = func(tb *taskBuilder) (func(*Record) error, error) {
			next, err := out.consumer(tb)
			if err != nil {
				return nil, err
			}
			return func(r *Record) error {
				v, err := codec.Decode(r.Value)
				if err != nil {
					return fmt.Errorf("%w: the shuffle of the %s at %s: %w", ErrDecode, what, where, err)
				}
				return next(v)
			}, nil
		}
		return func(tb *taskBuilder) (func(T) error, error) {
			t := tb.t
			if kb.shuffle >= 0 {
				// A shuffle point (Build decided): write the shuffle; the
				// operators after the KeyBy run in the downstream stage.
				edge := kb.shuffle
				var buf []byte
				return func(v T) error {
					k, err := keyOf(t, v)
					if err != nil {
						return opError(what, where, err)
					}
					if buf, err = codec.Append(buf[:0], v); err != nil {
						return fmt.Errorf("stream: %s (%s): encode for the shuffle: %w", what, where, err)
					}
					return t.out.Shuffle(edge, Record{Key: k, Value: buf, Timestamp: t.ts, Headers: t.headers})
				}, nil
			}
			next, err := out.consumer(tb)
			if err != nil {
				return nil, err
			}
			return func(v T) error {
				k, err := keyOf(t, v)
				if err != nil {
					return opError(what, where, err)
				}
				saved := t.key
				t.key = k
				err = next(v)
				t.key = saved
				return err
			}, nil
		}
	})
}

// ShuffleOption configures the shuffle of a KeyBy that is a shuffle point.
type ShuffleOption func(*shuffleOptions)

type shuffleOptions struct {
	name           string
	keyDesc        string
	nameSet        bool
	parallelism    int
	parallelismSet bool
	codec          any
	codecSet       bool
}

// Named names the stage downstream of the shuffle (default: the name of its
// first keyed operator). A stage name is lower-case letters, digits, '_'
// and '-', starting with a letter or digit, and not "main". It names the
// stage's tasks ("<stage>/<i>"), state and shuffle topic
// ("<prefix>shuffle.<stage>"): keep it stable across versions of the job.
func Named(name string) ShuffleOption {
	return func(o *shuffleOptions) { o.name, o.nameSet = name, true }
}

// KeyDescription says what the KeyBy keys by ("field page"), for the job's
// state schema: the state of the keyed operators downstream is keyed by
// it, and a restore under another key description is refused (docs/operations.md,
// "Upgrading a job"). Without it, a KeyBy is described by its stage's name.
func KeyDescription(desc string) ShuffleOption {
	return func(o *shuffleOptions) { o.keyDesc = desc }
}

// Parallelism sets the number of tasks of the stage downstream of the
// shuffle (default: the job's parallelism). It must be at least 1, and at
// most the job's max parallelism (checked by the planner).
func Parallelism(n int) ShuffleOption {
	return func(o *shuffleOptions) { o.parallelism, o.parallelismSet = n, true }
}

// ShuffleCodec sets the codec that encodes the elements in the shuffle
// topic: c must be a Codec[T] of the KeyBy's element type T (KeyBy checks
// it). A KeyBy of []byte elements defaults to RawCodec; any other element
// type needs one if the KeyBy is a shuffle point (Build says so).
func ShuffleCodec(c any) ShuffleOption {
	return func(o *shuffleOptions) { o.codec, o.codecSet = c, true }
}

// Merge defines the union of streams of one job: every element of each.
// Their elements interleave in the order their records are processed.
func Merge[T any](streams ...*Stream[T]) *Stream[T] {
	where := siteOf(mergeJob(streams), 1)
	if len(streams) == 0 || streams[0] == nil || streams[0].job == nil {
		return &Stream[T]{}
	}
	j := streams[0].job
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.begin("Merge") {
		return &Stream[T]{job: j, node: &node{}}
	}
	inputs := make([]*node, len(streams))
	for i, s := range streams {
		if s == nil || s.job != j || s.node == nil {
			j.failf(where, "Merge: stream %d is nil, inert or of another job", i)
			return &Stream[T]{job: j, node: &node{}}
		}
		inputs[i] = s.node
	}
	out := &Stream[T]{job: j, node: j.addNode(kindMerge, "Merge", where, inputs...)}
	for _, s := range streams {
		s.outs = append(s.outs, out.consumer)
	}
	return out
}

// To defines a sink: each element of s, encoded by codec, is written to
// sink.Topic with the element's key, timestamp and headers.
func To[T any](s *Stream[T], sink KafkaSink, codec Codec[T]) {
	where := siteOf(s.jobOrNil(), 1)
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
		sink.Delivery = kafkaio.DeliveryExactlyOnce
	}
	idx := j.addSink(sink, false, where)
	if idx < 0 {
		return
	}
	n := j.addNode(kindSink, fmt.Sprintf("To(%s)", sink.Topic), where, s.node)
	n.sink = idx
	topic := sink.Topic
	kc, _ := codec.(KeyCodec[T])
	s.outs = append(s.outs, func(tb *taskBuilder) (func(T) error, error) {
		t := tb.t
		var buf, kbuf []byte
		return func(v T) error {
			var err error
			if buf, err = codec.Append(buf[:0], v); err != nil {
				return fmt.Errorf("stream: sink %s (%s): encode: %w", topic, where, err)
			}
			key := t.key
			if kc != nil && key != nil {
				if kbuf, err = kc.AppendKey(kbuf[:0], key); err != nil {
					return fmt.Errorf("stream: sink %s (%s): encode the key: %w", topic, where, err)
				}
				key = kbuf
			}
			return t.out.Emit(idx, Record{Key: key, Value: buf, Timestamp: t.ts, Headers: t.headers, Topic: topic})
		}, nil
	})
}

// KeyCodec is a Codec that also writes the records' keys: a sink whose
// codec implements it writes AppendKey's bytes as each record's key
// instead of the element's key as it is (an Avro key, say). A nil key
// stays nil.
type KeyCodec[T any] interface {
	Codec[T]
	AppendKey(dst, key []byte) ([]byte, error)
}

// addSink returns the index of sink, adding it if no sink of its topic
// exists, or -1 after recording a problem. Sinks of one topic are shared if
// their settings agree.
func (j *Job) addSink(sink KafkaSink, deadLetter bool, where string) int {
	switch {
	case !validTopic(sink.Topic):
		j.failf(where, "sink: %q is not a valid topic name", sink.Topic)
		return -1
	case sink.Delivery != kafkaio.DeliveryExactlyOnce && sink.Delivery != kafkaio.DeliveryAtLeastOnce:
		j.failf(where, "sink %s: delivery %q: want %s or %s", sink.Topic, sink.Delivery, kafkaio.DeliveryExactlyOnce, kafkaio.DeliveryAtLeastOnce)
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
		if k != sink && !(deadLetter && k.Delivery == kafkaio.DeliveryExactlyOnce) {
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
