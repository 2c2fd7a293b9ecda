package pipeline

import (
	"bytes"
	"slices"

	"github.com/weir-stream/weir/expression"
	"github.com/weir-stream/weir/internal/jsontext"
)

// This file locates paths of fields (value.bid.price) in a JSON object's
// text, all of them in one scan, as byte ranges: the fast path of a map
// whose fields are plain reads of paths (mapStep), which copies the
// ranges into its output without decoding them. Like scanObject, it
// trusts that the text is JSON (checked where it was read) and gives up
// on what it does not expect (a key with an escape, in an object on a
// path); its callers then evaluate the expressions.

// fieldPaths is a set of paths compiled into a tree: a node per distinct
// prefix, numbered in preorder, so that a node's descendants follow it
// (nodes[k+1:nodes[k].end]). Node 0 is the value itself. It is immutable
// and shared by the tasks of a job.
type fieldPaths struct {
	nodes []pathNode
	// leaf[i] is the node where path i ends, via[i] the nodes it goes
	// through before (the objects it reads a member of, the value aside).
	leaf []int32
	via  [][]int32
}

type pathNode struct {
	name string
	kids []int32
	end  int32
}

// compilePaths compiles paths (each at least one name long).
func compilePaths(paths [][]string) *fieldPaths {
	fp := &fieldPaths{leaf: make([]int32, len(paths)), via: make([][]int32, len(paths))}
	var build func(name string, prefix int, idx []int)
	build = func(name string, prefix int, idx []int) {
		k := int32(len(fp.nodes))
		fp.nodes = append(fp.nodes, pathNode{name: name})
		var names []string // the kids, in the order the paths name them
		for _, i := range idx {
			if len(paths[i]) == prefix {
				fp.leaf[i] = k
			} else if n := paths[i][prefix]; !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
		for _, n := range names {
			var sub []int
			for _, i := range idx {
				if len(paths[i]) > prefix && paths[i][prefix] == n {
					sub = append(sub, i)
					if prefix > 0 {
						fp.via[i] = append(fp.via[i], k)
					}
				}
			}
			fp.nodes[k].kids = append(fp.nodes[k].kids, int32(len(fp.nodes)))
			build(n, prefix+1, sub)
		}
		fp.nodes[k].end = int32(len(fp.nodes))
	}
	all := make([]int, len(paths))
	for i := range all {
		all[i] = i
	}
	build("", 0, all)
	for i := range fp.via {
		slices.Sort(fp.via[i])
	}
	return fp
}

// locate sets texts[k] (len(fp.nodes)) to the text of node k's value in
// the JSON object b, nil where b has no such member: the last one where a
// name repeats in an object, and a member of the last of the objects a
// repeated name holds, as DecodeJSON decodes b. It returns false if b
// cannot be scanned (not an object, a key with an escape in an object on
// a path, text it cannot follow).
func (fp *fieldPaths) locate(b []byte, texts [][]byte) bool {
	clear(texts)
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	n, ok := fp.object(b[i:], 0, texts)
	return ok && skipSpace(b, i+n) == len(b)
}

// object scans the object at the start of b, the value of node k, setting
// the texts of k's descendants; it returns the object's length.
func (fp *fieldPaths) object(b []byte, k int32, texts [][]byte) (int, bool) {
	i := skipSpace(b, 1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	kids := fp.nodes[k].kids
	for {
		if i >= len(b) || b[i] != '"' {
			return 0, false
		}
		end := bytes.IndexByte(b[i+1:], '"')
		if end < 0 {
			return 0, false
		}
		key := b[i+1 : i+1+end]
		if bytes.IndexByte(key, '\\') >= 0 {
			return 0, false
		}
		i = skipSpace(b, i+2+end)
		if i >= len(b) || b[i] != ':' {
			return 0, false
		}
		i = skipSpace(b, i+1)
		kid := int32(-1)
		for _, c := range kids {
			if string(key) == fp.nodes[c].name {
				kid = c
				break
			}
		}
		var n int
		switch {
		case kid < 0:
			n = skipValue(b[i:])
		case len(fp.nodes[kid].kids) > 0 && i < len(b) && b[i] == '{':
			// A repeated name: what an earlier occurrence held is gone.
			clear(texts[kid+1 : fp.nodes[kid].end])
			var ok bool
			if n, ok = fp.object(b[i:], kid, texts); !ok {
				return 0, false
			}
			texts[kid] = b[i : i+n]
		default:
			clear(texts[kid+1 : fp.nodes[kid].end])
			if n = skipValue(b[i:]); n > 0 {
				texts[kid] = b[i : i+n]
			}
		}
		if n <= 0 {
			return 0, false
		}
		i = skipSpace(b, i+n)
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return i + 1, true
		default:
			return 0, false
		}
	}
}

// text returns the text of path i's value after locate filled texts, nil
// if the last object on the path lacks the member; ok is false if a
// member before the last is missing or not an object (evaluating the
// path says what it gives then: an error, or nil under ?.).
func (fp *fieldPaths) text(i int, texts [][]byte) (text []byte, ok bool) {
	for _, k := range fp.via[i] {
		if t := texts[k]; t == nil || t[0] != '{' {
			return nil, false
		}
	}
	return texts[fp.leaf[i]], true
}

// pathCopy is how a map's fast path writes one field of its output: the
// text of a path copied, or, with scaled, the path's integer times factor
// (expression.Program.ScaledPath).
type pathCopy struct {
	scaled bool
	factor float64
}

// copyPaths returns the JSON text of the object {names[i]: <path i>, …}
// built from the paths fp of the JSON object b, as AppendJSON writes the
// object that map's expressions build over the decoded value (a path the
// last object lacks is null); how[i] says how field i is computed, texts
// is scratch space of len(fp.nodes). The text is a new slice. Each value
// is copied as written where that is how AppendJSON writes it
// (appendAsEncoded), and decoded and encoded otherwise. ok is false if b
// cannot be scanned, or if a field's expression must be evaluated to say
// what it gives (a path through a missing member, a scaled path that is
// not an integer, a number out of a float64's range, which fails it).
func copyPaths(b []byte, names []string, fp *fieldPaths, how []pathCopy, texts [][]byte) (out []byte, ok bool) {
	if !fp.locate(b, texts) {
		return nil, false
	}
	size := 2 // what the object takes when its values are copied
	for i, n := range names {
		x := len(texts[fp.leaf[i]])
		if how[i].scaled {
			x = 24 // the longest float64 AppendJSONNumber writes
		}
		size += len(n) + 4 + max(x, 4)
	}
	dst := make([]byte, 0, size)
	out = append(dst, '{')
	for i, n := range names {
		x, ok := fp.text(i, texts)
		if !ok {
			return nil, false
		}
		if i > 0 {
			out = append(out, ',')
		}
		out = jsontext.AppendText(out, n)
		out = append(out, ':')
		if how[i].scaled {
			if x == nil || !isIntegerText(x) {
				return nil, false
			}
			v, ok := parseInt(x)
			if f := float64(v) * how[i].factor; ok && finite(f) {
				out = AppendJSONNumber(out, f)
				continue
			}
			return nil, false
		}
		if x == nil {
			out = append(out, "null"...)
			continue
		}
		var copied bool
		if out, copied = appendAsEncoded(out, x); copied {
			continue
		}
		v, _, err := DecodeJSON(x)
		if err != nil || !allFinite(v) {
			return nil, false // a number out of range fails the expression
		}
		if out, err = AppendJSON(out, v, nil); err != nil {
			return nil, false
		}
	}
	return append(out, '}'), true
}

// pathPredicate is a filter's condition over integer members of the
// value (expression.IntPredicate), decided from the value's text.
type pathPredicate struct {
	paths *fieldPaths
	pred  *expression.IntPredicate
}

// newPathPredicate returns the pathPredicate of p, nil if p is not an
// IntPredicate.
func newPathPredicate(p *expression.Program) *pathPredicate {
	pred, ok := p.IntPredicate()
	if !ok {
		return nil
	}
	return &pathPredicate{paths: compilePaths(pred.Paths()), pred: pred}
}

// eval returns the condition's result over the JSON object b, if each
// path it reads holds an integer that an int64 holds (as DecodeJSON
// decodes it); ok is false otherwise (a missing or null member, another
// type, a path through a missing member, b not scanned, a % by zero): the
// expression decides.
func (pp *pathPredicate) eval(t *evalTask, b []byte) (result, ok bool) {
	t.texts = slices.Grow(t.texts[:0], len(pp.paths.nodes))[:len(pp.paths.nodes)]
	if !pp.paths.locate(b, t.texts) {
		return false, false
	}
	t.ints = t.ints[:0]
	for i := range pp.paths.leaf {
		x, ok := pp.paths.text(i, t.texts)
		if !ok || x == nil || !isIntegerText(x) {
			return false, false
		}
		v, ok := parseInt(x)
		if !ok {
			return false, false
		}
		t.ints = append(t.ints, v)
	}
	return pp.pred.Eval(t.ints)
}

// pathTextKey appends to dst the key that expression.Evaluator.Key gives
// the read of the one path of fp over the JSON object b, read from the
// path's text if that text is the key (textKey's cases, a path the last
// object lacks being null); texts is scratch space of len(fp.nodes). ok
// is false otherwise, and if b cannot be scanned or a member on the way
// is missing or not an object: the caller evaluates the expression.
func pathTextKey(dst, b []byte, fp *fieldPaths, texts [][]byte) (key []byte, ok bool) {
	if !fp.locate(b, texts) {
		return dst, false
	}
	text, ok := fp.text(0, texts)
	if !ok {
		return dst, false
	}
	return textKey(dst, text)
}

// allFinite reports whether the decoded value v holds no number that
// JSON cannot write (1e400 decodes to +Inf): an expression whose result
// holds one fails.
func allFinite(v any) bool {
	switch x := v.(type) {
	case float64:
		return finite(x)
	case map[string]any:
		for _, e := range x {
			if !allFinite(e) {
				return false
			}
		}
	case []any:
		for _, e := range x {
			if !allFinite(e) {
				return false
			}
		}
	}
	return true
}
