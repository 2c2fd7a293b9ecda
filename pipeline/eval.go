package pipeline

import (
	"slices"
	"sync"
	"unsafe"

	"github.com/weir-stream/weir/expression"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/stream"
)

// stepFunc is a stateless step's function for one task: for each Rec it
// emits 0..n Recs; an error of its own follows the step's on_error. ev is
// the task's Evaluator and vars a Vars it may fill (elemVars) and reuse.
type stepFunc func(t *evalTask, e stream.Elem, r Rec, emit func(Rec) error) error

// evalTask is what a step function reuses from one record to the next in
// one task: an Evaluator (not safe for concurrent use) and a Vars.
type evalTask struct {
	ev   *expression.Evaluator
	vars expression.Vars
	buf  []byte
	proj map[string]any // view's projection, reused
	// texts and heads are scratch space of map's copyPaths, reused, and
	// ints of a filter's pathPredicate.
	texts, heads [][]byte
	ints         []int64
}

// valueReads is what a step's expressions read of a record's value: the
// whole value, or only some top-level fields (expression.ValueFields).
type valueReads struct {
	whole  bool
	fields []string
}

// readsOf is what the programs read of the value together (nil programs
// are skipped).
func readsOf(progs ...*expression.Program) valueReads {
	var rd valueReads
	for _, p := range progs {
		if p == nil {
			continue
		}
		f, ok := p.ValueFields()
		if !ok {
			return valueReads{whole: true}
		}
		rd.fields = append(rd.fields, f...)
	}
	slices.Sort(rd.fields)
	rd.fields = slices.Compact(rd.fields)
	return rd
}

// view returns the value the step's expressions see of r: r's value if it
// is decoded; else, for expressions that read only some fields, those
// fields decoded from its text into t.proj (valid until the next view of
// t; r stays undecoded, to be passed on as read); else r decoded, which
// the step passes on. The projection's top level is never the result of
// an expression that reads only fields of it, so reusing it is safe.
func (t *evalTask) view(r Rec, rd valueReads) (Rec, any, error) {
	switch {
	case r.raw == nil:
		return r, r.V, nil
	case rd.whole:
		r, err := r.decoded()
		return r, r.V, err
	case len(rd.fields) == 0:
		return r, nil, nil
	}
	if t.proj == nil {
		t.proj = make(map[string]any, len(rd.fields))
	}
	v, err := projectJSON(r.raw, rd.fields, t.proj)
	return r, v, err
}

// transform defines the stateless operator of a step: a stream.Transform
// named by opName(kind) whose function is fn, with the step's on_error
// (onError, deadLetterTopic at path+".on_error"). Each call gets an
// evalTask that no other goroutine uses meanwhile: Transform's function is
// shared by the job's tasks, so evalTasks are pooled (one per task in
// practice: a task takes one, runs fn, gives it back).
func (c *compiler) transform(path, kind, onError, deadLetterTopic string, fn stepFunc) {
	c.transformStep(path, kind, onError, deadLetterTopic, true, fn)
}

// transformStep is transform; decode says whether fn reads the record's
// value, which it then gets decoded (Rec.decoded), and passes on decoded
// if it emits it. Only a step that never reads the value as a whole (a
// key_by on a field) sets decode false.
func (c *compiler) transformStep(path, kind, onError, deadLetterTopic string, decode bool, fn stepFunc) {
	opts := c.onError(path, onError, deadLetterTopic)
	if len(c.problems) > 0 || c.cur == nil {
		return
	}
	pool := &sync.Pool{New: func() any { return &evalTask{ev: expression.NewEvaluator()} }}
	c.cur = stream.Transform(c.cur, c.opName(kind), func(e stream.Elem, r Rec, emit func(Rec) error) error {
		if decode {
			var err error
			if r, err = r.decoded(); err != nil {
				return poison(e, r, err)
			}
		}
		t := pool.Get().(*evalTask)
		defer pool.Put(t)
		return poison(e, r, fn(t, e, r, emit))
	}, opts...)
	if err := c.job.Err(); err != nil {
		c.addJob(path, err)
	}
}

// poison returns err, the error of a step's own function for r (the
// element e), as a poison record's (stream.PoisonError) naming the input
// record r came from; nil if err is nil. What a step computes from a
// record (an expression, a decoding) fails the same way on every attempt:
// under on_error: fail the job stops at the record, which `processor
// resume --skip` can skip, instead of restarting the task over and over.
// An error of emit (a downstream operator's) may pass through poison:
// stream.Transform returns emit's error as it is, whatever fn returned.
func poison(e stream.Elem, r Rec, err error) error {
	if err == nil {
		return nil
	}
	r = withOrigin(e, r)
	return &stream.PoisonError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: err}
}

// onError returns the Transform options of a step's on_error and
// dead_letter_topic (path is the step's).
func (c *compiler) onError(path, onError, deadLetterTopic string) []stream.TransformOption {
	p, err := kafkaio.ParseOnError(onError)
	switch {
	case err != nil:
		c.add(path+".on_error", "%q: must be fail, skip or dead-letter", onError)
		return nil
	case p == kafkaio.OnErrorDeadLetter && deadLetterTopic == "":
		c.add(path+".dead_letter_topic", "required when on_error is dead-letter")
		return nil
	case p == kafkaio.OnErrorDeadLetter:
		return []stream.TransformOption{stream.OnErrorPolicy[Rec](p, deadLetterTopic, JSONCodec{})}
	case deadLetterTopic != "":
		c.add(path+".dead_letter_topic", "set, but on_error is %q: set on_error to dead-letter or remove it", onError)
		return nil
	}
	return []stream.TransformOption{stream.OnErrorPolicy[Rec](p, "", nil)}
}

// elemVars fills v with what an expression sees of r in a stateless
// operator: its value, the element's key, timestamp and headers, and r's
// origin (the element's if r has none yet).
//
// r's value must be decoded (Rec.decoded): compiler.transform does it.
func elemVars(v *expression.Vars, e stream.Elem, r Rec) *expression.Vars {
	return elemVarsOf(v, e, r, r.V)
}

// elemVarsOf is elemVars with the value the expressions see given: view's.
func elemVarsOf(v *expression.Vars, e stream.Elem, r Rec, value any) *expression.Vars {
	*v = expression.Vars{Value: value, Key: e.Key(), Timestamp: e.Timestamp(), Headers: headers(e.Headers()),
		Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	if r.Topic == "" {
		v.Topic, v.Partition, v.Offset = e.Topic(), e.Partition(), e.Offset()
	}
	return v
}

// withOrigin returns r with its origin set from e if it has none: before a
// shuffle, which replaces the element's origin with the shuffle topic's.
func withOrigin(e stream.Elem, r Rec) Rec {
	if r.Topic == "" {
		r.Topic, r.Partition, r.Offset = e.Topic(), e.Partition(), e.Offset()
	}
	return r
}

// headers views stream headers as expression headers: the two types have
// the same layout (expression.Header's doc), so no copy is made.
func headers(h []stream.Header) []expression.Header {
	if len(h) == 0 {
		return nil
	}
	return unsafe.Slice((*expression.Header)(unsafe.Pointer(unsafe.SliceData(h))), len(h))
}
