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
	c.transform(path, "filter", f.OnError, f.DeadLetterTopic, func(t *evalTask, e stream.Elem, r Rec, emit func(Rec) error) error {
		ok, err := t.ev.Bool(p, elemVars(&t.vars, e, r))
		if err != nil || !ok {
			return err
		}
		return emit(r)
	})
}
