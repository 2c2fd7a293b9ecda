package pipeline

import (
	"fmt"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/expression"
	"github.com/weir-stream/weir/stream"
)

// flatMap compiles `flat_map: {each: <expr>}`: an operator "flat_map" that
// emits one record per element of the list each evaluates to, the element
// as its value, with the record's key, timestamp, headers and origin. Null
// emits none; any other non-list result is an error of the record (its
// on_error applies).
func (c *compiler) flatMap(path string, f *config.FlatMapStep) {
	c.flush()
	p := c.compileExpr(path+".each", f.Each, expression.Any)
	if p == nil {
		return
	}
	c.fields, c.numbers, c.raw = nil, nil, false
	w := c.watchFields(path, p)
	c.transform(path, "flat_map", f.OnError, f.DeadLetterTopic, func(t *evalTask, e stream.Elem, r Rec, emit func(Rec) error) error {
		w.check(r.V)
		v, err := t.ev.Eval(p, elemVars(&t.vars, e, r))
		if err != nil {
			return err
		}
		var list []any
		switch x := v.(type) {
		case nil:
			return nil
		case []any:
			list = x
		default:
			return fmt.Errorf("each: the result is %s, not a list", typeOf(v))
		}
		out := withOrigin(e, r)
		out.Fields = nil
		for _, el := range list {
			out.V = el
			if err := emit(out); err != nil {
				return err
			}
		}
		return nil
	})
}

// typeOf names the type of a value of the value model for errors: "a
// string", "null", "an object"...
func typeOf(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case int64, int, float64:
		return "a number"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("a %T", x)
	}
}
