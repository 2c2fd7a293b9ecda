// Package plan owns the physical plan of a job: from a built stream.Job
// and what is known when a generation is planned (the source topics'
// partition count, the job's parallelism settings, the topic prefix, the
// running generation's task counts), it derives each stage's
// parallelism and tasks, each task's range of key groups, and each shuffle
// topic with its partition count and its writers and readers.
//
// A plan is a pure function of its inputs: the package does no I/O, reads
// no clock and keeps no state. The runtime creates the topics and runs the
// tasks a plan lists; Describe prints it for people.
package plan

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/keygroup"
	"github.com/weir-stream/weir/stream"
)

// ErrInvalid reports inputs or a job that cannot be planned; Build wraps it
// with what is wrong.
var ErrInvalid = errors.New("plan: invalid")

// Inputs is what the plan needs besides the job.
type Inputs struct {
	// SourcePartitions is the partition count of the job's input topics:
	// the source stage's parallelism.
	SourcePartitions int
	// Parallelism is job.parallelism: the parallelism of the downstream
	// stages whose KeyBy sets none; 0 means SourcePartitions.
	Parallelism int
	// MaxParallelism is job.max_parallelism: the number of key groups, and
	// of partitions of every shuffle topic; 0 means
	// keygroup.DefaultMaxParallelism.
	MaxParallelism int
	// TopicPrefix is kafka.topic_prefix, which starts the shuffle topics'
	// names.
	TopicPrefix string
	// Running is the number of tasks of each stage in the job's running
	// generation (Count of its assignment); nil at the job's first start.
	// A downstream stage whose parallelism neither its KeyBy nor
	// Parallelism sets keeps its running task count instead of following
	// SourcePartitions: input partitions added to a running job give tasks
	// to the source stage only. Its state could move (a restore with
	// another task count moves key groups, docs/state.md "Rescaling"), but
	// a partition added to an input topic should not move every
	// downstream task's state as a side effect; an operator rescales a
	// stage on purpose by setting job.parallelism or the KeyBy's.
	Running map[string]int
	// StageNames are the job's stages that run under another name, by the
	// job's name (compat.Result.StageNames: a stage keeps the name of the
	// checkpoint's stage whose state it continues when an edit renamed
	// the operator it is named after). Running is by the names the stages
	// run under.
	StageNames map[string]string
}

// Plan is a job's stages, tasks and shuffle topics.
type Plan struct {
	Job      string     `json:"job"`
	Stages   []Stage    `json:"stages"`
	Shuffles []*Shuffle `json:"shuffles"`
	// Sinks are the topics of the job's sinks, by index.
	Sinks []string `json:"sinks"`
	// MaxParallelism is the number of key groups.
	MaxParallelism int `json:"max_parallelism"`
}

// Stage is one stage of the plan (stream.StageDef, with its parallelism
// resolved).
type Stage struct {
	Name        string `json:"name"`
	Parallelism int    `json:"parallelism"`
	// Kafka is true for the stage that reads the job's Kafka sources.
	Kafka bool `json:"kafka"`
	// Input is the shuffle the stage reads; nil for the source stage.
	Input *Shuffle `json:"input,omitempty"`
	// Outputs are the shuffles the stage writes.
	Outputs []*Shuffle `json:"outputs,omitempty"`
	// Sinks are indices into the job's Sinks.
	Sinks     []int    `json:"sinks,omitempty"`
	Operators []string `json:"operators"`
	// Defined is the job's own name for the stage, if the plan runs it
	// under another (Inputs.StageNames): the name its operators are
	// built by (stream.TaskContext.Stage).
	Defined string `json:"defined,omitempty"`
}

// JobName is the job's own name for the stage: Defined, or else Name.
func (s *Stage) JobName() string {
	if s.Defined != "" {
		return s.Defined
	}
	return s.Name
}

// Shuffle is a shuffle topic between two stages.
type Shuffle struct {
	// Edge is the index of the edge in the job's Shuffles (the edge
	// argument of stream.Emitter.Shuffle).
	Edge int `json:"edge"`
	// Topic is TopicPrefix + "shuffle." + the downstream stage's name.
	Topic string `json:"topic"`
	// Partitions is one per key group: MaxParallelism.
	Partitions int `json:"partitions"`
	// From and To are the upstream and downstream stages.
	From string `json:"from"`
	To   string `json:"to"`
	// Writers and Readers are the upstream and downstream stages'
	// parallelism: how many tasks write each partition, and how many read
	// the topic (each a range of partitions).
	Writers int `json:"writers"`
	Readers int `json:"readers"`
	// Where is the file:line of the KeyBy.
	Where string `json:"where"`
}

// Build plans job, which it builds first, returning its error: the stage
// problems stream.Job.Build finds (duplicate or invalid stage names,
// streams of two stages merged...) name the call sites, which the plan
// cannot.
func Build(job *stream.Job, in Inputs) (*Plan, error) {
	if err := job.Build(); err != nil {
		return nil, err
	}
	if in.MaxParallelism == 0 {
		in.MaxParallelism = keygroup.DefaultMaxParallelism
	}
	followsInput := in.Parallelism == 0 // the default parallelism is the input's
	if in.Parallelism == 0 {
		in.Parallelism = in.SourcePartitions
	}
	m := in.MaxParallelism
	switch {
	case in.SourcePartitions < 1:
		return nil, fmt.Errorf("%w: job %s: its input topics have %d partitions: need at least 1", ErrInvalid, job.Name(), in.SourcePartitions)
	case m < 1 || m > keygroup.Limit:
		return nil, fmt.Errorf("%w: job %s: max parallelism %d: must be between 1 and %d", ErrInvalid, job.Name(), m, keygroup.Limit)
	case in.Parallelism < 1:
		return nil, fmt.Errorf("%w: job %s: parallelism %d: must be at least 1 (or 0 for the input partition count)", ErrInvalid, job.Name(), in.Parallelism)
	}
	defs := job.Stages()
	p := &Plan{Job: job.Name(), MaxParallelism: m, Stages: make([]Stage, len(defs))}
	for _, k := range job.Sinks() {
		p.Sinks = append(p.Sinks, k.Topic)
	}
	runs := map[string]string{} // the job's stage name → the name it runs under
	for i, d := range defs {
		st := &p.Stages[i]
		*st = Stage{Name: d.Name, Kafka: d.Kafka, Sinks: d.Sinks, Operators: d.Operators}
		if n := in.StageNames[d.Name]; n != "" && n != d.Name && !d.Kafka {
			st.Name, st.Defined = n, d.Name
		}
		if other := slices.IndexFunc(p.Stages[:i], func(o Stage) bool { return o.Name == st.Name }); other >= 0 {
			return nil, fmt.Errorf("%w: job %s: stages %s and %s would both run as stage %s", ErrInvalid, job.Name(), p.Stages[other].JobName(), d.Name, st.Name)
		}
		runs[d.Name] = st.Name
		switch {
		case d.Kafka:
			st.Parallelism = in.SourcePartitions
		case d.Parallelism > 0:
			st.Parallelism = d.Parallelism
		case followsInput && in.Running[st.Name] > 0:
			st.Parallelism = in.Running[st.Name]
		default:
			st.Parallelism = in.Parallelism
		}
		if !d.Kafka && st.Parallelism > m {
			return nil, fmt.Errorf("%w: stage %s (after the KeyBy at %s): parallelism %d is above the max parallelism %d: each task reads at least one key group (raise job.max_parallelism at the job's first start, or lower the parallelism)",
				ErrInvalid, d.Name, d.Input.Where, st.Parallelism, m)
		}
	}
	for _, e := range job.Shuffles() {
		sh := &Shuffle{Edge: e.Index, Topic: in.TopicPrefix + "shuffle." + runs[e.To], Partitions: m, From: runs[e.From], To: runs[e.To], Where: e.Where}
		if !validTopic(sh.Topic) {
			return nil, fmt.Errorf("%w: stage %s (after the KeyBy at %s): shuffle topic %q is not a valid Kafka topic name (at most 249 letters, digits, '.', '_' or '-')", ErrInvalid, sh.To, e.Where, sh.Topic)
		}
		from, to := p.Stage(sh.From), p.Stage(sh.To)
		sh.Writers, sh.Readers = from.Parallelism, to.Parallelism
		from.Outputs = append(from.Outputs, sh)
		to.Input = sh
		p.Shuffles = append(p.Shuffles, sh)
	}
	return p, nil
}

// Count returns the number of tasks of each stage among tasks: a
// generation's Inputs.Running.
func Count(tasks []control.TaskID) map[string]int {
	n := make(map[string]int)
	for _, t := range tasks {
		n[t.Stage]++
	}
	return n
}

// ForTasks plans job for a generation that runs tasks (its assignment's,
// control.Assignment.Tasks): the source stage gets as many tasks as tasks
// hold of it, every downstream stage whose parallelism follows the input
// keeps its count in tasks (Inputs.Running). in.SourcePartitions and
// in.Running are ignored. It fails, wrapping ErrInvalid, if the plan's
// tasks are not exactly tasks: a generation placed by a coordinator
// running another job file.
func ForTasks(job *stream.Job, in Inputs, tasks []control.TaskID) (*Plan, error) {
	if err := job.Build(); err != nil {
		return nil, err
	}
	in.Running = Count(tasks)
	in.SourcePartitions = 0
	for _, d := range job.Stages() {
		if d.Kafka {
			in.SourcePartitions = in.Running[d.Name]
		}
	}
	p, err := Build(job, in)
	if err != nil {
		return nil, err
	}
	want := p.Tasks()
	if !slices.Equal(sortedTasks(want), sortedTasks(tasks)) {
		return nil, fmt.Errorf("%w: job %s: the generation runs %d tasks (%s), the job's plan for them has %d (%s)",
			ErrInvalid, job.Name(), len(tasks), describeCounts(Count(tasks)), len(want), describeCounts(Count(want)))
	}
	return p, nil
}

func sortedTasks(ts []control.TaskID) []control.TaskID {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, control.TaskID.Compare)
	return ts
}

// describeCounts writes counts as "a: 2, main: 8", by stage name.
func describeCounts(counts map[string]int) string {
	names := slices.Sorted(maps.Keys(counts))
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s: %d", n, counts[n])
	}
	return strings.Join(parts, ", ")
}

// validTopic is Kafka's rule for topic names.
func validTopic(t string) bool {
	if t == "" || t == "." || t == ".." || len(t) > 249 {
		return false
	}
	for _, c := range t {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// Stage returns the stage named name, or nil.
func (p *Plan) Stage(name string) *Stage {
	for i := range p.Stages {
		if p.Stages[i].Name == name {
			return &p.Stages[i]
		}
	}
	return nil
}

// Tasks returns every task of the plan: the source stage's, then each
// downstream stage's, in stage order, each by index.
func (p *Plan) Tasks() []control.TaskID {
	var out []control.TaskID
	for _, st := range p.Stages {
		for i := range st.Parallelism {
			out = append(out, control.TaskID{Stage: st.Name, Index: i})
		}
	}
	return out
}

// KeyGroups returns the key groups [lo, hi) that task id owns: the
// partitions of its stage's shuffle topic it reads (keygroup.Range). A task
// of the source stage owns none (its keys follow its input partition), nor
// does a task the plan does not have: both get (0, 0).
func (p *Plan) KeyGroups(id control.TaskID) (lo, hi int) {
	st := p.Stage(id.Stage)
	if st == nil || st.Input == nil || id.Index < 0 || id.Index >= st.Parallelism {
		return 0, 0
	}
	return keygroup.Range(id.Index, st.Parallelism, p.MaxParallelism)
}

// Describe writes the plan for people: each stage with its tasks (and
// their key groups), its input and outputs, sinks and operators.
func (p *Plan) Describe(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "job %s: %d stage(s), %d task(s), max parallelism %d (key groups)\n", p.Job, len(p.Stages), len(p.Tasks()), p.MaxParallelism)
	for _, st := range p.Stages {
		fmt.Fprintf(&b, "\nstage %s: parallelism %d\n", st.Name, st.Parallelism)
		if st.Defined != "" {
			fmt.Fprintf(&b, "  named %s by the job: runs under its checkpoint's name\n", st.Defined)
		}
		if st.Kafka {
			fmt.Fprintf(&b, "  input: the job's Kafka sources (task i reads partition i)\n")
		} else {
			fmt.Fprintf(&b, "  input: %s (%d partitions, %d writers)\n", st.Input.Topic, st.Input.Partitions, st.Input.Writers)
		}
		b.WriteString("  tasks:")
		for i := range st.Parallelism {
			id := control.TaskID{Stage: st.Name, Index: i}
			if st.Input == nil {
				fmt.Fprintf(&b, " %s", id)
				continue
			}
			lo, hi := p.KeyGroups(id)
			fmt.Fprintf(&b, " %s[%d-%d]", id, lo, hi-1)
		}
		b.WriteString("\n")
		for _, sh := range st.Outputs {
			fmt.Fprintf(&b, "  output: %s (%d partitions, %d readers) -> stage %s\n", sh.Topic, sh.Partitions, sh.Readers, sh.To)
		}
		if len(st.Sinks) > 0 {
			topics := make([]string, len(st.Sinks))
			for i, k := range st.Sinks {
				topics[i] = p.Sinks[k]
			}
			fmt.Fprintf(&b, "  sinks: %s\n", strings.Join(topics, ", "))
		}
		fmt.Fprintf(&b, "  operators: %s\n", strings.Join(st.Operators, ", "))
	}
	if len(p.Shuffles) > 0 {
		b.WriteString("\nshuffle topics:\n")
		for _, sh := range p.Shuffles {
			fmt.Fprintf(&b, "  %s: %d partitions, %d writers (%s), %d readers (%s), KeyBy at %s\n", sh.Topic, sh.Partitions, sh.Writers, sh.From, sh.Readers, sh.To, sh.Where)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
