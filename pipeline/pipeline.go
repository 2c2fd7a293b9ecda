// Package pipeline owns the YAML job language's compiler: it compiles the
// steps of config.Job.Pipeline (and job.streams) into a built *stream.Job,
// which the stock processor binary runs without any Go code.
//
// A pipeline is a list of steps applied in order to one stream of Recs:
// the records' values decoded once, in the source stage, into the value
// model of expressions (see Rec), and encoded as JSON by sinks and
// shuffles. Each step kind has its own file and compile method
// (filter.go: compiler.filter, ...), which takes the stream so far
// (compiler.cur) and leaves the next one there. A step that evaluates
// expressions compiles them once (compiler.compileExpr) and evaluates them
// per record with its task's Evaluator (compiler.transform, eval.go);
// a record on which an expression fails follows the step's on_error.
//
// A key change (key_by, map's key) computes the new key into the Rec and
// leaves a pending stream.KeyBy (compiler.pending), which the next step
// applies (compiler.flush): it is a shuffle exactly when a keyed step
// (aggregate, window, dedupe, join) follows before the next key change or
// sink; otherwise it only changes the key that sinks write.
//
// The package has no state of its own and does no I/O.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"github.com/weir-stream/weir/compat"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/expression"
	"github.com/weir-stream/weir/format"
	"github.com/weir-stream/weir/stream"
)

// Compile compiles a YAML job into a built stream.Job. Every problem is
// reported as a *config.FieldError naming the setting's key path
// ("job.pipeline[1].aggregate.op") and, for an expression, where in the
// job file the problem is (Origin "job.yaml:4:22"); they are joined.
func Compile(job config.Job) (*stream.Job, error) { return CompileWith(job, Env{}) }

// Env is what a compiled job takes from the process that runs it.
type Env struct {
	// Context bounds what the job's formats wait for (the retries of an
	// unreachable schema registry): the process's life. Nil: never ends.
	Context context.Context
	// Registry returns the schema-registry client of an avro format's
	// settings; the process shares one per URL, with its metrics. Nil:
	// one client per format, without metrics.
	Registry func(config.Format) (*format.Registry, error)
	// Missing, if set, returns the function that counts a record whose
	// value, an object, lacks the top-level field field that an
	// expression of the step at key path step reads as if it were always
	// there (a misspelt field is null on every record, and no error says
	// so): the process's weir_field_missing_total{step,field}. It is
	// called when the job is compiled; what it returns, for every such
	// record, by any task: it must be safe for concurrent use and should
	// not allocate.
	Missing func(step, field string) func()
}

// CompileWith is Compile with env. Compiling makes no request: the sinks'
// schemas are registered by the job's Start.
func CompileWith(job config.Job, env Env) (*stream.Job, error) {
	if env.Context == nil {
		env.Context = context.Background()
	}
	if env.Registry == nil {
		env.Registry = func(f config.Format) (*format.Registry, error) {
			return format.NewRegistry(format.RegistryConfig{URL: f.Registry, Username: f.RegistryUsername, Password: f.RegistryPassword})
		}
	}
	c := &compiler{cfg: job, env: env, job: stream.NewJob(job.Name), ops: make(map[string]int)}
	if err := c.job.Err(); err != nil {
		c.addJob("job.name", err)
	}
	if len(job.Pipeline) == 0 {
		c.add("job.pipeline", "required: at least a source and a sink step")
		return nil, c.err()
	}
	c.compileGraph() // job.pipeline and job.streams (graph.go)
	c.site = ""
	c.job.At("")
	if len(c.problems) > 0 {
		// Compiling stopped at the first step with a problem: report the
		// expressions of the others too, so that one run shows them all.
		c.problems = append(c.problems, CheckExprs(job, c.problemPaths())...)
		return nil, c.err()
	}
	if err := c.job.Build(); err != nil {
		c.addJob("job.pipeline", err)
		return nil, c.err()
	}
	return c.job, nil
}

// stepKinds are the step kinds, in the order of config.Step's fields.
var stepKinds = []string{"source", "filter", "map", "flat_map", "key_by", "window", "aggregate", "dedupe", "join", "route", "sink"}

// stepKind returns the name of the step's kind and how many kinds it sets.
func stepKind(s config.Step) (string, int) {
	set := []bool{s.Source != nil, s.Filter != nil, s.Map != nil, s.FlatMap != nil, s.KeyBy != nil,
		s.Window != nil, s.Aggregate != nil, s.Dedupe != nil, s.Join != nil, s.Route != nil, s.Sink != nil}
	kind, n := "", 0
	for i, ok := range set {
		if ok {
			kind, n = stepKinds[i], n+1
		}
	}
	return kind, n
}

// steps compiles a list of steps at path ("job.pipeline",
// "job.streams.big"). A pipeline starts with a source unless fed (a stream
// a route feeds: c.cur is set), and ends with a sink or a route. It stops
// at the first step with a problem: the steps after it would see a stream
// that is not what the user meant.
func (c *compiler) steps(path string, steps []config.Step, main bool) {
	for i, step := range steps {
		p := fmt.Sprintf("%s[%d]", path, i)
		kind, n := stepKind(step)
		if n != 1 {
			c.add(p, "must have exactly one of %s (has %d)", listFields(stepKinds), n)
			return
		}
		p += "." + kind
		last := i == len(steps)-1
		switch {
		case i == 0 && main && kind != "source":
			c.add(p, "the first step must be a source")
		case i > 0 && kind == "source":
			c.add(p, "a source must be the first step (a pipeline reads one source)")
		case last && kind != "sink" && kind != "route" && !c.joined():
			c.add(p, "the last step must be a sink or a route")
		case !last && kind == "sink":
			c.add(p, "a sink must be the last step")
		case !last && kind == "route":
			c.add(p, "a route must be the last step: its branches are streams of job.streams")
		case kind == "window" && steps[i+1].Aggregate == nil:
			c.add(p, "must be followed by an aggregate step, which computes each window's result")
		}
		if len(c.problems) > 0 {
			return
		}
		// The operators the step defines are named by its key path in
		// errors and plans (a YAML user has no use for the Go file of the
		// compiler).
		c.site, c.stepID = p, step.ID
		c.job.At(p)
		switch kind {
		case "source":
			c.graphSource(p, step.Source)
		case "filter":
			c.filter(p, step.Filter)
		case "map":
			c.mapStep(p, step.Map, steps[i+1:])
		case "flat_map":
			c.flatMap(p, step.FlatMap)
		case "key_by":
			c.keyBy(p, step.KeyBy, steps[i+1:])
		case "window":
			c.flush()
			c.window, c.windowPath = step.Window, p
		case "aggregate":
			c.aggregate(p, step.Aggregate)
		case "dedupe":
			c.dedupe(p, step.Dedupe)
		case "join":
			c.join(p, step.Join)
		case "route":
			c.route(p, step.Route)
		case "sink":
			c.sink(p, step.Sink)
		}
		if len(c.problems) > 0 {
			return
		}
	}
}

// compiler is the state of one compilation: the stream so far and what is
// known about its values. site is the key path of the step being compiled,
// which names its operators (stream.Job.At).
type compiler struct {
	cfg  config.Job
	env  Env
	job  *stream.Job
	site string // the key path of the step being compiled (stream.Job.At)
	// cur is the stream so far. Steps that read the key (keyed steps,
	// sinks) call flush first.
	cur *stream.Stream[Rec]
	// pending is the key change whose stream.KeyBy the next step applies
	// (flush), nil if none: the Recs of cur carry the new key in Rec.key.
	pending *pendingKey
	// raw is true if the values are a raw source's text (strings).
	raw bool
	// fields are the top-level fields every value of the current stream
	// has, if known (after an aggregate or a projection); nil if not.
	// numbers are those of them that are numbers, nil if not known.
	fields, numbers []string
	// checked is the field whose legacy number check (numberField.check)
	// ran before the key_by that leads to the next aggregate, empty if none.
	checked string
	// window is the window step the next aggregate computes, or nil.
	window     *config.WindowStep
	windowPath string
	// graph is the state of job.streams and routes (graph.go).
	graph graphState
	ops   map[string]int
	// stepID is the id of the step being compiled (config.Step.ID), or "".
	stepID   string
	problems []error
}

// pendingKey is a key change not applied yet: the stream.KeyBy options of
// the key_by (or map) at path.
type pendingKey struct {
	path string
	opts []stream.ShuffleOption
	// desc says what the key is, for the state schema
	// (stream.KeyDescription).
	desc string
}

// recKey is the key function of a pending KeyBy: the key the step before
// computed into the Rec.
func recKey(r Rec) ([]byte, error) { return r.key, nil }

// flush applies the pending key change, if any: every step but a key
// change calls it before it uses c.cur (a join may take c.pending instead,
// to merge its two sides before one KeyBy).
func (c *compiler) flush() {
	p := c.pending
	if p == nil || c.cur == nil {
		return
	}
	c.pending = nil
	// The KeyBy is the key_by step's (or the map's key), wherever the
	// step is that applies it.
	c.job.At(p.path)
	defer c.job.At(c.site)
	c.cur = stream.KeyBy(c.cur, recKey, append([]stream.ShuffleOption{stream.ShuffleCodec(stream.Codec[Rec](RecCodec{Borrow: true})), stream.KeyDescription(p.desc)}, p.opts...)...)
	if err := c.job.Err(); err != nil {
		c.addJob(p.path, err)
	}
}

// add reports a problem of the setting at path.
func (c *compiler) add(path, format string, args ...any) {
	c.problems = append(c.problems, &config.FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// addAt reports a problem of the expression e of the setting at path, at
// byte offset of e's source: its Origin is file:line:col there.
func (c *compiler) addAt(e config.Expr, offset int, path, format string, args ...any) {
	c.problems = append(c.problems, &config.FieldError{Path: path, Msg: fmt.Sprintf(format, args...), Origin: exprOrigin(e, offset)})
}

// exprOrigin is where byte offset of e's source is in the job file:
// "job.yaml:4:22", "4:22" without a file, "" if e has no position.
func exprOrigin(e config.Expr, offset int) string {
	if e.Line == 0 {
		return ""
	}
	line, col := e.Line, e.Column
	if !e.Folded && offset > 0 && offset <= len(e.Src) {
		col += utf8.RuneCountInString(e.Src[:offset])
	}
	if e.File == "" {
		return fmt.Sprintf("%d:%d", line, col)
	}
	return fmt.Sprintf("%s:%d:%d", e.File, line, col)
}

// compileExpr compiles the expression e of the setting at path, whose
// result must be of type want; nil (and a problem at the expression's
// position) if it does not compile.
func (c *compiler) compileExpr(path string, e config.Expr, want expression.Type) *expression.Program {
	if strings.TrimSpace(e.Src) == "" {
		c.addAt(e, 0, path, "required: an expression")
		return nil
	}
	p, err := expression.Compile(e.Src, want)
	if err != nil {
		var xe *expression.Error
		if errors.As(err, &xe) {
			c.addAt(e, xe.Offset, path, "%s", xe.Msg)
		} else {
			c.addAt(e, 0, path, "%v", err)
		}
		return nil
	}
	return p
}

// problemPaths returns the key paths that have a problem.
func (c *compiler) problemPaths() map[string]bool {
	paths := make(map[string]bool, len(c.problems))
	for _, p := range c.problems {
		var fe *config.FieldError
		if errors.As(p, &fe) {
			paths[fe.Path] = true
		}
	}
	return paths
}

// CheckExprs compiles every expression of job (config.Job.Exprs) but those
// at the key paths of skip, each for the type its step wants, and returns
// their problems as *config.FieldErrors, with their position in the job
// file: syntax, names, and types known at compile time (a filter's where
// that is a string, sum: "'x'"). It needs no valid job: processor validate
// runs it on a job with other problems, Compile past the first step with
// one.
func CheckExprs(job config.Job, skip map[string]bool) []error {
	c := &compiler{cfg: job}
	for _, pe := range job.Exprs() {
		if skip[pe.Path] {
			continue
		}
		wants := exprWants(pe.Path)
		if len(wants) == 1 && wants[0] == expression.Bool {
			c.compileExpr(pe.Path, pe.Expr, expression.Bool) // as filter and route do
			continue
		}
		c.compileTyped(pe.Path, pe.Expr, wants...)
	}
	return c.problems
}

// exprWants returns the types the expression at path may have, as the
// steps compile it: a filter's where and a route's when a bool, an
// aggregate's argument by its operation (aggArgTypes), anything else any.
func exprWants(path string) []expression.Type {
	switch {
	case strings.HasSuffix(path, ".filter.where") || routeWhenRE.MatchString(path):
		return []expression.Type{expression.Bool}
	}
	if m := aggArgRE.FindStringSubmatch(path); m != nil {
		return aggArgTypes[m[1]]
	}
	return nil
}

var (
	routeWhenRE = regexp.MustCompile(`\.route\[\d+\]\.when$`)
	aggArgRE    = regexp.MustCompile(`\.aggregate\.[^.]+\.([a-z_]+)$`)
)

// compileTyped is compileExpr for a setting whose expression may be of
// one of the types wants (all, if none is given), checked where the type
// is known at compile time (expression.Program.Check); the program
// returns any type.
func (c *compiler) compileTyped(path string, e config.Expr, wants ...expression.Type) *expression.Program {
	p := c.compileExpr(path, e, expression.Any)
	if p == nil || len(wants) == 0 {
		return p
	}
	if err := p.Check(wants...); err != nil {
		c.addAt(e, 0, path, "%v", err)
		return nil
	}
	return p
}

// addJob reports a problem the stream package found in the job the step at
// path defined. Its messages are for Go authors: they end in the Go call
// site of the builder ("(pipeline.go:167)"), which is this package's, not
// the YAML user's; the key path says where the problem is instead.
func (c *compiler) addJob(path string, err error) {
	msg := strings.TrimPrefix(err.Error(), stream.ErrInvalidJob.Error()+": ")
	msg = goSiteRE.ReplaceAllString(msg, "")
	msg = pathSiteRE.ReplaceAllString(msg, "") // the problem's own key path says where
	c.add(path, "%s", msg)
}

// goSiteRE matches the Go call sites in stream's messages:
// " (pipeline.go:167)", " (source at pipeline.go:167)".
var goSiteRE = regexp.MustCompile(` \((?:[a-z ]+ at )?[\w.-]+\.go:\d+\)`)

// pathSiteRE matches the sites the compiler gave stream (Job.At) in its
// messages: " (job.pipeline[2].map)", " (source at job.streams.x[0].source)".
var pathSiteRE = regexp.MustCompile(` \((?:[a-z ]+ at )?job\.(?:pipeline|streams)[\w.\[\]-]*\)`)

func (c *compiler) err() error { return errors.Join(c.problems...) }

// opName returns a stable operator name for the n-th operator of a kind:
// "count", then "count-2"... Operator names name state, so they must not
// depend on the position of the step in the pipeline.
// stateName names the state of the stateful step being compiled: its id,
// or else the name derived from its kind (opName). opName is called either
// way, so that an id set on one step renames no other step of its kind.
func (c *compiler) stateName(kind string) string {
	name := c.opName(kind)
	if c.stepID != "" {
		return c.stepID
	}
	return name
}

// stateSchema declares the state of the stateful step being compiled for
// the job's state schema (stream.WithStateSchema, package compat). A step
// without an id has a derived name, which a step of its kind inserted or
// removed before it changes: def says what defines its state besides its
// kind, stage, key and window (a join's other side, a dedupe's key), and
// the pipeline it is in is added, so that compat.Compare can tell it from
// the others of its kind and its state follows it.
func (c *compiler) stateSchema(kind, encoding, def string, fields ...compat.Field) stream.ProcessOption {
	s := stream.StateSchema{Kind: kind, Encoding: encoding, Fields: fields, Derived: c.stepID == ""}
	if s.Derived {
		s.Definition = "in " + c.graph.cur.path
		if def != "" {
			s.Definition += ", " + def
		}
	}
	return stream.WithStateSchema(s)
}

func (c *compiler) opName(kind string) string {
	c.ops[kind]++
	if n := c.ops[kind]; n > 1 {
		return fmt.Sprintf("%s-%d", kind, n)
	}
	return kind
}

// listFields writes fields for a message: "a and b", "a, b and c".
func listFields(fields []string) string {
	if len(fields) < 2 {
		return strings.Join(fields, "")
	}
	return strings.Join(fields[:len(fields)-1], ", ") + " and " + fields[len(fields)-1]
}
