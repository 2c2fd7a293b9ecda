package stream

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"github.com/weir-stream/weir/kafkaio"
)

// Elem is the record context of the element a Transform's function is
// called with: its key, timestamp and headers, and the origin of the Kafka
// record the task read. It is valid only during the call (afterwards its
// methods return zero values and SetKey does nothing); the slices it
// returns must not be modified, nor kept after the call.
type Elem struct {
	c *elemCtx
}

// elemCtx is one Transform's per-task state that its Elems read.
type elemCtx struct {
	t          *task
	active     bool
	changesKey bool
	// badSetKey is set by a SetKey on a Transform not declared ChangesKey.
	badSetKey bool
}

// Key returns the element's current key: the record key, a KeyBy's key, or
// the key an upstream Transform set with SetKey.
func (e Elem) Key() []byte {
	if e.c == nil || !e.c.active {
		return nil
	}
	return e.c.t.key
}

// Timestamp returns the element's timestamp (its record's, or the time of
// the timer that fired it in a keyed operator upstream).
func (e Elem) Timestamp() time.Time {
	if e.c == nil || !e.c.active {
		return time.Time{}
	}
	return e.c.t.ts
}

// Headers returns the element's headers.
func (e Elem) Headers() []Header {
	if e.c == nil || !e.c.active {
		return nil
	}
	return e.c.t.headers
}

// Topic returns the topic of the Kafka record the task is processing: in
// the source stage the input topic, in a downstream stage the shuffle
// topic (a job that needs the source record's origin past a shuffle keeps
// it in its elements). It is empty for an element a timer emitted.
func (e Elem) Topic() string {
	if e.c == nil || !e.c.active {
		return ""
	}
	return e.c.t.origin.topic
}

// Partition returns the partition of the Kafka record the task is
// processing (see Topic).
func (e Elem) Partition() int32 {
	if e.c == nil || !e.c.active {
		return 0
	}
	return e.c.t.origin.partition
}

// Offset returns the offset of the Kafka record the task is processing (see
// Topic).
func (e Elem) Offset() int64 {
	if e.c == nil || !e.c.active {
		return 0
	}
	return e.c.t.origin.offset
}

// SetKey sets the key of the elements the function emits next for this
// input (and of everything they cause downstream); operators upstream see
// the element's key unchanged after the call. k must stay valid until the
// element is processed (it may alias v).
//
// Only a Transform defined with ChangesKey may call it (otherwise the
// Transform fails the task); Build rejects a job in which such a
// Transform's stream reaches a keyed operator without a KeyBy in between,
// since keyed state is partitioned by the key the element had when it
// entered the stage. To re-key for keyed operators, follow the Transform
// with KeyByCurrent, which shuffles by the key SetKey set.
func (e Elem) SetKey(k []byte) {
	if e.c == nil || !e.c.active {
		return
	}
	if !e.c.changesKey {
		e.c.badSetKey = true
		return
	}
	e.c.t.key = k
}

// Transform defines a stateless operator named name: for each element v,
// fn may emit 0..n elements, which carry v's timestamp and headers and its
// key (or the one fn set with e.SetKey). emit is valid only during fn's
// call and returns the first error of the operators downstream; fn should
// return it (then, and whenever emit failed, Transform returns that error
// as it is, which fails the task: it is not fn's error).
//
// An error of fn's own follows the operator's error policy (OnErrorPolicy;
// default kafkaio.OnErrorFail): kafkaio.OnErrorFail fails the task with an
// error naming the operator; kafkaio.OnErrorSkip drops v, counts it
// (TaskContext.OnRecordError) and logs it at debug level;
// kafkaio.OnErrorDeadLetter counts it and writes v, encoded with the
// policy's codec, to the dead-letter topic (exactly once,
// with the task's output) with v's key, timestamp and headers plus
// DeadLetterHeaderTopic, DeadLetterHeaderPartition and
// DeadLetterHeaderOffset (the origin, see Elem.Topic),
// DeadLetterHeaderError and DeadLetterHeaderOperator. Elements fn emitted
// before it returned its error have gone downstream already and stay.
// Under kafkaio.OnErrorFail, an error of fn wrapping ErrDecode in the
// source stage lets the source's OnError apply to the record instead (see
// ErrDecode), and a *PoisonError stops the job at the record (see
// ErrPoison) instead of failing the task.
//
// The name must be unique among the job's operator names (Process's too):
// it names the operator in the job's graph and in metrics.
func Transform[T, U any](s *Stream[T], name string, fn func(e Elem, v T, emit func(U) error) error, opts ...TransformOption) *Stream[U] {
	where := siteOf(s.jobOrNil(), 1)
	var o transformOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.policy == "" {
		o.policy = kafkaio.OnErrorFail
	}
	what := fmt.Sprintf("Transform(%q)", name)
	var codec Codec[T]
	dlq := -1
	check := func(j *Job) bool {
		switch {
		case fn == nil:
			j.failf(where, "%s: nil function", what)
		case !j.nameFree(where, what, name):
		case o.policy != kafkaio.OnErrorFail && o.policy != kafkaio.OnErrorSkip && o.policy != kafkaio.OnErrorDeadLetter:
			j.failf(where, "%s: on_error %q: want fail, skip or dead-letter", what, o.policy)
		case o.policy == kafkaio.OnErrorDeadLetter && o.dlqTopic == "":
			j.failf(where, "%s: on_error dead-letter needs a dead-letter topic", what)
		case o.policy != kafkaio.OnErrorDeadLetter && o.dlqTopic != "":
			j.failf(where, "%s: dead-letter topic %s set, but on_error is %s", what, o.dlqTopic, o.policy)
		case o.policy == kafkaio.OnErrorDeadLetter && o.codec == nil:
			j.failf(where, "%s: on_error dead-letter needs a codec of the input type %s", what, reflect.TypeFor[T]())
		default:
			if o.policy == kafkaio.OnErrorDeadLetter {
				c, ok := o.codec.(Codec[T])
				if !ok {
					j.failf(where, "%s: OnErrorPolicy: %T is not a stream.Codec[%s]", what, o.codec, reflect.TypeFor[T]())
					return false
				}
				codec = c
				if dlq = j.addSink(KafkaSink{Topic: o.dlqTopic, Delivery: kafkaio.DeliveryExactlyOnce}, true, where); dlq < 0 {
					return false
				}
			}
			j.transforms[name] = where
			return true
		}
		return false
	}
	return define(s, kindStateless, what, where, check, func(out *Stream[U]) connector[T] {
		out.node.op = name
		out.node.changesKey = o.changesKey
		if dlq >= 0 {
			out.node.sideSinks = append(out.node.sideSinks, dlq)
		}
		return func(tb *taskBuilder) (func(T) error, error) {
			next, err := out.consumer(tb)
			if err != nil {
				return nil, err
			}
			op := &transformOp[T, U]{
				ctx: elemCtx{t: tb.t, changesKey: o.changesKey}, name: name, what: what, where: where,
				fn: fn, next: next, policy: o.policy, dlq: dlq, dlqTopic: o.dlqTopic, codec: codec,
				log: tb.t.log.With("operator", name),
			}
			op.emitFn = op.emit
			return op.process, nil
		}
	})
}

// transformOp is one task's instance of a Transform.
type transformOp[T, U any] struct {
	ctx         elemCtx
	name        string
	what, where string
	fn          func(Elem, T, func(U) error) error
	next        func(U) error
	emitFn      func(U) error // op.emit, bound once
	downErr     error         // the first error of next during the current call
	policy      kafkaio.OnError
	dlq         int
	dlqTopic    string
	codec       Codec[T]
	log         *slog.Logger
	buf         []byte
	hdr         []Header
}

func (op *transformOp[T, U]) emit(u U) error {
	if op.downErr != nil {
		return op.downErr
	}
	if !op.ctx.active {
		return ErrContextExpired
	}
	op.downErr = op.next(u)
	return op.downErr
}

func (op *transformOp[T, U]) process(v T) error {
	t := op.ctx.t
	key := t.key
	op.ctx.active, op.ctx.badSetKey, op.downErr = true, false, nil
	err := op.fn(Elem{c: &op.ctx}, v, op.emitFn)
	op.ctx.active = false
	t.key = key
	switch {
	case op.downErr != nil:
		err, op.downErr = op.downErr, nil
		return err // downstream's, as it is
	case op.ctx.badSetKey:
		return opError(op.what, op.where, errors.New("Elem.SetKey called, but the Transform is not defined with stream.ChangesKey()"))
	case err == nil:
		return nil
	}
	return op.failed(v, key, err)
}

// failed applies the operator's policy to v, whose function returned err;
// key is v's key.
func (op *transformOp[T, U]) failed(v T, key []byte, err error) error {
	t := op.ctx.t
	if op.policy == kafkaio.OnErrorFail {
		return opError(op.what, op.where, err)
	}
	if f := t.tc.OnRecordError; f != nil {
		f(op.name, op.policy)
	}
	if op.policy == kafkaio.OnErrorSkip {
		op.log.Debug("element skipped: the operator failed", "topic", t.origin.topic, "partition", t.origin.partition, "offset", t.origin.offset, "err", err)
		return nil
	}
	var eerr error
	if op.buf, eerr = op.codec.Append(op.buf[:0], v); eerr != nil {
		return fmt.Errorf("stream: %s (%s): encode for the dead-letter topic %s: %w (the operator's error: %w)", op.what, op.where, op.dlqTopic, eerr, err)
	}
	op.hdr = append(op.hdr[:0], t.headers...)
	op.hdr = t.appendDeadLetterHeaders(op.hdr, err)
	op.hdr = append(op.hdr, Header{Key: DeadLetterHeaderOperator, Value: []byte(op.name)})
	return t.out.Emit(op.dlq, Record{Key: key, Value: op.buf, Timestamp: t.ts, Headers: op.hdr, Topic: op.dlqTopic})
}

// KeyByCurrent is KeyBy by each element's current key: the one an upstream
// Transform set with Elem.SetKey (or else the record key, or an earlier
// KeyBy's). Like KeyBy, it is a shuffle point if its stream reaches a
// keyed operator, and otherwise changes nothing.
func KeyByCurrent[T any](s *Stream[T], opts ...ShuffleOption) *Stream[T] {
	return keyBy(s, "KeyByCurrent", siteOf(s.jobOrNil(), 1), false, func(t *task, _ T) ([]byte, error) { return t.key, nil }, opts)
}

// TransformOption configures a Transform.
type TransformOption func(*transformOptions)

type transformOptions struct {
	policy     kafkaio.OnError
	dlqTopic   string
	codec      any // a Codec[T] of the Transform's input type
	changesKey bool
}

// OnErrorPolicy sets what happens to an element whose Transform function
// returns an error of its own: kafkaio.OnErrorFail (the default),
// kafkaio.OnErrorSkip, or kafkaio.OnErrorDeadLetter, which needs
// deadLetterTopic and a codec of the Transform's input type T (Transform
// checks it); the other policies take neither (pass "" and nil).
func OnErrorPolicy[T any](p kafkaio.OnError, deadLetterTopic string, codec Codec[T]) TransformOption {
	return func(o *transformOptions) {
		o.policy, o.dlqTopic, o.codec = p, deadLetterTopic, nil
		if codec != nil {
			o.codec = codec
		}
	}
}

// ChangesKey declares that the Transform's function calls Elem.SetKey (see
// there for what a job may do with such a stream).
func ChangesKey() TransformOption {
	return func(o *transformOptions) { o.changesKey = true }
}

// origin is the Kafka record a task is processing.
type origin struct {
	topic     string
	partition int32
	offset    int64
}
