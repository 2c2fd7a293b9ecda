package pipeline

import (
	"fmt"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/expression"
	"github.com/weir-stream/weir/stream"
)

// route compiles `route: [{when: <expr>, to: a}, {to: b}]`, the last step
// of its pipeline: every branch whose condition holds (a branch without
// one: every record) sends the record on to its stream of job.streams,
// which continues from there (graph.go). The stream fans out: a branch
// with a condition is an operator "route" (then "route-2"...) that keeps
// the records for which it is true; a condition that fails on a record
// fails the job (the route step has no on_error of its own yet).
func (c *compiler) route(path string, r *config.RouteStep) {
	c.flush()
	if len(r.Branches) == 0 {
		c.add(path, "required: at least one branch {when: <condition>, to: <stream>}")
		return
	}
	u := c.graph.cur
	changed, shuffled := c.keyState(len(u.steps) - 1)
	base := c.save()
	for i, b := range r.Branches {
		bp := fmt.Sprintf("%s[%d]", path, i)
		t := c.graph.byName[b.To]
		if t == nil || t.feeder != u {
			continue // link reported it
		}
		c.restore(base)
		if b.When != nil {
			p := c.compileExpr(bp+".when", *b.When, expression.Bool)
			if p == nil {
				continue
			}
			w := c.watchFields(bp, p)
			c.transform(bp, "route", "", "", func(t *evalTask, e stream.Elem, r Rec, emit func(Rec) error) error {
				w.check(r.V)
				ok, err := t.ev.Bool(p, elemVars(&t.vars, e, r))
				if err != nil || !ok {
					return err
				}
				return emit(r)
			})
		}
		f := c.save()
		f.keyChanged, f.shuffled = changed, shuffled
		t.fed = &f
	}
	c.restore(base)
}
