package pipeline

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/weir-stream/weir/state"
)

// editSet is the aggregates of the edit tests: count_distinct kept in map
// state in the running form (inMap), in the accumulator in a window's.
func editSet(running bool) *aggSet {
	return &aggSet{defs: []aggDef{
		{name: "a", op: opSum},
		{name: "b", op: opMax},
		{name: "c", op: opCountDistinct, inMap: running},
		{name: "d", op: opCollect, limit: 3},
		{name: "e", op: opCount},
	}}
}

// edit returns s with its aggregates as names lists them (each name of s,
// or name:op for a new or changed one, name:collect/2 for a collect of
// limit 2).
func edit(t *testing.T, s *aggSet, running bool, names ...string) *aggSet {
	t.Helper()
	out := &aggSet{}
	for _, n := range names {
		name, op, changed := strings.Cut(n, ":")
		i := s.index([]byte(name))
		var d aggDef
		if i >= 0 {
			d = s.defs[i]
		}
		if changed {
			op, limit, _ := strings.Cut(op, "/")
			d = aggDef{name: name, op: aggOps[op], limit: 100}
			if limit != "" {
				d.limit = int(limit[0] - '0')
			}
			d.inMap = running && d.op == opCountDistinct
		}
		if d.op == 0 {
			t.Fatalf("%s: no such aggregate", n)
		}
		out.defs = append(out.defs, d)
	}
	return out
}

// resultsByName returns aggregate name's result in acc of s, for every
// aggregate of s.
func resultsByName(s *aggSet, acc *aggAcc) map[string]any {
	out := map[string]any{}
	for i := range s.defs {
		out[s.defs[i].name] = s.result(acc, i)
	}
	return out
}

// TestAggCodecByName: an accumulator stored by name is read by a step
// whose aggregates were reordered, added, removed or changed, in the
// running form (count_distinct in map state, the codec reused) and in a
// window's (count_distinct in the accumulator): each aggregate of the
// edited step gets its own stored value, a new one starts empty, a
// removed one is dropped (and, in the running form, named so that its
// distinct values go), one whose op changed is an error naming it.
func TestAggCodecByName(t *testing.T) {
	for _, c := range []struct {
		name    string
		edited  []string
		want    map[string]any // the edited step's results; nil: as stored, by name
		dropped []string       // running form
		err     string
	}{
		{name: "unchanged", edited: []string{"a", "b", "c", "d", "e"}},
		{name: "reordered", edited: []string{"e", "d", "c", "b", "a"}},
		{name: "two swapped", edited: []string{"b", "a", "c", "d", "e"}},
		{name: "added first, in the middle, last", edited: []string{"new1:count", "a", "b", "new2:avg", "c", "d", "e", "new3:collect"},
			want: map[string]any{"new1": int64(0), "new2": nil, "new3": []any{}}},
		{name: "removed", edited: []string{"a", "d"}, dropped: []string{"c"}},
		{name: "removed and reordered", edited: []string{"e", "b"}, dropped: []string{"c"}},
		{name: "all removed, one added", edited: []string{"z:sum"}, want: map[string]any{"z": nil}, dropped: []string{"c"}},
		{name: "renamed: removed and added", edited: []string{"a", "b", "c", "d", "e2:count"}, want: map[string]any{"e2": int64(0)}},
		{name: "collect limit lowered: its last values", edited: []string{"a", "b", "c", "d:collect/2", "e"},
			want: map[string]any{"d": []any{"z", int64(4)}}},
		{name: "op changed", edited: []string{"a", "b:min", "c", "d", "e"}, err: "aggregate b: its state is of max, the step computes min"},
		{name: "op changed, reordered", edited: []string{"e", "a:avg"}, err: "aggregate a: its state is of sum, the step computes avg"},
	} {
		for _, running := range []bool{true, false} {
			form := map[bool]string{true: "running", false: "window"}[running]
			s := editSet(running)
			acc := s.newAcc()
			args := make([]any, len(s.defs))
			for _, v := range []any{int64(1), int64(2), "z", int64(4)} {
				for i := range s.defs {
					if args[i], _ = s.defs[i].checkArg(v); s.defs[i].op == opSum && args[i] == nil {
						args[i] = int64(10)
					}
				}
				s.fold(&acc, args, []bool{false, false, true, false, false})
			}
			stored := resultsByName(s, &acc)
			b, err := newAggCodec(s, running).Append(nil, acc)
			if err != nil {
				t.Fatal(err)
			}
			e := edit(t, s, running, c.edited...)
			codec := newAggCodec(e, running)
			got, err := codec.Decode(b)
			if c.err != "" {
				if !errors.Is(err, ErrAggregateChanged) || !strings.HasSuffix(err.Error(), c.err) {
					t.Errorf("%s, %s: %v, want %s", c.name, form, err, c.err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s, %s: %v", c.name, form, err)
			}
			for i, d := range e.defs {
				want, ok := c.want[d.name]
				if !ok {
					want = stored[d.name]
				}
				if r := e.result(&got, i); !equalResult(r, want) {
					t.Errorf("%s, %s: %s = %#v, want %#v", c.name, form, d.name, r, want)
				}
			}
			if running && !slices.Equal(codec.dropped, c.dropped) {
				t.Errorf("%s: dropped distinct %q, want %q", c.name, codec.dropped, c.dropped)
			}
			if codec.positional {
				t.Errorf("%s, %s: read as positional", c.name, form)
			}
		}
	}
}

func equalResult(a, b any) bool {
	al, aok := a.([]any)
	bl, bok := b.([]any)
	if aok || bok {
		return aok && bok && slices.Equal(al, bl)
	}
	return a == b
}

// TestAggCodecPositional: values written by the positional codec (before
// the by-name encoding; the bytes below are what it wrote) are read by
// the step that wrote them, with count_distinct's set in a window and in
// map state without one; they are written back by name, and read again
// the same.
func TestAggCodecPositional(t *testing.T) {
	windowSet := &aggSet{defs: append(testSet().defs, aggDef{name: "top", op: opMaxBy, limit: 2, byAt: 10}), width: 11}
	runningSet := &aggSet{defs: []aggDef{{name: "small", op: opSum}, {name: "big", op: opSum}, {name: "n", op: opCount}, {name: "who", op: opCountDistinct, inMap: true}}}
	for _, c := range []struct {
		name    string
		set     *aggSet
		reuse   bool
		written string // hex
		want    string
	}{
		{"window", windowSet, false,
			"040301401e00000000000003401e00000000000004043ff800000000000004050178030302030609043ff800000000000003050178040306040306040205017803060405017801050178",
			`count=4 total=7.5 mean=2.5 low=1.5 high="x" people=3 firstseen=3 lastseen=3 recent=[]interface {}{"x", 3} top=[]interface {}{"x"} `},
		{"running", runningSet, true, "01003e0100b8300101", `small=31 big=3100 n=1 who=1 `},
	} {
		old, err := hex.DecodeString(c.written)
		if err != nil {
			t.Fatal(err)
		}
		codec := newAggCodec(c.set, c.reuse)
		acc, err := codec.Decode(old)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := results(c.set, &acc); got != c.want {
			t.Errorf("%s: read\n  %s\nwant %s", c.name, got, c.want)
		}
		if c.reuse && !codec.positional {
			t.Errorf("%s: not marked positional", c.name)
		}
		b, _ := codec.Append(nil, acc)
		if !isByName(b) {
			t.Errorf("%s: written back as % x", c.name, b)
		}
		back, err := codec.Decode(b)
		if err != nil || results(c.set, &back) != c.want {
			t.Errorf("%s: read back %s, %v", c.name, results(c.set, &back), err)
		}
		if c.reuse && codec.positional {
			t.Errorf("%s: by name marked positional", c.name)
		}
	}
}

// TestByNameMark: no uvarint that binary.AppendUvarint writes, the first
// bytes of a positional value or of a positional distinct key, starts
// with byNameMark.
func TestByNameMark(t *testing.T) {
	var vs []uint64
	for s := range 64 {
		for _, d := range []int64{-1, 0, 1} {
			vs = append(vs, uint64(int64(1)<<s+d))
		}
	}
	vs = append(vs, math.MaxUint64, math.MaxUint64-1)
	for v := range uint64(1 << 16) {
		vs = append(vs, v)
	}
	for _, v := range vs {
		if b := binary.AppendUvarint(nil, v); isByName(b) {
			t.Fatalf("uvarint %d is % x", v, b)
		}
	}
}

// TestAggCodecBadValues: a by-name value of another version, with an
// aggregate twice, or with trailing bytes in a slot, is an error.
func TestAggCodecBadValues(t *testing.T) {
	s := &aggSet{defs: []aggDef{{name: "a", op: opSum}, {name: "b", op: opCount}}}
	good, _ := newAggCodec(s, false).Append(nil, s.newAcc())
	slotA, slotB := []byte{1, 'a', byte(opSum), 3, 0, 0, 0}, []byte{1, 'b', byte(opCount), 1, 0}
	value := func(version byte, slots ...[]byte) []byte {
		b := append([]byte(byNameMark), version, byte(len(slots)))
		for _, sl := range slots {
			b = append(b, sl...)
		}
		return b
	}
	if want := value(aggCodecVersion, slotA, slotB); string(good) != string(want) {
		t.Fatalf("empty accumulator % x, want % x", good, want)
	}
	for _, c := range []struct {
		name  string
		value []byte
		want  string
	}{
		{"version 2", value(2, slotA, slotB), "aggregate accumulator of version 2: this version of Weir reads version 1"},
		{"a twice", value(aggCodecVersion, slotA, slotB, slotA), "aggregate a stored twice"},
		{"b, a twice", value(aggCodecVersion, slotB, slotA, slotA), "aggregate a stored twice"},
		{"a slot too long", value(aggCodecVersion, []byte{1, 'a', byte(opSum), 4, 0, 0, 0, 0}), "aggregate a: state: corrupt stored value: aggregate accumulator: trailing bytes"},
		{"a slot too short", value(aggCodecVersion, []byte{1, 'a', byte(opSum), 2, 0, 0}), "aggregate a: state: corrupt stored value: aggregate accumulator: bad varint"},
		{"more slots than stored", value(aggCodecVersion, slotA)[:3], "bad uvarint"},
	} {
		_, err := newAggCodec(s, true).Decode(c.value)
		if !errors.Is(err, state.ErrCorruptValue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %s", c.name, err, c.want)
		}
	}
}

// TestAggCodecDecodeAllocs: reading a value whose slots are in the step's
// order allocates nothing (numbers, a reused codec): the per-record cost
// of the by-name encoding is a name comparison per slot.
func TestAggCodecDecodeAllocs(t *testing.T) {
	s := &aggSet{defs: []aggDef{{name: "count", op: opCount}, {name: "total", op: opSum}, {name: "mean", op: opAvg}, {name: "people", op: opCountDistinct, inMap: true}}}
	codec := newAggCodec(s, true)
	acc := s.newAcc()
	s.fold(&acc, []any{nil, int64(3), 2.5, "x"}, []bool{false, false, false, true})
	b, _ := codec.Append(nil, acc)
	buf := make([]byte, 0, 2*len(b))
	if n := testing.AllocsPerRun(100, func() {
		acc, err := codec.Decode(b)
		if err != nil {
			t.Fatal(err)
		}
		buf, _ = codec.Append(buf[:0], acc)
	}); n != 0 {
		t.Errorf("%v allocations per decode and append", n)
	}
}

// TestAggCodecLongSlots: a slot's body of any length (its length takes one
// byte below 128, more above) round-trips, and so does the slot after it.
func TestAggCodecLongSlots(t *testing.T) {
	s := &aggSet{defs: []aggDef{{name: "list", op: opCollect, limit: 1000}, {name: "n", op: opCount}}}
	for _, values := range []int{0, 1, 10, 20, 200} {
		acc := s.newAcc()
		args := make([]any, 2)
		for i := range values {
			args[0] = strings.Repeat("x", i)
			s.fold(&acc, args, nil)
		}
		codec := newAggCodec(s, false)
		b, _ := codec.Append([]byte("before"), acc)
		back, err := codec.Decode(b[len("before"):])
		if err != nil {
			t.Fatalf("%d values: %v", values, err)
		}
		if got, want := results(s, &back), results(s, &acc); got != want {
			t.Errorf("%d values (%d bytes): %.80s, want %.80s", values, len(b), got, want)
		}
	}
}

// FuzzAggCodecDecode: any stored bytes decode to an accumulator or to a
// state.ErrCorruptValue or ErrAggregateChanged, never a panic, in both
// encodings and both forms; what decodes is written back and read again
// the same.
func FuzzAggCodecDecode(f *testing.F) {
	for _, running := range []bool{true, false} {
		s := editSet(running)
		acc := s.newAcc()
		s.fold(&acc, []any{int64(1), "x", "y", []any{1.5}, nil}, []bool{false, false, true, false, false})
		b, _ := newAggCodec(s, false).Append(nil, acc)
		f.Add(b, running)
		f.Add(b[2:], running)
	}
	old, _ := hex.DecodeString("01003e0100b8300101")
	f.Add(old, true)
	f.Fuzz(func(t *testing.T, b []byte, running bool) {
		for _, s := range []*aggSet{editSet(running), edit(t, editSet(running), running, "e", "d", "x:max", "a")} {
			codec := newAggCodec(s, running)
			acc, err := codec.Decode(b)
			if err != nil {
				if !errors.Is(err, state.ErrCorruptValue) && !errors.Is(err, ErrAggregateChanged) {
					t.Fatalf("% x: %v", b, err)
				}
				continue
			}
			want := results(s, &acc)
			again, err := codec.Append(nil, acc)
			if err != nil {
				t.Fatal(err)
			}
			back, err := codec.Decode(again)
			if err != nil || results(s, &back) != want {
				t.Fatalf("% x: read back %s, %v; want %s", b, results(s, &back), err, want)
			}
		}
	})
}
