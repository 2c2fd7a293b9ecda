package expression

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestNullSemantics is the table of docs/yaml.md, "Missing fields and
// null": every operator and function with a null operand (value.n, a
// missing field, and null written as a literal where expr-lang allows it),
// the three-valued logic, and what stays an error. A filter's Bool of a
// null result is false, with no error.
func TestNullSemantics(t *testing.T) {
	value := map[string]any{"a": int64(2), "f": 1.5, "s": "Ada", "t": true, "u": false, "l": []any{int64(1), int64(2)}, "o": map[string]any{"x": int64(1)}}
	for _, tc := range []struct {
		src, want string // want: the result as JSON, or "error: <substring>"
	}{
		// arithmetic
		{"value.n + 1", "null"}, {"1 + value.n", "null"}, {"value.n - 1", "null"}, {"value.n * 2", "null"},
		{"value.n / 2", "null"}, {"2 / value.n", "null"}, {"value.n % 2", "null"}, {"value.n ** 2", "null"},
		{"value.n ^ 2", "null"}, {"-value.n", "null"}, {"value.a + value.n * 2", "null"}, {"value.s + value.n", "null"},
		{"value.a + 1", "3"}, {"-value.a", "-2"}, {"value.f * 2", "3"}, {"value.s + '!'", `"Ada!"`},
		{"value.a / 0", "error: division by zero"}, {"value.s * 2", "error: invalid operation: string * int"},
		// ordering comparisons
		{"value.n > 1", "null"}, {"value.n >= 1", "null"}, {"value.n < 1", "null"}, {"value.n <= 1", "null"},
		{"1 < value.n", "null"}, {"value.n < value.n", "null"}, {"value.a > 1", "true"}, {"value.s < 'B'", "true"},
		{"value.s > 1", "error: invalid operation: string > int"},
		// equality: null is a value
		{"value.n == nil", "true"}, {"value.n == 1", "false"}, {"value.n != 1", "true"}, {"value.n != nil", "false"},
		{"value.n ?? 7", "7"},
		// string operators
		{"value.n contains 'a'", "null"}, {"value.s contains value.n", "null"}, {"value.n startsWith 'a'", "null"},
		{"value.n endsWith 'a'", "null"}, {"value.n matches '^a'", "null"}, {"value.s startsWith 'A'", "true"},
		// membership and ranges
		{"value.n in [1, 2]", "null"}, {"1 in value.n", "null"}, {"value.n not in [1]", "null"}, {"value.a in [1, 2]", "true"},
		{"value.n..3", "null"}, {"1..value.n", "null"},
		// logic: SQL's three values, short-circuit kept
		{"!value.n", "null"}, {"not value.n", "null"}, {"!value.t", "false"},
		{"value.n && true", "null"}, {"value.n && false", "false"}, {"value.n && value.n", "null"},
		{"true && value.n", "null"}, {"false && value.n", "false"}, {"value.u && value.n.x", "false"},
		{"value.n || true", "true"}, {"value.n || false", "null"}, {"value.n || value.n", "null"},
		{"true || value.n", "true"}, {"false || value.n", "null"}, {"value.t || value.n.x", "true"},
		{"value.t && value.u", "false"}, {"value.t || value.u", "true"},
		{"value.n > 1 && value.s == 'Ada'", "null"}, {"value.n > 1 || value.s == 'Ada'", "true"},
		{"!(value.n > 1)", "null"}, {"value.s && true", "error: on the string \"Ada\" (expected a bool)"},
		// conditional: a null condition takes the else branch
		{"value.n ? 1 : 2", "2"}, {"value.n > 1 ? 1 : 2", "2"}, {"value.t ? 1 : 2", "1"},
		// functions
		{"len(value.n)", "null"}, {"upper(value.n)", "null"}, {"lower(value.n)", "null"}, {"trim(value.n)", "null"},
		{"trimPrefix(value.n, 'a')", "null"}, {"trimSuffix(value.s, value.n)", "null"}, {"replace(value.n, 'a', 'b')", "null"},
		{"split(value.n, ',')", "null"}, {"indexOf(value.n, 'a')", "null"}, {"lastIndexOf(value.n, 'a')", "null"},
		{"hasPrefix(value.n, 'a')", "null"}, {"hasSuffix(value.n, 'a')", "null"}, {"repeat(value.n, 2)", "null"},
		{"string(value.n)", "null"}, {"int(value.n)", "null"}, {"float(value.n)", "null"}, {"fromJSON(value.n)", "null"},
		{"date(value.n)", "null"}, {"duration(value.n)", "null"}, {"abs(value.n)", "null"}, {"ceil(value.n)", "null"},
		{"floor(value.n)", "null"}, {"round(value.n)", "null"}, {"max(value.n, 1)", "null"}, {"min(1, value.n)", "null"},
		{"keys(value.n)", "null"}, {"values(value.n)", "null"},
		{"map(value.n, # * 2)", "null"}, {"filter(value.n, # > 1)", "null"}, {"all(value.n, # > 1)", "null"},
		{"any(value.n, # > 1)", "null"}, {"none(value.n, # > 1)", "null"}, {"one(value.n, # > 1)", "null"},
		{"count(value.n, # > 1)", "null"}, {"sum(value.n)", "null"}, {"mean(value.n)", "null"}, {"median(value.n)", "null"},
		{"find(value.n, # > 1)", "null"}, {"findIndex(value.n, # > 1)", "null"}, {"first(value.n)", "null"},
		{"last(value.n)", "null"}, {"sort(value.n)", "null"}, {"sortBy(value.n, #)", "null"}, {"uniq(value.n)", "null"},
		{"flatten(value.n)", "null"}, {"reverse(value.n)", "null"}, {"join(value.n, ',')", "null"},
		{"groupBy(value.n, #)", "null"}, {"reduce(value.n, #acc + #, 0)", "null"}, {"concat(value.n, [1])", "null"},
		{"toJSON(value.n)", `"null"`}, {"len(value.l)", "2"}, {"upper(value.s)", `"ADA"`}, {"string(value.a)", `"2"`},
		{"map(value.l, # > value.n)", "[null,null]"}, {"filter(value.l, # > value.n)", "[]"}, {"count(value.l, # > value.n)", "0"},
		{"any(value.l, # > value.n)", "false"}, {"all(value.l, # > value.n)", "false"}, {"find(value.l, # > value.n)", "null"},
		// a member of null stays an error; ?. reads it as null
		{"value.n.x", "error: cannot fetch x from null"}, {"value.n?.x > 1", "null"}, {"value.o.x + value.o.y", "null"},
	} {
		p, err := Compile(tc.src, Any)
		if err != nil {
			t.Errorf("%s: compile: %v", tc.src, err)
			continue
		}
		out, err := NewEvaluator().Eval(p, &Vars{Value: value})
		got := ""
		if err != nil {
			got = "error: " + err.Error()
		} else {
			b, _ := json.Marshal(out)
			got = string(b)
		}
		if want, isErr := strings.CutPrefix(tc.want, "error: "); isErr {
			if !strings.HasPrefix(got, "error: ") || !strings.Contains(got, want) {
				t.Errorf("%s = %s, want an error with %q", tc.src, got, want)
			}
		} else if got != tc.want {
			t.Errorf("%s = %s, want %s", tc.src, got, tc.want)
		}
	}

	// A filter drops a record on which its condition is null.
	for _, src := range []string{"value.amount > 1", "!(value.amount > 1)", "value.amount > 1 && value.s == 'Ada'", "value.n contains 'x'"} {
		p, err := Compile(src, Bool)
		if err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if ok, err := NewEvaluator().Bool(p, &Vars{Value: value}); ok || err != nil {
			t.Errorf("filter %s = %v, %v: want false", src, ok, err)
		}
	}
}
