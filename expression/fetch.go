package expression

import (
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm/runtime"
)

// expr-lang reads a member of a value of unknown type (every field of
// `value`) with reflection, which costs an allocation and most of a filter's
// time. fetchPatcher rewrites the member accesses rooted at value, headers
// or a predicate's element (#, .field) into calls of functions that read a
// map[string]any or a []any directly and fall back to expr-lang's reflection
// for anything else. The functions are variables of the environment with a
// signature expr-lang calls directly (OpCallTyped), without building an
// argument slice per call. They keep expr-lang's semantics: a missing key is nil,
// a member of nil is an error, and `a?.b` ends the whole chain with nil when
// a is nil.
const (
	getFunc   = "__weir_get"   // a.b, a[i]
	ogetFunc  = "__weir_oget"  // a?.b
	chainFunc = "__weir_chain" // the end of a chain that has a ?.
)

// chainNil is what a ?. on nil returns inside its chain: the accesses after
// it pass it on, and the end of the chain turns it into nil.
type chainNilType struct{}

var chainNil any = chainNilType{}

func get(from, key any) any {
	if from == chainNil {
		return chainNil
	}
	return fetch(from, key)
}

func oget(from, key any) any {
	if from == nil || from == chainNil {
		return chainNil
	}
	return fetch(from, key)
}

func endChain(v any) any {
	if v == chainNil {
		return nil
	}
	return v
}

func fetch(from, key any) any {
	switch x := from.(type) {
	case map[string]any:
		if k, ok := key.(string); ok {
			return x[k]
		}
	case []any:
		i, ok := index(key)
		if ok {
			if i < 0 {
				i += len(x)
			}
			if i >= 0 && i < len(x) {
				return x[i]
			}
		}
	}
	return runtime.Fetch(from, key) // panics with expr-lang's message
}

func index(key any) (int, bool) {
	switch k := key.(type) {
	case int:
		return k, true
	case int64:
		return int(k), true
	}
	return 0, false
}

type fetchPatcher struct{}

func (fetchPatcher) Visit(n *ast.Node) {
	switch m := (*n).(type) {
	case *ast.MemberNode:
		if m.Method || !jsonRoot(m.Node) {
			return
		}
		fn := getFunc
		if m.Optional {
			fn = ogetFunc
		}
		ast.Patch(n, &ast.CallNode{
			Callee:    &ast.IdentifierNode{Value: fn},
			Arguments: []ast.Node{m.Node, m.Property},
		})
	case *ast.ChainNode:
		if !isCall(m.Node, getFunc, ogetFunc) {
			return
		}
		ast.Patch(n, &ast.CallNode{
			Callee:    &ast.IdentifierNode{Value: chainFunc},
			Arguments: []ast.Node{m.Node},
		})
	}
}

// jsonRoot reports whether n reads decoded JSON: value, headers, a
// predicate's element, or a member of those.
func jsonRoot(n ast.Node) bool {
	switch x := n.(type) {
	case *ast.IdentifierNode:
		return x.Value == "value" || x.Value == "headers"
	case *ast.PointerNode:
		return x.Name == ""
	case *ast.MemberNode:
		return !x.Method && jsonRoot(x.Node)
	case *ast.CallNode:
		return isCall(x, getFunc, ogetFunc) && jsonRoot(x.Arguments[0])
	}
	return false
}

func isCall(n ast.Node, names ...string) bool {
	c, ok := n.(*ast.CallNode)
	if !ok {
		return false
	}
	id, ok := c.Callee.(*ast.IdentifierNode)
	if !ok {
		return false
	}
	for _, name := range names {
		if id.Value == name {
			return true
		}
	}
	return false
}
