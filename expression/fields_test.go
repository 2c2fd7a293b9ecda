package expression

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func TestValueFields(t *testing.T) {
	for _, tc := range []struct {
		src    string
		fields []string
		ok     bool
	}{
		{`value.amount > 0`, []string{"amount"}, true},
		{`value.b + value.a + value.b`, []string{"a", "b"}, true},
		{`value?.a ?? value["b c"]`, []string{"a", "b c"}, true},
		{`value.a.b.c`, []string{"a"}, true},
		{`all(value.items, .x > 0) && value.n > 1`, []string{"items", "n"}, true},
		{`key + topic`, nil, true},
		{`value`, nil, false},
		{`len(value)`, nil, false},
		{`value[key]`, nil, false},
		{`value.a > 0 || value == nil`, nil, false},
		{`$env.value.a`, nil, false},
		{`{"p": value.page, "v": value}`, nil, false},
	} {
		p, err := Compile(tc.src, Any)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		want := tc.fields
		fields, ok := p.ValueFields()
		if ok != tc.ok || ok && !slices.Equal(fields, want) {
			t.Errorf("%s: ValueFields() = %q, %v; want %q, %v", tc.src, fields, ok, want, tc.ok)
		}
	}
}

// TestValueField: only a plain read of one field is one; its result is
// that field of an object, nil where it is missing.
func TestValueField(t *testing.T) {
	for _, tc := range []struct {
		src   string
		field string
	}{
		{`value.amount`, "amount"},
		{`value?.page`, "page"},
		{`value["b c"]`, "b c"},
		{`value.a.b`, ""},
		{`value.a + 0`, ""},
		{`value`, ""},
		{`value[key]`, ""},
		{`key`, ""},
		{`(value.a)`, "a"},
	} {
		p, err := Compile(tc.src, Any)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		f, ok := p.ValueField()
		if f != tc.field || ok != (tc.field != "") {
			t.Errorf("%s: ValueField() = %q, %v; want %q", tc.src, f, ok, tc.field)
		}
		if !ok {
			continue
		}
		ev := NewEvaluator()
		for _, v := range []map[string]any{{f: "x"}, {f: int64(7)}, {"other": true}} {
			got, err := ev.Eval(p, &Vars{Value: v})
			if err != nil || got != v[f] {
				t.Errorf("%s on %v: %v, %v; want %v", tc.src, v, got, err, v[f])
			}
		}
	}
}

// TestValueFieldsProjection: an expression that reads only the fields
// ValueFields names gives the same result, or the same error, on the value
// with only those fields as on the whole value.
func TestValueFieldsProjection(t *testing.T) {
	exprs := []string{
		`value.a`, `value.a > 1`, `value.a + value.b`, `value?.c ?? "none"`, `value["b"] * 2`,
		`value.a > 0 && value.missing == nil`, `string(value.c) + key`, `value.d?.x`,
	}
	progs := make([]*Program, len(exprs))
	for i, src := range exprs {
		p, err := Compile(src, Any)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		progs[i] = p
	}
	field := rapid.SampledFrom([]any{nil, int64(3), int64(-1), 2.5, "s", true, map[string]any{"x": int64(1)}})
	rapid.Check(t, func(t *rapid.T) {
		whole := map[string]any{}
		for _, k := range []string{"a", "b", "c", "d", "e"} {
			if rapid.Bool().Draw(t, "has "+k) {
				whole[k] = field.Draw(t, k)
			}
		}
		i := rapid.IntRange(0, len(progs)-1).Draw(t, "expr")
		p := progs[i]
		fields, ok := p.ValueFields()
		if !ok {
			t.Fatalf("%s: reads the whole value", exprs[i])
		}
		part := map[string]any{}
		for _, f := range fields {
			if v, ok := whole[f]; ok {
				part[f] = v
			}
		}
		ev := NewEvaluator()
		got, gerr := ev.Eval(p, &Vars{Value: part, Key: []byte("k")})
		want, werr := ev.Eval(p, &Vars{Value: whole, Key: []byte("k")})
		if fmt.Sprint(gerr) != fmt.Sprint(werr) || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s over %v: projection %v, %v; whole %v, %v", exprs[i], whole, got, gerr, want, werr)
		}
	})
}

// TestValuePath: ValuePath recognises plain reads of value at any depth,
// and ScaledPath a floating-point constant times one; anything else is
// neither.
func TestValuePath(t *testing.T) {
	for _, tc := range []struct {
		src    string
		path   []string
		scaled []string
		c      float64
	}{
		{`value.a`, []string{"a"}, nil, 0},
		{`value.bid.price`, []string{"bid", "price"}, nil, 0},
		{`value?.a?.b.c`, []string{"a", "b", "c"}, nil, 0},
		{`value["b c"].d`, []string{"b c", "d"}, nil, 0},
		{`0.908 * value.bid.price`, nil, []string{"bid", "price"}, 0.908},
		{`value.a.b * 2.5`, nil, []string{"a", "b"}, 2.5},
		{`2 * value.a`, nil, nil, 0},
		{`0.5 + value.a`, nil, nil, 0},
		{`0.5 * value.a + 1.0`, nil, nil, 0},
		{`value.a[0]`, nil, nil, 0},
		{`value.a[0].b`, nil, nil, 0},
		{`value`, nil, nil, 0},
		{`headers.a`, nil, nil, 0},
		{`value.a.b > 1`, nil, nil, 0},
		{`value.a.b ?? 0`, nil, nil, 0},
	} {
		p, err := Compile(tc.src, Any)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		path, ok := p.ValuePath()
		if ok != (tc.path != nil) || !slices.Equal(path, tc.path) {
			t.Errorf("%s: ValuePath() = %q, %v; want %q", tc.src, path, ok, tc.path)
		}
		scaled, c, ok := p.ScaledPath()
		if ok != (tc.scaled != nil) || !slices.Equal(scaled, tc.scaled) || c != tc.c {
			t.Errorf("%s: ScaledPath() = %q, %v, %v; want %q, %v", tc.src, scaled, c, ok, tc.scaled, tc.c)
		}
	}
}

// TestIntPredicate: IntPredicate recognises boolean expressions of
// integer members and literals, as written (not as the optimizer folds
// them), and evaluates them.
func TestIntPredicate(t *testing.T) {
	for _, tc := range []struct {
		src   string
		paths [][]string
		vals  []int64
		want  bool
	}{
		{`value.event_type == 2`, [][]string{{"event_type"}}, []int64{2}, true},
		{`value.event_type == 2 && value.bid.auction % 123 == 0`, [][]string{{"event_type"}, {"bid", "auction"}}, []int64{2, 246}, true},
		{`value.event_type == 2 and value.bid.auction % 123 == 0`, [][]string{{"event_type"}, {"bid", "auction"}}, []int64{2, 247}, false},
		{`10 < value.n || not (value.m >= -1)`, [][]string{{"n"}, {"m"}}, []int64{5, -2}, true},
		{`-value.n * 2 + value.n - 1 != value?.a?.b`, [][]string{{"n"}, {"a", "b"}}, []int64{3, -4}, false},
		{`value.n == value.n`, [][]string{{"n"}}, []int64{1}, true},
		{`value.n > 1 || true`, [][]string{{"n"}}, []int64{0}, true},
		{`value.n == 2.0`, nil, nil, false},
		{`value.n / 2 == 1`, nil, nil, false},
		{`value.n == "2"`, nil, nil, false},
		{`value.n in [2]`, nil, nil, false},
		{`offset == 2`, nil, nil, false},
		{`(value.n ?? 0) > 1`, nil, nil, false},
		{`len(value.s) > 1`, nil, nil, false},
	} {
		p, err := Compile(tc.src, Bool)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		pred, ok := p.IntPredicate()
		if ok != (tc.paths != nil) {
			t.Errorf("%s: IntPredicate() %v, want %v", tc.src, ok, tc.paths != nil)
			continue
		}
		if !ok {
			continue
		}
		if !reflect.DeepEqual(pred.Paths(), tc.paths) {
			t.Errorf("%s: paths %q, want %q", tc.src, pred.Paths(), tc.paths)
		}
		if got, ok := pred.Eval(tc.vals); !ok || got != tc.want {
			t.Errorf("%s over %v: %v (%v), want %v", tc.src, tc.vals, got, ok, tc.want)
		}
	}
	if p, _ := Compile(`value.a.b`, Any); p != nil {
		if _, ok := p.IntPredicate(); ok {
			t.Error("an expression that is not a condition is an IntPredicate")
		}
	}
}
