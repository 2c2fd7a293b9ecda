package pipeline

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"

	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// testSet is every operation once, count_distinct in the accumulator (as
// in a window).
func testSet() *aggSet {
	return &aggSet{defs: []aggDef{
		{name: "count", op: opCount},
		{name: "total", op: opSum},
		{name: "mean", op: opAvg},
		{name: "low", op: opMin},
		{name: "high", op: opMax},
		{name: "people", op: opCountDistinct},
		{name: "firstseen", op: opFirst},
		{name: "lastseen", op: opLast},
		{name: "recent", op: opCollect, limit: 2},
	}}
}

// foldAll checks and folds each record (one value per aggregate, the same
// for all of them but count) into acc.
func foldAll(t *testing.T, s *aggSet, acc *aggAcc, values ...any) {
	t.Helper()
	args := make([]any, len(s.defs))
	for _, v := range values {
		for i := range s.defs {
			a, err := s.defs[i].checkArg(v)
			if err != nil {
				t.Fatalf("%v: %v", v, err)
			}
			args[i] = a
		}
		s.fold(acc, args, nil)
	}
}

func results(s *aggSet, acc *aggAcc) string {
	var out string
	for i := range s.defs {
		out += fmt.Sprintf("%s=%#v ", s.defs[i].name, s.result(acc, i))
	}
	return out
}

// TestAggFold: each operation over ints, floats and nulls; the codec
// round-trips the accumulator.
func TestAggFold(t *testing.T) {
	s := &aggSet{defs: testSet().defs[:9]}
	for _, c := range []struct {
		name   string
		values []any
		want   string
	}{
		{"ints", []any{int64(3), int64(1), int64(3), int64(2)},
			`count=4 total=9 mean=2.25 low=1 high=3 people=3 firstseen=3 lastseen=2 recent=[]interface {}{3, 2} `},
		{"mixed numbers", []any{int64(3), 1.5, 3.0, nil},
			`count=4 total=7.5 mean=2.5 low=1.5 high=3 people=2 firstseen=3 lastseen=3 recent=[]interface {}{1.5, 3} `},
		{"nulls only", []any{nil, nil},
			`count=2 total=<nil> mean=<nil> low=<nil> high=<nil> people=0 firstseen=<nil> lastseen=<nil> recent=[]interface {}{} `},
		{"int overflow", []any{int64(math.MaxInt64), int64(1)},
			`count=2 total=9.223372036854776e+18 mean=4.611686018427388e+18 low=1 high=9223372036854775807 people=2 firstseen=9223372036854775807 lastseen=1 recent=[]interface {}{9223372036854775807, 1} `},
	} {
		acc := s.newAcc()
		foldAll(t, s, &acc, c.values...)
		got := results(s, &acc)
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
		codec := newAggCodec(s, true)
		b, _ := codec.Append(nil, acc)
		back, err := codec.Decode(b)
		if err != nil {
			t.Fatalf("%s: decode: %v", c.name, err)
		}
		if got := results(s, &back); got != c.want {
			t.Errorf("%s: after the codec:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}

// TestAggMinMaxStrings: min and max of strings by bytes; numbers order
// before strings (a key that mixes them has a number as min).
func TestAggMinMaxStrings(t *testing.T) {
	s := &aggSet{defs: []aggDef{{name: "low", op: opMin}, {name: "high", op: opMax}}}
	acc := s.newAcc()
	foldAll(t, s, &acc, "pear", "apple", "zoo")
	if got := results(s, &acc); got != `low="apple" high="zoo" ` {
		t.Errorf("strings: %s", got)
	}
	foldAll(t, s, &acc, int64(7))
	if got := results(s, &acc); got != `low=7 high="zoo" ` {
		t.Errorf("mixed: %s", got)
	}
}

// TestAggArgErrors: the arguments an operation cannot take are errors
// that name the aggregate; nulls are errors only in the strict form.
func TestAggArgErrors(t *testing.T) {
	for _, c := range []struct {
		d    aggDef
		v    any
		want string
	}{
		{aggDef{name: "total", op: opSum}, "3", "aggregate total: sum of a string: not a number"},
		{aggDef{name: "total", op: opSum}, math.Inf(1), "aggregate total: sum of +Inf: not a finite number"},
		{aggDef{name: "m", op: opAvg}, []any{}, "aggregate m: avg of a list: not a number"},
		{aggDef{name: "sum", op: opSum, strict: true}, nil, "aggregate sum: sum of null: not a number"},
		{aggDef{name: "big", op: opMax}, true, "aggregate big: max of a boolean: not a number or a string"},
		{aggDef{name: "big", op: opMax}, map[string]any{}, "aggregate big: max of an object: not a number or a string"},
	} {
		if _, err := c.d.checkArg(c.v); err == nil || err.Error() != c.want {
			t.Errorf("%v: %v, want %s", c.v, err, c.want)
		}
	}
	if v, err := (&aggDef{name: "total", op: opSum}).checkArg(7); err != nil || v != int64(7) {
		t.Errorf("an int: %#v, %v", v, err)
	}
}

// TestAggMerge: merging the accumulators of two sessions is folding both
// in order.
func TestAggMerge(t *testing.T) {
	s := testSet()
	a, b, both := s.newAcc(), s.newAcc(), s.newAcc()
	x := []any{int64(1), int64(4), 2.5}
	y := []any{int64(1), nil, -3.0, int64(9)}
	foldAll(t, s, &a, x...)
	foldAll(t, s, &b, y...)
	foldAll(t, s, &both, append(x, y...)...)
	if got, want := results(s, new(s.merge(a, b))), results(s, &both); got != want {
		t.Errorf("merged %s\n  want %s", got, want)
	}
	empty := s.newAcc()
	if got, want := results(s, new(s.merge(empty, both))), results(s, &both); got != want {
		t.Errorf("merged into empty %s\n  want %s", got, want)
	}
}

// TestAggValueCodec: every JSON value round-trips; count_distinct's
// canonical form makes 1 and 1.0 one value and sorts object fields.
func TestAggValueCodec(t *testing.T) {
	v := map[string]any{"b": []any{nil, true, false, int64(-3), 1.5, "x"}, "a": map[string]any{}}
	r := valueReader{src: appendValue(nil, v)}
	if got := r.value(0); r.err != nil || len(r.src) != 0 || !reflect.DeepEqual(got, v) {
		t.Fatalf("round trip: %#v, %v", got, r.err)
	}
	if string(appendCanonical(nil, 1.0)) != string(appendCanonical(nil, int64(1))) ||
		string(appendCanonical(nil, []any{2.0})) != string(appendCanonical(nil, []any{int64(2)})) ||
		string(appendCanonical(nil, 1.5)) == string(appendCanonical(nil, int64(1))) {
		t.Error("canonical numbers")
	}
}

// TestAggCodecCorrupt: a truncated accumulator is a state.ErrCorruptValue,
// never a panic.
func TestAggCodecCorrupt(t *testing.T) {
	s := &aggSet{defs: append(testSet().defs[:3:3], testSet().defs[5:]...)}
	acc := s.newAcc()
	foldAll(t, s, &acc, int64(1), 2.5)
	s.defs = append(s.defs[:1:1], s.defs[3:]...)
	acc.slots = append(acc.slots[:1:1], acc.slots[3:]...)
	foldAll(t, s, &acc, "x", map[string]any{"k": []any{1.5}})
	codec := newAggCodec(s, false)
	b, _ := codec.Append(nil, acc)
	for n := range len(b) {
		if _, err := codec.Decode(b[:n]); !errors.Is(err, state.ErrCorruptValue) {
			t.Fatalf("%d of %d bytes: %v", n, len(b), err)
		}
	}
	if _, err := codec.Decode(append(b, 0)); !errors.Is(err, state.ErrCorruptValue) {
		t.Fatalf("trailing byte: %v", err)
	}
}

// BenchmarkAggFold is the accumulator's part of a record of the issue's
// multi-aggregate (count, sum, max, first, collect of 10; count_distinct
// in map state, not here): decode the key's accumulator, check and fold
// the arguments, encode it back. It is what the value state costs beyond
// its lookup.
func BenchmarkAggFold(b *testing.B) {
	s := &aggSet{defs: []aggDef{
		{name: "count", op: opCount}, {name: "total", op: opSum}, {name: "biggest", op: opMax},
		{name: "people", op: opCountDistinct, inMap: true}, {name: "firstseen", op: opFirst},
		{name: "recent", op: opCollect, limit: 10},
	}}
	codec := newAggCodec(s, true)
	acc := s.newAcc()
	buf, _ := codec.Append(nil, acc)
	raw := []any{nil, 129.95, 129.95, "c-48213", "o-1029384", "o-1029384"}
	args := make([]any, len(raw))
	isNew := make([]bool, len(raw))
	b.ReportAllocs()
	for b.Loop() {
		acc, err := codec.Decode(buf)
		if err != nil {
			b.Fatal(err)
		}
		for i := range s.defs {
			if args[i], err = s.defs[i].checkArg(raw[i]); err != nil {
				b.Fatal(err)
			}
		}
		s.fold(&acc, args, isNew)
		buf, _ = codec.Append(buf[:0], acc)
	}
	b.ReportMetric(float64(len(buf)), "state-bytes")
}

// TestLegacyCodec: the one-aggregate form's accumulator is stored as it
// was before named aggregates (Int64Codec, stream.NumAccCodec), so that
// the checkpoints of such jobs stay readable; the sum continues.
func TestLegacyCodec(t *testing.T) {
	old, _ := state.Int64Codec{}.Append(nil, 41)
	count := &aggSet{defs: []aggDef{{name: "count", op: opCount, strict: true}}}
	acc, err := legacyCodec{op: opCount}.Decode(old)
	if err != nil {
		t.Fatal(err)
	}
	foldAll(t, count, &acc, nil)
	if b, _ := (legacyCodec{op: opCount}).Append(nil, acc); count.result(&acc, 0) != int64(42) || len(b) != 8 {
		t.Errorf("count %v, %d bytes", count.result(&acc, 0), len(b))
	}
	for _, c := range []struct {
		op   aggOp
		n    int64
		v    float64
		add  any
		want any
	}{
		{opSum, 2, 3.5, int64(1), 4.5},
		{opAvg, 2, 3, 6.0, 3.0},
		{opMin, 1, 2, int64(5), 2.0},
		{opMax, 1, 2, int64(5), int64(5)},
	} {
		old, _ := stream.NumAccCodec{}.Append(nil, stream.NumAcc{N: c.n, V: c.v})
		set := &aggSet{defs: []aggDef{{name: "x", op: c.op, strict: true}}}
		acc, err := legacyCodec{op: c.op}.Decode(old)
		if err != nil {
			t.Fatal(err)
		}
		foldAll(t, set, &acc, c.add)
		if got := set.result(&acc, 0); got != c.want {
			t.Errorf("%v: %#v, want %#v", set.defs[0].opName(), got, c.want)
		}
		b, _ := legacyCodec{op: c.op}.Append(nil, acc)
		if back, err := (stream.NumAccCodec{}).Decode(b); err != nil || back.N != c.n+1 {
			t.Errorf("%v: written back as %+v, %v", set.defs[0].opName(), back, err)
		}
	}
}

// TestAggMaxBy: max_by and min_by keep the values tied at the extreme of
// by (a number or a string; a null by is left out), at most limit; the
// codec round-trips them, and merging two sessions is folding both.
func TestAggMaxBy(t *testing.T) {
	s := &aggSet{defs: []aggDef{
		{name: "top", op: opMaxBy, limit: 2, byAt: 2},
		{name: "low", op: opMinBy, limit: 100, byAt: 3},
	}, width: 4}
	fold := func(acc *aggAcc, recs ...[2]any) {
		args := make([]any, s.width)
		for _, r := range recs {
			for i := range s.defs {
				by, err := s.defs[i].checkBy(r[0])
				if err != nil {
					t.Fatal(err)
				}
				args[i], args[s.defs[i].byAt] = r[1], by
			}
			s.fold(acc, args, nil)
		}
	}
	x := [][2]any{{int64(3), "a"}, {nil, "skipped"}, {3.0, nil}, {int64(1), "b"}}
	y := [][2]any{{int64(3), "c"}, {int64(1), "d"}, {int64(5), "e"}}
	a, b, both := s.newAcc(), s.newAcc(), s.newAcc()
	fold(&a, x...)
	fold(&b, y...)
	fold(&both, append(x, y...)...)
	if got, want := results(s, &a), `top=[]interface {}{"a", interface {}(nil)} low=[]interface {}{"b"} `; got != want {
		t.Errorf("fold: %s\n  want %s", got, want)
	}
	c := newAggCodec(s, false)
	enc, err := c.Append(nil, both)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := c.Decode(enc)
	if err != nil || results(s, &dec) != results(s, &both) {
		t.Fatalf("codec: %s, %v\n  want %s", results(s, &dec), err, results(s, &both))
	}
	if got, want := results(s, new(s.merge(a, b))), results(s, &both); got != want {
		t.Errorf("merged %s\n  want %s", got, want)
	}
	if _, err := s.defs[0].checkBy([]any{}); err == nil || err.Error() != "aggregate top: max_by by a list: not a number or a string" {
		t.Errorf("by a list: %v", err)
	}
}
