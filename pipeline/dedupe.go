package pipeline

import (
	"strings"
	"sync"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/expression"
	"github.com/weir-stream/weir/stream"
)

// dedupe compiles `dedupe: {key: <expr>, within: 10m}`, in the stage of
// the current key (after the shuffle of a key_by): a Transform
// "<name>-key" that evaluates each record's dedupe key (expression.Key:
// a string's text, a number as JSON writes it, anything else as JSON),
// under the step's on_error, and a Process <name> ("dedupe", then
// "dedupe-2"...) that drops a record whose dedupe key its key saw within
// the span (dedupeFn). Without key, the dedupe key is the record key: a
// record is dropped if its key had a record within the span.
//
// The span is in event time if the job has event time (its source sets a
// timestamp or a watermark, or a window step is anywhere in the job), and
// in processing time otherwise; the state expires by timers of that
// domain.
func (c *compiler) dedupe(path string, d *config.DedupeStep) {
	c.flush()
	switch {
	case d.Within <= 0:
		c.add(path+".within", "required: how long a dedupe key is remembered (a duration such as 10m)")
	case d.Within%1e6 != 0:
		c.add(path+".within", "%v: must be a whole number of milliseconds", d.Within)
	}
	var p *expression.Program
	if d.Key != nil {
		p = c.compileExpr(path+".key", *d.Key, expression.Any)
	}
	opts := c.onError(path, d.OnError, d.DeadLetterTopic)
	if len(c.problems) > 0 || c.cur == nil {
		return
	}
	name := c.stateName("dedupe")
	pool := &sync.Pool{New: func() any { return &evalTask{ev: expression.NewEvaluator()} }}
	w := c.watchFields(path, p)
	in := stream.Transform(c.cur, name+"-key", func(e stream.Elem, r Rec, emit func(dedupeIn[Rec]) error) error {
		if p == nil {
			return emit(dedupeIn[Rec]{v: r, dk: e.Key()})
		}
		r, err := r.decoded() // the key expression reads the value
		if err != nil {
			return poison(e, r, err)
		}
		w.check(r.V)
		t := pool.Get().(*evalTask)
		defer pool.Put(t)
		// The key is read before the element is done: t (and its buffer)
		// is not given back before emit returns.
		dk, err := t.ev.Key(p, elemVars(&t.vars, e, r), t.buf[:0])
		if err != nil {
			return poison(e, r, err)
		}
		t.buf = dk
		return emit(dedupeIn[Rec]{v: r, dk: dk})
	}, opts...)
	eventTime := c.jobHasEventTime()
	popts := []stream.ProcessOption{c.stateSchema("dedupe", "dedupe", dedupeDef(d))}
	if eventTime {
		popts = append(popts, stream.WithEventTime())
	}
	c.cur = stream.Process(in, name, newDedupeFn[Rec](d.Within, eventTime), popts...)
	if err := c.job.Err(); err != nil {
		c.addJob(path, err)
	}
}

// jobHasEventTime reports whether the job has event time: a source with a
// timestamp or a watermark, or a window step, in the pipeline or in a
// stream of job.streams.
func (c *compiler) jobHasEventTime() bool {
	has := func(steps []config.Step) bool {
		for _, s := range steps {
			if s.Window != nil || s.Source != nil && (s.Source.Timestamp != nil || s.Source.Watermark != nil) {
				return true
			}
		}
		return false
	}
	if has(c.cfg.Pipeline) {
		return true
	}
	for _, s := range c.cfg.Streams {
		if has(s.Steps) {
			return true
		}
	}
	return false
}

// dedupeDef is what defines a dedupe's state besides its kind, stage and
// key (the state schema's definition): the expression of its key, if it
// has one.
func dedupeDef(d *config.DedupeStep) string {
	if d.Key == nil {
		return ""
	}
	return "key " + strings.TrimSpace(d.Key.Src)
}
