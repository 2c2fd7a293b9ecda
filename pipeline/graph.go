package pipeline

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/stream"
)

// The job as a graph (job.streams): besides job.pipeline, a job has named
// pipelines, each a unit compiled like job.pipeline. A unit starts with a
// source (the other side of an interval join, or an independent
// pipeline), or is fed by one branch of a route (it continues from that
// branch's records). It ends with a sink or a route, or, if it starts with
// a source, it may instead be consumed by exactly one join.
//
// Units are compiled in dependency order: a route's unit before the units
// it feeds, a joined stream before the unit that joins it. A cycle is an
// error.
//
// One Kafka source reads every topic of a job (stream.KafkaSource: task i
// reads partition i of each topic; the runtime checks at start that they
// have the same partition count): the topics of job.pipeline's source, of
// the streams' sources and of the table joins' tables. If there is more
// than one of them, an operator "split" per unit (and per table) keeps
// the records of its own topics. So the sources' settings other than
// topics must agree.

// graphState is the state of job.streams: the units and the shared source.
type graphState struct {
	units  []*unit
	byName map[string]*unit
	cur    *unit // being compiled
	// from is the job's one Kafka source's stream when it reads the topics
	// of more than one unit or table; nil if job.pipeline's source alone.
	from   *stream.Stream[Rec]
	raw    bool                           // from's values are a raw source's text
	tables map[string]*stream.Stream[Rec] // by topic, split from from
}

// unit is job.pipeline or one stream of job.streams.
type unit struct {
	name  string // "" for job.pipeline
	path  string // "job.pipeline", "job.streams.big"
	steps []config.Step
	// feeder is the unit whose route feeds this one, and the branch's
	// path; nil if none.
	feeder     *unit
	feederPath string
	// fed is the compiler's state at the feeding branch, set when the
	// feeder's route compiles.
	fed *flow
	// joinedBy is the path of the join that consumes the unit, "" if none.
	joinedBy string
	// out is the unit's state after its last step, for the join that
	// consumes it.
	out       *flow
	done      bool
	compiling bool
}

// flow is the part of the compiler's state that belongs to one stream:
// saved at a route's branch or at the end of a joined stream, restored to
// continue from there.
type flow struct {
	cur             *stream.Stream[Rec]
	pending         *pendingKey
	raw             bool
	fields, numbers []string
	checked         string
	// keyChanged is true if a key change (key_by, map's key) happened on
	// the way (the key is not the source record's any more); shuffled if
	// one of them was a shuffle (the stream is no longer in the source
	// stage).
	keyChanged, shuffled bool
}

func (c *compiler) save() flow {
	return flow{cur: c.cur, pending: c.pending, raw: c.raw, fields: c.fields, numbers: c.numbers, checked: c.checked}
}

func (c *compiler) restore(f flow) {
	c.cur, c.pending, c.raw, c.fields, c.numbers, c.checked = f.cur, f.pending, f.raw, f.fields, f.numbers, f.checked
	c.window, c.windowPath = nil, ""
}

// compileGraph compiles job.pipeline and job.streams (see the top of this
// file).
func (c *compiler) compileGraph() {
	g := &c.graph
	g.byName = map[string]*unit{}
	main := &unit{path: "job.pipeline", steps: c.cfg.Pipeline}
	g.units = []*unit{main}
	for _, s := range c.cfg.Streams {
		path := "job.streams." + s.Name
		switch {
		case s.Name == "":
			c.addStream(s, "job.streams", "a stream without a name")
			continue
		case g.byName[s.Name] != nil:
			c.addStream(s, path, "a second stream named %q: stream names must be unique", s.Name)
			continue
		case len(s.Steps) == 0:
			c.addStream(s, path, "required: at least one step")
			continue
		}
		u := &unit{name: s.Name, path: path, steps: s.Steps}
		g.units = append(g.units, u)
		g.byName[s.Name] = u
	}
	if len(c.problems) > 0 {
		return
	}
	c.link()
	if len(c.problems) > 0 {
		return
	}
	c.openSources()
	if len(c.problems) > 0 {
		return
	}
	for _, u := range g.units {
		c.compileUnit(u)
		if len(c.problems) > 0 {
			return
		}
	}
}

// addStream reports a problem of the stream s of job.streams, at its name.
func (c *compiler) addStream(s config.NamedStream, path, format string, args ...any) {
	origin := ""
	switch {
	case s.Line > 0 && s.File != "":
		origin = fmt.Sprintf("%s:%d:%d", s.File, s.Line, s.Column)
	case s.Line > 0:
		origin = fmt.Sprintf("%d:%d", s.Line, s.Column)
	}
	c.problems = append(c.problems, &config.FieldError{Path: path, Msg: fmt.Sprintf(format, args...), Origin: origin})
}

// streamOf returns the job.streams entry of unit u.
func (c *compiler) streamOf(u *unit) config.NamedStream {
	for _, s := range c.cfg.Streams {
		if s.Name == u.name {
			return s
		}
	}
	return config.NamedStream{}
}

// link finds, for every unit, the route that feeds it and the join that
// consumes it, and checks that every stream is used exactly once.
func (c *compiler) link() {
	g := &c.graph
	for _, u := range g.units {
		for i, step := range u.steps {
			p := fmt.Sprintf("%s[%d]", u.path, i)
			switch {
			case step.Route != nil:
				for k, b := range step.Route.Branches {
					bp := fmt.Sprintf("%s.route[%d].to", p, k)
					t := g.byName[b.To]
					switch {
					case b.To == "":
						c.add(bp, "required: the stream of job.streams that gets this branch's records")
					case t == nil:
						c.add(bp, "%q: no such stream in job.streams%s", b.To, c.streamNames())
					case t == u:
						c.add(bp, "%q: a route cannot feed its own stream", b.To)
					case len(t.steps) > 0 && t.steps[0].Source != nil:
						c.add(bp, "%q starts with a source: a stream a route feeds continues from the route's records, so it has no source", b.To)
					case t.feeder != nil:
						c.add(bp, "%q is already fed by %s: a stream has one feeding branch (route a second stream to the same sink instead)", b.To, t.feederPath)
					default:
						t.feeder, t.feederPath = u, bp
					}
				}
			case step.Join != nil && step.Join.Stream != nil:
				jp := p + ".join.stream.name"
				name := step.Join.Stream.Name
				t := g.byName[name]
				switch {
				case name == "":
					c.add(jp, "required: the stream of job.streams to join")
				case t == nil:
					c.add(jp, "%q: no such stream in job.streams%s", name, c.streamNames())
				case t == u:
					c.add(jp, "%q: a stream cannot join itself", name)
				case t.steps[0].Source == nil:
					c.add(jp, "%q does not start with a source: the other side of an interval join is a stream with its own source", name)
				case t.joinedBy != "":
					c.add(jp, "%q is already joined by %s: a stream can be joined once", name, t.joinedBy)
				default:
					t.joinedBy = p + ".join"
				}
			}
		}
	}
	for _, u := range g.units[1:] {
		s := c.streamOf(u)
		source := u.steps[0].Source != nil
		last, _ := stepKind(u.steps[len(u.steps)-1])
		ends := last == "sink" || last == "route"
		switch {
		case !source && u.feeder == nil:
			c.addStream(s, u.path, "not used: no route sends records to it, and it does not start with a source")
		case u.joinedBy != "" && ends:
			c.addStream(s, u.path, "joined by %s, so it must not end with a %s: the join consumes its records", u.joinedBy, last)
		}
	}
}

// streamNames lists the streams for a message: " (there are a and b)".
func (c *compiler) streamNames() string {
	var names []string
	for _, u := range c.graph.units[1:] {
		names = append(names, u.name)
	}
	if len(names) == 0 {
		return " (it has none)"
	}
	return " (there are " + listFields(names) + ")"
}

// compileUnit compiles u after what it depends on: the unit whose route
// feeds it, and the streams it joins.
func (c *compiler) compileUnit(u *unit) {
	if u.done {
		return
	}
	if u.compiling {
		c.add(u.path, "is part of a cycle of routes and joins: a stream cannot depend on itself")
		return
	}
	u.compiling = true
	if u.feeder != nil {
		c.compileUnit(u.feeder)
	}
	for _, step := range u.steps {
		if step.Join != nil && step.Join.Stream != nil {
			if t := c.graph.byName[step.Join.Stream.Name]; t != nil {
				c.compileUnit(t)
			}
		}
	}
	if len(c.problems) > 0 || u.done {
		return
	}
	start := flow{}
	if u.feeder != nil {
		if u.fed == nil {
			// The feeder's route did not compile its branch: a problem
			// was reported there.
			return
		}
		start = *u.fed
	}
	saved := c.graph.cur
	c.graph.cur = u
	c.restore(start)
	c.steps(u.path, u.steps, u.feeder == nil)
	f := c.save()
	f.keyChanged, f.shuffled = c.keyState(len(u.steps))
	c.graph.cur = saved
	u.out, u.done, u.compiling = &f, true, false
}

// keyState returns what the key changes of the current unit before its
// step at index i (and of the units that feed it) did: whether the key is
// not the source record's any more, and whether the stream went through a
// shuffle (is no longer in the source stage). A key change that is still
// pending (c.pending) is not a shuffle yet.
func (c *compiler) keyState(i int) (changed, shuffled bool) {
	u := c.graph.cur
	if u == nil {
		return false, false
	}
	if u.fed != nil {
		changed, shuffled = u.fed.keyChanged, u.fed.shuffled
	}
	for k := 0; k < i && k < len(u.steps); k++ {
		s := u.steps[k]
		if s.KeyBy == nil && (s.Map == nil || s.Map.Key == nil) {
			continue
		}
		changed = true
		if _, kind := nextKeyed(u.steps[k+1 : i]); kind != "" {
			shuffled = true
		}
	}
	return changed, shuffled
}

// stepIndex returns the index of the step of the current unit whose join
// is j, or its length.
func (c *compiler) stepIndex(j *config.JoinStep) int {
	u := c.graph.cur
	if u == nil {
		return 0
	}
	for i, s := range u.steps {
		if s.Join == j {
			return i
		}
	}
	return len(u.steps)
}

// openSources defines the job's one Kafka source. If only job.pipeline
// has a source and no step joins a table, its source step does that, as
// in a plain pipeline. Otherwise the source reads the topics of every
// unit's source and every table, with the settings of job.pipeline's
// source, which the other sources must share.
func (c *compiler) openSources() {
	g := &c.graph
	main := g.units[0]
	if len(main.steps) == 0 || main.steps[0].Source == nil {
		return // steps reports it
	}
	ms := *main.steps[0].Source
	topics := slices.Clone(ms.Topics)
	owner := map[string]string{}
	for _, t := range ms.Topics {
		owner[t] = main.path + "[0].source"
	}
	var tables []string
	for _, u := range g.units {
		for i, step := range u.steps {
			p := fmt.Sprintf("%s[%d]", u.path, i)
			switch {
			case step.Source != nil && u != main:
				c.sameSource(p+".source", step.Source, &ms)
				for _, t := range step.Source.Topics {
					if o := owner[t]; o != "" {
						c.add(p+".source.topics", "%s is already read by %s", t, o)
					}
					owner[t] = p + ".source"
					topics = append(topics, t)
				}
			case step.Join != nil && step.Join.Table != nil:
				t := step.Join.Table.Topic
				switch {
				case t == "":
					c.add(p+".join.table.topic", "required: the table's topic")
					continue
				case slices.Contains(tables, t):
					continue // two joins with one table share its records
				case owner[t] != "":
					c.add(p+".join.table.topic", "%s is also read by %s: a table's topic is only the table", t, owner[t])
					continue
				}
				owner[t] = p + ".join.table"
				tables = append(tables, t)
				topics = append(topics, t)
				mf := ms.Format.Type
				if mf == "" {
					mf = config.FormatJSON
				}
				// An avro or protobuf source's table is too, decoded into
				// JSON.
				if f := step.Join.Table.Format; f != "" && f != mf && !(ms.Format.UsesRegistry() && f == config.FormatJSON) {
					c.add(p+".join.table.format", "%q, but the source's format is %q: one Kafka source reads all of a job's topics, with one format", f, mf)
				}
				if st, err := kafkaio.ParseStart(ms.Start); err == nil && st.Kind != kafkaio.StartEarliest {
					c.add(p+".join.table", "a table is read whole, from its earliest offset, but the job's source starts at %q, and one Kafka source reads all of a job's topics: remove job.pipeline[0].source.start (or set it to earliest)", ms.Start)
				}
			}
		}
	}
	if len(c.problems) > 0 || len(topics) == len(ms.Topics) {
		return
	}
	all := ms
	all.Topics = topics
	c.source(main.path+"[0].source", &all)
	g.from, g.raw = c.cur, c.raw
	c.cur, c.raw = nil, false
	if g.from == nil {
		return
	}
	g.tables = map[string]*stream.Stream[Rec]{}
	for _, t := range tables {
		g.tables[t] = c.split(g.from, []string{t})
	}
}

// sameSource checks that the source step s of a stream has the settings of
// job.pipeline's source m (besides topics).
func (c *compiler) sameSource(path string, s, m *config.SourceStep) {
	differs := func(what string, a, b any) {
		c.add(path+"."+what, "%v differs from job.pipeline[0].source's %v: one Kafka source reads all of a job's topics, so the sources' settings other than topics must be the same", a, b)
	}
	switch {
	case s.Format != m.Format:
		differs("format", fmt.Sprintf("%q", s.Format.Type), fmt.Sprintf("%q", m.Format.Type))
	case s.Start != m.Start:
		differs("start", fmt.Sprintf("%q", s.Start), fmt.Sprintf("%q", m.Start))
	case s.OnError != m.OnError:
		differs("on_error", fmt.Sprintf("%q", s.OnError), fmt.Sprintf("%q", m.OnError))
	case s.DeadLetterTopic != m.DeadLetterTopic:
		differs("dead_letter_topic", fmt.Sprintf("%q", s.DeadLetterTopic), fmt.Sprintf("%q", m.DeadLetterTopic))
	case !reflect.DeepEqual(s.Timestamp, m.Timestamp):
		differs("timestamp", fmtPtr(s.Timestamp), fmtPtr(m.Timestamp))
	case !reflect.DeepEqual(s.Watermark, m.Watermark):
		differs("watermark", fmtPtr(s.Watermark), fmtPtr(m.Watermark))
	}
}

func fmtPtr[T any](p *T) string {
	if p == nil {
		return "(unset)"
	}
	return fmt.Sprintf("%+v", *p)
}

// graphSource compiles the source step of a unit: the job's one source, or
// the records of the unit's topics split from it.
func (c *compiler) graphSource(path string, s *config.SourceStep) {
	g := &c.graph
	if g.from == nil {
		c.source(path, s)
		return
	}
	c.cur, c.raw = c.split(g.from, s.Topics), g.raw
}

// split defines an operator "split" that keeps the records of topics.
func (c *compiler) split(from *stream.Stream[Rec], topics []string) *stream.Stream[Rec] {
	s := stream.Transform(from, c.opName("split"), func(e stream.Elem, r Rec, emit func(Rec) error) error {
		if !slices.Contains(topics, e.Topic()) {
			return nil
		}
		return emit(r)
	})
	if err := c.job.Err(); err != nil {
		c.addJob("job.pipeline[0].source", err)
	}
	return s
}

// joined reports whether the unit being compiled is consumed by a join:
// then its last step need not be a sink or a route.
func (c *compiler) joined() bool { return c.graph.cur != nil && c.graph.cur.joinedBy != "" }

// joinFollows reports whether the steps after a key change of the unit
// being compiled lead, without another key change, to the join that
// consumes the unit: then the key change is the join's shuffle.
func (c *compiler) joinFollows(rest []config.Step) bool {
	if !c.joined() {
		return false
	}
	for _, s := range rest {
		if s.KeyBy != nil || (s.Map != nil && s.Map.Key != nil) {
			return false
		}
	}
	return true
}
