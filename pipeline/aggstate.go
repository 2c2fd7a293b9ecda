package pipeline

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// This file is the pure part of the aggregate step: the accumulator that
// holds every named aggregate of one key (or of one window of a key), how
// a record's evaluated arguments fold into it, and its result (its binary
// codec is in aggcodec.go). It does no I/O and keeps no state of its own.

// aggOp is the operation of one named aggregate. Its values are stored
// (aggCodec writes each slot's op): never renumber them, only add.
type aggOp uint8

const (
	opCount aggOp = iota + 1
	opSum
	opMin
	opMax
	opAvg
	opCountDistinct
	opFirst
	opLast
	opCollect
	opMaxBy
	opMinBy
)

// aggOps maps the YAML names of the operations to them.
var aggOps = map[string]aggOp{
	"count": opCount, "sum": opSum, "min": opMin, "max": opMax, "avg": opAvg,
	"count_distinct": opCountDistinct, "first": opFirst, "last": opLast, "collect": opCollect,
	"max_by": opMaxBy, "min_by": opMinBy,
}

// aggOpNames lists the operations for messages, in the documented order.
const aggOpNames = "count, sum, min, max, avg, count_distinct, first, last, collect, max_by or min_by"

// defaultCollectLimit is collect's limit when the step sets none.
const defaultCollectLimit = 100

// aggDef is one compiled named aggregate (its argument's program is the
// step's, evaluated before the fold: see aggArgs).
type aggDef struct {
	name  string
	op    aggOp
	limit int // collect, max_by, min_by
	// byAt is, for max_by and min_by, the index in a record's arguments
	// of the value it orders by (after one argument per aggregate).
	byAt int
	// strict: a null argument is an error rather than skipped (the legacy
	// `{op: sum, field: f}` form, whose field must be a number).
	strict bool
	// inMap: count_distinct keeps its distinct values in keyed map state,
	// not in the accumulator (the running form; see distinctSet).
	inMap bool
}

// slot is the state of one aggregate in an accumulator.
//
//   - count: n records.
//   - sum: n values; their sum i while every value is an int64 and the sum
//     fits, else f (float64 from the first float or overflow on).
//   - avg: n values, their float64 sum f.
//   - min, max: n values, the extreme v (int64, float64 or string).
//   - first, last: v, set once n > 0.
//   - count_distinct: n distinct values; in a window also set, the sorted
//     canonical encodings of the values (appendCanonical).
//   - collect: list, the last limit values, oldest first; n values seen.
//   - max_by, min_by: n records with a by value, the extreme by value v,
//     and list, the first limit values of the records tied at it, in
//     arrival order.
type slot struct {
	n     int64
	i     int64
	f     float64
	float bool
	v     any
	list  []any
	set   []string
}

// aggAcc is the accumulator of one key, or of one window of one key: one
// slot per aggregate, in the step's order.
type aggAcc struct {
	slots []slot
}

// aggSet is the compiled list of aggregates of one step.
type aggSet struct {
	defs []aggDef
	// width is the length of a record's arguments: one per aggregate,
	// then the by values of max_by and min_by.
	width int
}

func (s *aggSet) newAcc() aggAcc { return aggAcc{slots: make([]slot, len(s.defs))} }

// checkArg checks an evaluated argument of aggregate d before anything is
// folded, so that a record is either folded whole or rejected whole (under
// the step's on_error): sum and avg take numbers, min and max numbers or
// strings; a null is skipped, except in the strict (legacy) form.
func (d *aggDef) checkArg(v any) (any, error) {
	v = normalize(v)
	switch d.op {
	case opCount:
		return nil, nil
	case opSum, opAvg:
		switch x := v.(type) {
		case int64:
			return v, nil
		case float64:
			if math.IsInf(x, 0) || math.IsNaN(x) {
				return nil, fmt.Errorf("aggregate %s: %s of %v: not a finite number", d.name, d.opName(), x)
			}
			return v, nil
		case nil:
			if !d.strict {
				return nil, nil
			}
		}
		return nil, fmt.Errorf("aggregate %s: %s of %s: not a number", d.name, d.opName(), describe(v))
	case opMin, opMax:
		switch x := v.(type) {
		case int64, string:
			return v, nil
		case float64:
			if math.IsNaN(x) {
				return nil, fmt.Errorf("aggregate %s: %s of NaN", d.name, d.opName())
			}
			return v, nil
		case nil:
			if !d.strict {
				return nil, nil
			}
		}
		return nil, fmt.Errorf("aggregate %s: %s of %s: not a number or a string", d.name, d.opName(), describe(v))
	}
	return v, nil
}

// checkBy checks the by value of max_by or min_by: a number or a string,
// as min and max take; a null leaves the record out of the aggregate.
func (d *aggDef) checkBy(v any) (any, error) {
	v = normalize(v)
	switch x := v.(type) {
	case nil, int64, string:
		return v, nil
	case float64:
		if math.IsNaN(x) {
			return nil, fmt.Errorf("aggregate %s: %s by NaN", d.name, d.opName())
		}
		return v, nil
	}
	return nil, fmt.Errorf("aggregate %s: %s by %s: not a number or a string", d.name, d.opName(), describe(v))
}

func (d *aggDef) opName() string { return d.op.String() }

// String returns the op's YAML name.
func (op aggOp) String() string {
	for name, o := range aggOps {
		if o == op {
			return name
		}
	}
	return fmt.Sprintf("op(%d)", uint8(op))
}

// index returns the index of the aggregate called name, -1 if none.
func (s *aggSet) index(name []byte) int {
	for i := range s.defs {
		if s.defs[i].name == string(name) {
			return i
		}
	}
	return -1
}

// normalize turns the integer types an expression may return into int64.
func normalize(v any) any {
	switch x := v.(type) {
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case int8:
		return int64(x)
	case int16:
		return int64(x)
	case uint8:
		return int64(x)
	case uint16:
		return int64(x)
	case uint32:
		return int64(x)
	case uint:
		if x <= math.MaxInt64 {
			return int64(x)
		}
		return float64(x)
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x)
		}
		return float64(x)
	case float32:
		return float64(x)
	}
	return v
}

// describe names a value's JSON type for errors.
func describe(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	case int64, float64:
		return "a number"
	}
	return fmt.Sprintf("a %T", v)
}

// fold adds one record's checked arguments (args[i] for aggregate i, from
// checkArg) to acc. distinctNew[i] says, for a count_distinct kept in map
// state, whether the value is new to the key (the caller looked it up).
func (s *aggSet) fold(acc *aggAcc, args []any, distinctNew []bool) {
	for i := range s.defs {
		d, sl, v := &s.defs[i], &acc.slots[i], args[i]
		switch d.op {
		case opCount:
			sl.n++
			continue
		case opMaxBy, opMinBy:
			// The value may be null; a null by leaves the record out.
			if by := args[d.byAt]; by != nil {
				foldBy(d, sl, by, v)
			}
			continue
		}
		if v == nil {
			continue // SQL: aggregates skip nulls
		}
		switch d.op {
		case opSum:
			sl.n++
			sumAdd(sl, v)
		case opAvg:
			sl.n++
			sl.f += toFloat(v)
		case opMin, opMax:
			if sl.n == 0 {
				sl.v = v
			} else if c := compareOrdered(v, sl.v); (d.op == opMin && c < 0) || (d.op == opMax && c > 0) {
				sl.v = v
			}
			sl.n++
		case opFirst:
			if sl.n == 0 {
				sl.v = v
			}
			sl.n++
		case opLast:
			sl.v = v
			sl.n++
		case opCollect:
			if len(sl.list) >= d.limit {
				copy(sl.list, sl.list[1:])
				sl.list = sl.list[:d.limit-1]
			}
			sl.list = append(sl.list, v)
			sl.n++
		case opCountDistinct:
			if d.inMap {
				if distinctNew[i] {
					sl.n++
				}
				continue
			}
			k := string(appendCanonical(nil, v))
			if j, found := slices.BinarySearch(sl.set, k); !found {
				sl.set = slices.Insert(sl.set, j, k)
				sl.n++
			}
		}
	}
}

// foldBy adds a record to a max_by or min_by slot: by is its order, v
// its value. A new extreme starts the list again; a tie joins it while
// there is room.
func foldBy(d *aggDef, sl *slot, by, v any) {
	c := 1
	if sl.n > 0 {
		c = compareOrdered(by, sl.v)
		if d.op == opMinBy {
			c = -c
		}
	}
	sl.n++
	switch {
	case c > 0:
		sl.v = by
		sl.list = append(sl.list[:0], v)
	case c == 0 && len(sl.list) < d.limit:
		sl.list = append(sl.list, v)
	}
}

// sumAdd adds v (int64 or float64) to a sum: int64 while every value is
// one and the sum does not overflow, float64 from then on.
func sumAdd(sl *slot, v any) {
	if x, ok := v.(int64); ok && !sl.float {
		if s := sl.i + x; (x >= 0) == (s >= sl.i) {
			sl.i = s
			return
		}
		// Overflow: continue in float64.
	}
	if !sl.float {
		sl.float, sl.f = true, float64(sl.i)
	}
	sl.f += toFloat(v)
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case int64:
		return float64(x)
	case float64:
		return x
	}
	return 0
}

// compareOrdered orders min and max's values: numbers by value (an int64
// and a float64 exactly), before every string; strings by their bytes (as
// MongoDB orders mixed types).
func compareOrdered(a, b any) int {
	as, aStr := a.(string)
	bs, bStr := b.(string)
	switch {
	case aStr && bStr:
		return strings.Compare(as, bs)
	case aStr:
		return 1
	case bStr:
		return -1
	}
	return compareNumbers(a, b)
}

func compareNumbers(a, b any) int {
	ai, aInt := a.(int64)
	bi, bInt := b.(int64)
	switch {
	case aInt && bInt:
		return cmp.Compare(ai, bi)
	case aInt:
		return -compareFloatInt(b.(float64), ai)
	case bInt:
		return compareFloatInt(a.(float64), bi)
	}
	return cmp.Compare(a.(float64), b.(float64))
}

// compareFloatInt compares f and i exactly.
func compareFloatInt(f float64, i int64) int {
	switch {
	case f < -(1 << 63):
		return -1
	case f >= 1<<63:
		return 1
	}
	t := math.Trunc(f)
	if c := cmp.Compare(int64(t), i); c != 0 {
		return c
	}
	return cmp.Compare(f, t) // the fraction decides
}

// merge folds b into a (session windows that merge): a is the earlier
// window, so first comes from a and last from b where both have one.
func (s *aggSet) merge(a, b aggAcc) aggAcc {
	for i := range s.defs {
		d, x, y := &s.defs[i], &a.slots[i], &b.slots[i]
		if y.n == 0 {
			continue
		}
		if x.n == 0 {
			*x = *y
			continue
		}
		switch d.op {
		case opCount:
			x.n += y.n
		case opSum:
			x.n += y.n
			if y.float {
				sumAdd(x, y.f)
			} else {
				sumAdd(x, y.i)
			}
		case opAvg:
			x.n += y.n
			x.f += y.f
		case opMin, opMax:
			if c := compareOrdered(y.v, x.v); (d.op == opMin && c < 0) || (d.op == opMax && c > 0) {
				x.v = y.v
			}
			x.n += y.n
		case opFirst:
			x.n += y.n
		case opLast:
			x.v = y.v
			x.n += y.n
		case opCollect:
			x.list = append(x.list, y.list...)
			if over := len(x.list) - d.limit; over > 0 {
				x.list = x.list[over:]
			}
			x.n += y.n
		case opCountDistinct:
			x.set = mergeSorted(x.set, y.set)
			x.n = int64(len(x.set))
		case opMaxBy, opMinBy:
			c := compareOrdered(y.v, x.v)
			if d.op == opMinBy {
				c = -c
			}
			switch {
			case c > 0:
				x.v, x.list = y.v, y.list
			case c == 0:
				x.list = append(x.list, y.list[:min(len(y.list), d.limit-len(x.list))]...)
			}
			x.n += y.n
		}
	}
	return a
}

// mergeSorted returns the sorted union of two sorted sets.
func mergeSorted(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch c := strings.Compare(a[i], b[j]); {
		case c < 0:
			out = append(out, a[i])
			i++
		case c > 0:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i, j = i+1, j+1
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// result returns aggregate i's result: count and count_distinct an int64,
// sum an int64 or a float64 (null if it had no value), avg a float64
// (null if none), min, max, first and last the value (null if none),
// collect, max_by and min_by the list ([] if none).
func (s *aggSet) result(acc *aggAcc, i int) any {
	d, sl := &s.defs[i], &acc.slots[i]
	switch d.op {
	case opCount, opCountDistinct:
		return sl.n
	case opSum:
		switch {
		case sl.n == 0:
			return nil
		case sl.float:
			return sl.f
		}
		return sl.i
	case opAvg:
		if sl.n == 0 {
			return nil
		}
		return sl.f / float64(sl.n)
	case opCollect, opMaxBy, opMinBy:
		// A copy: the accumulator's list is reused by the next record's
		// decode, and the result may outlive it.
		return append([]any{}, sl.list...)
	}
	return sl.v
}
