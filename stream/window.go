package stream

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/state"
)

// WindowKind is the shape of a Windowing's windows.
type WindowKind int

// The window kinds. The zero WindowKind is none: Window rejects it.
const (
	// Tumbling windows are fixed-size, adjacent and disjoint:
	// [k·Size, (k+1)·Size) from the Unix epoch.
	Tumbling WindowKind = iota + 1
	// Sliding (hopping) windows are of Size and start every Slide
	// (Slide <= Size), from the Unix epoch: a record is in Size/Slide
	// windows (rounded up or down).
	Sliding
	// Session windows of a key group its records that are less than Gap
	// apart: a record opens [ts, ts+Gap), and windows that overlap or touch
	// merge.
	Session
)

func (k WindowKind) String() string {
	switch k {
	case Tumbling:
		return "tumbling"
	case Sliding:
		return "sliding"
	case Session:
		return "session"
	}
	return "WindowKind(" + strconv.Itoa(int(k)) + ")"
}

// Windowing says how Window groups a stream of T into windows, when they
// fire and where late records go. Event times have millisecond
// resolution: the durations must be whole milliseconds.
type Windowing[T any] struct {
	Kind WindowKind
	// Size is the length of Tumbling and Sliding windows.
	Size time.Duration
	// Slide is the start-to-start distance of Sliding windows.
	Slide time.Duration
	// Gap is the inactivity that ends a Session window.
	Gap time.Duration
	// AllowedLateness delays the firing of each window: [start, end) fires
	// when the watermark reaches end − 1 ms + AllowedLateness, so records
	// up to AllowedLateness behind the watermark still count.
	AllowedLateness time.Duration
	// EmitEvery > 0 emits early results (WindowResult.Early) of each open
	// window that had new input, every EmitEvery of processing time.
	EmitEvery time.Duration
	// LateTopic, if set, receives late records (in no open window), each
	// encoded with LateCodec, with headers LateHeaderWindowStart,
	// LateHeaderWindowEnd and LateHeaderLateBy. It is a sink of the job
	// (Job.Sinks), exactly-once. Without it, late records are dropped
	// (and counted either way, TaskContext.OnLate).
	LateTopic string
	// LateCodec encodes late records for LateTopic; for a stream of
	// []byte it defaults to RawCodec.
	LateCodec Codec[T]
}

// Header keys of a late record written to Windowing.LateTopic.
const (
	// LateHeaderWindowStart and LateHeaderWindowEnd name, in RFC 3339, the
	// latest window the record belonged to (already fired).
	LateHeaderWindowStart = "weir-late-window-start"
	LateHeaderWindowEnd   = "weir-late-window-end"
	// LateHeaderLateBy is how far the record's event time is behind the
	// watermark when it arrived, as a Go duration ("1m3.5s").
	LateHeaderLateBy = "weir-late-by"
)

// AggregateFunc aggregates the records of a window: a state.AggregateFunc
// plus Merge, which combines the accumulators of two windows (Session
// windows merge; the other kinds never call it). It is shared by every
// task: it must not hold mutable state.
type AggregateFunc[T, ACC, U any] interface {
	state.AggregateFunc[T, ACC, U]
	Merge(a, b ACC) ACC
}

// WindowResult is the result of one window of one key.
type WindowResult[U any] struct {
	// Key is the window's key (also the result's record key). It must not
	// be modified, nor kept after the element is processed.
	Key []byte
	// Start and End bound the window: [Start, End).
	Start, End time.Time
	// Value is the aggregate of the window's records.
	Value U
	// Early is true for an early result (Windowing.EmitEvery): the
	// window is still open and will fire again.
	Early bool
}

// Window defines a keyed window aggregate named name over s: the records
// of each key, grouped into the windows of w by event time (their record
// timestamps), aggregated by agg (accumulators stored with accCodec). Each
// window emits one WindowResult, once, when the watermark reaches its end −
// 1 ms + w.AllowedLateness; the result's record has the window's key and
// Timestamp end − 1 ms. The window's state is then cleared.
//
// Like Process, Window keys by the current key (a KeyBy before it is a
// shuffle point), and its name must be unique in the job and stable across
// its versions. A Window makes Job.EventTime true.
//
// Of opts, WithStateSchema applies (a Window always uses event time).
func Window[T, ACC, U any](s *Stream[T], name string, w Windowing[T], accCodec Codec[ACC], agg AggregateFunc[T, ACC, U], opts ...ProcessOption) *Stream[WindowResult[U]] {
	return window(s, name, siteOf(s.jobOrNil(), 1), w, accCodec, agg, opts)
}

func window[T, ACC, U any](s *Stream[T], name, where string, w Windowing[T], accCodec Codec[ACC], agg AggregateFunc[T, ACC, U], opts []ProcessOption) *Stream[WindowResult[U]] {
	what := fmt.Sprintf("Window(%q)", name)
	late := -1
	spec, problem := w.compile()
	if problem == "" && (accCodec == nil || agg == nil) {
		problem = "nil codec or aggregate function"
	}
	lateCodec := w.LateCodec
	if problem == "" && w.LateTopic != "" && lateCodec == nil {
		if c, ok := any(RawCodec{}).(Codec[T]); ok {
			lateCodec = c
		} else {
			problem = fmt.Sprintf("late topic %s needs a LateCodec for %s", w.LateTopic, reflect.TypeFor[T]())
		}
	}
	if problem == "" && w.LateTopic == "" && w.LateCodec != nil {
		problem = "LateCodec set without a LateTopic"
	}
	check := func(j *Job) bool {
		if problem != "" {
			j.failf(where, "%s: %s", what, problem)
			return false
		}
		if w.LateTopic != "" {
			if late = j.addSink(KafkaSink{Topic: w.LateTopic, Delivery: kafkaio.DeliveryExactlyOnce}, false, where); late < 0 {
				return false
			}
		}
		return true
	}
	o := processOptions{}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	o.eventTime, o.check = true, check
	id := name // the timers' operator: UID's, as process names them
	if o.uid != "" {
		id = o.uid
	}
	o.encoding = "windows/" + encodingOf(accCodec)
	o.window = spec.schema()
	out := process(s, name, "Window", where, o, func() KeyedProcessFunction[T, WindowResult[U]] {
		return &windowFn[T, ACC, U]{spec: spec, name: id, codec: accCodec, agg: agg, late: late, lateTopic: w.LateTopic, lateCodec: lateCodec}
	})
	if late >= 0 && out.node != nil && out.job != nil {
		out.job.mu.Lock()
		out.node.sideSinks = append(out.node.sideSinks, late)
		out.job.mu.Unlock()
	}
	return out
}

// windowSpec is a Windowing in milliseconds.
type windowSpec struct {
	kind                              WindowKind
	size, slide, gap, lateness, every int64 // ms
	emitEvery                         time.Duration
}

// compile checks w and returns it in milliseconds, or the problem.
func (w Windowing[T]) compile() (windowSpec, string) {
	sp := windowSpec{kind: w.Kind, emitEvery: w.EmitEvery}
	ms := func(what string, d time.Duration, dst *int64) string {
		if d%time.Millisecond != 0 {
			return fmt.Sprintf("%s %s is not a whole number of milliseconds", what, d)
		}
		*dst = d.Milliseconds()
		return ""
	}
	for _, f := range []struct {
		what string
		d    time.Duration
		dst  *int64
	}{{"size", w.Size, &sp.size}, {"slide", w.Slide, &sp.slide}, {"gap", w.Gap, &sp.gap}, {"allowed lateness", w.AllowedLateness, &sp.lateness}, {"emit every", w.EmitEvery, &sp.every}} {
		if f.d < 0 {
			return sp, fmt.Sprintf("negative %s %s", f.what, f.d)
		}
		if p := ms(f.what, f.d, f.dst); p != "" {
			return sp, p
		}
	}
	switch w.Kind {
	case Tumbling:
		switch {
		case sp.size == 0:
			return sp, "a tumbling window needs a size"
		case sp.slide != 0 || sp.gap != 0:
			return sp, "a tumbling window has a size only (no slide, no gap)"
		}
	case Sliding:
		switch {
		case sp.size == 0 || sp.slide == 0:
			return sp, "a sliding window needs a size and a slide"
		case sp.slide > sp.size:
			return sp, fmt.Sprintf("slide %s is longer than size %s", w.Slide, w.Size)
		case sp.gap != 0:
			return sp, "a sliding window has no gap"
		}
	case Session:
		switch {
		case sp.gap == 0:
			return sp, "a session window needs a gap"
		case sp.size != 0 || sp.slide != 0:
			return sp, "a session window has a gap only (no size, no slide)"
		}
	default:
		return sp, fmt.Sprintf("unknown window kind %d: want Tumbling, Sliding or Session", int(w.Kind))
	}
	if w.LateTopic != "" && !validTopic(w.LateTopic) {
		return sp, fmt.Sprintf("late topic %q is not a valid topic name", w.LateTopic)
	}
	return sp, ""
}

// winKey is a window [start, end) in Unix ms.
type winKey struct{ start, end int64 }

// winEntry is one open window of a key: its accumulator, and whether it
// had input since its last early result.
type winEntry[ACC any] struct {
	k     winKey
	acc   ACC
	dirty bool
}

// windowsCodec encodes the open windows of a key, sorted by start, as
// uvarint(n), then per window: start and end (8 bytes each, big-endian),
// a flag byte (1: dirty), uvarint(len(acc)) and the accumulator. Decode
// returns its scratch slice: valid until the next Decode (the task uses
// it, then writes it back, before the next).
type windowsCodec[ACC any] struct {
	c       Codec[ACC]
	scratch []winEntry[ACC]
	buf     []byte
}

func (c *windowsCodec[ACC]) Append(dst []byte, ws []winEntry[ACC]) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(ws)))
	for _, w := range ws {
		dst = binary.BigEndian.AppendUint64(dst, uint64(w.k.start))
		dst = binary.BigEndian.AppendUint64(dst, uint64(w.k.end))
		var f byte
		if w.dirty {
			f = 1
		}
		dst = append(dst, f)
		var err error
		if c.buf, err = c.c.Append(c.buf[:0], w.acc); err != nil {
			return dst, err
		}
		dst = binary.AppendUvarint(dst, uint64(len(c.buf)))
		dst = append(dst, c.buf...)
	}
	return dst, nil
}

func (c *windowsCodec[ACC]) Decode(src []byte) ([]winEntry[ACC], error) {
	corrupt := func(what string) ([]winEntry[ACC], error) {
		return nil, fmt.Errorf("%w: windows: %s", state.ErrCorruptValue, what)
	}
	n, w := binary.Uvarint(src)
	if w <= 0 || n > uint64(len(src)) {
		return corrupt("bad count")
	}
	src = src[w:]
	ws := c.scratch[:0]
	for range n {
		if len(src) < 17 || src[16] > 1 {
			return corrupt("truncated window")
		}
		e := winEntry[ACC]{k: winKey{int64(binary.BigEndian.Uint64(src)), int64(binary.BigEndian.Uint64(src[8:]))}, dirty: src[16] == 1}
		l, w := binary.Uvarint(src[17:])
		if w <= 0 || uint64(len(src)-17-w) < l {
			return corrupt("truncated accumulator")
		}
		acc, err := c.c.Decode(src[17+w : 17+w+int(l)])
		if err != nil {
			return nil, err
		}
		e.acc = acc
		ws = append(ws, e)
		src = src[17+w+int(l):]
	}
	if len(src) != 0 {
		return corrupt("trailing bytes")
	}
	c.scratch = ws
	return ws, nil
}

// windowFn is a Window's keyed function, one per task. Its state is one
// value per key, "<name>/windows": the key's open windows and their
// accumulators (a value state, so the task's record cache holds the hot
// keys); each open window has one event-time timer at its firing time,
// and with EmitEvery each key with new input one processing-time timer.
type windowFn[T, ACC, U any] struct {
	spec      windowSpec
	name      string // the operator's identity, for metrics
	timerOp   string // the name its timers are stored under (Open)
	codec     Codec[ACC]
	agg       AggregateFunc[T, ACC, U]
	late      int // the late topic's sink, or -1
	lateTopic string
	lateCodec Codec[T]

	ws      *state.ValueState[[]winEntry[ACC]]
	fired   []winEntry[ACC] // scratch of OnTimer
	lateBuf []byte
	lateHdr []Header
}

func (f *windowFn[T, ACC, U]) Open(oc OpenContext) error {
	f.timerOp = oc.Operator
	var err error
	f.ws, err = state.NewValueState(oc.Backend, oc.StateName("windows"), state.Codec[[]winEntry[ACC]](&windowsCodec[ACC]{c: f.codec}))
	return err
}

// fireAt returns the event time at which window k fires.
func (f *windowFn[T, ACC, U]) fireAt(k winKey) int64 { return k.end - 1 + f.spec.lateness }

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

func (f *windowFn[T, ACC, U]) ProcessElement(ctx *Context[WindowResult[U]], in T) error {
	ts := ctx.t.ts.UnixMilli()
	wm := ctx.t.watermark()
	sp := &f.spec
	var k winKey
	switch sp.kind {
	case Tumbling:
		start := floorDiv(ts, sp.size) * sp.size
		k = winKey{start, start + sp.size}
	case Sliding:
		// The window that ends last; the record is late if it has fired.
		start := floorDiv(ts, sp.slide) * sp.slide
		k = winKey{start, start + sp.size}
	case Session:
		k = winKey{ts, ts + sp.gap}
	}
	if f.fireAt(k) <= wm {
		return f.lateRecord(ctx, in, k, ts, wm)
	}
	ws, _, err := f.ws.Get()
	if err != nil {
		return err
	}
	switch sp.kind {
	case Tumbling:
		ws, err = f.add(ctx, ws, k, in)
	case Sliding:
		for start := k.start; start > ts-sp.size && err == nil; start -= sp.slide {
			k := winKey{start, start + sp.size}
			if f.fireAt(k) <= wm {
				break // this one and the earlier ones have fired
			}
			ws, err = f.add(ctx, ws, k, in)
		}
	case Session:
		ws, err = f.addSession(ctx, ws, k, in)
	}
	if err != nil {
		return err
	}
	return f.ws.Put(ws)
}

// add adds in to window k of ws, the current key's windows (sorted by
// start), and returns them.
func (f *windowFn[T, ACC, U]) add(ctx *Context[WindowResult[U]], ws []winEntry[ACC], k winKey, in T) ([]winEntry[ACC], error) {
	i, found := slices.BinarySearchFunc(ws, k, func(e winEntry[ACC], k winKey) int {
		if c := cmp.Compare(e.k.start, k.start); c != 0 {
			return c
		}
		return cmp.Compare(e.k.end, k.end)
	})
	if !found {
		if err := ctx.t.etimers.register(f.timerOp, time.UnixMilli(f.fireAt(k)), ctx.t.key); err != nil {
			return ws, err
		}
		ws = slices.Insert(ws, i, winEntry[ACC]{k: k, acc: f.agg.CreateAccumulator()})
	}
	e := &ws[i]
	e.acc = f.agg.Add(e.acc, in)
	return ws, f.markDirty(ctx, e)
}

// markDirty notes that e had new input: with EmitEvery, the key's next
// early timer is set when the first of its windows gets new input.
func (f *windowFn[T, ACC, U]) markDirty(ctx *Context[WindowResult[U]], e *winEntry[ACC]) error {
	if f.spec.every == 0 || e.dirty {
		return nil
	}
	e.dirty = true
	next := ctx.t.now().Truncate(f.spec.emitEvery).Add(f.spec.emitEvery)
	return ctx.t.timers.register(f.timerOp, next, ctx.t.key)
}

// addSession adds in, whose own session is k, to ws, the current key's
// sessions: k and the sessions it overlaps or touches merge into one.
func (f *windowFn[T, ACC, U]) addSession(ctx *Context[WindowResult[U]], ws []winEntry[ACC], k winKey, in T) ([]winEntry[ACC], error) {
	lo := slices.IndexFunc(ws, func(e winEntry[ACC]) bool { return e.k.end >= k.start })
	if lo < 0 {
		lo = len(ws)
	}
	hi := lo
	for hi < len(ws) && ws[hi].k.start <= k.end {
		hi++
	}
	if hi-lo == 1 && ws[lo].k.start <= k.start && ws[lo].k.end >= k.end {
		e := &ws[lo] // within an existing session
		e.acc = f.agg.Add(e.acc, in)
		return ws, f.markDirty(ctx, e)
	}
	t := ctx.t
	merged := winEntry[ACC]{k: k, acc: f.agg.CreateAccumulator()}
	for _, e := range ws[lo:hi] {
		merged.k.start, merged.k.end = min(merged.k.start, e.k.start), max(merged.k.end, e.k.end)
		merged.acc = f.agg.Merge(merged.acc, e.acc)
		merged.dirty = merged.dirty || e.dirty
		if err := t.etimers.remove(f.timerOp, time.UnixMilli(f.fireAt(e.k)), t.key); err != nil {
			return ws, err
		}
	}
	if err := t.etimers.register(f.timerOp, time.UnixMilli(f.fireAt(merged.k)), t.key); err != nil {
		return ws, err
	}
	merged.acc = f.agg.Add(merged.acc, in)
	if err := f.markDirty(ctx, &merged); err != nil {
		return ws, err
	}
	return slices.Replace(ws, lo, hi, merged), nil
}

// lateRecord counts in, late at watermark wm (k is the latest window it
// missed), and writes it to the late topic if there is one.
func (f *windowFn[T, ACC, U]) lateRecord(ctx *Context[WindowResult[U]], in T, k winKey, ts, wm int64) error {
	t := ctx.t
	if t.tc.OnLate != nil {
		t.tc.OnLate(f.name)
	}
	if f.late < 0 {
		return nil
	}
	var err error
	if f.lateBuf, err = f.lateCodec.Append(f.lateBuf[:0], in); err != nil {
		return fmt.Errorf("stream: late topic %s: encode: %w", f.lateTopic, err)
	}
	f.lateHdr = append(f.lateHdr[:0], t.headers...)
	f.lateHdr = append(f.lateHdr,
		Header{Key: LateHeaderWindowStart, Value: []byte(formatMs(k.start))},
		Header{Key: LateHeaderWindowEnd, Value: []byte(formatMs(k.end))},
		Header{Key: LateHeaderLateBy, Value: []byte((time.Duration(wm-ts) * time.Millisecond).String())},
	)
	return t.out.Emit(f.late, Record{Key: t.key, Value: f.lateBuf, Timestamp: t.ts, Headers: f.lateHdr, Topic: f.lateTopic})
}

// formatMs formats Unix ms as RFC 3339 in UTC.
func formatMs(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

// OnTimer fires the current key's windows due at at (an event-time timer),
// or emits early results of its windows with new input (a processing-time
// one).
func (f *windowFn[T, ACC, U]) OnTimer(ctx *Context[WindowResult[U]], at time.Time) error {
	early := ctx.TimeDomain() == ProcessingTime
	limit := at.UnixMilli()
	ws, _, err := f.ws.Get()
	if err != nil {
		return err
	}
	f.fired = f.fired[:0]
	keep := ws[:0]
	for _, e := range ws {
		switch {
		case early && e.dirty:
			f.fired = append(f.fired, e)
			e.dirty = false
		case !early && f.fireAt(e.k) <= limit:
			f.fired = append(f.fired, e)
			continue
		}
		keep = append(keep, e)
	}
	if len(f.fired) == 0 {
		return nil
	}
	if len(keep) == 0 {
		err = f.ws.Clear()
	} else {
		err = f.ws.Put(keep)
	}
	if err != nil {
		return err
	}
	t := ctx.t
	saved := t.ts
	defer func() { t.ts = saved }()
	for _, e := range f.fired {
		t.ts = time.UnixMilli(e.k.end - 1)
		r := WindowResult[U]{Key: t.key, Start: time.UnixMilli(e.k.start).UTC(), End: time.UnixMilli(e.k.end).UTC(), Value: f.agg.Result(e.acc), Early: early}
		if err := ctx.Emit(r); err != nil {
			return err
		}
	}
	return nil
}
