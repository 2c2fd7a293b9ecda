package expression

import (
	"slices"

	"github.com/expr-lang/expr/ast"
)

// IntPredicate is a boolean expression over integer members of value and
// integer literals, compiled so that it runs on int64s without boxing:
// comparisons (== != < <= > >=), the arithmetic + - * % and unary -, and
// && || ! over them (value.event_type == 2 && value.bid.auction % 123 ==
// 0). Where every path it reads (Paths) holds an integer that an int64
// holds, Eval gives what the expression gives; anything else (a null, a
// float, a string) is the Program's to evaluate. It is immutable.
type IntPredicate struct {
	paths [][]string
	root  intNode
}

// intNode is a node of an IntPredicate: an integer (op "int": c; "path":
// path index c), a boolean ("true", "false") or an operator over kids.
type intNode struct {
	op   string
	c    int64
	kids []intNode
}

// Paths returns the paths the predicate reads, as ValuePath gives them
// (shared: not to be modified); Eval takes their values in this order.
func (p *IntPredicate) Paths() [][]string { return p.paths }

// Eval returns the predicate's result where the paths' values are vals;
// ok is false where the expression must run to say (a % by zero, which is
// its error).
func (p *IntPredicate) Eval(vals []int64) (result, ok bool) {
	return p.root.bool(vals)
}

func (n *intNode) bool(vals []int64) (bool, bool) {
	switch n.op {
	case "&&", "||":
		// Both sides are evaluated: the result is the same where both are
		// defined, and a side that is not is the expression's to run.
		a, okA := n.kids[0].bool(vals)
		b, okB := n.kids[1].bool(vals)
		if n.op == "&&" {
			return a && b, okA && okB
		}
		return a || b, okA && okB
	case "!":
		a, ok := n.kids[0].bool(vals)
		return !a, ok
	case "true", "false":
		return n.op == "true", true
	}
	a, okA := n.kids[0].int(vals)
	b, okB := n.kids[1].int(vals)
	if !okA || !okB {
		return false, false
	}
	switch n.op {
	case "==":
		return a == b, true
	case "!=":
		return a != b, true
	case "<":
		return a < b, true
	case "<=":
		return a <= b, true
	case ">":
		return a > b, true
	case ">=":
		return a >= b, true
	}
	return false, false
}

func (n *intNode) int(vals []int64) (int64, bool) {
	switch n.op {
	case "int":
		return n.c, true
	case "path":
		return vals[n.c], true
	case "neg":
		a, ok := n.kids[0].int(vals)
		return -a, ok
	}
	a, okA := n.kids[0].int(vals)
	b, okB := n.kids[1].int(vals)
	if !okA || !okB {
		return 0, false
	}
	switch n.op {
	case "+":
		return a + b, true
	case "-":
		return a - b, true
	case "*":
		return a * b, true
	case "%":
		if b == 0 {
			return 0, false
		}
		return a % b, true
	}
	return 0, false
}

// intPredicate compiles the expression n (as written) into an
// IntPredicate, if it is one.
func intPredicate(n ast.Node) (*IntPredicate, bool) {
	p := &IntPredicate{}
	root, ok := p.boolNode(n)
	if !ok {
		return nil, false
	}
	p.root = root
	return p, true
}

var boolOps = map[string]string{"&&": "&&", "and": "&&", "||": "||", "or": "||"}
var cmpOps = map[string]bool{"==": true, "!=": true, "<": true, "<=": true, ">": true, ">=": true}
var intOps = map[string]bool{"+": true, "-": true, "*": true, "%": true}

func (p *IntPredicate) boolNode(n ast.Node) (intNode, bool) {
	switch x := n.(type) {
	case *ast.BoolNode: // a comparison of literals, folded
		if x.Value {
			return intNode{op: "true"}, true
		}
		return intNode{op: "false"}, true
	case *ast.UnaryNode:
		if x.Operator != "!" && x.Operator != "not" {
			return intNode{}, false
		}
		a, ok := p.boolNode(x.Node)
		return intNode{op: "!", kids: []intNode{a}}, ok
	case *ast.BinaryNode:
		if op, isBool := boolOps[x.Operator]; isBool {
			a, okA := p.boolNode(x.Left)
			b, okB := p.boolNode(x.Right)
			return intNode{op: op, kids: []intNode{a, b}}, okA && okB
		}
		if !cmpOps[x.Operator] {
			return intNode{}, false
		}
		a, okA := p.intNode(x.Left)
		b, okB := p.intNode(x.Right)
		return intNode{op: x.Operator, kids: []intNode{a, b}}, okA && okB
	}
	return intNode{}, false
}

func (p *IntPredicate) intNode(n ast.Node) (intNode, bool) {
	switch x := n.(type) {
	case *ast.IntegerNode:
		return intNode{op: "int", c: int64(x.Value)}, true
	case *ast.UnaryNode:
		if x.Operator != "-" {
			return intNode{}, false
		}
		a, ok := p.intNode(x.Node)
		return intNode{op: "neg", kids: []intNode{a}}, ok
	case *ast.BinaryNode:
		if !intOps[x.Operator] {
			return intNode{}, false
		}
		a, okA := p.intNode(x.Left)
		b, okB := p.intNode(x.Right)
		return intNode{op: x.Operator, kids: []intNode{a, b}}, okA && okB
	}
	path, ok := valuePath(n)
	if !ok {
		return intNode{}, false
	}
	for i, q := range p.paths {
		if slices.Equal(q, path) {
			return intNode{op: "path", c: int64(i)}, true
		}
	}
	p.paths = append(p.paths, path)
	return intNode{op: "path", c: int64(len(p.paths) - 1)}, true
}
