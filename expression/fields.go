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
