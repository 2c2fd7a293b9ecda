// Package pipeline owns the YAML job language: it compiles the steps of
// config.Job.Pipeline (source, aggregate, sink, and later filters, maps and
// windows) into a built *stream.Job, which the stock processor binary runs
// without any Go code.
//
// A pipeline is a list of steps applied in order to one stream of records
// whose values are bytes; each step's compiler takes the stream so far and
// returns the next one, and tracks whether the values are JSON, so that a
// step that needs JSON (a json sink, later a filter on a field) is checked
// at compile time. Adding a step kind is adding a field to config.Step, a
// case to stepKind and a compile function.
//
// The package has no state of its own and does no I/O.
package pipeline

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// Compile compiles a YAML job into a built stream.Job. Every problem is
// reported as a *config.FieldError naming the setting's key path
// ("job.pipeline[1].aggregate.op"); they are joined.
func Compile(job config.Job) (*stream.Job, error) {
	c := &compiler{job: stream.NewJob(job.Name), ops: make(map[string]int)}
	if err := c.job.Err(); err != nil {
		c.addJob("job.name", err)
	}
	if len(job.Pipeline) == 0 {
		c.add("job.pipeline", "required: at least a source and a sink step")
		return nil, c.err()
	}
	for i, step := range job.Pipeline {
		path := fmt.Sprintf("job.pipeline[%d]", i)
		kind, n := stepKind(step)
		if n != 1 {
			c.add(path, "must have exactly one of source, aggregate, sink (has %d)", n)
			return nil, c.err()
		}
		path += "." + kind
		switch {
		case i == 0 && kind != "source":
			c.add(path, "the first step must be a source")
		case i > 0 && kind == "source":
			c.add(path, "a source must be the first step (a pipeline reads one source)")
		case i == len(job.Pipeline)-1 && kind != "sink":
			c.add(path, "the last step must be a sink")
		case i < len(job.Pipeline)-1 && kind == "sink":
			c.add(path, "a sink must be the last step")
		}
		if len(c.problems) > 0 {
			return nil, c.err()
		}
		switch kind {
		case "source":
			c.source(path, step.Source)
		case "aggregate":
			c.aggregate(path, step.Aggregate)
		case "sink":
			c.sink(path, step.Sink)
		}
		if len(c.problems) > 0 {
			return nil, c.err()
		}
	}
	if err := c.job.Build(); err != nil {
		c.addJob("job.pipeline", err)
		return nil, c.err()
	}
	return c.job, nil
}

// stepKind returns the name of the step's kind and how many kinds it sets.
func stepKind(s config.Step) (string, int) {
	kind, n := "", 0
	if s.Source != nil {
		kind, n = "source", n+1
	}
	if s.Aggregate != nil {
		kind, n = "aggregate", n+1
	}
	if s.Sink != nil {
		kind, n = "sink", n+1
	}
	return kind, n
}

// compiler is the state of one compilation: the stream so far and what is
// known about its values.
type compiler struct {
	job      *stream.Job
	cur      *stream.Stream[[]byte]
	json     bool // the current stream's values are JSON documents
	ops      map[string]int
	problems []error
}

func (c *compiler) add(path, format string, args ...any) {
	c.problems = append(c.problems, &config.FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// addJob reports a problem the stream package found in the job the step at
// path defined. Its messages are for Go authors: they end in the Go call
// site of the builder ("(pipeline.go:167)"), which is this package's, not
// the YAML user's; the key path says where the problem is instead.
func (c *compiler) addJob(path string, err error) {
	msg := strings.TrimPrefix(err.Error(), stream.ErrInvalidJob.Error()+": ")
	msg = goSiteRE.ReplaceAllString(msg, "")
	c.add(path, "%s", msg)
}

// goSiteRE matches the Go call sites in stream's messages:
// " (pipeline.go:167)", " (source at pipeline.go:167)".
var goSiteRE = regexp.MustCompile(` \((?:[a-z ]+ at )?[\w.-]+\.go:\d+\)`)

func (c *compiler) err() error { return errors.Join(c.problems...) }

// opName returns a stable operator name for the n-th operator of a kind:
// "count", then "count-2"... Operator names name state, so they must not
// depend on the position of the step in the pipeline.
func (c *compiler) opName(kind string) string {
	c.ops[kind]++
	if n := c.ops[kind]; n > 1 {
		return fmt.Sprintf("%s-%d", kind, n)
	}
	return kind
}

func (c *compiler) source(path string, s *config.SourceStep) {
	src := stream.KafkaSource{Topics: s.Topics, DeadLetterTopic: s.DeadLetterTopic}
	if len(s.Topics) == 0 {
		c.add(path+".topics", "required: at least one topic")
	}
	switch s.Format {
	case "", config.FormatJSON:
		src.Format = stream.FormatJSON
		c.json = true
	case config.FormatRaw:
		src.Format = stream.FormatRaw
	default:
		c.add(path+".format", "%q: must be json or raw", s.Format)
	}
	switch s.Start {
	case "", config.StartEarliest:
		src.Start = stream.Start{Kind: stream.StartEarliest}
	case config.StartLatest:
		src.Start = stream.Start{Kind: stream.StartLatest}
	default:
		t, err := time.Parse(time.RFC3339Nano, s.Start)
		if err != nil {
			c.add(path+".start", "%q: must be earliest, latest or an RFC 3339 time", s.Start)
		}
		src.Start = stream.StartAt(t)
	}
	switch s.OnError {
	case "", config.OnErrorFail:
		src.OnError = stream.OnErrorFail
	case config.OnErrorSkip:
		src.OnError = stream.OnErrorSkip
	case config.OnErrorDeadLetter:
		src.OnError = stream.OnErrorDeadLetter
		if s.DeadLetterTopic == "" {
			c.add(path+".dead_letter_topic", "required when on_error is dead-letter")
		}
	default:
		c.add(path+".on_error", "%q: must be fail, skip or dead-letter", s.OnError)
	}
	if s.DeadLetterTopic != "" && src.OnError != stream.OnErrorDeadLetter {
		c.add(path+".dead_letter_topic", "set, but on_error is %q: set on_error to dead-letter or remove it", s.OnError)
	}
	if len(c.problems) > 0 {
		return
	}
	// The values stay bytes: the source checks the format at the edge (and
	// applies on_error there), and the steps read the bytes they need.
	c.cur = stream.From(c.job, src, stream.RawCodec{})
	if err := c.job.Err(); err != nil {
		c.addJob(path, err)
	}
}

func (c *compiler) aggregate(path string, a *config.AggregateStep) {
	switch a.Op {
	case config.OpCount:
		c.cur = stream.Process(c.cur, c.opName("count"), newCountJSON)
		c.json = true
	default:
		c.add(path+".op", "%q: must be %q", a.Op, config.OpCount)
		return
	}
	if err := c.job.Err(); err != nil {
		c.addJob(path, err)
	}
}

func (c *compiler) sink(path string, s *config.SinkStep) {
	sink := stream.KafkaSink{Topic: s.Topic, TransactionTimeout: s.TransactionTimeout}
	if s.Topic == "" {
		c.add(path+".topic", "required")
	}
	switch s.Format {
	case "", config.FormatJSON:
		if !c.json {
			c.add(path+".format", "json, but the values reaching the sink are raw bytes (source format raw): use a json source, or a step that produces JSON")
		}
	default:
		c.add(path+".format", "%q: must be json", s.Format)
	}
	switch s.Delivery {
	case "", config.ModeExactlyOnce:
		sink.Delivery = stream.DeliveryExactlyOnce
	case config.ModeAtLeastOnce:
		sink.Delivery = stream.DeliveryAtLeastOnce
	default:
		c.add(path+".delivery", "%q: must be exactly-once or at-least-once", s.Delivery)
	}
	if s.TransactionTimeout < 0 {
		c.add(path+".transaction_timeout", "%v: must not be negative", s.TransactionTimeout)
	}
	if len(c.problems) > 0 {
		return
	}
	stream.To(c.cur, sink, stream.RawCodec{})
	if err := c.job.Err(); err != nil {
		c.addJob(path, err)
	}
}

// countJSON is `aggregate: {op: count}`: per record key, it counts the
// records and emits, for each, {"key":"<key>","count":<n>}. The count is
// a value state "<operator>/count" holding an int64.
type countJSON struct {
	n   *state.ValueState[int64]
	buf []byte
}

func newCountJSON() stream.KeyedProcessFunction[[]byte, []byte] { return &countJSON{} }

func (c *countJSON) Open(oc stream.OpenContext) error {
	var err error
	c.n, err = state.NewValueState(oc.Backend, oc.StateName("count"), state.Int64Codec{})
	return err
}

func (c *countJSON) ProcessElement(ctx *stream.Context[[]byte], _ []byte) error {
	n, _, err := c.n.Get()
	if err != nil {
		return err
	}
	n++
	if err := c.n.Put(n); err != nil {
		return err
	}
	c.buf = AppendCountJSON(c.buf[:0], ctx.Key(), n)
	return ctx.Emit(c.buf)
}
