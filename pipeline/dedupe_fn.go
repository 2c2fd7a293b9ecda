package pipeline

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// dedupeIn is a record on its way into a dedupe: the record and its
// dedupe key (evaluated before, under the step's on_error).
type dedupeIn[T any] struct {
	v  T
	dk []byte
}

// dedupeFn is the keyed function of a dedupe step, one per task. Per
// current key it keeps two map states:
//
//   - "<operator>/seen": dedupe key → the time it was last seen (Unix ms,
//     event time or processing time);
//   - "<operator>/expiry": 8-byte big-endian (expiry ms XOR 1<<63) | dedupe
//     key → nothing, the same entries ordered by when they expire (last
//     seen + within), so that a timer removes the expired ones from the
//     head without reading the others.
//
// A record is a duplicate, and dropped, if its dedupe key was last seen
// less than within before (or after: event times arrive out of order)
// its own time; every sighting, kept or dropped, moves the last-seen time
// to the latest of the two. The decision reads only the stored time, so it
// does not depend on when the state is removed: a timer (event time or
// processing time, as the job has, at the expiry rounded up to a granule
// so that a key has at most one timer per granule) removes the entries
// that expired. Timers are keyed state: across a restore they fire once.
type dedupeFn[T any] struct {
	within    int64 // ms
	granule   int64 // ms
	eventTime bool

	seen   *state.MapState[[]byte, int64]
	expiry *state.MapState[[]byte, []byte]
	kbuf   []byte
	due    [][]byte
}

// newDedupeFn returns the constructor of a dedupe's function (one per task).
func newDedupeFn[T any](within time.Duration, eventTime bool) func() stream.KeyedProcessFunction[dedupeIn[T], T] {
	ms := max(within.Milliseconds(), 1)
	granule := max(ms/16, 1)
	return func() stream.KeyedProcessFunction[dedupeIn[T], T] {
		return &dedupeFn[T]{within: ms, granule: granule, eventTime: eventTime}
	}
}

func (f *dedupeFn[T]) Open(oc stream.OpenContext) error {
	var err error
	if f.seen, err = state.NewMapState(oc.Backend, oc.StateName("seen"), state.BytesCodec{}, state.Codec[int64](state.Int64Codec{})); err != nil {
		return err
	}
	f.expiry, err = state.NewMapState(oc.Backend, oc.StateName("expiry"), state.BytesCodec{}, state.Codec[[]byte](state.BytesCodec{}))
	return err
}

// now is the time of the current record: its event time, or the task's
// processing time.
func (f *dedupeFn[T]) now(ctx *stream.Context[T]) int64 {
	if f.eventTime {
		return ctx.Timestamp().UnixMilli()
	}
	return ctx.Now().UnixMilli()
}

func (f *dedupeFn[T]) expiryKey(at int64, dk []byte) []byte {
	f.kbuf = binary.BigEndian.AppendUint64(f.kbuf[:0], uint64(at)^(1<<63))
	return append(f.kbuf, dk...)
}

func (f *dedupeFn[T]) ProcessElement(ctx *stream.Context[T], in dedupeIn[T]) error {
	ts := f.now(ctx)
	last, ok, err := f.seen.Get(in.dk)
	if err != nil {
		return err
	}
	dup := ok && ts-last < f.within && last-ts < f.within
	if ok && ts <= last {
		return f.emit(ctx, in, dup) // the latest sighting stays
	}
	if ok {
		if err := f.expiry.Remove(f.expiryKey(last+f.within, in.dk)); err != nil {
			return err
		}
	}
	if err := f.seen.Put(in.dk, ts); err != nil {
		return err
	}
	exp := ts + f.within
	if err := f.expiry.Put(f.expiryKey(exp, in.dk), nil); err != nil {
		return err
	}
	fire := time.UnixMilli((exp + f.granule - 1) / f.granule * f.granule)
	if f.eventTime {
		err = ctx.RegisterEventTimeTimer(fire)
	} else {
		err = ctx.RegisterProcessingTimeTimer(fire)
	}
	if err != nil {
		return err
	}
	return f.emit(ctx, in, dup)
}

func (f *dedupeFn[T]) emit(ctx *stream.Context[T], in dedupeIn[T], dup bool) error {
	if dup {
		return nil
	}
	return ctx.Emit(in.v)
}

// OnTimer removes the current key's dedupe keys that expired at or before
// at.
func (f *dedupeFn[T]) OnTimer(ctx *stream.Context[T], at time.Time) error {
	limit := at.UnixMilli()
	f.due = f.due[:0]
	var bad error
	err := f.expiry.RangeFrom(nil, func(k, _ []byte) bool {
		if len(k) < 8 {
			bad = fmt.Errorf("%w: dedupe expiry entry of %d bytes", state.ErrCorruptValue, len(k))
			return false
		}
		if int64(binary.BigEndian.Uint64(k)^(1<<63)) > limit {
			return false
		}
		f.due = append(f.due, k)
		return true
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return err
	}
	for _, k := range f.due {
		if err := f.expiry.Remove(k); err != nil {
			return err
		}
		if err := f.seen.Remove(k[8:]); err != nil {
			return err
		}
	}
	return nil
}
