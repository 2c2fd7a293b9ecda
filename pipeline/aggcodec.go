package pipeline

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"

	"github.com/weir-stream/weir/state"
)

// This file is the binary codec of the aggregate step's accumulator (the
// pure part, aggstate.go, holds its fold and result): how an accumulator
// is stored in keyed state, and the value encoding of the JSON values it
// keeps. It does no I/O and keeps no state of its own.

// The binary codec of an accumulator (aggCodec): per slot, in the step's
// order, uvarint(n), then what the op keeps:
//
//	sum:            a flag byte (0 int64, 1 float64), then varint(i) or the 8 bytes of f
//	avg:            the 8 bytes of f
//	min, max,
//	first, last:    the value (appendValue), if n > 0
//	collect:        uvarint(len(list)), the values
//	max_by, min_by: if n > 0, the by value (appendValue), uvarint(len(list)), the values
//	count_distinct: (in a window) the set: uvarint(len) per string, then it
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

// aggCodec encodes the accumulators of one aggregate step. Decode reuses
// its scratch slots: the result is valid until the next Decode (a state
// handle decodes, the caller folds and writes back before the next).
// For a window's state, where the stream keeps several accumulators of a
// key at once, reuse is off.
type aggCodec struct {
	set     *aggSet
	reuse   bool
	scratch []slot
}

var _ state.Codec[aggAcc] = (*aggCodec)(nil)

func (c *aggCodec) Append(dst []byte, acc aggAcc) ([]byte, error) {
	for i := range c.set.defs {
		d, sl := &c.set.defs[i], &acc.slots[i]
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
	}
	return dst, nil
}

func (c *aggCodec) Decode(src []byte) (aggAcc, error) {
	var slots []slot
	if c.reuse {
		slots = c.scratch[:0]
	}
	r := valueReader{src: src}
	for i := range c.set.defs {
		d := &c.set.defs[i]
		var sl slot
		if c.reuse && i < cap(c.scratch) {
			// Keep the collect list's array.
			sl.list = c.scratch[:cap(c.scratch)][i].list[:0]
		}
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
		slots = append(slots, sl)
	}
	if r.err == nil && len(r.src) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return aggAcc{}, r.err
	}
	if c.reuse {
		c.scratch = slots
	}
	return aggAcc{slots: slots}, nil
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
