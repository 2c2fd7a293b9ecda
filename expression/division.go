package expression

import (
	"errors"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm/runtime"
)

// errDivisionByZero is a runtime error of `/` and `%`.
var errDivisionByZero = errors.New("division by zero")

// The functions / and % are rewritten to. Their names cannot be written in
// an expression by chance.
const (
	divFunc = "__weir_div"
	modFunc = "__weir_mod"
)

// div and mod panic, as expr-lang's operators do; the VM turns the panic
// into the evaluation's error. A null operand gives null (null.go).
func div(a, b any) any {
	if a == nil || b == nil {
		return nil
	}
	if isZero(b) {
		panic(errDivisionByZero)
	}
	return runtime.Divide(a, b)
}

func mod(a, b any) any {
	if a == nil || b == nil {
		return nil
	}
	if isZero(b) {
		panic(errDivisionByZero)
	}
	return runtime.Modulo(a, b)
}

func isZero(v any) bool {
	switch x := v.(type) {
	case int:
		return x == 0
	case int64:
		return x == 0
	case float64:
		return x == 0
	case int32:
		return x == 0
	case float32:
		return x == 0
	}
	return false
}

// divisionPatcher replaces a / b by __weir_div(a, b) and a % b by
// __weir_mod(a, b).
type divisionPatcher struct{}

func (divisionPatcher) Visit(n *ast.Node) {
	b, ok := (*n).(*ast.BinaryNode)
	if !ok {
		return
	}
	var fn string
	switch b.Operator {
	case "/":
		fn = divFunc
	case "%":
		fn = modFunc
	default:
		return
	}
	ast.Patch(n, &ast.CallNode{
		Callee:    &ast.IdentifierNode{Value: fn},
		Arguments: []ast.Node{b.Left, b.Right},
	})
}
