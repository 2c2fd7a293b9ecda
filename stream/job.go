package stream

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weir-stream/weir/kafkaio"
)

// Sentinel errors, for errors.Is.
var (
	// ErrInvalidJob reports a job definition that cannot run: Build returns
	// it, wrapped with what is wrong and where it was defined.
	ErrInvalidJob = errors.New("stream: invalid job")
	// ErrContextExpired reports use of a Context outside the call it was
	// passed to.
	ErrContextExpired = errors.New("stream: context used outside its call")
)

// Record formats checked at the source's edge, before records enter the
// task.
const (
	FormatRaw  = "raw"  // any bytes (the default)
	FormatJSON = "json" // each value is one JSON document (a null value is accepted)
)

// Header keys of a dead-letter record written by a task; they are those of
// kafkaio's dead-letter writer.
const (
	DeadLetterHeaderTopic     = "weir-dlq-topic"
	DeadLetterHeaderPartition = "weir-dlq-partition"
	DeadLetterHeaderOffset    = "weir-dlq-offset"
	DeadLetterHeaderError     = "weir-dlq-error"
	// DeadLetterHeaderOperator names the Transform whose function failed
	// (absent on a record its source's codec rejected).
	DeadLetterHeaderOperator = "weir-dlq-operator"
)

// KafkaSource describes the input topics of a source and how their records
// are decoded. Task i reads partition i of every topic, so the topics must
// have the same partition count and be partitioned by the record key.
type KafkaSource struct {
	Topics []string
	// Start is where a job with no completed checkpoint starts (the zero
	// value: kafkaio.StartEarliest).
	Start kafkaio.Start
	// Format is the check the source applies at the edge: FormatRaw
	// (default) or FormatJSON.
	Format string
	// OnError is the policy for records that fail Format's check or the
	// source's Codec. Default kafkaio.OnErrorFail; under
	// kafkaio.OnErrorDeadLetter the record, with weir-dlq-* headers naming
	// its origin and the error, goes to DeadLetterTopic.
	OnError kafkaio.OnError
	// DeadLetterTopic receives failed records under
	// kafkaio.OnErrorDeadLetter. A
	// record that passes Format's check but that the Codec rejects is
	// written by the task to the sink of this topic, which Job.Sinks lists
	// (so it is committed exactly once, with the task's output).
	DeadLetterTopic string
	// Timestamp is where records get their event time (the record
	// Timestamp the task sees): the Kafka record timestamp by default.
	Timestamp TimestampSpec
	// Watermark configures the partitions' watermarks, if the job uses
	// event time.
	Watermark WatermarkSpec
	// ValueDecoder, if set, converts each record's value at the edge,
	// before Format's check, Timestamp and the Codec: for example an Avro
	// value in the Confluent wire format into its JSON document
	// (format.AvroDecoder). Its error is the record's, under OnError. It
	// is called from the goroutine that reads the source, concurrently for
	// the tasks of a process.
	ValueDecoder ValueDecoder
	// KeyDecoder, if set, converts each record's key at the edge, as
	// ValueDecoder does its value (an Avro key into its JSON document's
	// text, which is then the key the job sees). A nil key stays nil.
	KeyDecoder ValueDecoder
}

// ValueDecoder converts a source record's value at the edge. DecodeValue
// returns the new value (which the caller owns) or the record's error; a
// nil value (a tombstone) should stay nil.
type ValueDecoder interface {
	DecodeValue(v []byte) ([]byte, error)
}

// KafkaSink describes an output topic.
type KafkaSink struct {
	Topic string
	// Delivery defaults to kafkaio.DeliveryExactlyOnce: the sink's Kafka
	// transactions commit when a checkpoint completes.
	Delivery kafkaio.Delivery
	// TransactionTimeout is the producer's transaction.timeout.ms under
	// exactly-once; zero lets the runtime choose: the least the checkpoint
	// settings need (config.Config.SinkTransactionTimeout).
	TransactionTimeout time.Duration
	// MaxRecordBytes is the largest record the sink's producers write
	// (kgo.ProducerBatchMaxBytes); zero lets the runtime choose: the
	// topic's max.message.bytes, read at start, so that a record the
	// broker would take is not refused by the client's 1 MB default.
	MaxRecordBytes int32
}

// Job is a dataflow program under construction, then, after Build, a
// definition the runtime instantiates once per task of each of its stages.
type Job struct {
	name string

	mu      sync.Mutex
	err     error
	built   bool
	sources []*sourceDef
	sinks   []KafkaSink
	nodes   []*node
	ops     map[string]string // keyed operator names -> where defined
	// transforms maps Transform names to where they were defined (an
	// operator name is unique among both maps).
	transforms map[string]string
	// dlqSink maps dead-letter topics to their sink index.
	dlqSink map[string]int
	// sourceDLQ are the sinks of the sources' dead-letter topics, which
	// main writes.
	sourceDLQ []int

	// site, if set (At), names the operators defined next instead of
	// their Go call sites.
	site string

	// starts are what Start runs (OnStart), in order.
	starts []func(context.Context) error

	// Set by Build (cut): the stages and the shuffles between them.
	stages   []StageDef
	shuffles []ShuffleEdge
	entries  []*node // per stage, the KeyBy whose shuffle feeds it (nil for main)
}

// nodeKind is what a node does, as far as cutting the job into stages
// cares.
type nodeKind int

const (
	kindSource    nodeKind = iota // From
	kindStateless                 // Map, Filter, FlatMap, Transform
	kindKeyBy                     // KeyBy, KeyByCurrent
	kindMerge                     // Merge
	kindKeyed                     // Process, Aggregate, Reduce, Count
	kindSink                      // To
)

// node is what the job knows about one operator and the stream it
// defines: where it was defined, what it reads and what consumes it.
type node struct {
	id     int // index in Job.nodes
	kind   nodeKind
	what   string // "Map", "From([clicks])"...
	where  string // file:line of the builder call
	op     string // kindKeyed, Transform: the operator's name
	inputs []*node
	outs   []*node // the nodes that consume the stream
	sink   int     // kindSink: the index in Job.sinks
	keyBy  *keyByDef
	// eventTime is set on an operator that uses event time (Window,
	// Process WithEventTime).
	eventTime bool
	// sideSinks are the indices in Job.sinks of sinks the node writes
	// besides its stream (a Window's late topic).
	sideSinks []int
	// changesKey is set on a Transform defined with ChangesKey.
	changesKey bool
	// stage is the index of the stage the node runs in (set by Build).
	stage int
	// state is what a keyed node records of its state in the job's state
	// schema (Job.StateOperators).
	state *opState
}

// keyByDef is what a KeyBy node adds: its options and, if it is a shuffle
// point, its edge.
type keyByDef struct {
	name        string // Named, or ""
	keyDesc     string // KeyDescription, or ""
	parallelism int    // Parallelism, or 0
	elem        string // the element type, for errors
	hasCodec    bool
	// input builds, in a task of the stage downstream of the shuffle, the
	// function that decodes a shuffle record and hands it on.
	input func(tb *taskBuilder) (func(*Record) error, error)
	// Set by Build: the shuffle edge (index in Job.shuffles) and the
	// downstream stage, or -1 if the KeyBy stays in its stage.
	shuffle, down int
}

type sourceDef struct {
	src   KafkaSource
	where string
	// connect builds the task's consumer of this source's raw records.
	connect func(tb *taskBuilder) (func(*Record) error, error)
}

// NewJob starts the definition of job name. The name namespaces the job's
// topics, groups, transactional IDs and objects: 1 to 100 letters, digits,
// '.', '_' or '-', starting with a letter or digit.
func NewJob(name string) *Job {
	j := &Job{name: name, ops: make(map[string]string), transforms: make(map[string]string), dlqSink: make(map[string]int)}
	if !validJobName(name) {
		j.fail(fmt.Errorf("%w: job name %q: use 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit", ErrInvalidJob, name))
	}
	return j
}

func validJobName(s string) bool {
	if len(s) == 0 || len(s) > 100 {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// Name returns the job's name.
func (j *Job) Name() string { return j.name }

// Err returns the first problem found so far, if any.
func (j *Job) Err() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.err
}

// Build checks the whole job, cuts it into stages and freezes it: it
// returns the first problem a builder call recorded, or else any of: no
// source, no sink, a stream that reaches no sink, and the problems of the
// stages (see Stages). After Build, builder calls on the job fail. Build is
// idempotent; NewTask calls it.
func (j *Job) Build() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.built || j.err != nil {
		return j.err
	}
	switch {
	case len(j.sources) == 0:
		j.err = fmt.Errorf("%w: job %s has no source (stream.From)", ErrInvalidJob, j.name)
	case len(j.sinks) == len(j.dlqSink):
		j.err = fmt.Errorf("%w: job %s has no sink (stream.To)", ErrInvalidJob, j.name)
	}
	if j.err == nil {
		for _, n := range j.nodes {
			if n.kind != kindSink && len(n.outs) == 0 {
				j.err = fmt.Errorf("%w: the stream of %s (%s) reaches no sink: send it to one with stream.To, or remove it", ErrInvalidJob, n.what, n.where)
				break
			}
		}
	}
	if j.err == nil {
		j.err = j.cut()
	}
	j.built = true
	return j.err
}

// Sources returns the job's sources, in definition order. They are read
// by the job's source stage, main: its task i reads partition i of every
// topic of every source.
func (j *Job) Sources() []KafkaSource {
	out := make([]KafkaSource, len(j.sources))
	for i, s := range j.sources {
		out[i] = s.src
		out[i].Topics = slices.Clone(s.src.Topics)
	}
	return out
}

// Sinks returns the job's sinks: the index of a sink is the sink argument
// of Emitter.Emit. The list includes, after the sink they were first needed
// by, the sinks of dead-letter topics (see KafkaSource.DeadLetterTopic).
func (j *Job) Sinks() []KafkaSink { return slices.Clone(j.sinks) }

// fail records err if it is the first problem.
func (j *Job) fail(err error) {
	if j.err == nil {
		j.err = err
	}
}

// begin starts a builder call: it reports false (and records why) if the
// job can take no more definitions.
func (j *Job) begin(what string) bool {
	if j.built && j.err == nil {
		j.err = fmt.Errorf("%w: %s after Build", ErrInvalidJob, what)
	}
	return j.err == nil
}

// nameFree reports whether name can name a new operator (what, defined at
// where): not empty, and not used by a keyed operator or a Transform. If
// not, it records the problem.
func (j *Job) nameFree(where, what, name string) bool {
	switch {
	case name == "":
		j.failf(where, "%s: empty operator name", what)
	case j.ops[name] != "":
		j.failf(where, "%s: operator name already used at %s", what, j.ops[name])
	case j.transforms[name] != "":
		j.failf(where, "%s: operator name already used at %s", what, j.transforms[name])
	default:
		return true
	}
	return false
}

// failf records a definition problem at where.
func (j *Job) failf(where string, format string, args ...any) {
	j.fail(fmt.Errorf("%w: "+format+" (%s)", append(append([]any{ErrInvalidJob}, args...), where)...))
}

// addNode adds a node that reads inputs.
func (j *Job) addNode(kind nodeKind, what, where string, inputs ...*node) *node {
	n := &node{id: len(j.nodes), kind: kind, what: what, where: where, inputs: inputs}
	for _, in := range inputs {
		in.outs = append(in.outs, n)
	}
	j.nodes = append(j.nodes, n)
	return n
}

// caller returns file:line of the user's builder call, skip frames up.
func caller(skip int) string {
	_, file, line, ok := runtime.Caller(skip + 1)
	if !ok {
		return "unknown"
	}
	return fmt.Sprintf("%s:%d", filepath.Base(file), line)
}

// At makes site name the operators defined next, in place of the Go call
// site of their builder, in definition problems, in the errors they return
// at run time and in Graph: a compiler of another job language gives the
// position of the step it compiles (package pipeline gives the key path,
// "job.pipeline[3].join"), so that its users never read a Go file name.
// An empty site restores Go call sites.
func (j *Job) At(site string) {
	if j == nil {
		return
	}
	j.mu.Lock()
	j.site = site
	j.mu.Unlock()
}

// siteOf returns where the operator a builder defines is: j's site if At
// set one, else the Go call site skip frames above siteOf's caller.
func siteOf(j *Job, skip int) string {
	if j != nil {
		j.mu.Lock()
		site := j.site
		j.mu.Unlock()
		if site != "" {
			return site
		}
	}
	return caller(skip + 1)
}

func validTopic(t string) bool {
	return t != "" && len(t) <= 249 && !strings.ContainsAny(t, " /\\\x00") && t != "." && t != ".."
}

// OnStart registers f to run when the job starts in a process (Start),
// before any task runs: for work that needs the outside world and must
// fail at start, not at the first record, such as registering a sink's
// schema in a schema registry.
func (j *Job) OnStart(f func(context.Context) error) {
	if j == nil {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.starts = append(j.starts, f)
}

// Start runs the functions OnStart registered, in order, and returns the
// first error. The runtime's entry points (processor run, processor dev)
// call it once per process before the replica starts.
func (j *Job) Start(ctx context.Context) error {
	j.mu.Lock()
	starts := slices.Clone(j.starts)
	j.mu.Unlock()
	for _, f := range starts {
		if err := f(ctx); err != nil {
			return err
		}
	}
	return nil
}
