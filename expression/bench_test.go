package expression_test

import (
	"testing"

	"github.com/weir-stream/weir/internal/exprbench"
)

// The cost of one expression evaluation per record, expr-lang (through this
// package) against cel-go; `make bench` prints the same as result lines.
func BenchmarkFilterExprLang(b *testing.B)  { exprbench.ExprLangFilter(b) }
func BenchmarkFilterCEL(b *testing.B)       { exprbench.CELFilter(b) }
func BenchmarkProjectExprLang(b *testing.B) { exprbench.ExprLangProject(b) }
func BenchmarkProjectCEL(b *testing.B)      { exprbench.CELProject(b) }
