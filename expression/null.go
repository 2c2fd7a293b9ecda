package expression

import (
	"fmt"
	"reflect"
	"strconv"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm/runtime"
)

// Null semantics. A missing field is null, and a record without a field
// must not fail an expression that merely compares or computes with it:
// `value.amount > 1` on a record without amount is null, which a filter
// counts as false. The rules follow SQL's, with equality as the exception
// (docs/yaml.md, "Missing fields and null", is the table):
//
//   - arithmetic (+ - * / % ** and unary -, string concatenation with +),
//     ordering comparisons (< <= > >=), the string operators contains,
//     startsWith, endsWith and matches, in and .. with a null operand are
//     null;
//   - ! (not) of null is null; && and || follow SQL's three-valued logic
//     (false && null is false, true || null is true, otherwise a null
//     operand makes the result null), and still short-circuit;
//   - a null condition of ?: takes the else branch, and a null predicate of
//     filter(), all(), any(), count()... is false, as a null filter or
//     route condition is;
//   - the functions of nullStrict with a null argument (the first one, for
//     the list functions) are null;
//   - == and != compare null as a value (null == null is true, null == 1
//     false), so that `value.coupon == nil` tests for a missing field;
//     ?? gives its right side for null; toJSON(null) is "null";
//   - reading a member of null (value.a.b where a is null) stays an error:
//     ?. says where null is expected.
//
// nullPatcher implements the rules by rewriting the program where an
// operand's type is not known at compile time (a field of value, the
// result of another rewritten node). The operators of most expressions
// (comparisons, arithmetic) become calls of functions that return null for
// a null operand (nullFuncs; / and % are division.go's); the others
// evaluate the operand once into a variable and run only if it is not
// null:
//
//	upper(a)  →  let n1 = a; n1 == nil ? nil : upper(n1)
//
// Operands of a known type (key, offset, a literal) are left alone, so
// that an expression over them compiles as before. The operation itself
// is expr-lang's, with its errors and their positions.
type nullPatcher struct{ n int }

// nullStrict are the functions whose result is null when an argument is:
// those that take values (all their arguments), and those that take a list
// and a predicate or a separator (the list: argument 0).
var nullStrict = map[string]bool{
	// strings
	"len": true, "upper": true, "lower": true, "trim": true, "trimPrefix": true, "trimSuffix": true,
	"replace": true, "split": true, "splitAfter": true, "indexOf": true, "lastIndexOf": true,
	"hasPrefix": true, "hasSuffix": true, "repeat": true,
	// conversions
	"string": true, "int": true, "float": true, "fromJSON": true, "date": true, "duration": true,
	// numbers
	"abs": true, "ceil": true, "floor": true, "round": true, "max": true, "min": true,
	// objects
	"keys": true, "values": true,
}

// nullList are the functions of a list whose result is null when the list
// is: only their first argument is guarded (a predicate, a separator or an
// initial value may be anything).
var nullList = map[string]bool{
	"map": true, "filter": true, "all": true, "any": true, "none": true, "one": true, "count": true,
	"sum": true, "mean": true, "median": true, "find": true, "findIndex": true, "findLast": true,
	"findLastIndex": true, "first": true, "last": true, "sort": true, "sortBy": true, "uniq": true,
	"flatten": true, "reverse": true, "join": true, "groupBy": true, "reduce": true, "concat": true,
}

// predicates are the list functions whose predicate is a condition: a
// null condition counts as false, as a filter's.
var predicates = map[string]bool{
	"filter": true, "all": true, "any": true, "none": true, "one": true, "count": true,
	"find": true, "findIndex": true, "findLast": true, "findLastIndex": true,
}

// nullOperators are the binary operators whose result is null when an
// operand is, and that nullPatcher guards with variables.
var nullOperators = map[string]bool{
	"contains": true, "startsWith": true, "endsWith": true, "matches": true,
	"in": true, "..": true,
}

// nullCalls are the binary operators that nullPatcher replaces by a call of
// a function that returns null for a null operand and otherwise does what
// the VM does: cheaper than a guard, for the operators of most filters.
var nullCalls = map[string]string{
	"<": ltFunc, "<=": leFunc, ">": gtFunc, ">=": geFunc,
	"+": addFunc, "-": subFunc, "*": mulFunc, "**": powFunc, "^": powFunc,
}

const (
	ltFunc  = "__weir_lt"
	leFunc  = "__weir_le"
	gtFunc  = "__weir_gt"
	geFunc  = "__weir_ge"
	addFunc = "__weir_add"
	subFunc = "__weir_sub"
	mulFunc = "__weir_mul"
	powFunc = "__weir_pow"
	negFunc = "__weir_neg"
	andFunc = "__weir_and"
	orFunc  = "__weir_or"
)

// nullFuncs are the functions of nullCalls, for the environment. They panic
// as the VM's operators do (the VM turns a panic into the error of the
// evaluation, at the operator's position).
var nullFuncs = map[string]any{
	ltFunc: func(a, b any) any {
		if a == nil || b == nil {
			return nil
		}
		return runtime.Less(a, b)
	},
	leFunc: func(a, b any) any {
		if a == nil || b == nil {
			return nil
		}
		return runtime.LessOrEqual(a, b)
	},
	gtFunc: func(a, b any) any {
		if a == nil || b == nil {
			return nil
		}
		return runtime.More(a, b)
	},
	geFunc: func(a, b any) any {
		if a == nil || b == nil {
			return nil
		}
		return runtime.MoreOrEqual(a, b)
	},
	addFunc: func(a, b any) any {
		if a == nil || b == nil {
			return nil
		}
		return runtime.Add(a, b)
	},
	subFunc: func(a, b any) any {
		if a == nil || b == nil {
			return nil
		}
		return runtime.Subtract(a, b)
	},
	mulFunc: func(a, b any) any {
		if a == nil || b == nil {
			return nil
		}
		return runtime.Multiply(a, b)
	},
	powFunc: func(a, b any) any {
		if a == nil || b == nil {
			return nil
		}
		return runtime.Exponent(a, b)
	},
	andFunc: and3,
	orFunc:  or3,
	negFunc: func(a any) any {
		if a == nil {
			return nil
		}
		return runtime.Negate(a)
	},
}

// mayBeNull reports whether n's value may be null: its type is unknown
// (any, or not computed yet for a node a patcher made) or nil.
func mayBeNull(n ast.Node) bool {
	t := n.Type()
	if t == nil || t.Kind() == reflect.Interface {
		return true
	}
	_, isNil := n.(*ast.NilNode)
	return isNil
}

func (p *nullPatcher) Visit(n *ast.Node) {
	switch x := (*n).(type) {
	case *ast.BinaryNode:
		switch {
		case x.Operator == "&&" || x.Operator == "and":
			if mayBeNull(x.Left) || mayBeNull(x.Right) {
				p.logic(n, x, false)
			}
		case x.Operator == "||" || x.Operator == "or":
			if mayBeNull(x.Left) || mayBeNull(x.Right) {
				p.logic(n, x, true)
			}
		case nullCalls[x.Operator] != "":
			if mayBeNull(x.Left) || mayBeNull(x.Right) {
				ast.Patch(n, &ast.CallNode{Callee: ident(nullCalls[x.Operator]), Arguments: []ast.Node{x.Left, x.Right}})
			}
		case nullOperators[x.Operator]:
			p.guard(n, &x.Left, &x.Right)
		}
	case *ast.UnaryNode:
		switch {
		case x.Operator == "-" && mayBeNull(x.Node):
			ast.Patch(n, &ast.CallNode{Callee: ident(negFunc), Arguments: []ast.Node{x.Node}})
		case x.Operator == "!" || x.Operator == "not":
			p.guard(n, &x.Node)
		}
	case *ast.ConditionalNode:
		if mayBeNull(x.Cond) {
			x.Cond = p.falseIfNil(x.Cond)
		}
	case *ast.BuiltinNode:
		switch {
		case nullStrict[x.Name]:
			args := make([]*ast.Node, len(x.Arguments))
			for i := range x.Arguments {
				args[i] = &x.Arguments[i]
			}
			p.guard(n, args...)
		case nullList[x.Name] && len(x.Arguments) > 0:
			if predicates[x.Name] && len(x.Arguments) > 1 {
				if pr, ok := x.Arguments[1].(*ast.PredicateNode); ok && mayBeNull(pr.Node) {
					pr.Node = p.falseIfNil(pr.Node)
				}
			}
			p.guard(n, &x.Arguments[0])
		}
	}
}

// falseIfNil returns cond as a condition that is false where cond is
// null: let n1 = cond; n1 == nil ? false : n1.
func (p *nullPatcher) falseIfNil(cond ast.Node) ast.Node {
	v := p.name()
	return &ast.VariableDeclaratorNode{Name: v, Value: cond,
		Expr: &ast.ConditionalNode{Cond: isNil(v), Exp1: &ast.BoolNode{Value: false}, Exp2: ident(v)}}
}

// guard replaces the node at n by
//
//	let n1 = op1; let n2 = op2; n1 == nil || n2 == nil ? nil : node(n1, n2)
//
// for the operands that may be null; the others stay in place.
func (p *nullPatcher) guard(n *ast.Node, operands ...*ast.Node) {
	var names []string
	var values []ast.Node
	for _, op := range operands {
		if !mayBeNull(*op) {
			continue
		}
		if _, ok := (*op).(*ast.PredicateNode); ok {
			continue
		}
		v := p.name()
		names = append(names, v)
		values = append(values, *op)
		*op = ident(v)
	}
	if len(names) == 0 {
		return
	}
	var cond ast.Node
	for _, v := range names {
		if cond == nil {
			cond = isNil(v)
		} else {
			cond = &ast.BinaryNode{Operator: "||", Left: cond, Right: isNil(v)}
		}
	}
	out := ast.Node(&ast.ConditionalNode{Cond: cond, Exp1: &ast.NilNode{}, Exp2: *n})
	for i := len(names) - 1; i >= 0; i-- {
		out = &ast.VariableDeclaratorNode{Name: names[i], Value: values[i], Expr: out}
	}
	(*n) = out
}

// logic replaces a && b (or, with or set, a || b) by its three-valued
// form, which evaluates b only if a does not decide:
//
//	let n1 = a; n1 == false ? false : __weir_and(n1, b)
//
// (for ||, true in place of false, and __weir_or).
func (p *nullPatcher) logic(n *ast.Node, x *ast.BinaryNode, or bool) {
	l := p.name()
	fn := andFunc
	if or {
		fn = orFunc
	}
	call := &ast.CallNode{Callee: ident(fn), Arguments: []ast.Node{ident(l), x.Right}}
	call.SetLocation(x.Location())
	*n = &ast.VariableDeclaratorNode{Name: l, Value: x.Left,
		Expr: &ast.ConditionalNode{
			Cond: &ast.BinaryNode{Operator: "==", Left: ident(l), Right: &ast.BoolNode{Value: or}},
			Exp1: &ast.BoolNode{Value: or}, Exp2: call,
		}}
}

// and3 is a && b where a is not false: false if b is, else null if
// either is null, else true.
func and3(a, b any) any {
	checkBool("&&", a)
	checkBool("&&", b)
	switch {
	case b == false:
		return false
	case a == nil || b == nil:
		return nil
	}
	return true
}

// or3 is a || b where a is not true: true if b is, else null if either is
// null, else false.
func or3(a, b any) any {
	checkBool("||", a)
	checkBool("||", b)
	switch {
	case b == true:
		return true
	case a == nil || b == nil:
		return nil
	}
	return false
}

// checkBool panics (an error of the evaluation) if v, an operand of op, is
// neither a bool nor null.
func checkBool(op string, v any) {
	switch v.(type) {
	case nil, bool:
		return
	}
	panic(fmt.Errorf("invalid operation: %s on %s (expected a bool)", op, describe(v)))
}

// name returns a new variable name, which no expression can use by chance.
func (p *nullPatcher) name() string {
	p.n++
	return "__weir_n" + strconv.Itoa(p.n)
}

func ident(name string) ast.Node { return &ast.IdentifierNode{Value: name} }

func isNil(name string) ast.Node {
	return &ast.BinaryNode{Operator: "==", Left: ident(name), Right: &ast.NilNode{}}
}
