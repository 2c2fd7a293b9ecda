package stream

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/weir-stream/weir/keygroup"
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
//
// With key groups (state.Config.MaxParallelism > 0) there is one such map
// per key group, under the empty key filed in the group
// (state.Backend.SetCurrentKeyInGroup), and each timer is in the map of its
// record key's group: timers move with the state of their keys. Firing
// merges the maps of the groups the task owns into one time order.
const TimerStateName = "_weir.timers"

// timerFireBatch bounds how many due timers one scan collects.
const timerFireBatch = 256

// timerKey is one timer: when, for which operator, for which key.
type timerKey struct {
	at    int64 // Unix nanoseconds
	op    string
	key   []byte
	group int // the key's key group (0 without key groups); not encoded
}

// compareTimers orders timers as their encoded map keys sort: by time,
// then by the uvarint of the operator's length, the operator, the key.
// Firing merges the groups' maps with it, so that the order is the same
// with and without key groups.
func compareTimers(a, b timerKey) int {
	if c := cmp.Compare(a.at, b.at); c != 0 {
		return c
	}
	if len(a.op) != len(b.op) {
		var la, lb [binary.MaxVarintLen64]byte
		return bytes.Compare(binary.AppendUvarint(la[:0], uint64(len(a.op))), binary.AppendUvarint(lb[:0], uint64(len(b.op))))
	}
	if c := strings.Compare(a.op, b.op); c != 0 {
		return c
	}
	return bytes.Compare(a.key, b.key)
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

// timerService keeps a task's timers of one time domain in its state
// backend: the processing-time ones (TimerStateName) or the event-time
// ones (EventTimerStateName), whose times are event times. It belongs to
// the task goroutine.
type timerService struct {
	b *state.Backend
	m *state.MapState[timerKey, struct{}]
	// maxPar is the backend's number of key groups, and [lo, hi) the groups
	// the task owns; without key groups (maxPar 0) the one map under the
	// empty key is group 0 of [0, 1).
	maxPar, lo, hi int
	// next[g-lo] is at most the time of group g's earliest timer:
	// math.MinInt64 until a scan of the group learns it, math.MaxInt64 for
	// none. fire scans only the groups with a timer due (it is all the
	// service writes to TimerStateName, so the bound holds).
	next []int64
	// floor[g-lo], if set, is at most every live timer of group g: the
	// timers before it were fired (and deleted). A scan seeks there
	// instead of stepping from the group's start over the tombstones of
	// every timer fired before (which made firing n timers cost O(n²):
	// 86µs per window with 100 000 windows due at once). Firing raises
	// it to the timer it fires; registering a timer before it lowers it.
	floor    []timerKey
	hasFloor []bool
	due      []timerKey
	// While fire runs: its limit, and whether a timer due by then was set
	// (the collected batch may then be out of order).
	firing   bool
	limit    int64
	dueAdded bool
}

// newTimerService returns the timer service over the map state called
// name (TimerStateName, EventTimerStateName).
func newTimerService(b *state.Backend, name string, ops map[string]string) (*timerService, error) {
	m, err := state.NewMapState(b, name, state.Codec[timerKey](timerCodec{ops: ops}), state.Codec[struct{}](emptyCodec{}))
	if err != nil {
		return nil, fmt.Errorf("stream: timer state %s: %w", name, err)
	}
	s := &timerService{b: b, m: m, maxPar: b.MaxParallelism(), lo: 0, hi: 1}
	if s.maxPar > 0 {
		s.lo, s.hi = b.KeyGroups()
	}
	s.next = make([]int64, s.hi-s.lo)
	s.floor, s.hasFloor = make([]timerKey, s.hi-s.lo), make([]bool, s.hi-s.lo)
	for i := range s.next {
		s.next[i] = math.MinInt64
	}
	return s, nil
}

// group returns the key group of key's timers, and an error if the task
// does not own it (its record was routed to the wrong task: the timer
// would never fire).
func (s *timerService) group(key []byte) (int, error) {
	if s.maxPar == 0 {
		return 0, nil
	}
	g := keygroup.Of(key, s.maxPar)
	if g < s.lo || g >= s.hi {
		return g, fmt.Errorf("stream: timer for key %q: its key group %d is not among the task's key groups [%d, %d)", key, g, s.lo, s.hi)
	}
	return g, nil
}

// selectGroup makes group g's timer map the one s.m reads and writes.
func (s *timerService) selectGroup(g int) {
	if s.maxPar == 0 {
		s.b.SetCurrentKey(nil)
		return
	}
	s.b.SetCurrentKeyInGroup(nil, g)
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
	g, err := s.group(key)
	if err != nil {
		return err
	}
	s.selectGroup(g)
	k := timerKey{at: ns, op: op, key: key}
	err = s.m.Put(k, struct{}{})
	s.b.SetCurrentKey(key)
	if err != nil {
		return err
	}
	s.next[g-s.lo] = min(s.next[g-s.lo], ns)
	if s.hasFloor[g-s.lo] && compareTimers(k, s.floor[g-s.lo]) < 0 {
		k.key = append([]byte(nil), key...) // key is the caller's
		s.floor[g-s.lo] = k
	}
	if s.firing && ns <= s.limit {
		s.dueAdded = true
	}
	return nil
}

// remove deletes op's timer at at for key; key stays the current key.
func (s *timerService) remove(op string, at time.Time, key []byte) error {
	g, err := s.group(key)
	if err != nil {
		return err
	}
	s.selectGroup(g)
	err = s.m.Remove(timerKey{at: unixNano(at), op: op, key: key})
	s.b.SetCurrentKey(key)
	return err
}

// fire removes and hands to fn every timer due at now, in time order
// (then operator, then key) across the task's key groups. A timer that fn
// removes before its turn does not fire; one that fn sets at or before now
// fires in this call too, in its place in the order.
//
// Each round collects up to timerFireBatch due timers from every group
// with one due and sorts them. A group that had more is cut: none of its
// uncollected timers comes before its last collected one, so the round
// fires the collected timers up to the earliest such last one (at least a
// batch), and the next round goes on from there.
func (s *timerService) fire(now time.Time, fn func(k timerKey) error) error {
	limit := unixNano(now)
	s.firing, s.limit = true, limit
	defer func() { s.firing = false }()
	for {
		s.due = s.due[:0]
		var cutoff timerKey
		cut, groups := false, 0
		for g := s.lo; g < s.hi; g++ {
			if s.next[g-s.lo] > limit {
				continue
			}
			groups++
			n, err := s.scan(g, limit)
			if err != nil {
				s.unfired(s.due)
				return fmt.Errorf("stream: scan timers: %w", err)
			}
			if n < timerFireBatch {
				continue
			}
			if last := s.due[len(s.due)-1]; !cut || compareTimers(last, cutoff) < 0 {
				cutoff, cut = last, true
			}
		}
		if len(s.due) == 0 {
			return nil
		}
		if groups > 1 {
			slices.SortFunc(s.due, compareTimers)
		}
		if err := s.fireDue(cut, cutoff, fn); err != nil {
			return err
		}
	}
}

// fireDue fires the collected timers in order, up to cutoff if cut, and
// until one sets a timer due in this call. The timers it leaves are still
// due: their groups' next says so.
func (s *timerService) fireDue(cut bool, cutoff timerKey, fn func(k timerKey) error) error {
	for i, k := range s.due {
		if cut && compareTimers(k, cutoff) > 0 {
			s.unfired(s.due[i:]) // the next round collects them again
			return nil
		}
		s.selectGroup(k.group)
		ok, err := s.m.Contains(k)
		if err == nil && ok {
			err = s.m.Remove(k)
		}
		if err != nil {
			s.unfired(s.due[i:])
			return fmt.Errorf("stream: timer: %w", err)
		}
		if !ok {
			continue // removed by an earlier timer of this batch
		}
		// Decoded timers own their key: k may stay as the floor.
		s.floor[k.group-s.lo], s.hasFloor[k.group-s.lo] = k, true
		s.dueAdded = false
		if err := fn(k); err != nil {
			s.unfired(s.due[i+1:])
			return err
		}
		if s.dueAdded {
			s.unfired(s.due[i+1:]) // rescan: the new timer may come before them
			return nil
		}
	}
	return nil
}

// unfired notes in next that the collected timers ks were not fired.
func (s *timerService) unfired(ks []timerKey) {
	for _, k := range ks {
		s.next[k.group-s.lo] = min(s.next[k.group-s.lo], k.at)
	}
}

// scan appends to s.due up to timerFireBatch timers of group g due at
// limit, in order, and returns how many. If it sees the group's first
// timer after limit, or the group's end, it records that in s.next.
func (s *timerService) scan(g int, limit int64) (int, error) {
	n := 0
	next := int64(math.MaxInt64)
	s.selectGroup(g)
	visit := func(k timerKey, _ struct{}) bool {
		if k.at > limit {
			next = k.at
			return false
		}
		k.group = g
		s.due = append(s.due, k)
		n++
		return n < timerFireBatch
	}
	var err error
	if s.hasFloor[g-s.lo] {
		err = s.m.RangeFrom(s.floor[g-s.lo], visit)
	} else {
		err = s.m.Range(visit)
	}
	if err != nil {
		return n, err
	}
	if n < timerFireBatch {
		s.next[g-s.lo] = next
	}
	return n, nil
}
