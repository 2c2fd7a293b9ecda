package main

import (
	"runtime"

	"github.com/weir-stream/weir/internal/benchutil"
	"github.com/weir-stream/weir/internal/exprbench"
)

// runExpr measures the cost of one expression evaluation per record (issue
// 14): the same filter and the same projection over the same decoded JSON
// records with expr-lang (through package expression, as jobs run it) and
// with cel-go (internal/exprbench). It needs no broker: -expr runs only
// this; the default run starts with it.
func runExpr() {
	benchutil.Info("-expr: one evaluation per record of %q and %q with expr-lang (package expression) and cel-go, over 1024 decoded JSON orders, the fastest of %d rounds each; %d CPUs, load average %s",
		exprbench.FilterExprLang, exprbench.ProjectExprLang, exprbench.Rounds, runtime.NumCPU(), loadAvg())
	ns := map[string]float64{}
	for _, r := range exprbench.Run() {
		ns[r.Name] = r.NsPerOp
		benchutil.Result(r.Name, "%.0f", r.NsPerOp, "ns/op")
		benchutil.Result(r.Name+"_allocs", "%d", r.AllocsPerOp, "allocs/op")
	}
	for _, kind := range []string{"filter", "project"} {
		if el := ns["expr_"+kind+"_exprlang"]; el > 0 {
			benchutil.Result("expr_"+kind+"_cel_vs_exprlang", "%.2f", ns["expr_"+kind+"_cel"]/el, "ratio")
		}
	}
}
