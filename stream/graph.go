package stream

import (
	"fmt"
	"regexp"
	"slices"
)

// MainStage is the name of a job's source stage, stage 0: the stage that
// reads the job's Kafka sources.
const MainStage = "main"

// Graph is a built job as nodes and stages, for planners and for people.
type Graph struct {
	Nodes    []Node        `json:"nodes"`
	Stages   []StageDef    `json:"stages"`
	Shuffles []ShuffleEdge `json:"shuffles"`
}

// Node is one operator of a job: a source, a sink, or what a builder
// function defined.
type Node struct {
	// ID is the node's index in Graph.Nodes; nodes are in definition order,
	// so a node's inputs have smaller IDs.
	ID int `json:"id"`
	// What names the operator: "From([clicks])", "Map", "KeyBy",
	// `Count("n")`, "To(out)".
	What string `json:"what"`
	// Where is the file:line of the builder call.
	Where string `json:"where"`
	// Inputs are the IDs of the nodes whose streams the node reads.
	Inputs []int `json:"inputs,omitempty"`
	// Stage is the name of the stage the node runs in. A KeyBy that is a
	// shuffle point runs in the stage upstream of its shuffle.
	Stage string `json:"stage"`
}

// StageDef is one stage of a job: the operators that run in the same task,
// chained by function calls, between the job's sources or a shuffle and the
// job's sinks or shuffles.
type StageDef struct {
	// Name is MainStage for stage 0; a downstream stage is named by its
	// KeyBy's Named option, or else by its first keyed operator.
	Name  string `json:"name"`
	Index int    `json:"index"`
	// Kafka is true for the stage that reads the job's Kafka sources
	// (main).
	Kafka bool `json:"kafka"`
	// Input is the shuffle that feeds the stage; nil for main.
	Input *ShuffleEdge `json:"input,omitempty"`
	// Outputs are the shuffles the stage writes.
	Outputs []ShuffleEdge `json:"outputs,omitempty"`
	// Sinks are the indices in Job.Sinks of the sinks the stage writes
	// (main writes the dead-letter sinks, the stage of a Window the sink of
	// its late topic).
	Sinks []int `json:"sinks,omitempty"`
	// Parallelism is the KeyBy's Parallelism option; 0 means the job's
	// default (and is always 0 for main, whose parallelism is its input's
	// partition count).
	Parallelism int `json:"parallelism,omitempty"`
	// Operators are the What of the stage's nodes, in definition order.
	Operators []string `json:"operators"`
	// NamedAfter is the ID of the keyed operator the stage is named after
	// (its first), for a downstream stage without Named: an edit that
	// renames that operator renames the stage, and the runtime then runs
	// the stage under the name its state has (compat.Result.StageNames).
	// It is no part of the graph's encoding (a Go job's fingerprint).
	NamedAfter string `json:"-"`
}

// ShuffleEdge is a shuffle between two stages: the elements of a KeyBy,
// re-keyed and encoded in the upstream stage, decoded in the downstream
// one.
type ShuffleEdge struct {
	// Index is the edge's index in Job.Shuffles, the edge argument of
	// Emitter.Shuffle.
	Index int `json:"index"`
	// From and To are the upstream and downstream stages' names.
	From string `json:"from"`
	To   string `json:"to"`
	// Where is the file:line of the KeyBy.
	Where string `json:"where"`
}

// stageNameRE is the form of a stage name: it goes into task IDs
// ("<stage>/<i>"), state directories ("<stage>-<i>"), transactional IDs
// and shuffle topic names.
var stageNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// checkStageName returns what is wrong with a stage name, or "".
func checkStageName(name string) string {
	switch {
	case name == MainStage:
		return fmt.Sprintf("stage name %q is reserved for the source stage", name)
	case !stageNameRE.MatchString(name):
		return fmt.Sprintf("stage name %q: use lower-case letters, digits, '_' and '-', starting with a letter or digit", name)
	}
	return ""
}

// cut cuts the job into stages. A KeyBy whose stream reaches a keyed
// operator, directly or through stateless operators and merges, is a
// shuffle point: it runs in its input's stage, which writes the shuffle,
// and the nodes that consume its stream start a new stage. Nodes are in
// definition order, which is topological (a node's inputs are defined
// before it), so one pass backwards finds the shuffle points and one pass
// forwards assigns the stages. It is called by Build, with j.mu held.
func (j *Job) cut() error {
	reach := j.shufflePoints()
	if err := j.checkKeyChanges(reach); err != nil {
		return err
	}
	if err := j.assignStages(reach); err != nil {
		return err
	}
	if err := j.nameStages(); err != nil {
		return err
	}
	j.linkStages()
	return nil
}

// shufflePoints returns, by node ID, whether the node's stream reaches a
// keyed operator without crossing a KeyBy: for a KeyBy, whether it is a
// shuffle point.
func (j *Job) shufflePoints() []bool {
	reach := make([]bool, len(j.nodes))
	for i := len(j.nodes) - 1; i >= 0; i-- {
		for _, c := range j.nodes[i].outs {
			switch c.kind {
			case kindKeyed:
				reach[i] = true
			case kindStateless, kindMerge:
				reach[i] = reach[i] || reach[c.id]
			}
		}
	}
	return reach
}

// checkKeyChanges rejects a Transform defined with ChangesKey whose stream
// reaches a keyed operator without a KeyBy in between (reach is
// shufflePoints'): the keyed operator would see elements under keys that
// the stage's tasks do not own.
func (j *Job) checkKeyChanges(reach []bool) error {
	for _, n := range j.nodes {
		if n.changesKey && reach[n.id] {
			return fmt.Errorf("%w: %s (%s): it changes keys (ChangesKey), and its stream reaches a keyed operator (Process, Aggregate, Reduce, Count, Window) without a KeyBy in between: add stream.KeyByCurrent after it, which shuffles by the new key", ErrInvalidJob, n.what, n.where)
		}
	}
	return nil
}

// assignStages gives every node its stage, and every shuffle point its
// edge and downstream stage (unnamed yet). It fails on a shuffle point
// without a codec, stage options on a KeyBy that is none, and a node that
// reads streams of two stages.
func (j *Job) assignStages(shuffle []bool) error {
	j.stages = []StageDef{{Name: MainStage, Index: 0, Kafka: true}}
	j.entries = []*node{nil}
	j.shuffles = nil
	// outStage is the stage of the nodes that consume n's stream.
	outStage := func(n *node) int {
		if n.keyBy != nil && n.keyBy.down >= 0 {
			return n.keyBy.down
		}
		return n.stage
	}
	for _, n := range j.nodes {
		if n.kind != kindSource {
			n.stage = outStage(n.inputs[0])
			for _, in := range n.inputs[1:] {
				if s := outStage(in); s != n.stage {
					return fmt.Errorf("%w: %s (%s): reads streams of two stages, %s and %s: a stream that went through a shuffle (a KeyBy before a keyed operator) cannot meet one that did not, nor one of another shuffle",
						ErrInvalidJob, n.what, n.where, j.describeStage(n.stage), j.describeStage(s))
				}
			}
		}
		kb := n.keyBy
		if kb == nil {
			continue
		}
		kb.shuffle, kb.down = -1, -1
		switch {
		case !shuffle[n.id] && (kb.name != "" || kb.parallelism != 0):
			return fmt.Errorf("%w: KeyBy (%s): Named or Parallelism set, but the KeyBy reaches no keyed operator (Process, Aggregate, Reduce, Count), so it starts no stage: remove the options", ErrInvalidJob, n.where)
		case !shuffle[n.id]:
			continue
		case !kb.hasCodec:
			return fmt.Errorf("%w: KeyBy (%s): its %s elements go through a shuffle to the keyed operators after it, and need a codec: pass stream.ShuffleCodec(c), c a stream.Codec[%s]", ErrInvalidJob, n.where, kb.elem, kb.elem)
		}
		kb.shuffle, kb.down = len(j.shuffles), len(j.stages)
		j.shuffles = append(j.shuffles, ShuffleEdge{Index: kb.shuffle, Where: n.where})
		j.stages = append(j.stages, StageDef{Name: kb.name, Index: kb.down, Parallelism: kb.parallelism})
		j.entries = append(j.entries, n)
	}
	return nil
}

// nameStages names the stages without Named after their first keyed
// operator (there is one: their KeyBy reaches a keyed operator through
// stateless ones, which run in the stage), and checks the names.
func (j *Job) nameStages() error {
	for _, n := range j.nodes {
		if st := &j.stages[n.stage]; n.kind == kindKeyed && st.Name == "" {
			st.Name, st.NamedAfter = n.op, n.op
		}
	}
	seen := map[string]int{MainStage: 0}
	for i, st := range j.stages[1:] {
		i++
		kb := j.entries[i]
		if msg := checkStageName(st.Name); msg != "" {
			if kb.keyBy.name == "" {
				msg = fmt.Sprintf("the stage after it takes its name from its first keyed operator, but %s; name the stage with stream.Named", msg)
			}
			return fmt.Errorf("%w: KeyBy (%s): %s", ErrInvalidJob, kb.where, msg)
		}
		if other, dup := seen[st.Name]; dup {
			return fmt.Errorf("%w: KeyBy (%s): stage name %q is also the name of the stage after the KeyBy at %s: name one with stream.Named", ErrInvalidJob, kb.where, st.Name, j.entries[other].where)
		}
		seen[st.Name] = i
	}
	return nil
}

// linkStages fills in the stages' edges, operators and sinks.
func (j *Job) linkStages() {
	for i := range j.shuffles {
		e := &j.shuffles[i]
		kb := j.entries[i+1]
		e.From, e.To = j.stages[kb.stage].Name, j.stages[i+1].Name
		j.stages[i+1].Input = e
		j.stages[kb.stage].Outputs = append(j.stages[kb.stage].Outputs, *e)
	}
	for _, n := range j.nodes {
		st := &j.stages[n.stage]
		st.Operators = append(st.Operators, n.what)
		if n.kind == kindSink && !slices.Contains(st.Sinks, n.sink) {
			st.Sinks = append(st.Sinks, n.sink)
		}
		for _, idx := range n.sideSinks {
			if !slices.Contains(st.Sinks, idx) {
				st.Sinks = append(st.Sinks, idx)
			}
		}
	}
	for _, idx := range j.sourceDLQ {
		if !slices.Contains(j.stages[0].Sinks, idx) {
			j.stages[0].Sinks = append(j.stages[0].Sinks, idx)
		}
	}
	for i := range j.stages {
		slices.Sort(j.stages[i].Sinks)
	}
}

// describeStage names stage i for an error, before the stages have names:
// "main", or "the stage after the KeyBy at job.go:12".
func (j *Job) describeStage(i int) string {
	if i == 0 {
		return MainStage
	}
	return "the stage after the KeyBy at " + j.entries[i].where
}

// Graph returns the nodes, stages and shuffles of a built job; before Build
// succeeds, the zero Graph.
func (j *Job) Graph() Graph {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.built || j.err != nil {
		return Graph{}
	}
	g := Graph{Nodes: make([]Node, len(j.nodes)), Stages: j.stagesLocked(), Shuffles: slices.Clone(j.shuffles)}
	for i, n := range j.nodes {
		g.Nodes[i] = Node{ID: n.id, What: n.what, Where: n.where, Stage: j.stages[n.stage].Name}
		for _, in := range n.inputs {
			g.Nodes[i].Inputs = append(g.Nodes[i].Inputs, in.id)
		}
	}
	return g
}

// Stages returns the stages of a built job, main first, then in the order
// of their KeyBys' definitions (so every stage comes after the stages
// upstream of it); before Build succeeds, nil.
func (j *Job) Stages() []StageDef {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.built || j.err != nil {
		return nil
	}
	return j.stagesLocked()
}

func (j *Job) stagesLocked() []StageDef {
	out := make([]StageDef, len(j.stages))
	for i, st := range j.stages {
		out[i] = st
		if st.Input != nil {
			e := *st.Input
			out[i].Input = &e
		}
		out[i].Outputs = slices.Clone(st.Outputs)
		out[i].Sinks = slices.Clone(st.Sinks)
		out[i].Operators = slices.Clone(st.Operators)
	}
	return out
}

// Shuffles returns the shuffle edges of a built job; before Build
// succeeds, nil. Edge i feeds stage i+1.
func (j *Job) Shuffles() []ShuffleEdge {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.built || j.err != nil {
		return nil
	}
	return slices.Clone(j.shuffles)
}
