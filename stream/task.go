package stream

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/weir-stream/weir/state"
)

// TaskContext is what the runtime gives a task's operator chain.
type TaskContext struct {
	// Backend is the task's state (opened or restored by the runtime, which
	// keeps ownership: Task.Close does not close it). Required if the job
	// has a keyed operator.
	Backend *state.Backend
	// Task is the task ID; Index the task's number (its input partition).
	Task  string
	Index int
	// Now is the processing-time clock; nil means time.Now.
	Now func() time.Time
	// Logger receives the chain's logs; nil discards them. It should
	// already name the job and the task (the runtime's loggers do): the
	// chain adds only "operator".
	Logger *slog.Logger
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
	ProcessBatch(recs []Record, out Emitter) error
	// FireTimers fires every processing-time timer due at now.
	FireTimers(now time.Time, out Emitter) error
	// Close releases the chain (not the backend).
	Close() error
}

// RecordError is the error of ProcessBatch: the record whose processing
// failed, and why.
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

// ErrDecode reports an input record that its source's codec rejects under
// OnErrorFail (wrapped in a *RecordError).
var ErrDecode = errors.New("stream: record does not decode")

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
	out     Emitter

	single      func(*Record) error // the only input topic's consumer, or nil
	singleTopic string
	byTopic     map[string]func(*Record) error

	timers  *timerService
	onTimer map[string]func() error
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

// useTimers makes sure the task has its timer service.
func (tb *taskBuilder) useTimers() error {
	if tb.t.timers != nil {
		return nil
	}
	ops := make(map[string]string, len(tb.job.ops))
	for name := range tb.job.ops {
		ops[name] = name
	}
	ts, err := newTimerService(tb.t.tc.Backend, ops)
	if err != nil {
		return err
	}
	tb.t.timers = ts
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
		onTimer: make(map[string]func() error),
	}
	tb := &taskBuilder{t: t, job: j, memo: make(map[*node]any)}
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

// ProcessBatch implements Task.
func (t *task) ProcessBatch(recs []Record, out Emitter) error {
	if t.closed {
		return errors.New("stream: ProcessBatch on a closed task")
	}
	t.out = out
	defer t.reset()
	for i := range recs {
		r := &recs[i]
		f := t.single
		if f == nil || r.Topic != t.singleTopic {
			if f = t.byTopic[r.Topic]; f == nil {
				return &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: errors.New("stream: the topic is not an input of the job")}
			}
		}
		t.key, t.ts, t.headers = r.Key, r.Timestamp, r.Headers
		if err := f(r); err != nil {
			return &RecordError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: err}
		}
	}
	return nil
}

// reset drops the references to the last element and the emitter.
func (t *task) reset() {
	t.key, t.headers, t.out = nil, nil, nil
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
		t.key, t.ts, t.headers = k.key, time.Unix(0, k.at), nil
		t.tc.Backend.SetCurrentKey(k.key)
		if err := h(); err != nil {
			return fmt.Errorf("stream: timer of %s at %s for key %q: %w", k.op, t.ts.Format(time.RFC3339Nano), k.key, err)
		}
		return nil
	})
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
func (t *task) decodeFailed(r *Record, policy OnError, dlq int, dlqTopic string, cause error) error {
	switch policy {
	case OnErrorSkip:
		t.log.Debug("undecodable record skipped", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", cause)
		return nil
	case OnErrorDeadLetter:
		msg := cause.Error()
		if len(msg) > 1024 {
			msg = strings.ToValidUTF8(msg[:1024], "")
		}
		t.dlqBuf = append(t.dlqBuf[:0], r.Headers...)
		t.dlqBuf = append(t.dlqBuf,
			Header{Key: DeadLetterHeaderTopic, Value: []byte(r.Topic)},
			Header{Key: DeadLetterHeaderPartition, Value: strconv.AppendInt(nil, int64(r.Partition), 10)},
			Header{Key: DeadLetterHeaderOffset, Value: strconv.AppendInt(nil, r.Offset, 10)},
			Header{Key: DeadLetterHeaderError, Value: []byte(msg)},
		)
		return t.out.Emit(dlq, Record{Key: r.Key, Value: r.Value, Headers: t.dlqBuf, Topic: dlqTopic})
	}
	return fmt.Errorf("%w: %w", ErrDecode, cause)
}
