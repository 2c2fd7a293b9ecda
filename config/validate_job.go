package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// This file validates the job's dataflow: the steps of job.pipeline and of
// job.streams, and how the streams connect (routes and interval joins).

// stepKinds are the keys of a step, in the order of Step's fields.
var stepKinds = []string{"source", "filter", "map", "flat_map", "key_by", "window", "aggregate", "dedupe", "join", "route", "sink"}

// kinds returns the keys of s that are set.
func (s *Step) kinds() []string {
	var out []string
	for i, set := range []bool{s.Source != nil, s.Filter != nil, s.Map != nil, s.FlatMap != nil, s.KeyBy != nil,
		s.Window != nil, s.Aggregate != nil, s.Dedupe != nil, s.Join != nil, s.Route != nil, s.Sink != nil} {
		if set {
			out = append(out, stepKinds[i])
		}
	}
	return out
}

// kind returns the key of s ("filter"), or "" if not exactly one is set.
func (s *Step) kind() string {
	if k := s.kinds(); len(k) == 1 {
		return k[0]
	}
	return ""
}

// pathStep is a step with its key path ("job.streams.big[0]").
type pathStep struct {
	Step
	path string
}

// allSteps returns the steps of the pipeline and of every stream.
func (c *Config) allSteps() []pathStep {
	var out []pathStep
	for i, s := range c.Job.Pipeline {
		out = append(out, pathStep{s, fmt.Sprintf("job.pipeline[%d]", i)})
	}
	for _, ns := range c.Job.Streams {
		for i, s := range ns.Steps {
			out = append(out, pathStep{s, fmt.Sprintf("job.streams.%s[%d]", ns.Name, i)})
		}
	}
	return out
}

// fieldNameRE is an output field name that expressions can read as
// value.<name>.
var fieldNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,99}$`)

// reservedFields are the fields an aggregate's result has besides its
// aggregates.
var reservedFields = []string{"key", "window_start", "window_end", "early"}

// streamNameRE keeps stream names usable in topic names and metric labels.
var streamNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_-]{0,99}$`)

// readsWatermarks reports whether a step runs on event time: a window,
// an interval join, or a dedupe (whose state expires by event time when
// the job has watermarks).
func readsWatermarks(s pathStep) bool {
	return s.Window != nil || s.Dedupe != nil || (s.Join != nil && s.Join.Stream != nil)
}

func (c *Config) validatePipeline(v *validator) {
	steps := c.Job.Pipeline
	if len(steps) == 0 {
		v.add("job.pipeline", "required: at least a source and a sink step")
		return
	}
	c.validateSteps(v, "job.pipeline", steps)
	c.validateStepIDs(v)
	if steps[0].Source == nil {
		v.add("job.pipeline[0]", "the first step must be a source")
	} else if wm := steps[0].Source.Watermark; wm != nil && !slices.ContainsFunc(c.allSteps(), readsWatermarks) {
		v.add("job.pipeline[0].source.watermark", "set, but no step reads watermarks (a window, an interval join or a dedupe): remove it, or add a window")
	}
	if last := steps[len(steps)-1]; last.Sink == nil && last.Route == nil {
		v.add(fmt.Sprintf("job.pipeline[%d]", len(steps)-1), "the last step must be a sink or a route")
	}
	c.validateStreams(v)
}

// validateSteps checks one list of steps: each step, and the rules of
// their order within the list.
func (c *Config) validateSteps(v *validator, list string, steps []Step) {
	for i := range steps {
		s := &steps[i]
		path := fmt.Sprintf("%s[%d]", list, i)
		kinds := s.kinds()
		if len(kinds) != 1 {
			if len(kinds) == 0 {
				v.add(path, "must have one of %s (has none)", strings.Join(stepKinds, ", "))
			} else {
				v.add(path, "must have exactly one of %s (has %s): write each as its own step, in the order they run", strings.Join(stepKinds, ", "), strings.Join(kinds, " and "))
			}
			continue
		}
		validateStepID(v, path, s, kinds[0])
		path += "." + kinds[0]
		last := i == len(steps)-1
		switch {
		case s.Source != nil:
			if i != 0 {
				v.add(path, "a source must be the first step")
			}
			validateSource(v, path, s.Source)
		case s.Filter != nil:
			requireExpr(v, path+".where", s.Filter.Where, "an expression that is true for the records to keep")
		case s.Map != nil:
			if s.Map.Value == nil && s.Map.Key == nil {
				v.add(path, "sets neither value nor key: add value: <expression> or {field: <expression>, ...}, or key: <expression>")
			}
			if mv := s.Map.Value; mv != nil && mv.Expr == nil && len(mv.Fields) == 0 {
				v.add(path+".value", "an empty mapping: name at least one field, as in {id: value.id}")
			}
		case s.FlatMap != nil:
			requireExpr(v, path+".each", s.FlatMap.Each, "an expression whose value is a list, as in value.items")
		case s.KeyBy != nil:
			c.validateKeyBy(v, path, s.KeyBy)
		case s.Window != nil:
			c.validateWindow(v, path, s.Window)
			if last || steps[i+1].Aggregate == nil {
				v.add(path, "must be followed by an aggregate step, which computes each window's result")
			}
		case s.Aggregate != nil:
			validateAggregate(v, path, s.Aggregate, i > 0 && steps[i-1].Window != nil)
		case s.Dedupe != nil:
			validateDuration(v, path+".within", s.Dedupe.Within, true)
		case s.Join != nil:
			c.validateJoin(v, path, s.Join)
		case s.Route != nil:
			if !last {
				v.add(path, "a route must be the last step: the steps after it go in the streams it routes to")
			}
			c.validateRoute(v, path, s.Route)
		case s.Sink != nil:
			if !last {
				v.add(path, "a sink must be the last step")
			}
			c.validateSink(v, path, s.Sink)
		}
		if onErr, dlt := stepOnError(s); onErr != nil {
			validateOnError(v, path, *onErr, *dlt)
			if *dlt != "" {
				checkTopic(v, path+".dead_letter_topic", *dlt)
				if c.isInput(*dlt) {
					v.add(path+".dead_letter_topic", "%q is also an input topic: a job must not read its own dead letters", *dlt)
				}
			}
		}
	}
}

// isInput reports whether topic is read by a source of the job.
func (c *Config) isInput(topic string) bool {
	return slices.ContainsFunc(c.allSteps(), func(s pathStep) bool {
		return s.Source != nil && slices.Contains(s.Source.Topics, topic)
	})
}

// isSinkTopic reports whether topic is written by a sink of the job.
func (c *Config) isSinkTopic(topic string) bool {
	return slices.ContainsFunc(c.allSteps(), func(s pathStep) bool { return s.Sink != nil && s.Sink.Topic == topic })
}

func requireExpr(v *validator, path string, e Expr, what string) {
	if e.IsZero() || strings.TrimSpace(e.Src) == "" {
		v.addAt(path, e.Pos(0), "required: %s", what)
	}
}

func (c *Config) validateKeyBy(v *validator, path string, k *KeyByStep) {
	switch {
	case k.Field == "" && k.Expr == nil:
		v.add(path+".field", "required: the top-level JSON field to key by (or expr: an expression)")
	case k.Field != "" && k.Expr != nil:
		v.add(path, "has both field and expr: keep one (field: f is expr: value.f)")
	case k.Expr != nil:
		requireExpr(v, path+".expr", *k.Expr, "the expression whose value becomes the key")
	}
	switch m := c.Job.MaxParallelism; {
	case k.Parallelism < 0:
		v.add(path+".parallelism", "%d: must be at least 1 (or left out for job.parallelism)", k.Parallelism)
	case k.Parallelism > m && m >= 1:
		v.add(path+".parallelism", "%d: must not exceed job.max_parallelism (%d): each task of the stage reads at least one key group", k.Parallelism, m)
	}
}

// validateAggregate checks an aggregate step; windowed is whether a window
// step comes right before it.
func validateAggregate(v *validator, path string, a *AggregateStep, windowed bool) {
	if a.Op != "" || a.Field != "" {
		validateLegacyAggregate(v, path, a)
	} else if len(a.Aggs) == 0 {
		v.add(path, "no aggregate: name at least one, as in {count: true} or {total: {sum: value.amount}}")
	}
	if a.Op == "" {
		seen := map[string]bool{}
		for _, g := range a.Aggs {
			p := path + "." + g.Name
			at := fmt.Sprintf("%s:%d:%d", g.File, g.Line, g.Column)
			if g.File == "" {
				at = ""
			}
			switch {
			case seen[g.Name]:
				v.addAt(p, at, "a second aggregate named %s: names must be unique", g.Name)
			case slices.Contains(reservedFields, g.Name):
				v.addAt(p, at, "%s is a field of every result (%s): name the aggregate otherwise", g.Name, strings.Join(reservedFields, ", "))
			case !fieldNameRE.MatchString(g.Name):
				v.addAt(p, at, "%q is not a usable field name: use letters, digits and '_', starting with a letter or '_'", g.Name)
			}
			seen[g.Name] = true
			switch {
			case !slices.Contains(AggregateOps(), g.Op):
				v.addAt(p, at, "%q: not an aggregate: use one of %s%s", g.Op, strings.Join(AggregateOps(), ", "), didYouMean(g.Op, AggregateOps()))
			case g.Op == OpCount && g.Arg != nil:
				v.addAt(p, at, "count takes no expression: write count: true")
			case g.Op != OpCount && (g.Arg == nil || strings.TrimSpace(g.Arg.Src) == ""):
				v.addAt(p, at, "%s needs an expression, as in {%s: value.amount}", g.Op, g.Op)
			case HasBy(g.Op) && (g.By == nil || strings.TrimSpace(g.By.Src) == ""):
				v.addAt(p, at, "%s needs by, what to order the records by: {%s: value, by: value.price}", g.Op, g.Op)
			case !HasBy(g.Op) && g.By != nil:
				v.addAt(p+".by", at, "set, but only max_by and min_by order by an expression")
			}
			switch {
			case !HasLimit(g.Op) && g.Limit != 0:
				v.addAt(p+".limit", at, "set, but only collect, max_by and min_by have a limit")
			case HasLimit(g.Op) && (g.Limit < 1 || g.Limit > MaxCollectLimit):
				v.addAt(p+".limit", at, "%d: must be between 1 and %d (the list lives in one state value)", g.Limit, MaxCollectLimit)
			}
		}
	}
	switch a.Emit {
	case EmitUpdate:
		if windowed {
			v.add(path+".emit", "update after a window: a window emits its result when it closes; for early results every so often while it is open, set the window's emit_every")
		}
	case EmitClose:
		if !windowed {
			v.add(path+".emit", "close needs a window step right before the aggregate: without a window nothing closes; use update, or add a window")
		}
	default:
		v.add(path+".emit", "%q: must be update or close%s", a.Emit, didYouMean(a.Emit, []string{EmitUpdate, EmitClose}))
	}
}

// validateLegacyAggregate checks the one-aggregate form {op, field}.
func validateLegacyAggregate(v *validator, path string, a *AggregateStep) {
	switch {
	case a.Op == OpCount:
		if a.Field != "" {
			v.add(path+".field", "set, but count reads no field: remove it, or use sum, min, max or avg")
		}
	case slices.Contains(LegacyAggregateOps(), a.Op):
		if a.Field == "" {
			v.add(path+".field", "required by op %s: the top-level JSON number field to aggregate", a.Op)
		}
	case a.Op == "":
		v.add(path+".op", "required: count, sum, min, max or avg")
	case slices.Contains(AggregateOps(), a.Op):
		v.add(path+".op", "%q: the op/field form takes count, sum, min, max or avg; write %s: value.%s instead", a.Op, a.Op, orDefault(a.Field, "field"))
	default:
		v.add(path+".op", "%q: must be count, sum, min, max or avg%s", a.Op, didYouMean(a.Op, LegacyAggregateOps()))
	}
}

func (c *Config) validateJoin(v *validator, path string, j *JoinStep) {
	switch {
	case j.Table == nil && j.Stream == nil:
		v.add(path, "needs table (a stream–table join) or stream (an interval join)")
	case j.Table != nil && j.Stream != nil:
		v.add(path, "has both table and stream: a join step joins one other side")
	case j.Table != nil:
		t := j.Table
		p := path + ".table.topic"
		switch {
		case t.Topic == "":
			v.add(p, "required: the table's compacted topic")
		case !validTopic(t.Topic):
			checkTopic(v, p, t.Topic)
		case c.isInput(t.Topic):
			v.add(p, "%q is also an input topic of a source: a table is read by its join only", t.Topic)
		case c.isSinkTopic(t.Topic):
			v.add(p, "%q is also a sink's topic: a job must not read its own output", t.Topic)
		}
		if !slices.Contains(sourceFormats, t.Format) {
			v.add(path+".table.format", "%q: must be %s (the source's format)", t.Format, orList(sourceFormats))
		}
		if !oneOf(j.Type, JoinLeft, JoinInner) {
			v.add(path+".type", "%q: must be left or inner%s", j.Type, didYouMean(j.Type, []string{JoinLeft, JoinInner}))
		}
	case j.Stream != nil:
		if j.Stream.Name == "" {
			v.add(path+".stream.name", "required: the stream of job.streams to join")
		}
		validateDuration(v, path+".stream.within", j.Stream.Within, true)
		if j.Type != JoinInner {
			v.add(path+".type", "%q: an interval join is inner only (a record without a match within the interval is dropped)", j.Type)
		}
	}
	if j.As != "" && !fieldNameRE.MatchString(j.As) {
		v.add(path+".as", "%q is not a usable field name: use letters, digits and '_', starting with a letter or '_'", j.As)
	}
}

func (c *Config) validateRoute(v *validator, path string, r *RouteStep) {
	if len(r.Branches) == 0 {
		v.add(path, "no branch: list at least one {when: <expression>, to: <stream>}")
	}
	for i, b := range r.Branches {
		p := fmt.Sprintf("%s[%d]", path, i)
		if b.To == "" {
			v.add(p+".to", "required: the stream of job.streams that gets the records")
		}
		if b.When != nil {
			requireExpr(v, p+".when", *b.When, "a condition (or leave when out: every record)")
		}
	}
}

// streamEdge is a use of a named stream: a route branch or an interval
// join that names it.
type streamEdge struct {
	from string // the stream that uses it; "" for the pipeline
	to   string
	path string // the key path of the name: "job.pipeline[3].route[0].to"
	join bool
}

// edges returns the uses of named streams by the steps of one list.
func edges(from, list string, steps []Step) []streamEdge {
	var out []streamEdge
	for i, s := range steps {
		if s.Route != nil {
			for j, b := range s.Route.Branches {
				if b.To != "" {
					out = append(out, streamEdge{from, b.To, fmt.Sprintf("%s[%d].route[%d].to", list, i, j), false})
				}
			}
		}
		if s.Join != nil && s.Join.Stream != nil && s.Join.Stream.Name != "" {
			out = append(out, streamEdge{from, s.Join.Stream.Name, fmt.Sprintf("%s[%d].join.stream.name", list, i), true})
		}
	}
	return out
}

// validateStreams checks job.streams and how the steps use them: every
// name used exists, every stream is used as it must be (a route feeds a
// stream without a source, exactly one join reads a stream with one), and
// the streams form no cycle.
func (c *Config) validateStreams(v *validator) {
	byName := map[string]NamedStream{}
	var names []string
	all := edges("", "job.pipeline", c.Job.Pipeline)
	for _, ns := range c.Job.Streams {
		path := "job.streams." + ns.Name
		byName[ns.Name] = ns
		names = append(names, ns.Name)
		if !streamNameRE.MatchString(ns.Name) {
			v.add(path, "%q: name a stream with 1 to 100 letters, digits, '_' or '-', starting with a letter or digit", ns.Name)
		}
		if len(ns.Steps) == 0 {
			v.add(path, "no steps: a stream needs at least one step")
			continue
		}
		c.validateSteps(v, path, ns.Steps)
		last := ns.Steps[len(ns.Steps)-1]
		if ns.Steps[0].Source != nil {
			if last.Sink != nil || last.Route != nil {
				v.add(fmt.Sprintf("%s[%d]", path, len(ns.Steps)-1), "a stream that starts with a source is the other side of an interval join: it must not end with a sink or a route")
			}
		} else if last.Sink == nil && last.Route == nil {
			v.add(fmt.Sprintf("%s[%d]", path, len(ns.Steps)-1), "the last step of a stream a route feeds must be a sink or a route")
		}
		all = append(all, edges(ns.Name, path, ns.Steps)...)
	}

	uses := map[string][]streamEdge{}
	for _, e := range all {
		ns, ok := byName[e.to]
		if !ok {
			msg := fmt.Sprintf("%q is not a stream of job.streams", e.to)
			if len(names) == 0 {
				msg += ": define it under job.streams"
			} else {
				msg += fmt.Sprintf(" (streams: %s)%s", strings.Join(names, ", "), didYouMean(e.to, names))
			}
			v.add(e.path, "%s", msg)
			continue
		}
		uses[e.to] = append(uses[e.to], e)
		startsWithSource := len(ns.Steps) > 0 && ns.Steps[0].Source != nil
		switch {
		case e.join && !startsWithSource:
			v.add(e.path, "%q does not start with a source: an interval join reads a stream of its own, which starts with a source", e.to)
		case !e.join && startsWithSource:
			v.add(e.path, "%q starts with a source: a route feeds a stream that has none (its records are the route's)", e.to)
		}
	}
	for _, ns := range c.Job.Streams {
		u := uses[ns.Name]
		path := "job.streams." + ns.Name
		joins := 0
		for _, e := range u {
			if e.join {
				joins++
			}
		}
		switch {
		case len(u) == 0:
			v.add(path, "not used: no route sends to it and no join reads it; remove it, or route to it")
		case len(ns.Steps) > 0 && ns.Steps[0].Source != nil && joins > 1:
			v.add(path, "read by %d joins: a stream that starts with a source is the other side of exactly one join (copy it under another name for a second join)", joins)
		}
	}
	c.findCycles(v, all)
}

// findCycles reports a cycle among the streams (a stream that, through
// routes and joins, feeds itself).
func (c *Config) findCycles(v *validator, all []streamEdge) {
	out := map[string][]streamEdge{}
	for _, e := range all {
		out[e.from] = append(out[e.from], e)
	}
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	var stack []string
	var visit func(name string)
	visit = func(name string) {
		state[name] = active
		stack = append(stack, name)
		for _, e := range out[name] {
			switch state[e.to] {
			case active:
				i := slices.Index(stack, e.to)
				cycle := append(slices.Clone(stack[i:]), e.to)
				v.add(e.path, "%q feeds back into itself (%s): the streams must not form a cycle", e.to, strings.Join(cycle, " → "))
			case unseen:
				visit(e.to)
			}
		}
		stack = stack[:len(stack)-1]
		state[name] = done
	}
	visit("")
	for _, ns := range c.Job.Streams { // the streams the pipeline does not reach
		if state[ns.Name] == unseen {
			visit(ns.Name)
		}
	}
}

// stepIDRE is the form of a step's id: it may name the stage the step
// starts, and so task IDs, state directories, transactional IDs and a
// shuffle topic (stream.Named's rule).
var stepIDRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,99}$`)

// statefulKinds are the kinds of step that keep state, and take an id.
var statefulKinds = []string{"aggregate", "dedupe", "join"}

// validateStepID checks the id of step s (of kind) at path.
func validateStepID(v *validator, path string, s *Step, kind string) {
	switch {
	case s.ID == "":
	case !slices.Contains(statefulKinds, kind):
		hint := ""
		if kind == "window" {
			hint = "; a window's state is its aggregate's: set the id on the aggregate step after it"
		}
		v.add(path+".id", "%q: only a step that keeps state (%s) takes an id%s", s.ID, strings.Join(statefulKinds, ", "), hint)
	case s.ID == "main" || !stepIDRE.MatchString(s.ID):
		v.add(path+".id", "%q: use lower-case letters, digits, '_' and '-', starting with a letter or digit (not main): an id can name a stage, its tasks and its shuffle topic", s.ID)
	}
}

// validateStepIDs checks that no two steps have one id.
func (c *Config) validateStepIDs(v *validator) {
	seen := map[string]string{}
	for _, s := range c.allSteps() {
		if s.ID == "" {
			continue
		}
		if other, dup := seen[s.ID]; dup {
			v.add(s.path+".id", "%q is also the id of %s: ids name state, and must be unique in the job", s.ID, other)
			continue
		}
		seen[s.ID] = s.path
	}
}

// StepsWithoutID returns the key paths of the steps that keep state but
// have no id: their state is named after their kind and their rank among
// the steps of that kind, which an edit elsewhere can change (`processor
// validate` warns about them).
func (c *Config) StepsWithoutID() []string {
	var out []string
	for _, s := range c.allSteps() {
		if k := s.kind(); s.ID == "" && slices.Contains(statefulKinds, k) {
			out = append(out, s.path+"."+k)
		}
	}
	return out
}
