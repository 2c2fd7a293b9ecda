package expression

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// decodeJSON decodes a record as the pipeline does: integers that fit are
// int64, other numbers float64.
func decodeJSON(t testing.TB, s string) any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return fromNumbers(v)
}

func fromNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, el := range x {
			x[k] = fromNumbers(el)
		}
	case []any:
		for i, el := range x {
			x[i] = fromNumbers(el)
		}
	}
	return v
}

var typeNames = map[string]Type{"any": Any, "bool": Bool, "number": Number, "string": String, "list": List}

// TestEval runs testdata/eval.txt. Commands:
//
//	record [key=K] [ts=RFC3339] [topic=T] [partition=N] [offset=N] [header=K:V...]
//	<JSON value>
//	  sets the record the following commands evaluate over.
//	eval [want=TYPE] | bool | number | key
//	<expression>
//	  compiles the expression and evaluates it with Eval (printing the
//	  result as JSON and its Go type), Bool, Number or Key; a compile error
//	  is printed under the expression with a caret at its offset.
func TestEval(t *testing.T) {
	e := NewEvaluator()
	var vars Vars
	datadriven.RunTest(t, "testdata/eval.txt", func(t *testing.T, d *datadriven.TestData) string {
		switch d.Cmd {
		case "record":
			vars = Vars{Value: decodeJSON(t, d.Input)}
			for _, a := range d.CmdArgs {
				val := strings.Join(a.Vals, ",")
				switch a.Key {
				case "key":
					vars.Key = []byte(val)
				case "ts":
					ts, err := time.Parse(time.RFC3339Nano, val)
					if err != nil {
						d.Fatalf(t, "ts: %v", err)
					}
					vars.Timestamp = ts
				case "topic":
					vars.Topic = val
				case "partition":
					n, _ := strconv.Atoi(val)
					vars.Partition = int32(n)
				case "offset":
					n, _ := strconv.ParseInt(val, 10, 64)
					vars.Offset = n
				case "header":
					for _, kv := range a.Vals {
						k, v, _ := strings.Cut(kv, ":")
						vars.Headers = append(vars.Headers, Header{Key: k, Value: []byte(v)})
					}
				default:
					d.Fatalf(t, "unknown argument %s", a.Key)
				}
			}
			return ""
		case "eval", "bool", "number", "key":
			want := Any
			switch d.Cmd {
			case "bool":
				want = Bool
			case "number":
				want = Number
			}
			var w string
			if d.MaybeScanArgs(t, "want", &w) {
				want = typeNames[w]
			}
			src := strings.TrimSuffix(d.Input, "\n")
			p, err := Compile(src, want)
			if err != nil {
				return compileErrorText(src, err)
			}
			return evalText(e, d.Cmd, p, &vars)
		}
		d.Fatalf(t, "unknown command %s", d.Cmd)
		return ""
	})
}

func evalText(e *Evaluator, cmd string, p *Program, v *Vars) string {
	var out any
	var err error
	switch cmd {
	case "eval":
		out, err = e.Eval(p, v)
	case "bool":
		out, err = e.Bool(p, v)
	case "number":
		out, err = e.Number(p, v)
	case "key":
		var k []byte
		k, err = e.Key(p, v, nil)
		out = string(k)
	}
	if err != nil {
		if strings.Contains(err.Error(), ".go:") || strings.Contains(err.Error(), "\n") {
			return "an error meant for YAML users has a Go file name or a snippet: " + err.Error() + "\n"
		}
		return "runtime error: " + err.Error() + "\n"
	}
	b, jerr := json.Marshal(out)
	if jerr != nil {
		return "cannot encode: " + jerr.Error() + "\n"
	}
	return fmt.Sprintf("%s (%T)\n", b, out)
}

// compileErrorText renders a compile error as the YAML user would see it:
// the line of the expression with a caret under the error's byte offset.
func compileErrorText(src string, err error) string {
	var ce *Error
	if !errors.As(err, &ce) {
		return "not an *Error: " + err.Error() + "\n"
	}
	if ce.Offset < 0 || ce.Offset > len(src) {
		return fmt.Sprintf("offset %d out of range: %s\n", ce.Offset, ce.Msg)
	}
	start := strings.LastIndexByte(src[:ce.Offset], '\n') + 1
	end := strings.IndexByte(src[ce.Offset:], '\n')
	if end < 0 {
		end = len(src)
	} else {
		end += ce.Offset
	}
	line := strings.Count(src[:ce.Offset], "\n") + 1
	var b bytes.Buffer
	fmt.Fprintf(&b, "compile error at line %d, byte %d: %s\n", line, ce.Offset-start, ce.Msg)
	fmt.Fprintf(&b, "%s\n%s^\n", src[start:end], strings.Repeat(" ", len([]rune(src[start:ce.Offset]))))
	return b.String()
}

// TestFilterAllocs: the filter a job runs most, over a decoded record,
// allocates nothing per evaluation.
func TestFilterAllocs(t *testing.T) {
	p, err := Compile(`value.amount > 10 && value.country == "DE"`, Bool)
	if err != nil {
		t.Fatal(err)
	}
	e := NewEvaluator()
	v := &Vars{Value: decodeJSON(t, `{"amount": 12.5, "country": "DE", "id": 7}`)}
	allocs := testing.AllocsPerRun(1000, func() {
		if ok, err := e.Bool(p, v); err != nil || !ok {
			t.Fatalf("Bool = %v, %v", ok, err)
		}
	})
	t.Logf("allocations per evaluation: %v", allocs)
	if allocs != 0 {
		t.Errorf("allocations per evaluation = %v, want 0", allocs)
	}
}

func TestUses(t *testing.T) {
	for _, tc := range []struct {
		src  string
		uses []string
	}{
		{`value.a > 1`, []string{"value"}},
		{`key + topic`, []string{"key", "topic"}},
		{`headers.x ?? timestamp_ms`, []string{"headers", "timestamp_ms"}},
		{`timestamp.Unix() + partition + offset`, []string{"timestamp", "partition", "offset"}},
		{`$env.key`, varNames[:]},
		{`1 + 2`, nil},
	} {
		p, err := Compile(tc.src, Any)
		if err != nil {
			t.Fatalf("%s: %v", tc.src, err)
		}
		for _, name := range varNames {
			want := false
			for _, u := range tc.uses {
				want = want || u == name
			}
			if got := p.Uses(name); got != want {
				t.Errorf("%s: Uses(%s) = %v, want %v", tc.src, name, got, want)
			}
		}
	}
}

// TestCompileErrorOffset: the offset is a byte offset in src, also after
// multi-byte characters and on later lines, and the message has no snippet.
func TestCompileErrorOffset(t *testing.T) {
	for _, tc := range []struct {
		src    string
		offset int
	}{
		{`value.a +`, 8},
		{`"ü" == value.b && nope`, 19},
		{"value.a > 1 &&\n  nope", 17},
	} {
		_, err := Compile(tc.src, Any)
		var ce *Error
		if !errors.As(err, &ce) {
			t.Fatalf("%q: error %v is not an *Error", tc.src, err)
		}
		if ce.Offset != tc.offset {
			t.Errorf("%q: offset %d, want %d (%s)", tc.src, ce.Offset, tc.offset, ce.Msg)
		}
		if strings.Contains(ce.Msg, "\n") || strings.Contains(ce.Msg, "^") {
			t.Errorf("%q: message has a snippet: %q", tc.src, ce.Msg)
		}
	}
}

// TestEvaluatorReuse: results of one evaluation are not changed by the next.
func TestEvaluatorReuse(t *testing.T) {
	p, err := Compile(`headers`, Any)
	if err != nil {
		t.Fatal(err)
	}
	e := NewEvaluator()
	a, _ := e.Eval(p, &Vars{Headers: []Header{{Key: "h", Value: []byte("1")}}})
	_, _ = e.Eval(p, &Vars{Headers: []Header{{Key: "h", Value: []byte("2")}}})
	if got := a.(map[string]any)["h"]; got != "1" {
		t.Errorf("first result's header = %v after a second evaluation, want 1", got)
	}
}

// TestProgramShared: one Program, evaluated by an Evaluator per goroutine.
func TestProgramShared(t *testing.T) {
	p, err := Compile(`{n: value.n * 2, k: key}`, Any)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	for g := 0; g < 4; g++ {
		go func() {
			e := NewEvaluator()
			for i := int64(0); i < 200; i++ {
				out, err := e.Eval(p, &Vars{Value: map[string]any{"n": i}, Key: []byte("k")})
				if err != nil {
					done <- err
					return
				}
				if got := out.(map[string]any)["n"]; got != 2*i {
					done <- fmt.Errorf("n = %v, want %d", got, 2*i)
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}

func TestCompileEmpty(t *testing.T) {
	for _, src := range []string{"", "   "} {
		_, err := Compile(src, Bool)
		var ce *Error
		if !errors.As(err, &ce) || ce.Msg != "the expression is empty" || ce.Offset != 0 {
			t.Errorf("Compile(%q) = %#v, want an *Error at 0: the expression is empty", src, err)
		}
	}
}

// FuzzCompile: Compile never panics, a compile error is an *Error with an
// offset inside src, and a program that compiles evaluates without
// panicking over a decoded record.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		`value.amount > 10 && value.country == "DE"`, `value.a?.b.c ?? 1`, `{id: value.id}`,
		`map(value.items, .price / 0)`, `"é" + key`, `value.x[-1]`, "value.a >\n 1 &&", `let x = 1; x % 0`,
		`headers.h ?? timestamp_ms`, `$env.value`, `1..3 | map(# * 2)`, `value.items[1:2]`,
	} {
		f.Add(s)
	}
	rec := decodeJSON(f, `{"amount": 12.5, "country": "DE", "items": [{"price": 1}, 2, "x", null], "a": {"b": null}}`)
	f.Fuzz(func(t *testing.T, src string) {
		for _, want := range []Type{Any, Bool, Number} {
			p, err := Compile(src, want)
			if err != nil {
				var ce *Error
				if !errors.As(err, &ce) {
					t.Fatalf("Compile(%q): %T, want *Error", src, err)
				}
				if ce.Offset < 0 || ce.Offset > len(src) {
					t.Fatalf("Compile(%q): offset %d outside [0, %d]", src, ce.Offset, len(src))
				}
				continue
			}
			e := NewEvaluator()
			v := &Vars{Value: rec, Key: []byte("k"), Headers: []Header{{Key: "h", Value: []byte("v")}}}
			_, _ = e.Eval(p, v)
			_, _ = e.Key(p, v, nil)
		}
	})
}
