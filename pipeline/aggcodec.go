package pipeline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/weir-stream/weir/state"
)

// This file is the binary codec of the aggregate step's accumulator (the
// pure part, aggstate.go, holds its fold and result): how an accumulator
// is stored in keyed state, and the value encoding of the JSON values it
// keeps. It does no I/O and keeps no state of its own.

// An accumulator is stored by name (aggCodec): each aggregate's slot with
// its output name and its operation, so that a job file may reorder, add
// and remove aggregates and each keeps its own state (DESIGN.md, invariant
// 7):
//
//	0x80 0x00                 the mark of the encoding (byNameMark)
//	a version byte            aggCodecVersion
//	uvarint(number of slots)
//	per slot:                 uvarint(len(name)), the name, the op byte (aggOp),
//	                          uvarint(len(body)), the body
//
// A slot's body is uvarint(n), then what its op keeps:
//
//	sum:            a flag byte (0 int64, 1 float64), then varint(i) or the 8 bytes of f
//	avg:            the 8 bytes of f
//	min, max,
//	first, last:    the value (appendValue), if n > 0
//	collect:        uvarint(len(list)), the values
//	max_by, min_by: if n > 0, the by value (appendValue), uvarint(len(list)), the values
//	count_distinct: (in a window) the set: uvarint(len) per string, then it
//
// Decoding maps the stored slots to the step's aggregates by name: a slot
// whose name the step no longer has is dropped (its body skipped, whatever
// its op); an aggregate with no slot starts empty; a slot whose op is not
// the aggregate's is an error (ErrAggregateChanged). The compatibility
// check of a restore decides before that which of these a job may do;
// the codec is the defence in depth. Slots in the step's order, the
// common case, cost no lookup.
//
// The positional encoding. Before this one, an accumulator was its slot
// bodies, in the step's order, nothing else (so a reordered job swapped
// its aggregates' values silently). Checkpoints hold such values, and
// nothing in the state's name tells them apart; their first bytes do: a
// positional value starts with its first slot's n, a uvarint as
// binary.AppendUvarint writes it, in the fewest bytes, and no such
// uvarint starts with 0x80 0x00 (a last byte of 0 would be one byte too
// many). So Decode reads a value without the mark positionally, with the
// step's aggregates (right for the job that wrote it: an unchanged job),
// and Append always writes the new encoding: a key's value migrates on its
// next write, with no second lookup and no second state name (a window's
// accumulators, inside stream.Window's state, migrate the same way, and
// are gone when their windows fire). So that no running aggregate's key
// stays positional until the job's aggregates are edited, the running
// aggregate also rewrites every positional value when it opens, once per
// key group (runningAgg.migratePositional).
//
// Values are encoded by appendValue: a tag byte, then the value.
const (
	tagNull byte = iota
	tagFalse
	tagTrue
	tagInt
	tagFloat
	tagString
	tagList
	tagObject
)

// byNameMark starts every accumulator stored by name, and every map key of
// a running count_distinct's values (distinctKey): two bytes no positional
// value or key starts with (see above).
const byNameMark = "\x80\x00"

// aggCodecVersion is the version of the by-name encoding. A value of
// another version is an error: it was written by a later Weir.
const aggCodecVersion = 1

// ErrAggregateChanged reports a stored accumulator with a slot under the
// name of one of the step's aggregates but of another operation (sum
// then max): its state cannot be read as the new operation's. The error
// names the aggregate and both operations.
var ErrAggregateChanged = errors.New("pipeline: aggregate changed its operation")

// isByName reports whether a stored accumulator (or a distinct key) is in
// the by-name encoding, else positional.
func isByName(src []byte) bool {
	return len(src) >= len(byNameMark) && string(src[:len(byNameMark)]) == byNameMark
}

// aggCodec encodes the accumulators of one aggregate step. With reuse (a
// running aggregate's, one per task), Decode reuses its scratch slots:
// the result is valid until the next Decode (a state handle decodes, the
// caller folds and writes back before the next), and it tells what the
// last value held beyond the step's slots (positional, dropped). For a
// window's state, where the stream keeps several accumulators of a key at
// once and the tasks share one codec, reuse is off and the codec is not
// written to.
type aggCodec struct {
	set *aggSet
	// heads[i] is uvarint(len(name)), name, op of aggregate i: what
	// precedes its slot's body.
	heads [][]byte
	reuse bool

	scratch []slot
	// positional: the last value decoded was positional (with reuse).
	positional bool
	// dropped names the count_distinct slots of the last value decoded
	// that the step no longer has (with reuse): a running aggregate
	// removes their distinct values from its map state.
	dropped []string
}

var _ state.Codec[aggAcc] = (*aggCodec)(nil)

func newAggCodec(set *aggSet, reuse bool) *aggCodec {
	c := &aggCodec{set: set, reuse: reuse, heads: make([][]byte, len(set.defs))}
	for i, d := range set.defs {
		h := binary.AppendUvarint(nil, uint64(len(d.name)))
		c.heads[i] = append(append(h, d.name...), byte(d.op))
	}
	return c
}

func (c *aggCodec) Append(dst []byte, acc aggAcc) ([]byte, error) {
	dst = append(append(dst, byNameMark...), aggCodecVersion)
	dst = binary.AppendUvarint(dst, uint64(len(c.set.defs)))
	for i := range c.set.defs {
		dst = append(dst, c.heads[i]...)
		// One byte for the body's length, the common case; prefixLength
		// makes room for more if needed.
		start := len(dst)
		dst = appendSlot(append(dst, 0), &c.set.defs[i], &acc.slots[i])
		dst = prefixLength(dst, start)
	}
	return dst, nil
}

// prefixLength writes the length of dst[start+1:] as a uvarint at
// dst[start], a byte kept for it, moving dst[start+1:] if it takes more.
func prefixLength(dst []byte, start int) []byte {
	l := len(dst) - start - 1
	if l < 0x80 {
		dst[start] = byte(l)
		return dst
	}
	var u [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(u[:], uint64(l))
	end := len(dst)
	dst = append(dst, u[1:n]...)
	copy(dst[start+n:], dst[start+1:end])
	copy(dst[start:], u[:n])
	return dst
}

// appendSlot appends the body of slot sl of aggregate d.
func appendSlot(dst []byte, d *aggDef, sl *slot) []byte {
	dst = binary.AppendUvarint(dst, uint64(sl.n))
	switch d.op {
	case opSum:
		if sl.float {
			dst = append(dst, 1)
			dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(sl.f))
		} else {
			dst = append(dst, 0)
			dst = binary.AppendVarint(dst, sl.i)
		}
	case opAvg:
		dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(sl.f))
	case opMin, opMax, opFirst, opLast:
		if sl.n > 0 {
			dst = appendValue(dst, sl.v)
		}
	case opMaxBy, opMinBy:
		if sl.n == 0 {
			break
		}
		dst = appendValue(dst, sl.v)
		fallthrough
	case opCollect:
		dst = binary.AppendUvarint(dst, uint64(len(sl.list)))
		for _, v := range sl.list {
			dst = appendValue(dst, v)
		}
	case opCountDistinct:
		if !d.inMap {
			dst = binary.AppendUvarint(dst, uint64(len(sl.set)))
			for _, s := range sl.set {
				dst = binary.AppendUvarint(dst, uint64(len(s)))
				dst = append(dst, s...)
			}
		}
	}
	return dst
}

func (c *aggCodec) Decode(src []byte) (aggAcc, error) {
	slots := c.slots()
	if c.reuse {
		c.positional, c.dropped = false, c.dropped[:0]
	}
	var err error
	if isByName(src) {
		err = c.decodeByName(src[len(byNameMark):], slots)
	} else {
		err = c.decodePositional(src, slots)
		if c.reuse {
			c.positional = true
		}
	}
	if err != nil {
		return aggAcc{}, err
	}
	return aggAcc{slots: slots}, nil
}

// slots returns one slot per aggregate for Decode to fill: new ones, or
// with reuse the scratch slots, whose lists' arrays decodeSlot reuses.
func (c *aggCodec) slots() []slot {
	n := len(c.set.defs)
	if !c.reuse {
		return make([]slot, n)
	}
	if len(c.scratch) != n {
		c.scratch = make([]slot, n)
	}
	return c.scratch
}

// decodePositional decodes a value of the positional encoding into slots.
func (c *aggCodec) decodePositional(src []byte, slots []slot) error {
	r := valueReader{src: src}
	for i := range c.set.defs {
		slots[i] = decodeSlot(&r, &c.set.defs[i], slots[i].list[:0])
	}
	if r.err == nil && len(r.src) != 0 {
		r.fail("trailing bytes")
	}
	return r.err
}

// decodeByName decodes the slots of a value of the by-name encoding (src
// after the mark) into slots, by name; the aggregates it has no slot for
// get an empty one.
func (c *aggCodec) decodeByName(src []byte, slots []slot) error {
	defs := c.set.defs
	r := valueReader{src: src}
	if v := r.byte(); r.err == nil && v != aggCodecVersion {
		return fmt.Errorf("%w: aggregate accumulator of version %d: this version of Weir reads version %d", state.ErrCorruptValue, v, aggCodecVersion)
	}
	n := r.uvarint()
	if n > uint64(len(r.src)) {
		r.fail("bad slot count")
	}
	// While the slots are in the step's order, the next one is for
	// aggregate next, and its name and op are heads[next]: the common
	// case costs one comparison. From the first slot that is not, seen
	// tracks the aggregates read.
	next := 0
	var seen []bool
	for k := uint64(0); k < n && r.err == nil; k++ {
		i := next
		if seen == nil && i < len(defs) && bytes.HasPrefix(r.src, c.heads[i]) {
			r.src = r.src[len(c.heads[i]):]
		} else {
			name, op := r.bytes(), aggOp(r.byte())
			if r.err != nil {
				break
			}
			if seen == nil {
				seen = make([]bool, len(defs))
				for j := range next {
					seen[j] = true
				}
			}
			if i = c.set.index(name); i < 0 {
				// An aggregate the step no longer has: dropped.
				if c.reuse && op == opCountDistinct {
					c.dropped = append(c.dropped, string(name))
				}
				r.bytes()
				continue
			}
			if seen[i] {
				r.fail(fmt.Sprintf("aggregate %s stored twice", name))
				break
			}
			if op != defs[i].op {
				return fmt.Errorf("%w: aggregate %s: its state is of %s, the step computes %s", ErrAggregateChanged, name, op, defs[i].op)
			}
			seen[i] = true
		}
		br := valueReader{src: r.bytes()}
		if r.err != nil {
			break
		}
		slots[i] = decodeSlot(&br, &defs[i], slots[i].list[:0])
		if br.err == nil && len(br.src) != 0 {
			br.fail("trailing bytes")
		}
		if br.err != nil {
			return fmt.Errorf("aggregate %s: %w", defs[i].name, br.err)
		}
		next = i + 1
	}
	if r.err == nil && len(r.src) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return r.err
	}
	// The aggregates without a slot start empty.
	for i := range slots {
		if seen == nil && i < next || seen != nil && seen[i] {
			continue
		}
		slots[i] = slot{list: slots[i].list[:0]}
	}
	return nil
}

// decodeSlot reads the body of a slot of aggregate d; its list, if it
// has one, reuses list's array. A list longer than d's limit (a job that
// lowered it) keeps what the fold would have kept: collect its last
// values, max_by and min_by their first.
func decodeSlot(r *valueReader, d *aggDef, list []any) slot {
	sl := slot{list: list}
	sl.n = int64(r.uvarint())
	switch d.op {
	case opSum:
		if r.byte() == 1 {
			sl.float, sl.f = true, r.float()
		} else {
			sl.i = r.varint()
		}
	case opAvg:
		sl.f = r.float()
	case opMin, opMax, opFirst, opLast:
		if sl.n > 0 {
			sl.v = r.value(0)
		}
	case opMaxBy, opMinBy:
		if sl.n == 0 {
			break
		}
		sl.v = r.value(0)
		fallthrough
	case opCollect:
		n := r.uvarint()
		if n > uint64(len(r.src)) {
			r.fail("collect list")
			break
		}
		for range n {
			sl.list = append(sl.list, r.value(0))
		}
		if over := len(sl.list) - d.limit; over > 0 {
			if d.op == opCollect {
				sl.list = append(sl.list[:0], sl.list[over:]...)
			} else {
				sl.list = sl.list[:d.limit]
			}
		}
	case opCountDistinct:
		if !d.inMap {
			n := r.uvarint()
			if n > uint64(len(r.src)) {
				r.fail("distinct set")
				break
			}
			sl.set = make([]string, 0, n)
			for range n {
				sl.set = append(sl.set, r.string())
			}
		}
	}
	return sl
}

// appendValue appends v (a decoded JSON value: nil, bool, int64, float64,
// string, []any, map[string]any) as a tag and its bytes; an object's
// fields sorted by name.
func appendValue(dst []byte, v any) []byte { return appendEncoded(dst, v, false) }

// appendCanonical appends v as appendValue does, but with a float64 that
// is a whole number in the range of an int64 as that int64: the distinct
// values of count_distinct are compared by these bytes, so 1 and 1.0 are
// one value.
func appendCanonical(dst []byte, v any) []byte { return appendEncoded(dst, v, true) }

// appendEncoded is appendValue, canonical or not.
func appendEncoded(dst []byte, v any, canonical bool) []byte {
	switch x := normalize(v).(type) {
	case nil:
		return append(dst, tagNull)
	case bool:
		if x {
			return append(dst, tagTrue)
		}
		return append(dst, tagFalse)
	case int64:
		return binary.AppendVarint(append(dst, tagInt), x)
	case float64:
		if t := math.Trunc(x); canonical && t == x && x >= -(1<<63) && x < 1<<63 {
			return binary.AppendVarint(append(dst, tagInt), int64(x))
		}
		return binary.BigEndian.AppendUint64(append(dst, tagFloat), math.Float64bits(x))
	case string:
		dst = binary.AppendUvarint(append(dst, tagString), uint64(len(x)))
		return append(dst, x...)
	case []any:
		dst = binary.AppendUvarint(append(dst, tagList), uint64(len(x)))
		for _, e := range x {
			dst = appendEncoded(dst, e, canonical)
		}
		return dst
	case map[string]any:
		dst = binary.AppendUvarint(append(dst, tagObject), uint64(len(x)))
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			dst = binary.AppendUvarint(dst, uint64(len(k)))
			dst = append(dst, k...)
			dst = appendEncoded(dst, x[k], canonical)
		}
		return dst
	}
	// Not a JSON value (an expression's own type): its text.
	s := fmt.Sprint(v)
	dst = binary.AppendUvarint(append(dst, tagString), uint64(len(s)))
	return append(dst, s...)
}

// valueReader reads what the codec wrote; the first problem sticks in err
// (a state.ErrCorruptValue) and later reads return zero values.
type valueReader struct {
	src []byte
	err error
}

func (r *valueReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: aggregate accumulator: %s", state.ErrCorruptValue, what)
	}
	r.src = nil
}

func (r *valueReader) uvarint() uint64 {
	if len(r.src) > 0 && r.src[0] < 0x80 {
		v := r.src[0] // one byte, the common case
		r.src = r.src[1:]
		return uint64(v)
	}
	v, n := binary.Uvarint(r.src)
	if n <= 0 {
		r.fail("bad uvarint")
		return 0
	}
	r.src = r.src[n:]
	return v
}

func (r *valueReader) varint() int64 {
	v, n := binary.Varint(r.src)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.src = r.src[n:]
	return v
}

func (r *valueReader) byte() byte {
	if len(r.src) < 1 {
		r.fail("truncated")
		return 0
	}
	b := r.src[0]
	r.src = r.src[1:]
	return b
}

func (r *valueReader) float() float64 {
	if len(r.src) < 8 {
		r.fail("truncated float")
		return 0
	}
	f := math.Float64frombits(binary.BigEndian.Uint64(r.src))
	r.src = r.src[8:]
	return f
}

// bytes reads uvarint(len) and that many bytes, which alias src.
func (r *valueReader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.src)) {
		r.fail("truncated bytes")
		return nil
	}
	b := r.src[:n]
	r.src = r.src[n:]
	return b
}

func (r *valueReader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.src)) {
		r.fail("truncated string")
		return ""
	}
	s := string(r.src[:n])
	r.src = r.src[n:]
	return s
}

// maxValueDepth bounds the nesting a decoded value may have (a corrupt
// value must not overflow the stack).
const maxValueDepth = 1000

func (r *valueReader) value(depth int) any {
	if depth > maxValueDepth {
		r.fail("value nested too deep")
		return nil
	}
	switch r.byte() {
	case tagNull:
		return nil
	case tagFalse:
		return false
	case tagTrue:
		return true
	case tagInt:
		return r.varint()
	case tagFloat:
		return r.float()
	case tagString:
		return r.string()
	case tagList:
		n := r.uvarint()
		if n > uint64(len(r.src)) {
			r.fail("truncated list")
			return nil
		}
		l := make([]any, 0, n)
		for range n {
			l = append(l, r.value(depth+1))
		}
		return l
	case tagObject:
		n := r.uvarint()
		if n > uint64(len(r.src)) {
			r.fail("truncated object")
			return nil
		}
		m := make(map[string]any, n)
		for range n {
			k := r.string()
			m[k] = r.value(depth + 1)
		}
		return m
	}
	r.fail("unknown value tag")
	return nil
}

// legacyCodec encodes the accumulator of the one-aggregate form
// (`{op: count}`, `{op: sum, field: f}`...) as that form stored it before
// named aggregates, so that a job's checkpoints stay readable: count as
// state.Int64Codec (8 bytes), sum, min, max and avg as stream.NumAccCodec
// (the number of values, and their float64 sum, minimum or maximum). A
// sum decoded from it continues in float64, as it was.
type legacyCodec struct{ op aggOp }

var _ state.Codec[aggAcc] = legacyCodec{}

func (c legacyCodec) Append(dst []byte, acc aggAcc) ([]byte, error) {
	sl := &acc.slots[0]
	if c.op == opCount {
		return state.Int64Codec{}.Append(dst, sl.n)
	}
	var v float64
	switch c.op {
	case opSum:
		v = sl.f
		if !sl.float {
			v = float64(sl.i)
		}
	case opAvg:
		v = sl.f
	default:
		v = toFloat(sl.v)
	}
	dst = binary.BigEndian.AppendUint64(dst, uint64(sl.n))
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(v)), nil
}

func (c legacyCodec) Decode(src []byte) (aggAcc, error) {
	acc := aggAcc{slots: make([]slot, 1)}
	sl := &acc.slots[0]
	if c.op == opCount {
		n, err := state.Int64Codec{}.Decode(src)
		sl.n = n
		return acc, err
	}
	if len(src) != 16 {
		return acc, fmt.Errorf("%w: numeric accumulator of %d bytes", state.ErrCorruptValue, len(src))
	}
	sl.n = int64(binary.BigEndian.Uint64(src))
	v := math.Float64frombits(binary.BigEndian.Uint64(src[8:]))
	switch c.op {
	case opSum:
		sl.float, sl.f = true, v
	case opAvg:
		sl.f = v
	default:
		if sl.n > 0 {
			sl.v = v
		}
	}
	return acc, nil
}
