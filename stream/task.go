package stream

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/state"
)

// TaskContext is what the runtime gives a task's operator chain.
type TaskContext struct {
	// Backend is the task's state (opened or restored by the runtime, which
	// keeps ownership: Task.Close does not close it). Required if the job
	// has a keyed operator.
	Backend *state.Backend
	// Stage is the name of the stage the task runs (Job.Stages); empty
	// means MainStage. NewTask builds only that stage's operators.
	Stage string
	// Task is the task ID; Index the task's number (in main, its input
	// partition).
	Task  string
	Index int
	// Now is the processing-time clock; nil means time.Now.
	Now func() time.Time
	// Logger receives the chain's logs; nil discards them. It should
	// already name the job and the task (the runtime's loggers do): the
	// chain adds only "operator".
	Logger *slog.Logger
	// OnLate, if set, is called with the operator's name for each record
	// that a Window drops or sends to its late topic because it is late
	// (the runtime counts them: weir_late_records_total).
	OnLate func(operator string)
	// OnRecordError, if set, is called with the operator's name and its
	// policy for each element whose Transform function failed and that
	// the policy skipped or sent to the dead-letter topic (the runtime
	// counts them: weir_record_errors_total).
	OnRecordError func(operator string, policy kafkaio.OnError)
	// StateNames, if set, stores the state and timers of the operators it
	// names (by ID: a Process name or UID) under another name: the stored
	// name of the checkpoint's state a renamed operator continues
	// (compat.Result.StateNames). An operator not in it stores under its
	// ID.
	StateNames map[string]string
}

// Task is one instance of a job's operator chain, driven by the task
// goroutine. It is not safe for concurrent use.
//
// After a method returns an error the chain may have handled part of the
// batch (and changed state and emitted records for it): the runtime must
// fail the task and restore it from a checkpoint, not retry.
type Task interface {
	// ProcessBatch runs records (all from this task's input partitions, in
	// order) through the chain; each emitted record goes to out. recs and
	// their bytes are not kept after the call returns.
	//
	// In main, records are those of the job's sources, routed by Topic. In
	// a downstream stage, they are the records of its shuffle topic, as
	// the upstream stage gave them to Emitter.Shuffle (the runtime strips
	// its own weir- headers first): Topic is not looked at, Key is the
	// current key, and Partition and Offset only name the record in
	// errors.
	ProcessBatch(recs []Record, out Emitter) error
	// FireTimers fires every processing-time timer due at now.
	FireTimers(now time.Time, out Emitter) error
	// AdvanceWatermark sets the task's watermark to wm (a wm not after the
	// current one is ignored) and fires, in timestamp order, every
	// event-time timer at or before wm, including those set while firing.
	// A watermark wm means no more records with event time <= wm are
	// expected: windows that end by then fire.
	AdvanceWatermark(wm time.Time, out Emitter) error
	// Close releases the chain (not the backend).
	Close() error
}

// RecordError is the error of ProcessBatch: the record whose processing
// failed (for a *PoisonError that names the input record its element came
// from, that record), and why.
type RecordError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("record %s/%d@%d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// ErrDecode reports an input record that cannot be processed as it is: its
// source's codec rejects it, or, in a downstream stage, the KeyBy's codec
// rejects a shuffle record. Under kafkaio.OnErrorFail (and always in a
// downstream stage) ProcessBatch returns it wrapped in a *RecordError,
// which the runtime treats as a permanent failure naming the record.
//
// An operator function of the source stage (a Map, a KeyBy's key function,
// a keyed function...) may return an error wrapping ErrDecode to reject its
// input record the same way: the source's OnError then applies to the
// record (skip it, or write it to the dead-letter topic). Outputs that
// other branches of the job already emitted for that record stay.
var ErrDecode = errors.New("stream: record does not decode")

// ErrPoison reports a poison record (DESIGN.md section 11): an input record
// that an operator function cannot process and never will, because the
// function fails the same way on every attempt (an expression of a YAML job
// that fails on the record's value). An operator function returns a
// *PoisonError, which is ErrPoison for errors.Is. Under
// kafkaio.OnErrorFail, ProcessBatch returns it wrapped in a *RecordError
// naming the record, which the runtime treats as a permanent failure, as
// it does ErrDecode: restarting the task would only fail on the record
// again. Any other error of an operator function fails the task, which the
// runtime restores from a checkpoint and runs again.
var ErrPoison = errors.New("stream: poison record")

// PoisonError is the error of an operator function that fails on its
// element and would fail the same way on every attempt (see ErrPoison).
// Topic, Partition and Offset, if Topic is set, name the job's input
// record the element came from: a job that keeps its elements' origin
// across shuffles sets them, so that in a downstream stage the failure
// names the input record (which `processor resume --skip` can skip) rather
// than the shuffle record. With Topic empty, the record is the one the
// task was processing.
type PoisonError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

// Error returns Err's text: marking an error as poison does not change
// what it says (a dead-letter record's DeadLetterHeaderError shows it).
func (e *PoisonError) Error() string { return e.Err.Error() }

// Unwrap returns the function's error.
func (e *PoisonError) Unwrap() error { return e.Err }

// Is reports whether target is ErrPoison.
func (e *PoisonError) Is(target error) bool { return target == ErrPoison }

// task runs a job's chain; the operators' closures share it to read the
// current element's record context.
type task struct {
	tc  TaskContext
	log *slog.Logger
	now func() time.Time

	// The current element's context, set per record (or per timer).
	key     []byte
	ts      time.Time
	headers []Header
	origin  origin // the Kafka record being processed
	out     Emitter

	single      func(*Record) error // the only input topic's consumer, or nil
	singleTopic string
	shuffleIn   func(*Record) error // a downstream stage's input, or nil
	byTopic     map[string]func(*Record) error

	timers  *timerService
	onTimer map[string]func(TimeDomain) error

	// Event time (only if the job uses it): the event-time timers, the
	// watermark (Unix ms, math.MinInt64 for none) and its state. gwm is
	// nil, or, after a restore that brought key groups with different
	// watermarks, each owned group's restored watermark, which holds for
	// its keys while above wm.
	etimers *timerService
	wm      int64
	wmState *state.ValueState[int64]
	gwm     []int64
	closers []func() error
	closed  bool
	dlqBuf  []Header
}

// taskBuilder is the state of NewTask while it composes the chain.
type taskBuilder struct {
	t    *task
	job  *Job
	memo map[*node]any
}

// useTimers makes sure the task has its processing-time timer service
// and, if eventTime, its event-time one.
func (tb *taskBuilder) useTimers(eventTime bool) error {
	ops := make(map[string]string, len(tb.job.ops))
	for name := range tb.job.ops {
		ops[name] = name
	}
	for _, name := range tb.t.tc.StateNames {
		ops[name] = name
	}
	if tb.t.timers == nil {
		ts, err := newTimerService(tb.t.tc.Backend, TimerStateName, ops)
		if err != nil {
			return err
		}
		tb.t.timers = ts
	}
	if eventTime && tb.t.etimers == nil {
		ts, err := newTimerService(tb.t.tc.Backend, EventTimerStateName, ops)
		if err != nil {
			return err
		}
		tb.t.etimers = ts
		if err := tb.t.restoreWatermark(); err != nil {
			return err
		}
	}
	return nil
}

// NewTask builds one instance of the job's operator chain for a task: it
// composes the operators, creates each keyed function and opens it on
// tc.Backend. It builds the job first, and returns its error if any.
func (j *Job) NewTask(tc TaskContext) (Task, error) {
	if err := j.Build(); err != nil {
		return nil, err
	}
	if tc.Now == nil {
		tc.Now = time.Now
	}
	if tc.Logger == nil {
		tc.Logger = slog.New(slog.DiscardHandler)
	}
	t := &task{
		tc:      tc,
		log:     tc.Logger, // the caller's logger names the job and the task
		now:     tc.Now,
		byTopic: make(map[string]func(*Record) error),
		onTimer: make(map[string]func(TimeDomain) error),
		wm:      math.MinInt64,
	}
	stage := slices.IndexFunc(j.stages, func(s StageDef) bool { return s.Name == tc.Stage })
	if tc.Stage == "" {
		stage = 0
	}
	if stage < 0 {
		return nil, fmt.Errorf("stream: job %s has no stage %q (its stages: %s)", j.name, tc.Stage, strings.Join(j.stageNames(), ", "))
	}
	tb := &taskBuilder{t: t, job: j, memo: make(map[*node]any)}
	if stage > 0 {
		f, err := j.entries[stage].keyBy.input(tb)
		if err != nil {
			return nil, errors.Join(err, t.Close())
		}
		t.shuffleIn = f
		return t, nil
	}
	for _, src := range j.sources {
		f, err := src.connect(tb)
		if err != nil {
			return nil, errors.Join(err, t.Close())
		}
		for _, topic := range src.src.Topics {
			t.byTopic[topic] = f
		}
	}
	if len(t.byTopic) == 1 {
		for topic, f := range t.byTopic {
			t.single, t.singleTopic = f, topic
		}
	}
	return t, nil
}

// stageNames returns the names of the job's stages.
func (j *Job) stageNames() []string {
	names := make([]string, len(j.stages))
	for i, st := range j.stages {
		names[i] = st.Name
	}
	return names
}

// ProcessBatch implements Task.
func (t *task) ProcessBatch(recs []Record, out Emitter) error {
	if t.closed {
		return errors.New("stream: ProcessBatch on a closed task")
	}
	t.out = out
	defer t.reset()
	for i := range recs {
		r := &recs[i]
		f := t.shuffleIn
		if f == nil {
			f = t.single
			if f == nil || r.Topic != t.singleTopic {
				if f = t.byTopic[r.Topic]; f == nil {
					return &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: errors.New("stream: the topic is not an input of the job")}
				}
			}
		}
		t.key, t.ts, t.headers = r.Key, r.Timestamp, r.Headers
		t.origin = origin{topic: r.Topic, partition: r.Partition, offset: r.Offset}
		if err := f(r); err != nil {
			return recordError(r, err)
		}
	}
	return nil
}

// recordError is ProcessBatch's error for r, whose processing failed with
// err: it names r, or, for a poison element that names the input record it
// came from, that record.
func recordError(r *Record, err error) *RecordError {
	var pe *PoisonError
	if errors.As(err, &pe) && pe.Topic != "" {
		return &RecordError{Topic: pe.Topic, Partition: pe.Partition, Offset: pe.Offset, Err: err}
	}
	return &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: err}
}

// reset drops the references to the last element and the emitter.
func (t *task) reset() {
	t.key, t.headers, t.out = nil, nil, nil
	t.origin = origin{}
}

// FireTimers implements Task.
func (t *task) FireTimers(now time.Time, out Emitter) error {
	if t.closed {
		return errors.New("stream: FireTimers on a closed task")
	}
	if t.timers == nil {
		return nil
	}
	t.out = out
	defer t.reset()
	return t.timers.fire(now, func(k timerKey) error {
		h := t.onTimer[k.op]
		if h == nil {
			// The operator is gone, or never had OnTimer (a job changed
			// between a checkpoint and its restore): nothing can fire it.
			t.log.Warn("timer of an operator without OnTimer dropped", "operator", k.op, "at", time.Unix(0, k.at))
			return nil
		}
		return t.fireTimer(h, ProcessingTime, k)
	})
}

// fireTimer calls h for timer k of domain d, with k's key and time
// current.
func (t *task) fireTimer(h func(TimeDomain) error, d TimeDomain, k timerKey) error {
	t.key, t.ts, t.headers = k.key, time.Unix(0, k.at), nil
	t.origin = origin{}
	t.tc.Backend.SetCurrentKey(k.key)
	if err := h(d); err != nil {
		return fmt.Errorf("stream: %s timer of %s at %s for key %q: %w", d, k.op, t.ts.Format(time.RFC3339Nano), k.key, err)
	}
	return nil
}

// Close implements Task: it closes the keyed functions, last defined first.
func (t *task) Close() error {
	if t.closed {
		return nil
	}
	t.closed = true
	var errs []error
	for _, c := range slices.Backward(t.closers) {
		if err := c(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// decodeFailed applies a source's OnError policy to r, which its codec
// rejected with cause.
func (t *task) decodeFailed(r *Record, policy kafkaio.OnError, dlq int, dlqTopic string, cause error) error {
	switch policy {
	case kafkaio.OnErrorSkip:
		t.log.Debug("undecodable record skipped", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", cause)
		return nil
	case kafkaio.OnErrorDeadLetter:
		t.dlqBuf = append(t.dlqBuf[:0], r.Headers...)
		t.dlqBuf = t.appendDeadLetterHeaders(t.dlqBuf, cause)
		return t.out.Emit(dlq, Record{Key: r.Key, Value: r.Value, Headers: t.dlqBuf, Topic: dlqTopic})
	}
	return fmt.Errorf("%w: %w", ErrDecode, cause)
}

// appendDeadLetterHeaders appends to hs the dead-letter headers of the
// record being processed (t.origin) that failed with cause.
func (t *task) appendDeadLetterHeaders(hs []Header, cause error) []Header {
	msg := cause.Error()
	if len(msg) > 1024 {
		msg = strings.ToValidUTF8(msg[:1024], "")
	}
	return append(hs,
		Header{Key: DeadLetterHeaderTopic, Value: []byte(t.origin.topic)},
		Header{Key: DeadLetterHeaderPartition, Value: strconv.AppendInt(nil, int64(t.origin.partition), 10)},
		Header{Key: DeadLetterHeaderOffset, Value: strconv.AppendInt(nil, t.origin.offset, 10)},
		Header{Key: DeadLetterHeaderError, Value: []byte(msg)},
	)
}
