package stream

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/weir-stream/weir/state"
)

// KeyedProcessFunction is a keyed operator: it sees each element with the
// key of its record, keeps keyed state, sets processing-time and
// event-time timers and emits elements downstream (Flink's
// KeyedProcessFunction, goka's callback).
//
// Process creates one instance per task. An instance may also implement:
//
//   - Opener, to create its keyed state handles when the task starts;
//   - TimerHandler[U], to be called when its timers fire;
//   - io.Closer (Close() error), to release what it holds when the task
//     ends (not the state: the runtime owns the backend).
type KeyedProcessFunction[T, U any] interface {
	// ProcessElement handles one element. ctx is valid only during the call.
	ProcessElement(ctx *Context[U], in T) error
}

// Opener is implemented by functions that prepare themselves for a task.
type Opener interface {
	Open(oc OpenContext) error
}

// TimerHandler is implemented by keyed functions that use timers.
type TimerHandler[U any] interface {
	// OnTimer is called once for each timer due, in time order, with the
	// timer's key current (ctx.Key, keyed state) and its time. Elements it
	// emits carry that key and that time as timestamp, and no headers.
	// It is called for both kinds of timers: ctx.TimeDomain says which
	// fires (processing-time timers from Task.FireTimers, event-time ones
	// from Task.AdvanceWatermark).
	OnTimer(ctx *Context[U], at time.Time) error
}

// ProcessFunc adapts a function to a KeyedProcessFunction without state or
// timers.
type ProcessFunc[T, U any] func(ctx *Context[U], in T) error

// ProcessElement calls f(ctx, in).
func (f ProcessFunc[T, U]) ProcessElement(ctx *Context[U], in T) error { return f(ctx, in) }

// OpenContext is what a keyed function gets when its task starts.
type OpenContext struct {
	// Backend is the task's keyed state: create handles with
	// state.NewValueState(oc.Backend, oc.StateName("x"), codec) and friends.
	// State names starting with "_weir." are reserved.
	Backend *state.Backend
	// Operator is the name the operator's state is stored under: its
	// identity (its UID, or its name as given to Process), or the stored
	// name the runtime maps it to (TaskContext.StateNames).
	Operator string
	// Task and Index identify the task (TaskContext).
	Task   string
	Index  int
	Logger *slog.Logger
	Now    func() time.Time
}

// StateName returns name qualified by the operator's name, "<operator>/<name>":
// the state names of different operators of a job never collide. The
// qualified name is what is stored, so keep operator names stable across
// versions of a job to keep its state.
func (oc OpenContext) StateName(name string) string { return oc.Operator + "/" + name }

// Context is the context of one call of a keyed function: the current
// element's key, timestamp and headers, timers, and Emit. It is valid only
// during the call (its methods return ErrContextExpired, or zero values,
// afterwards).
type Context[U any] struct {
	t         *task
	op        string
	emit      func(U) error
	active    bool
	downErr   error
	eventTime bool       // the operator may use event-time timers
	domain    TimeDomain // of the timer that fires, in OnTimer
}

// Key returns the current key: the record key of the element, or the key of
// the timer that fires. It must not be modified, nor kept after the call.
func (c *Context[U]) Key() []byte {
	if !c.active {
		return nil
	}
	return c.t.key
}

// Timestamp returns the current element's record timestamp, or the time of
// the timer that fires.
func (c *Context[U]) Timestamp() time.Time {
	if !c.active {
		return time.Time{}
	}
	return c.t.ts
}

// Headers returns the current element's record headers (none in OnTimer).
// They must not be modified, nor kept after the call.
func (c *Context[U]) Headers() []Header {
	if !c.active {
		return nil
	}
	return c.t.headers
}

// Now returns the current processing time (TaskContext.Now).
func (c *Context[U]) Now() time.Time { return c.t.now() }

// Emit sends v downstream with the current key, timestamp and headers, and
// returns the first error downstream operators or sinks return.
func (c *Context[U]) Emit(v U) error {
	if !c.active {
		return ErrContextExpired
	}
	if err := c.emit(v); err != nil {
		c.downErr = err
		return err
	}
	return nil
}

// RegisterProcessingTimeTimer sets a timer for the current key at at: the
// function's OnTimer is called once the task's processing time reaches at
// (a time already past fires at the next FireTimers, or in the running one
// when set from OnTimer). Setting the same time again for the same key does
// nothing. Timers are keyed state: they are
// checkpointed and restored.
func (c *Context[U]) RegisterProcessingTimeTimer(at time.Time) error {
	if !c.active {
		return ErrContextExpired
	}
	return c.t.timers.register(c.op, at, c.t.key)
}

// DeleteProcessingTimeTimer removes the current key's timer at at, if any.
func (c *Context[U]) DeleteProcessingTimeTimer(at time.Time) error {
	if !c.active {
		return ErrContextExpired
	}
	return c.t.timers.remove(c.op, at, c.t.key)
}

// RegisterEventTimeTimer sets an event-time timer for the current key at
// at: the function's OnTimer is called (with TimeDomain EventTime) once the
// task's watermark reaches at, in timestamp order with the task's other
// event-time timers (a time the watermark has passed fires at the next
// Task.AdvanceWatermark, or in the running one when set from OnTimer).
// Setting the same time again for the same key does nothing. Event-time
// timers are keyed state (EventTimerStateName), checkpointed and restored:
// a timer fires once, also across a restore. The operator must be defined
// WithEventTime.
func (c *Context[U]) RegisterEventTimeTimer(at time.Time) error {
	if !c.active {
		return ErrContextExpired
	}
	if !c.eventTime {
		return fmt.Errorf("%w: operator %s", errNoEventTime, c.op)
	}
	return c.t.etimers.register(c.op, at, c.t.key)
}

// DeleteEventTimeTimer removes the current key's event-time timer at at,
// if any.
func (c *Context[U]) DeleteEventTimeTimer(at time.Time) error {
	if !c.active {
		return ErrContextExpired
	}
	if !c.eventTime {
		return fmt.Errorf("%w: operator %s", errNoEventTime, c.op)
	}
	return c.t.etimers.remove(c.op, at, c.t.key)
}

// CurrentWatermark returns the task's watermark: no more records with
// event time at or before it are expected. It is the zero time before any
// watermark.
func (c *Context[U]) CurrentWatermark() time.Time {
	if !c.active {
		return time.Time{}
	}
	return wmTime(c.t.watermark())
}

// TimeDomain returns, in OnTimer, the kind of the timer that fires:
// ProcessingTime or EventTime. It is ProcessingTime outside OnTimer.
func (c *Context[U]) TimeDomain() TimeDomain {
	if !c.active {
		return ProcessingTime
	}
	return c.domain
}

// Process defines a keyed operator named name: newFn is called once per task
// to create the function that handles the task's elements. The name must be
// unique in the job and stable across its versions: it names the
// operator's state and timers.
//
// Process keys by the current key: the Kafka record key, or after a KeyBy
// the KeyBy's key, which makes that KeyBy a shuffle point (see KeyBy).
// A function that uses event time must be declared WithEventTime.
func Process[T, U any](s *Stream[T], name string, newFn func() KeyedProcessFunction[T, U], opts ...ProcessOption) *Stream[U] {
	var o processOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return process(s, name, "Process", siteOf(s.jobOrNil(), 1), o, newFn)
}

func process[T, U any](s *Stream[T], name, what, where string, o processOptions, newFn func() KeyedProcessFunction[T, U]) *Stream[U] {
	what0 := what
	what = fmt.Sprintf("%s(%q)", what, name)
	// id is the operator's identity: its state, timers and (for a
	// stage's first keyed operator) stage are named after it.
	id := name
	if o.uid != "" {
		id = o.uid
	}
	check := func(j *Job) bool {
		switch {
		case newFn == nil:
			j.failf(where, "%s: nil function or codec", what)
		case !j.nameFree(where, what, name):
		case id != name && !j.nameFree(where, what+" UID", id):
		case o.check != nil && !o.check(j):
		default:
			j.ops[name] = where
			j.ops[id] = where
			return true
		}
		return false
	}
	out := derive(s, kindKeyed, what, where, check, func(tb *taskBuilder, next func(U) error) (func(T) error, error) {
		t := tb.t
		b := t.tc.Backend
		if b == nil {
			return nil, fmt.Errorf("stream: %s (%s): the task has no state backend", what, where)
		}
		fn := newFn()
		if fn == nil {
			return nil, fmt.Errorf("stream: %s (%s): the function's constructor returned nil", what, where)
		}
		if err := tb.useTimers(o.eventTime); err != nil {
			return nil, err
		}
		// stored names the operator's state and timers: its identity,
		// or the name the runtime restores its state under
		// (TaskContext.StateNames).
		stored := id
		if n := t.tc.StateNames[id]; n != "" {
			stored = n
		}
		ctx := &Context[U]{t: t, op: stored, emit: next, eventTime: o.eventTime}
		if o, ok := fn.(Opener); ok {
			oc := OpenContext{Backend: b, Operator: stored, Task: t.tc.Task, Index: t.tc.Index, Logger: t.log.With("operator", name), Now: t.now}
			if err := o.Open(oc); err != nil {
				return nil, fmt.Errorf("stream: %s (%s): open: %w", what, where, err)
			}
		}
		if c, ok := fn.(interface{ Close() error }); ok {
			t.closers = append(t.closers, func() error {
				if err := c.Close(); err != nil {
					return fmt.Errorf("stream: %s: close: %w", what, err)
				}
				return nil
			})
		}
		if th, ok := fn.(TimerHandler[U]); ok {
			t.onTimer[stored] = func(d TimeDomain) error {
				ctx.active, ctx.downErr, ctx.domain = true, nil, d
				err := th.OnTimer(ctx, t.ts)
				ctx.active = false
				if err != nil && err != ctx.downErr {
					return opError(what+".OnTimer", where, err)
				}
				return err
			}
		}
		return func(v T) error {
			b.SetCurrentKey(t.key)
			ctx.active, ctx.downErr = true, nil
			err := fn.ProcessElement(ctx, v)
			ctx.active = false
			if err != nil && err != ctx.downErr {
				return opError(what, where, err)
			}
			return err
		}, nil
	})
	if out.node != nil && out.node.kind == kindKeyed {
		out.node.op = id
		out.node.eventTime = o.eventTime
		out.node.state = newOpState(what0, o)
	}
	return out
}

// Aggregate defines a keyed aggregate named name: for each element, it adds
// the element to its key's accumulator (stored with accCodec) and emits
// agg.Result of the new accumulator. agg is shared by every task: it must
// not hold mutable state.
func Aggregate[T, ACC, U any](s *Stream[T], name string, accCodec Codec[ACC], agg state.AggregateFunc[T, ACC, U]) *Stream[U] {
	where := siteOf(s.jobOrNil(), 1)
	if accCodec == nil || agg == nil {
		return process[T, U](s, name, "Aggregate", where, processOptions{}, nil) // records the problem
	}
	return process(s, name, "Aggregate", where, processOptions{encoding: encodingOf(accCodec)}, func() KeyedProcessFunction[T, U] {
		return &aggregateFn[T, ACC, U]{codec: accCodec, agg: agg}
	})
}

// Reduce defines a keyed aggregate named name that combines each element
// into its key's value with reduce, and emits the new value.
func Reduce[T any](s *Stream[T], name string, codec Codec[T], reduce func(acc, v T) T) *Stream[T] {
	where := siteOf(s.jobOrNil(), 1)
	if codec == nil || reduce == nil {
		return process[T, T](s, name, "Reduce", where, processOptions{}, nil)
	}
	return process(s, name, "Reduce", where, processOptions{encoding: encodingOf(codec)}, func() KeyedProcessFunction[T, T] {
		return &aggregateFn[T, reduceAcc[T], T]{codec: reduceCodec[T]{codec}, agg: reduceAgg[T](reduce)}
	})
}

// Count defines a keyed aggregate named name that emits, for each element,
// the number of elements of its key so far (1, 2, 3...).
func Count[T any](s *Stream[T], name string) *Stream[int64] {
	return process(s, name, "Count", siteOf(s.jobOrNil(), 1), processOptions{encoding: "int64"}, func() KeyedProcessFunction[T, int64] {
		return &aggregateFn[T, int64, int64]{codec: state.Int64Codec{}, agg: countAgg[T]{}}
	})
}

// aggregateFn runs an AggregateFunc on a value state: one read and one
// write per element.
type aggregateFn[T, ACC, U any] struct {
	codec Codec[ACC]
	agg   state.AggregateFunc[T, ACC, U]
	acc   *state.ValueState[ACC]
}

func (a *aggregateFn[T, ACC, U]) Open(oc OpenContext) error {
	var err error
	a.acc, err = state.NewValueState(oc.Backend, oc.StateName("acc"), a.codec)
	return err
}

func (a *aggregateFn[T, ACC, U]) ProcessElement(ctx *Context[U], in T) error {
	acc, ok, err := a.acc.Get()
	if err != nil {
		return err
	}
	if !ok {
		acc = a.agg.CreateAccumulator()
	}
	acc = a.agg.Add(acc, in)
	if err := a.acc.Put(acc); err != nil {
		return err
	}
	return ctx.Emit(a.agg.Result(acc))
}

type countAgg[T any] struct{}

func (countAgg[T]) CreateAccumulator() int64 { return 0 }
func (countAgg[T]) Add(acc int64, _ T) int64 { return acc + 1 }
func (countAgg[T]) Result(acc int64) int64   { return acc }

// reduceAcc is a reduced value and whether there is one yet.
type reduceAcc[T any] struct {
	v   T
	set bool
}

type reduceAgg[T any] func(acc, v T) T

func (reduceAgg[T]) CreateAccumulator() reduceAcc[T] { return reduceAcc[T]{} }
func (r reduceAgg[T]) Add(acc reduceAcc[T], v T) reduceAcc[T] {
	if !acc.set {
		return reduceAcc[T]{v: v, set: true}
	}
	return reduceAcc[T]{v: r(acc.v, v), set: true}
}
func (reduceAgg[T]) Result(acc reduceAcc[T]) T { return acc.v }

// reduceCodec stores a reduceAcc as its value (only set ones are stored).
type reduceCodec[T any] struct{ c Codec[T] }

func (r reduceCodec[T]) Append(dst []byte, acc reduceAcc[T]) ([]byte, error) {
	return r.c.Append(dst, acc.v)
}

func (r reduceCodec[T]) Decode(src []byte) (reduceAcc[T], error) {
	v, err := r.c.Decode(src)
	return reduceAcc[T]{v: v, set: true}, err
}
