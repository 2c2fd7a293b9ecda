package pipeline

import (
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/expression"
	"github.com/weir-stream/weir/stream"
)

// filter compiles `filter: {where: <expr>}`: an operator "filter" that
// keeps the records for which where is true.
func (c *compiler) filter(path string, f *config.FilterStep) {
	c.flush()
	p := c.compileExpr(path+".where", f.Where, expression.Bool)
	if p == nil {
		return
	}
	// A record the filter keeps goes on as it came: a value read only by
	// its fields stays undecoded (evalTask.view).
	rd := readsOf(p)
	w := c.watchFields(path, p)
	// A condition over integer members (value.event_type == 2 &&
	// value.bid.auction % 123 == 0) is decided on the members' text where
	// each is an integer (pathPredicate); the expression runs otherwise.
	cmp := newPathPredicate(p)
	c.transformStep(path, "filter", f.OnError, f.DeadLetterTopic, false, func(t *evalTask, e stream.Elem, r Rec, emit func(Rec) error) error {
		if cmp != nil && r.raw != nil {
			if keep, ok := cmp.eval(t, r.raw); ok {
				if !keep {
					return nil
				}
				return emit(r)
			}
		}
		r, v, err := t.view(r, rd)
		if err != nil {
			return err
		}
		w.check(v)
		ok, err := t.ev.Bool(p, elemVarsOf(&t.vars, e, r, v))
		if err != nil || !ok {
			return err
		}
		return emit(r)
	})
}
