package stream

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/weir-stream/weir/state"
)

// TimerStateName is the keyed state that holds a task's processing-time
// timers: a map state under the empty key whose map keys are
//
//	8-byte big-endian (time in Unix nanoseconds XOR 1<<63) |
//	uvarint(len(operator)) | operator | record key
//
// and whose values are empty. Pebble keeps the entries sorted, so the due
// timers are the first entries of the map, in time order; registering a
// timer twice writes the same entry, so it fires once. Being keyed state,
// timers are snapshotted and restored with the rest of the task's state.
const TimerStateName = "_weir.timers"

// timerFireBatch bounds how many due timers one scan collects.
const timerFireBatch = 256

// timerKey is one timer: when, for which operator, for which key.
type timerKey struct {
	at  int64 // Unix nanoseconds
	op  string
	key []byte
}

// timerCodec encodes timer keys. It interns operator names (ops maps each
// known name to itself), so that decoding a timer allocates only its key.
type timerCodec struct{ ops map[string]string }

func (timerCodec) Append(dst []byte, k timerKey) ([]byte, error) {
	dst = binary.BigEndian.AppendUint64(dst, uint64(k.at)^(1<<63))
	dst = binary.AppendUvarint(dst, uint64(len(k.op)))
	dst = append(dst, k.op...)
	return append(dst, k.key...), nil
}

func (c timerCodec) Decode(src []byte) (timerKey, error) {
	if len(src) < 9 {
		return timerKey{}, fmt.Errorf("%w: timer of %d bytes", state.ErrCorruptValue, len(src))
	}
	at := int64(binary.BigEndian.Uint64(src) ^ (1 << 63))
	n, w := binary.Uvarint(src[8:])
	if w <= 0 || uint64(len(src)-8-w) < n {
		return timerKey{}, fmt.Errorf("%w: bad timer operator length", state.ErrCorruptValue)
	}
	rest := src[8+w:]
	op, ok := c.ops[string(rest[:n])]
	if !ok {
		op = string(rest[:n])
	}
	return timerKey{at: at, op: op, key: append([]byte(nil), rest[n:]...)}, nil
}

// emptyCodec stores nothing.
type emptyCodec struct{}

func (emptyCodec) Append(dst []byte, _ struct{}) ([]byte, error) { return dst, nil }
func (emptyCodec) Decode([]byte) (struct{}, error)               { return struct{}{}, nil }

// timerService keeps a task's processing-time timers in its state backend.
// It belongs to the task goroutine.
type timerService struct {
	b   *state.Backend
	m   *state.MapState[timerKey, struct{}]
	due []timerKey
	// While fire runs: its limit, and whether a timer due by then was set
	// (the collected batch may then be out of order).
	firing   bool
	limit    int64
	dueAdded bool
}

func newTimerService(b *state.Backend, ops map[string]string) (*timerService, error) {
	m, err := state.NewMapState(b, TimerStateName, state.Codec[timerKey](timerCodec{ops: ops}), state.Codec[struct{}](emptyCodec{}))
	if err != nil {
		return nil, fmt.Errorf("stream: timer state: %w", err)
	}
	return &timerService{b: b, m: m}, nil
}

// unixNano returns t in Unix nanoseconds, clamped to what an int64 holds
// (years 1678 to 2262), so that the zero time is "long ago".
func unixNano(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

// register sets op's timer at at for key; key stays the current key.
func (s *timerService) register(op string, at time.Time, key []byte) error {
	ns := unixNano(at)
	s.b.SetCurrentKey(nil)
	err := s.m.Put(timerKey{at: ns, op: op, key: key}, struct{}{})
	s.b.SetCurrentKey(key)
	if s.firing && ns <= s.limit {
		s.dueAdded = true
	}
	return err
}

// remove deletes op's timer at at for key; key stays the current key.
func (s *timerService) remove(op string, at time.Time, key []byte) error {
	s.b.SetCurrentKey(nil)
	err := s.m.Remove(timerKey{at: unixNano(at), op: op, key: key})
	s.b.SetCurrentKey(key)
	return err
}

// fire removes and hands to fn every timer due at now, in time order
// (then operator, then key). A timer that fn removes before its turn does
// not fire; one that fn sets at or before now fires in this call too, in
// its place in the order.
func (s *timerService) fire(now time.Time, fn func(k timerKey) error) error {
	limit := unixNano(now)
	s.firing, s.limit = true, limit
	defer func() { s.firing = false }()
	for {
		s.due = s.due[:0]
		s.b.SetCurrentKey(nil)
		err := s.m.Range(func(k timerKey, _ struct{}) bool {
			if k.at > limit {
				return false
			}
			s.due = append(s.due, k)
			return len(s.due) < timerFireBatch
		})
		if err != nil {
			return fmt.Errorf("stream: scan timers: %w", err)
		}
		if len(s.due) == 0 {
			return nil
		}
		for i := range s.due {
			k := s.due[i]
			s.b.SetCurrentKey(nil)
			ok, err := s.m.Contains(k)
			if err != nil {
				return fmt.Errorf("stream: timer: %w", err)
			}
			if !ok {
				continue // removed by an earlier timer of this batch
			}
			if err := s.m.Remove(k); err != nil {
				return fmt.Errorf("stream: timer: %w", err)
			}
			s.dueAdded = false
			if err := fn(k); err != nil {
				return err
			}
			if s.dueAdded {
				break // rescan: the new timer may come before the rest
			}
		}
	}
}
