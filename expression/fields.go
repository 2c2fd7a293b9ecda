package expression

import (
	"slices"

	"github.com/expr-lang/expr/ast"
)

// valueFields returns the top-level fields of value that the expression n
// (as written, before the patches) reads, sorted, and whether that is all
// it reads of value: every use of value is a member with a constant name
// (value.f, value?.f, value["f"]). Any other use (value itself, len(value),
// value[k] with k computed, $env) reads the whole value: ok is false.
func valueFields(n ast.Node) (fields []string, ok bool) {
	members := memberVisitor{covered: map[*ast.IdentifierNode]bool{}}
	ast.Walk(&n, &members)
	uses := usesOfValue{covered: members.covered}
	ast.Walk(&n, &uses)
	if uses.whole {
		return nil, false
	}
	slices.Sort(members.fields)
	return slices.Compact(members.fields), true
}

// memberVisitor finds the members of value with a constant name.
type memberVisitor struct {
	covered map[*ast.IdentifierNode]bool
	fields  []string
}

func (v *memberVisitor) Visit(n *ast.Node) {
	m, ok := (*n).(*ast.MemberNode)
	if !ok {
		return
	}
	id, isID := m.Node.(*ast.IdentifierNode)
	name, isName := m.Property.(*ast.StringNode)
	if isID && isName && id.Value == "value" {
		v.covered[id] = true
		v.fields = append(v.fields, name.Value)
	}
}

// usesOfValue finds a use of value other than those members, or of $env.
type usesOfValue struct {
	covered map[*ast.IdentifierNode]bool
	whole   bool
}

func (v *usesOfValue) Visit(n *ast.Node) {
	id, ok := (*n).(*ast.IdentifierNode)
	if ok && (id.Value == "$env" || id.Value == "value" && !v.covered[id]) {
		v.whole = true
	}
}

// valueField returns the name f if the expression n (as written) is
// exactly a member of value with a constant name: value.f, value?.f or
// value["f"].
func valueField(n ast.Node) (string, bool) {
	if c, ok := n.(*ast.ChainNode); ok {
		n = c.Node
	}
	m, ok := n.(*ast.MemberNode)
	if !ok {
		return "", false
	}
	id, isID := m.Node.(*ast.IdentifierNode)
	name, isName := m.Property.(*ast.StringNode)
	if !isID || !isName || id.Value != "value" {
		return "", false
	}
	return name.Value, true
}

// requiredFields returns the top-level fields of value that the expression
// n (as written) reads as if they were always there, sorted: by value.f or
// value["f"], but not by value?.f nor as the left side of ?? (value.f ??
// 0), which say that the field may be missing.
func requiredFields(n ast.Node) []string {
	var opt optionalReads
	ast.Walk(&n, &opt)
	v := requiredVisitor{optional: opt.members}
	ast.Walk(&n, &v)
	slices.Sort(v.fields)
	return slices.Compact(v.fields)
}

// optionalReads finds the members that are the left side of ??.
type optionalReads struct{ members map[*ast.MemberNode]bool }

func (v *optionalReads) Visit(n *ast.Node) {
	b, ok := (*n).(*ast.BinaryNode)
	if !ok || b.Operator != "??" {
		return
	}
	left := b.Left
	if c, ok := left.(*ast.ChainNode); ok {
		left = c.Node
	}
	if m, ok := left.(*ast.MemberNode); ok {
		if v.members == nil {
			v.members = map[*ast.MemberNode]bool{}
		}
		v.members[m] = true
	}
}

type requiredVisitor struct {
	optional map[*ast.MemberNode]bool
	fields   []string
}

func (v *requiredVisitor) Visit(n *ast.Node) {
	m, ok := (*n).(*ast.MemberNode)
	if !ok || m.Optional || v.optional[m] {
		return
	}
	id, isID := m.Node.(*ast.IdentifierNode)
	name, isName := m.Property.(*ast.StringNode)
	if isID && isName && id.Value == "value" {
		v.fields = append(v.fields, name.Value)
	}
}

// valuePath returns the path [f1, f2, …] if the expression n (as written)
// is exactly a chain of members of value with constant names, to any
// depth: value.f1.f2, value?.f1?.f2, value["f1"].f2.
func valuePath(n ast.Node) ([]string, bool) {
	if c, ok := n.(*ast.ChainNode); ok {
		n = c.Node
	}
	var path []string
	for {
		m, ok := n.(*ast.MemberNode)
		if !ok || m.Method {
			return nil, false
		}
		name, isName := m.Property.(*ast.StringNode)
		if !isName {
			return nil, false
		}
		path = append(path, name.Value)
		if id, isID := m.Node.(*ast.IdentifierNode); isID {
			if id.Value != "value" {
				return nil, false
			}
			slices.Reverse(path)
			return path, true
		}
		n = m.Node
	}
}

// scaledPath returns the path and the constant c if the expression n (as
// written) is c * value.path or value.path * c with c a floating-point
// literal (0.908 * value.bid.price): a product that is a float64 whatever
// the field's number.
func scaledPath(n ast.Node) ([]string, float64, bool) {
	b, ok := n.(*ast.BinaryNode)
	if !ok || b.Operator != "*" {
		return nil, 0, false
	}
	left, right := b.Left, b.Right
	if _, isConst := left.(*ast.FloatNode); !isConst {
		left, right = right, left
	}
	c, isConst := left.(*ast.FloatNode)
	if !isConst {
		return nil, 0, false
	}
	path, ok := valuePath(right)
	return path, c.Value, ok
}
