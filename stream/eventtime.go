package stream

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/weir-stream/weir/compat"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/state"
)

// EventTimerStateName is the keyed state that holds a task's event-time
// timers. Its layout, codec, key groups and firing order are those of
// the processing-time timers (see TimerStateName); the times are event
// times, and a timer fires once the task's watermark reaches it
// (Task.AdvanceWatermark).
const EventTimerStateName = "_weir.event_timers"

// WatermarkStateName is the keyed state that holds the task's watermark:
// a value state under the empty key (of each key group the task owns, with
// key groups), the Unix milliseconds of the watermark that last advanced.
// Being keyed state it is in every snapshot, so a restored task knows which
// windows have fired, and its watermark moves with its key groups.
const WatermarkStateName = "_weir.watermark"

// TimestampSpec says where a source's records get their event time. The
// zero value means the Kafka record timestamp.
type TimestampSpec struct {
	// Field is a top-level field of the JSON value (the source's Format
	// must be FormatJSON). A record whose field is missing or malformed
	// follows the source's OnError policy.
	Field string
	// Format is how Field is written: kafkaio.TimestampUnixMs (default),
	// kafkaio.TimestampUnixS or kafkaio.TimestampRFC3339.
	Format kafkaio.TimestampFormat
}

// WatermarkSpec configures the watermarks of a source's input partitions
// (bounded out-of-orderness). It matters only if the job uses event time
// (Job.EventTime).
type WatermarkSpec struct {
	// MaxOutOfOrderness is how far behind the latest event time seen on a
	// partition a record may be and still be on time: the partition's
	// watermark is max event time − MaxOutOfOrderness − 1 ms. Default 0.
	MaxOutOfOrderness time.Duration
	// IdleTimeout marks a partition idle once it has had no record for
	// that long (processing time): it then stops holding the task's
	// watermark back, until its next record. 0 means never idle.
	IdleTimeout time.Duration
	// Interval is how often the task computes and forwards its watermark
	// (processing time). Default DefaultWatermarkInterval.
	Interval time.Duration
}

// DefaultWatermarkInterval is the default WatermarkSpec.Interval (Flink's
// autoWatermarkInterval).
const DefaultWatermarkInterval = 200 * time.Millisecond

// checkEventTime checks (and defaults) a source's Timestamp and Watermark.
func (j *Job) checkEventTime(src *KafkaSource, where string) bool {
	ts := &src.Timestamp
	if ts.Field == "" && ts.Format != "" {
		j.failf(where, "source %v: timestamp format %q without a field", src.Topics, ts.Format)
		return false
	}
	if ts.Field != "" {
		if ts.Format == "" {
			ts.Format = kafkaio.TimestampUnixMs
		}
		switch {
		case ts.Format != kafkaio.TimestampUnixMs && ts.Format != kafkaio.TimestampUnixS && ts.Format != kafkaio.TimestampRFC3339:
			j.failf(where, "source %v: timestamp format %q: want %s, %s or %s", src.Topics, ts.Format, kafkaio.TimestampUnixMs, kafkaio.TimestampUnixS, kafkaio.TimestampRFC3339)
			return false
		case src.Format != FormatJSON:
			j.failf(where, "source %v: a timestamp field (%s) needs format %s", src.Topics, ts.Field, FormatJSON)
			return false
		}
	}
	w := &src.Watermark
	switch {
	case w.MaxOutOfOrderness < 0:
		j.failf(where, "source %v: negative watermark max out-of-orderness %s", src.Topics, w.MaxOutOfOrderness)
		return false
	case w.IdleTimeout < 0:
		j.failf(where, "source %v: negative watermark idle timeout %s", src.Topics, w.IdleTimeout)
		return false
	case w.Interval < 0:
		j.failf(where, "source %v: negative watermark interval %s", src.Topics, w.Interval)
		return false
	}
	if w.Interval == 0 {
		w.Interval = DefaultWatermarkInterval
	}
	return true
}

// TimeDomain is the kind of a timer: which clock it follows.
type TimeDomain int

// The time domains.
const (
	// ProcessingTime timers fire when the task's clock reaches them
	// (Task.FireTimers).
	ProcessingTime TimeDomain = iota
	// EventTime timers fire when the task's watermark reaches them
	// (Task.AdvanceWatermark).
	EventTime
)

func (d TimeDomain) String() string {
	switch d {
	case ProcessingTime:
		return "processing-time"
	case EventTime:
		return "event-time"
	}
	return fmt.Sprintf("TimeDomain(%d)", int(d))
}

// ProcessOption configures a keyed operator defined with Process.
type ProcessOption func(*processOptions)

type processOptions struct {
	eventTime bool
	// check, if set, checks the operator's own settings (under the job's
	// lock, like every check).
	check func(j *Job) bool
	// schema is what the operator declares of its state (WithStateSchema).
	schema StateSchema
	// encoding and window are what a built-in operator (Aggregate, Reduce,
	// Count, Window) records of its state in the job's state schema.
	encoding string
	window   *compat.Window
	// uid is UID's identity, or "".
	uid string
}

// WithEventTime declares that the function uses event time: it registers
// event-time timers or reads the watermark. It makes Job.EventTime true, so
// that the runtime tracks watermarks; RegisterEventTimeTimer fails without
// it.
func WithEventTime() ProcessOption {
	return func(o *processOptions) { o.eventTime = true }
}

// EventTime reports whether an operator of the job uses event time (a
// Window, or a Process declared WithEventTime): only then does the runtime
// track watermarks and call Task.AdvanceWatermark.
func (j *Job) EventTime() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, n := range j.nodes {
		if n.eventTime {
			return true
		}
	}
	return false
}

// errNoEventTime is the error of RegisterEventTimeTimer in an operator
// not declared to use event time.
var errNoEventTime = errors.New("stream: an event-time timer in an operator not defined WithEventTime (the runtime would not track watermarks, and it would never fire)")

// millis returns t in Unix milliseconds; the zero time is MinInt64 ("no
// watermark").
func millis(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixMilli()
}

// wmTime returns watermark wm (Unix ms) as a time: the zero time for none.
func wmTime(wm int64) time.Time {
	if wm == math.MinInt64 {
		return time.Time{}
	}
	return time.UnixMilli(wm)
}

// restoreWatermark reads the watermark the task's key groups had in the
// snapshot the backend was restored from (none for a fresh backend).
func (t *task) restoreWatermark() error {
	b := t.tc.Backend
	vs, err := state.NewValueState(b, WatermarkStateName, state.Codec[int64](state.Int64Codec{}))
	if err != nil {
		return fmt.Errorf("stream: watermark state: %w", err)
	}
	t.wmState = vs
	s := t.etimers
	gwm := make([]int64, s.hi-s.lo)
	lo, even := int64(math.MaxInt64), true
	for g := s.lo; g < s.hi; g++ {
		s.selectGroup(g)
		v, ok, err := vs.Get()
		if err != nil {
			return fmt.Errorf("stream: watermark state: %w", err)
		}
		if !ok {
			v = math.MinInt64
		}
		gwm[g-s.lo] = v
		lo = min(lo, v)
		even = even && v == gwm[0]
	}
	b.SetCurrentKey(nil)
	t.wm = max(t.wm, lo)
	if !even {
		t.gwm = gwm
	}
	return nil
}

// watermark returns the watermark that holds for the current key.
func (t *task) watermark() int64 {
	if t.gwm == nil || t.etimers == nil {
		return t.wm
	}
	g, err := t.etimers.group(t.key)
	if err != nil {
		return t.wm
	}
	return max(t.wm, t.gwm[g-t.etimers.lo])
}

// AdvanceWatermark implements Task.
func (t *task) AdvanceWatermark(wm time.Time, out Emitter) error {
	if t.closed {
		return errors.New("stream: AdvanceWatermark on a closed task")
	}
	ms := millis(wm)
	if ms <= t.wm {
		return nil
	}
	t.wm = ms
	if t.etimers == nil {
		return nil
	}
	if err := t.storeWatermark(); err != nil {
		return err
	}
	t.out = out
	defer t.reset()
	return t.etimers.fire(time.UnixMilli(ms), func(k timerKey) error {
		h := t.onTimer[k.op]
		if h == nil {
			t.log.Warn("event-time timer of an operator without OnTimer dropped", "operator", k.op, "at", time.Unix(0, k.at))
			return nil
		}
		return t.fireTimer(h, EventTime, k)
	})
}

// storeWatermark writes the watermark to each owned key group's
// watermark state.
func (t *task) storeWatermark() error {
	s := t.etimers
	even := true
	for g := s.lo; g < s.hi; g++ {
		v := t.wm
		if t.gwm != nil {
			v = max(v, t.gwm[g-s.lo])
			even = even && t.gwm[g-s.lo] <= t.wm
		}
		s.selectGroup(g)
		if err := t.wmState.Put(v); err != nil {
			return fmt.Errorf("stream: watermark state: %w", err)
		}
	}
	t.tc.Backend.SetCurrentKey(nil)
	if even {
		t.gwm = nil
	}
	return nil
}
