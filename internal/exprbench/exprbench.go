// Package exprbench owns the benchmark of the expression language: one
// evaluation per record of the same filter and the same projection over the
// same decoded JSON records, with expr-lang through package expression (the
// library Weir uses) and with cel-go (the one it did not choose). The Go
// benchmarks in package expression and `make bench` (internal/tools/bench
// -expr) run these bodies. It must not be imported by the product: it links
// cel-go only to measure it.
package exprbench

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/interpreter"

	"github.com/weir-stream/weir/expression"
)

// The expressions, in each library's syntax. CEL does not mix int and double
// in arithmetic, so its projection converts the amount first.
const (
	FilterExprLang  = `value.amount > 10 && value.country == "DE"`
	FilterCEL       = `value.amount > 10 && value.country == "DE"`
	ProjectExprLang = `{id: value.id, amount: value.amount * 2, country: value.country}`
	ProjectCEL      = `{"id": value.id, "amount": double(value.amount) * 2.0, "country": value.country}`
)

// Records returns n decoded JSON order records as the source decodes them:
// integers are int64 (half the amounts), other numbers float64.
func Records(n int) []any {
	countries := []string{"DE", "FR", "US", "DE"}
	recs := make([]any, n)
	for i := range recs {
		amount := strconv.Itoa(i % 40)
		if i%2 == 1 {
			amount += ".5"
		}
		s := fmt.Sprintf(`{"id":%d,"amount":%s,"country":%q,"customer":"c%d","items":[{"sku":"a","qty":1}]}`,
			i, amount, countries[i%len(countries)], i%100)
		recs[i] = Decode(s)
	}
	return recs
}

// Decode decodes one JSON text with int64 integers and float64 others.
func Decode(s string) any {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		panic(err)
	}
	return numbers(v)
}

func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, el := range x {
			x[k] = numbers(el)
		}
	case []any:
		for i, el := range x {
			x[i] = numbers(el)
		}
	}
	return v
}

const nrecs = 1024

// ExprLangFilter evaluates the filter once per iteration with package
// expression, on a reused Evaluator.
func ExprLangFilter(b *testing.B) { exprLang(b, FilterExprLang, expression.Bool) }

// ExprLangProject builds the projection once per iteration with package
// expression.
func ExprLangProject(b *testing.B) { exprLang(b, ProjectExprLang, expression.Any) }

func exprLang(b *testing.B, src string, want expression.Type) {
	p, err := expression.Compile(src, want)
	if err != nil {
		b.Fatal(err)
	}
	recs := Records(nrecs)
	e := expression.NewEvaluator()
	var v expression.Vars
	kept := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		v.Value = recs[i%nrecs]
		if want == expression.Bool {
			ok, err := e.Bool(p, &v)
			if err != nil {
				b.Fatal(err)
			}
			if ok {
				kept++
			}
			continue
		}
		if _, err := e.Eval(p, &v); err != nil {
			b.Fatal(err)
		}
	}
	runtime.KeepAlive(kept)
}

// CELFilter evaluates the filter once per iteration with cel-go.
func CELFilter(b *testing.B) { celBench(b, FilterCEL, false) }

// CELProject builds the projection once per iteration with cel-go,
// converted to a map[string]any as the pipeline needs it.
func CELProject(b *testing.B) { celBench(b, ProjectCEL, true) }

// activation gives CEL the current record without allocating per record.
type activation struct{ value any }

func (a *activation) ResolveName(name string) (any, bool) {
	if name == "value" {
		return a.value, true
	}
	return nil, false
}

func (a *activation) Parent() interpreter.Activation { return nil }

var mapType = reflect.TypeOf(map[string]any{})

func celBench(b *testing.B, src string, native bool) {
	env, err := cel.NewEnv(cel.Variable("value", cel.DynType), cel.CrossTypeNumericComparisons(true))
	if err != nil {
		b.Fatal(err)
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		b.Fatal(iss.Err())
	}
	prg, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize))
	if err != nil {
		b.Fatal(err)
	}
	recs := Records(nrecs)
	act := &activation{}
	kept := 0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		act.value = recs[i%nrecs]
		out, _, err := prg.Eval(act)
		if err != nil {
			b.Fatal(err)
		}
		if native {
			if _, err := out.ConvertToNative(mapType); err != nil {
				b.Fatal(err)
			}
			continue
		}
		if out.Value() == true {
			kept++
		}
	}
	runtime.KeepAlive(kept)
}

// Result is one benchmark's figures.
type Result struct {
	Name        string // expr_filter_exprlang, ...
	NsPerOp     float64
	AllocsPerOp int64
}

// Rounds is how many times Run measures each benchmark.
const Rounds = 3

// Run runs the four benchmarks with testing.Benchmark, Rounds times each,
// interleaved, and keeps each one's fastest round: on a shared machine the
// other processes only ever add time, so the minimum is the least disturbed
// figure.
func Run() []Result {
	cases := []struct {
		name string
		fn   func(*testing.B)
	}{
		{"expr_filter_exprlang", ExprLangFilter},
		{"expr_filter_cel", CELFilter},
		{"expr_project_exprlang", ExprLangProject},
		{"expr_project_cel", CELProject},
	}
	out := make([]Result, len(cases))
	for round := 0; round < Rounds; round++ {
		for i, c := range cases {
			r := testing.Benchmark(c.fn)
			ns := float64(r.T.Nanoseconds()) / float64(r.N)
			if round == 0 || ns < out[i].NsPerOp {
				out[i] = Result{Name: c.name, NsPerOp: ns, AllocsPerOp: r.AllocsPerOp()}
			}
		}
	}
	return out
}
