package compat

import (
	"fmt"
	"slices"
	"strings"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

// Level is how a difference between a checkpoint's schema and a job's
// bears on restoring the checkpoint.
type Level int

const (
	// Compatible: the job restores the checkpoint and goes on; the
	// difference is logged once (a new operator starts empty).
	Compatible Level = iota
	// Drops: restoring would leave state of the checkpoint behind; only
	// --allow-non-restored-state allows it.
	Drops
	// Refused: the job cannot restore the checkpoint correctly.
	Refused
)

func (l Level) String() string {
	switch l {
	case Compatible:
		return "compatible"
	case Drops:
		return "drops state"
	case Refused:
		return "refused"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// Difference is one difference between a checkpoint's schema and a job's.
type Difference struct {
	Level Level
	// Operator is the operator's ID, the stage's or the sink's name, or ""
	// for the job as a whole.
	Operator string
	// Site is where the operator is defined in the job (a YAML key path),
	// or "".
	Site string
	Msg  string
}

func (d Difference) String() string {
	var b strings.Builder
	if d.Operator != "" {
		b.WriteString(d.Operator)
		if d.Site != "" {
			b.WriteString(" (" + d.Site + ")")
		}
		b.WriteString(": ")
	}
	b.WriteString(d.Msg)
	return b.String()
}

// Result is what Compare found.
type Result struct {
	// Checkpoint is the checkpoint compared with, for messages (0: unknown).
	Checkpoint ckpt.ID
	// Unchecked is set when the checkpoint records no schema (one taken by
	// a version of Weir before schemas): nothing could be compared.
	Unchecked   bool
	Differences []Difference
	// StateNames are the job's operators whose state is to be stored under
	// a name other than their ID, by operator ID: the stored name of the
	// checkpoint's state a derived operator continues (matchOperators),
	// or a new name for a new operator whose ID is such a stored name.
	// The runtime restores under them (stream.TaskContext.StateNames);
	// the job's checkpoints record them (WithStateNames).
	StateNames map[string]string
	// StageNames are the job's stages that run under another name than
	// the job gives them, by the job's name: the checkpoint's name of the
	// stage named after the operator whose state the stage's first
	// stateful operator continues (matchStages). An edit that renames
	// that operator (an aggregate inserted before a key_by renames the
	// aggregate after it) would rename the stage, its tasks, shuffle topic
	// and sinks' transactional IDs; the stage keeps them instead. The
	// runtime plans under them (plan.Inputs.StageNames).
	StageNames map[string]string
}

// WithStateNames returns a copy of s whose operators record the names
// their state is stored under (Operator.State) from names (operator ID →
// stored name, Result.StateNames): the schema of the job's checkpoints
// after a restore that matched operators by their signature.
func (s Schema) WithStateNames(names map[string]string) Schema {
	s.Operators = slices.Clone(s.Operators)
	for i := range s.Operators {
		o := &s.Operators[i]
		o.State = ""
		if n := names[o.ID]; n != "" && n != o.ID {
			o.State = n
		}
	}
	return s
}

// Allowed reports whether the job may restore the checkpoint: nothing is
// refused, and state is dropped only if allowNonRestored.
func (r Result) Allowed(allowNonRestored bool) bool {
	for _, d := range r.Differences {
		if d.Level == Refused || (d.Level == Drops && !allowNonRestored) {
			return false
		}
	}
	return true
}

// Err returns nil if the restore is allowed, else an *IncompatibleError.
func (r Result) Err(allowNonRestored bool) error {
	if r.Allowed(allowNonRestored) {
		return nil
	}
	return &IncompatibleError{Result: r, AllowNonRestored: allowNonRestored}
}

// Of returns the differences of level l.
func (r Result) Of(l Level) []Difference {
	var out []Difference
	for _, d := range r.Differences {
		if d.Level == l {
			out = append(out, d)
		}
	}
	return out
}

// IncompatibleError is a job that must not restore a checkpoint: it lists
// every difference that refuses it and says the ways out.
type IncompatibleError struct {
	Result
	AllowNonRestored bool
}

func (e *IncompatibleError) Error() string {
	var b strings.Builder
	what := "the checkpoint"
	if e.Checkpoint != 0 {
		what = fmt.Sprintf("checkpoint %d", e.Checkpoint)
	}
	fmt.Fprintf(&b, "the job cannot restore %s:", what)
	refused, drops := e.Of(Refused), e.Of(Drops)
	for _, d := range refused {
		b.WriteString("\n  - " + d.String())
	}
	if !e.AllowNonRestored {
		for _, d := range drops {
			b.WriteString("\n  - " + d.String() + " (its state would be dropped)")
		}
	}
	b.WriteString("\nnothing was written. Restore the job file the checkpoint was taken with")
	if !e.AllowNonRestored && len(drops) > 0 && len(refused) == 0 {
		b.WriteString(", or run with --allow-non-restored-state to drop the state named above")
	} else if len(refused) > 0 {
		b.WriteString(" (to start a changed operator empty instead, give its step a new id: and run with --allow-non-restored-state)")
	}
	return b.String()
}

// Report writes every difference, one a line, each with its level.
func (r Result) Report() string {
	var b strings.Builder
	if r.Unchecked {
		b.WriteString("the checkpoint records no state schema (taken before schemas were recorded): nothing to compare\n")
	}
	for _, d := range r.Differences {
		fmt.Fprintf(&b, "%-11s  %s\n", d.Level, d)
	}
	return b.String()
}

// Compare compares the schema recorded by a checkpoint (old; nil if it
// records none) with a job's (cur), and returns every difference. It reads
// nothing else: the caller passes the checkpoint's ID for messages.
func Compare(checkpoint ckpt.ID, old, cur *Schema) Result {
	r := Result{Checkpoint: checkpoint}
	if old == nil {
		r.Unchecked = true
		return r
	}
	add := func(l Level, op, site, format string, args ...any) {
		r.Differences = append(r.Differences, Difference{Level: l, Operator: op, Site: site, Msg: fmt.Sprintf(format, args...)})
	}

	if old.MaxParallelism != cur.MaxParallelism {
		add(Refused, "", "", "job.max_parallelism is %d, the checkpoint's is %d: the number of key groups is fixed at a job's first start",
			cur.MaxParallelism, old.MaxParallelism)
	}
	compareSources(old, cur, add)
	m := matchOperators(old, cur)
	r.StageNames = matchStages(old, cur, m, add)
	// The job as it runs: its stages under the names their state has.
	run := cur.withStageNames(r.StageNames)
	compareStages(old, run, add)
	r.StateNames = compareOperators(old, run, m, add)
	compareSinks(old, run, add)
	if old.Fingerprint != cur.Fingerprint && len(r.Differences) == 0 {
		add(Compatible, "", "", "the job's definition changed (%s → %s) without a change of its state", Short(old.Fingerprint), Short(cur.Fingerprint))
	}
	return r
}

type adder func(l Level, op, site, format string, args ...any)

func compareSources(old, cur *Schema, add adder) {
	if len(old.Sources) != len(cur.Sources) {
		add(Refused, "", "", "the job has %d sources, the checkpoint %d", len(cur.Sources), len(old.Sources))
		return
	}
	for i := range old.Sources {
		o, c := old.Sources[i], cur.Sources[i]
		for _, t := range c.Topics {
			if !slices.Contains(o.Topics, t) {
				add(Compatible, "source", "", "topic %s is new: it is read from the source's start position (source.start)", t)
			}
		}
		for _, t := range o.Topics {
			if !slices.Contains(c.Topics, t) {
				add(Drops, "source", "", "the checkpoint has read positions in topic %s, which the job no longer reads (read again later, it would start from source.start)", t)
			}
		}
		switch {
		case c.Partitions > o.Partitions:
			add(Compatible, SourceStage, "", "input partitions %d → %d: tasks %s/%d…%s/%d are new and read their partitions from the earliest offset",
				o.Partitions, c.Partitions, SourceStage, o.Partitions, SourceStage, c.Partitions-1)
		case c.Partitions < o.Partitions:
			add(Refused, SourceStage, "", "the input topics have %d partitions, the checkpoint's had %d: a topic with fewer partitions was recreated; its records' positions no longer match",
				c.Partitions, o.Partitions)
		}
	}
}

func compareStages(old, cur *Schema, add adder) {
	for _, c := range cur.Stages {
		o := old.Stage(c.Name)
		switch {
		case o == nil:
			add(Compatible, "stage "+c.Name, "", "new stage of %d tasks", c.Parallelism)
		case c.Name == SourceStage:
			// One task per input partition: compareSources says it.
		case o.Parallelism != c.Parallelism:
			// Its tasks' state is filed by key group: each new task
			// restores its range of key groups from the old tasks that
			// held them (docs/state.md, "Rescaling").
			add(Compatible, "stage "+c.Name, "", "parallelism %d → %d: key groups move", o.Parallelism, c.Parallelism)
		}
	}
}

func compareOperators(old, cur *Schema, m operatorMatch, add adder) map[string]string {
	for _, c := range cur.Operators {
		o := m.old[c.ID]
		if o == nil {
			msg := fmt.Sprintf("new %s: it starts empty", c.Kind)
			if s := m.names[c.ID]; s != "" {
				msg += fmt.Sprintf(" (its state is stored as %s: %s is the stored name of another step's state)", s, c.ID)
			}
			add(Compatible, c.ID, c.Site, "%s", msg)
			continue
		}
		if o.ID != c.ID {
			add(Compatible, c.ID, c.Site, "continues the state of %s (%s in the checkpoint): the step's derived id changed, and no other %s is defined as it is (%s)",
				o.ID, o.Site, c.Kind, describeSignature(o))
		}
		refuse := func(format string, args ...any) { add(Refused, c.ID, c.Site, format, args...) }
		switch {
		case o.Kind != c.Kind:
			refuse("is a %s, the checkpoint's %s is a %s", c.Kind, c.ID, o.Kind)
			continue
		case o.Stage != c.Stage:
			refuse("runs in stage %s, its state is in the tasks of stage %s", c.Stage, o.Stage)
			continue
		case o.Key != c.Key:
			refuse("is keyed by %s, its state by %s", c.Key, o.Key)
			continue
		case o.Encoding != c.Encoding:
			refuse("stores its state as %s, the checkpoint as %s", c.Encoding, o.Encoding)
			continue
		case !sameWindow(o.Window, c.Window):
			refuse("window %s, the checkpoint's is %s: its open windows cannot be carried over", c.Window, o.Window)
			continue
		}
		compareFields(o, &c, add)
	}
	for i := range old.Operators {
		o := &old.Operators[i]
		if !m.matched[o.ID] {
			add(Drops, o.ID, o.Site, "the checkpoint has state of this %s (stage %s), which the job no longer has", o.Kind, o.Stage)
		}
	}
	return m.names
}

// matchStages returns the job's stages that run under the checkpoint's
// name of the stage (Result.StageNames): a stage named after an operator
// that continues the state of the operator a checkpoint's stage is named
// after is that stage, whatever the job now names it. Two stages that
// would run under one name are refused.
func matchStages(old, cur *Schema, m operatorMatch, add adder) map[string]string {
	names, quiet := map[string]string{}, map[string]bool{}
	for _, c := range cur.Stages {
		if c.NamedAfter == "" {
			continue
		}
		o := m.old[c.NamedAfter]
		if o == nil {
			continue
		}
		if s := old.stageNamedAfter(o.ID); s != nil && s.Name != c.JobName() {
			names[c.JobName()] = s.Name
			if s.JobName() == c.JobName() {
				// Renamed by an edit before the checkpoint: said then.
				quiet[c.JobName()] = true
			}
		}
	}
	runs := func(st *Stage) string {
		if n := names[st.JobName()]; n != "" {
			return n
		}
		return st.JobName()
	}
	for i := range cur.Stages {
		c := &cur.Stages[i]
		n := names[c.JobName()]
		if n == "" {
			continue
		}
		other := slices.IndexFunc(cur.Stages, func(s Stage) bool { return s.JobName() != c.JobName() && runs(&s) == n })
		if other >= 0 {
			add(Refused, "stage "+c.JobName(), "", "its first stateful step %s continues the state of the checkpoint's stage %s, whose name the job's stage %s has: give the stages' first stateful steps an id:",
				c.NamedAfter, n, cur.Stages[other].JobName())
			continue
		}
		if !quiet[c.JobName()] {
			add(Compatible, "stage "+c.JobName(), "", "runs as stage %s, the checkpoint's stage named after %s, whose state its first stateful step %s continues: its tasks, shuffle topic and sinks' transactional IDs keep the name",
				n, m.old[c.NamedAfter].ID, c.NamedAfter)
		}
	}
	return names
}

// stageNamedAfter returns the stage named after operator id, or nil.
// A stage of a checkpoint that records no NamedAfter is named after the
// operator of its name in it.
func (s *Schema) stageNamedAfter(id string) *Stage {
	for i := range s.Stages {
		st := &s.Stages[i]
		if st.NamedAfter == id {
			return st
		}
		if st.NamedAfter == "" && st.Name == id {
			if o := s.Operator(id); o != nil && o.Stage == st.Name {
				return st
			}
		}
	}
	return nil
}

// withStageNames returns a copy of s whose stages, and its operators' and
// sinks' stages, are named as they run under names (the job's stage name
// → the name it runs under, Result.StageNames); s may name them either
// way (Stage.Defined).
func (s *Schema) withStageNames(names map[string]string) *Schema {
	out := *s
	out.Stages = slices.Clone(s.Stages)
	rename := map[string]string{}
	for i := range out.Stages {
		st := &out.Stages[i]
		given, job := st.Name, st.JobName()
		st.Name, st.Defined = job, ""
		if n := names[job]; n != "" && n != job {
			st.Name, st.Defined = n, job
		}
		rename[given] = st.Name
	}
	out.Operators = slices.Clone(s.Operators)
	for i := range out.Operators {
		if n, ok := rename[out.Operators[i].Stage]; ok {
			out.Operators[i].Stage = n
		}
	}
	out.Sinks = slices.Clone(s.Sinks)
	for i := range out.Sinks {
		if n, ok := rename[out.Sinks[i].Stage]; ok {
			out.Sinks[i].Stage = n
		}
	}
	return &out
}

// describeSignature says what defines a derived operator's state, for
// messages: "stage aggregate, keyed by record key, window none".
func describeSignature(o *Operator) string {
	s := fmt.Sprintf("stage %s, keyed by %s, window %s", o.Stage, o.Key, o.Window)
	if o.Definition != "" {
		s += ", " + o.Definition
	}
	return s
}

// operatorMatch is which operator of a checkpoint each operator of a job
// continues.
type operatorMatch struct {
	old     map[string]*Operator // by the job's operator ID; absent: new
	matched map[string]bool      // the checkpoint's operator IDs matched
	// names are the job's operators whose state is stored under a name
	// other than their ID (Result.StateNames).
	names map[string]string
}

// matchOperators matches the job's operators with the checkpoint's:
//
//  1. By ID, if either has an explicit or a given ID (not Derived), or
//     both define their state alike (Signature): a job whose steps did
//     not move keeps every name.
//  2. A derived operator not matched yet continues the checkpoint's
//     derived operator not matched yet that has its signature, if each is
//     the only one with it on its side: a step of the same kind inserted
//     or removed before it renamed it (aggregate → aggregate-2), its
//     state follows it.
//  3. A derived operator still not matched takes the checkpoint's of its
//     ID, if that one is not matched yet (the comparison then names what
//     changed): two derived operators with one signature stay matched by
//     rank.
//
// A matched operator's state is stored under the checkpoint's operator's
// stored name; a new one's under its ID, or, if that is the stored name
// of the checkpoint's state of another operator, under "<ID>#<n>", the
// first such name free.
func matchOperators(old, cur *Schema) operatorMatch {
	m := operatorMatch{old: map[string]*Operator{}, matched: map[string]bool{}, names: map[string]string{}}
	pair := func(c *Operator, o *Operator) {
		m.old[c.ID], m.matched[o.ID] = o, true
	}
	for i := range cur.Operators {
		c := &cur.Operators[i]
		if o := old.Operator(c.ID); o != nil && (!c.Derived || !o.Derived || o.Signature() == c.Signature()) {
			pair(c, o)
		}
	}
	// Step 2: the unmatched derived operators of each side by signature.
	curBy, oldBy := map[string][]*Operator{}, map[string][]*Operator{}
	for i := range cur.Operators {
		if c := &cur.Operators[i]; c.Derived && m.old[c.ID] == nil {
			curBy[c.Signature()] = append(curBy[c.Signature()], c)
		}
	}
	for i := range old.Operators {
		if o := &old.Operators[i]; o.Derived && !m.matched[o.ID] {
			oldBy[o.Signature()] = append(oldBy[o.Signature()], o)
		}
	}
	for i := range cur.Operators {
		c := &cur.Operators[i]
		cs, os := curBy[c.Signature()], oldBy[c.Signature()]
		if c.Derived && m.old[c.ID] == nil && len(cs) == 1 && len(os) == 1 {
			pair(c, os[0])
		}
	}
	for i := range cur.Operators {
		c := &cur.Operators[i]
		if o := old.Operator(c.ID); m.old[c.ID] == nil && o != nil && !m.matched[o.ID] {
			pair(c, o)
		}
	}
	// Stored names: a matched operator's is its checkpoint operator's; a
	// new one avoids every name the checkpoint stores state under.
	taken := map[string]bool{}
	for i := range old.Operators {
		taken[old.Operators[i].StateName()] = true
	}
	for i := range cur.Operators {
		c := &cur.Operators[i]
		if o := m.old[c.ID]; o != nil && o.StateName() != c.ID {
			m.names[c.ID] = o.StateName()
		}
	}
	for i := range cur.Operators {
		c := &cur.Operators[i]
		if m.old[c.ID] != nil || !taken[c.ID] {
			continue
		}
		name := c.ID
		for n := 2; taken[name]; n++ {
			name = fmt.Sprintf("%s#%d", c.ID, n)
		}
		taken[name] = true
		m.names[c.ID] = name
	}
	return m
}

func sameWindow(a, b *Window) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func compareFields(o, c *Operator, add adder) {
	for _, f := range c.Fields {
		i := slices.IndexFunc(o.Fields, func(g Field) bool { return g.Name == f.Name })
		switch {
		case i < 0:
			add(Compatible, c.ID, c.Site, "%s %s is new: it starts empty", f.Type, f.Name)
		case o.Fields[i].Type != f.Type:
			add(Refused, c.ID, c.Site, "%s is a %s, the checkpoint's %s is a %s: give it another name", f.Name, f.Type, f.Name, o.Fields[i].Type)
		}
	}
	for _, f := range o.Fields {
		if !slices.ContainsFunc(c.Fields, func(g Field) bool { return g.Name == f.Name }) {
			add(Drops, c.ID, c.Site, "the checkpoint has state of %s %s, which the step no longer has", f.Type, f.Name)
		}
	}
}

func compareSinks(old, cur *Schema, add adder) {
	for _, c := range cur.Sinks {
		i := slices.IndexFunc(old.Sinks, func(k Sink) bool { return k.ID == c.ID })
		switch {
		case i < 0:
			add(Compatible, "sink "+c.ID, "", "new sink: it starts with new transactions")
		case old.Sinks[i].Delivery != c.Delivery:
			add(Refused, "sink "+c.ID, "", "delivery %s, the checkpoint's is %s", c.Delivery, old.Sinks[i].Delivery)
		case old.Sinks[i].Stage != c.Stage:
			add(Refused, "sink "+c.ID, "", "is written by stage %s, the checkpoint's by stage %s, whose tasks recorded its transactions: keep the stage's name (the id of its first stateful step)", c.Stage, old.Sinks[i].Stage)
		}
	}
	for _, o := range old.Sinks {
		if !slices.ContainsFunc(cur.Sinks, func(k Sink) bool { return k.ID == o.ID }) {
			add(Compatible, "sink "+o.ID, "", "no longer in the job: the transactions the checkpoint recorded for it are committed at the restore, then its transactional IDs are fenced")
		}
	}
}
