package pipeline

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/expression"
	"github.com/weir-stream/weir/stream"
)

// nextKeyed returns the first keyed step (aggregate, window, dedupe, join)
// that the steps after a key change lead to before the next key change or
// the end: then the key change shuffles. Its kind is "" if none.
func nextKeyed(steps []config.Step) (config.Step, string) {
	for _, s := range steps {
		switch kind, _ := stepKind(s); kind {
		case "aggregate", "window", "dedupe", "join":
			return s, kind
		case "key_by", "sink", "route":
			return s, ""
		case "map":
			if s.Map.Key != nil {
				return s, ""
			}
		}
	}
	return config.Step{}, ""
}

// keyBy compiles `key_by: {field: f}` or `key_by: {expr: e}`, with
// parallelism n: an operator "key_by" computes each record's key (f's
// value: a string's text, a number as JSON writes it; or e's result, see
// expression.Evaluator.Key), and a KeyBy applies it (pending, see flush).
// If a keyed step follows (nextKeyed), the job is cut there: the stage
// after it is named by that step's first operator and has n tasks.
//
// A field that a record lacks, or that is no string or number, is an
// error wrapping stream.ErrDecode: the key_by's on_error applies to it,
// and, in the source's stage under the key_by's default (fail), the
// source's on_error (as before expressions).
func (c *compiler) keyBy(path string, k *config.KeyByStep, rest []config.Step) {
	c.flush()
	_, keyed := nextKeyed(rest)
	shuffle := keyed != "" || c.joinFollows(rest)
	var p *expression.Program
	switch {
	case k.Field != "" && k.Expr != nil:
		c.add(path, "set both field and expr: use one")
	case k.Expr != nil:
		p = c.compileExpr(path+".expr", *k.Expr, expression.Any)
	case k.Field == "":
		c.add(path+".field", "required: the top-level JSON field to key by (or expr: an expression)")
	case c.raw:
		c.add(path+".field", "key_by reads a JSON field, but the values are raw bytes (source format raw): use a json source, or expr")
	case c.fields != nil && !slices.Contains(c.fields, k.Field):
		c.add(path+".field", "%q: the values reaching this key_by have only the fields %s", k.Field, listFields(c.fields))
	}
	var opts []stream.ShuffleOption
	switch {
	case k.Parallelism < 0:
		c.add(path+".parallelism", "%d: must be at least 1 (or left out for job.parallelism)", k.Parallelism)
	case k.Parallelism > 0 && !shuffle:
		c.add(path+".parallelism", "set, but no aggregate follows this key_by (nor a window, dedupe or join), so no stage starts here: remove it")
	case k.Parallelism > 0:
		opts = append(opts, stream.Parallelism(k.Parallelism))
	}
	if len(c.problems) > 0 {
		return
	}
	c.checkLegacy(path, rest)
	if p != nil {
		rd := readsOf(p)
		// An expression that only reads a path (value.f, value.a.b) keys
		// an undecoded value by the path's text where that is the key
		// (pathTextKey), and runs otherwise.
		var plain *fieldPaths
		if fpath, ok := p.ValuePath(); ok {
			plain = compilePaths([][]string{fpath})
		}
		// A record without the field is counted where the expression is
		// evaluated, not on the fast path (a null key shows anyway).
		w := c.watchFields(path, p)
		c.transformStep(path, "key_by", k.OnError, k.DeadLetterTopic, false, func(t *evalTask, e stream.Elem, r Rec, emit func(Rec) error) error {
			if plain != nil && r.raw != nil {
				t.texts = slices.Grow(t.texts[:0], len(plain.nodes))[:len(plain.nodes)]
				if key, ok := pathTextKey(t.buf[:0], r.raw, plain, t.texts); ok {
					t.buf = key
					r = withOrigin(e, r)
					r.key = key
					return emit(r)
				}
			}
			r, v, err := t.view(r, rd)
			if err != nil {
				return err
			}
			w.check(v)
			key, err := t.ev.Key(p, elemVarsOf(&t.vars, e, r, v), t.buf[:0])
			if err != nil {
				return err
			}
			t.buf = key
			r = withOrigin(e, r)
			r.key = key
			return emit(r)
		})
	} else {
		field := k.Field
		// The one field is read from the text if the value is not decoded:
		// a record that only travels to its key group is never decoded.
		c.transformStep(path, "key_by", k.OnError, k.DeadLetterTopic, false, func(t *evalTask, e stream.Elem, r Rec, emit func(Rec) error) error {
			key, err := recFieldKey(t.buf[:0], r, field)
			if err != nil {
				return err
			}
			t.buf = key
			r = withOrigin(e, r)
			r.key = key
			return emit(r)
		})
	}
	desc := "key_by field " + k.Field
	if k.Expr != nil {
		desc = "key_by expr " + k.Expr.Src
	}
	c.pending = &pendingKey{path: path, opts: opts, desc: desc}
}

// fieldKey appends the key of `key_by: {field: name}` to dst: the value
// of the top-level field name of an object value, a string's text or a
// number as JSON writes it. A value without the field, or a field of
// another type, is an error that names the field and wraps
// stream.ErrDecode.
func fieldKey(dst []byte, v any, name string) ([]byte, error) {
	o, _ := v.(map[string]any)
	f, ok := o[name]
	return fieldValueKey(dst, f, ok, name)
}

// recFieldKey is fieldKey of r's value, read from its text if it is not
// decoded (rawField: the same field DecodeJSON would give).
func recFieldKey(dst []byte, r Rec, name string) ([]byte, error) {
	if r.raw == nil {
		return fieldKey(dst, r.V, name)
	}
	f, ok, err := rawField(r.raw, name)
	if err != nil {
		return nil, err
	}
	return fieldValueKey(dst, f, ok, name)
}

// fieldValueKey appends the key of field name's value f (ok: present).
func fieldValueKey(dst []byte, f any, ok bool, name string) ([]byte, error) {
	if !ok {
		return nil, fmt.Errorf("%w: key_by: the value has no top-level field %q", stream.ErrDecode, name)
	}
	switch x := f.(type) {
	case string:
		return append(dst, x...), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case float64:
		return AppendJSONNumber(dst, x), nil
	}
	return nil, fmt.Errorf("%w: key_by: field %q is %s, not a string or a number", stream.ErrDecode, name, typeOf(f))
}
