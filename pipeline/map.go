package pipeline

import (
	"fmt"
	"slices"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/expression"
	"github.com/weir-stream/weir/stream"
)

// mapStep compiles `map: {value: ..., key: ...}`: an operator "map" that
// computes each record's new value (one expression, or an object of
// named fields, written in their order) and, with key, its new key. Both
// read the input record. A key is a key change, as key_by: it shuffles
// exactly when a keyed step follows before the next key change (see
// keyBy).
func (c *compiler) mapStep(path string, m *config.MapStep, rest []config.Step) {
	c.flush()
	var (
		value  *expression.Program
		names  []string
		fields []*expression.Program
		key    *expression.Program
	)
	switch {
	case m.Value == nil && m.Key == nil:
		c.add(path, "needs value, key or both: what the map computes")
	case m.Value == nil:
	case m.Value.Expr != nil:
		value = c.compileExpr(path+".value", *m.Value.Expr, expression.Any)
	case len(m.Value.Fields) == 0:
		c.add(path+".value", "an object with no fields: write at least one field, or an expression")
	default:
		for _, f := range m.Value.Fields {
			if slices.Contains(names, f.Name) {
				c.addAt(f.Expr, 0, path+".value."+f.Name, "field %q written twice", f.Name)
			}
			names = append(names, f.Name)
			fields = append(fields, c.compileExpr(path+".value."+f.Name, f.Expr, expression.Any))
		}
	}
	if m.Key != nil {
		key = c.compileExpr(path+".key", *m.Key, expression.Any)
	}
	if len(c.problems) > 0 {
		return
	}
	rd := readsOf(append([]*expression.Program{value, key}, fields...)...)
	// An object of plain reads of paths (value.f, value.bid.price), and of
	// constants times one (0.908 * value.bid.price), is written from the
	// value's text, when it is undecoded: the paths are located in one scan
	// and their text copied, nothing is decoded but values that are not
	// written as read (copyPaths). A map that sets the key too evaluates
	// its expressions.
	var (
		copies *fieldPaths
		how    []pathCopy
		heads  []string // each path's top-level member, for the missing-field watch
	)
	if key == nil && fields != nil {
		var paths [][]string
		for _, p := range fields {
			if path, ok := p.ValuePath(); ok {
				paths, how = append(paths, path), append(how, pathCopy{})
			} else if path, c, ok := p.ScaledPath(); ok {
				paths, how = append(paths, path), append(how, pathCopy{scaled: true, factor: c})
			} else {
				paths = nil
				break
			}
			heads = append(heads, paths[len(paths)-1][0])
		}
		if paths != nil {
			copies = compilePaths(paths)
		}
	}
	w := c.watchFields(path, append([]*expression.Program{value, key}, fields...)...)
	c.transformStep(path, "map", m.OnError, m.DeadLetterTopic, false, func(t *evalTask, e stream.Elem, r Rec, emit func(Rec) error) error {
		if copies != nil && r.raw != nil {
			t.texts = slices.Grow(t.texts[:0], len(copies.nodes))[:len(copies.nodes)]
			if raw, ok := copyPaths(r.raw, names, copies, how, t.texts); ok {
				if w != nil {
					w.checkTexts(heads, headTexts(t, copies))
				}
				r.raw = raw
				return emit(r)
			}
		}
		r, in, err := t.view(r, rd)
		if err != nil {
			return err
		}
		w.check(in)
		vars := elemVarsOf(&t.vars, e, r, in)
		out := r
		switch {
		case value != nil:
			v, err := t.ev.Eval(value, vars)
			if err != nil {
				return fmt.Errorf("value: %w", err)
			}
			out.V, out.Fields, out.raw = v, nil, nil
		case fields != nil:
			o := make(map[string]any, len(fields))
			for i, p := range fields {
				v, err := t.ev.Eval(p, vars)
				if err != nil {
					return fmt.Errorf("value.%s: %w", names[i], err)
				}
				o[names[i]] = v
			}
			out.V, out.Fields, out.raw = o, names, nil
		}
		if key != nil {
			k, err := t.ev.Key(key, vars, t.buf[:0])
			if err != nil {
				return fmt.Errorf("key: %w", err)
			}
			t.buf = k
			out = withOrigin(e, out)
			out.key = k
		}
		return emit(out)
	})
	switch {
	case value != nil:
		c.fields, c.numbers = nil, nil
	case fields != nil:
		c.fields, c.numbers = names, nil
	}
	c.raw = c.raw && value == nil && fields == nil
	if key != nil {
		c.pending = &pendingKey{path: path + ".key", desc: "map key " + m.Key.Src}
		c.checkLegacy(path+".key", rest)
	}
}

// headTexts returns, for each path of fp after a successful copyPaths,
// the text of its top-level member as t.texts holds it (nil: missing),
// in scratch space of t.
func headTexts(t *evalTask, fp *fieldPaths) [][]byte {
	t.heads = t.heads[:0]
	for i := range fp.leaf {
		k := fp.leaf[i]
		if len(fp.via[i]) > 0 {
			k = fp.via[i][0]
		}
		t.heads = append(t.heads, t.texts[k])
	}
	return t.heads
}
