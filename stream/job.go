package stream

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Sentinel errors, for errors.Is.
var (
	// ErrInvalidJob reports a job definition that cannot run: Build returns
	// it, wrapped with what is wrong and where it was defined.
	ErrInvalidJob = errors.New("stream: invalid job")
	// ErrShuffle reports a keyed operator on a stream whose key is no longer
	// the Kafka record key (after KeyBy). Running it would need a shuffle.
	ErrShuffle = errors.New("stream: key_by on anything but the record key needs a shuffle, which Weir does not support yet; partition the input topic by that key")
	// ErrContextExpired reports use of a Context outside the call it was
	// passed to.
	ErrContextExpired = errors.New("stream: context used outside its call")
)

// StartKind says where a source starts reading partitions that have no
// offset in a restored checkpoint.
type StartKind int

// The start kinds; they match kafkaio.SourceStartKind.
const (
	// StartEarliest starts at the log start offset (the default).
	StartEarliest StartKind = iota
	// StartLatest starts at the end: only records produced after the start
	// are read.
	StartLatest
	// StartTimestamp starts at the first record at or after Start.Time.
	StartTimestamp
)

// Start is where a job with no completed checkpoint starts reading. The zero
// value is StartEarliest.
type Start struct {
	Kind StartKind
	Time time.Time // of StartTimestamp
}

// StartAt returns the start at the first record at or after t.
func StartAt(t time.Time) Start { return Start{Kind: StartTimestamp, Time: t} }

// String returns "earliest", "latest" or the RFC 3339 time, the form
// kafkaio.ParseSourceStart and the YAML `start` setting read.
func (s Start) String() string {
	switch s.Kind {
	case StartEarliest:
		return "earliest"
	case StartLatest:
		return "latest"
	case StartTimestamp:
		return s.Time.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("StartKind(%d)", int(s.Kind))
}

// OnError is what happens to an input record that does not decode, at the
// source's edge (Format) or in the task (the source's Codec).
type OnError string

// The decode error policies; they match kafkaio.DecodePolicy.
const (
	// OnErrorFail stops the task with an error naming the record (default).
	OnErrorFail OnError = "fail"
	// OnErrorSkip drops the record (logged at debug level).
	OnErrorSkip OnError = "skip"
	// OnErrorDeadLetter writes the record, with weir-dlq-* headers naming
	// its origin and the error, to KafkaSource.DeadLetterTopic.
	OnErrorDeadLetter OnError = "dead-letter"
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
)

// KafkaSource describes the input topics of a source and how their records
// are decoded. Task i reads partition i of every topic, so the topics must
// have the same partition count and be partitioned by the record key.
type KafkaSource struct {
	Topics []string
	// Start is where a job with no completed checkpoint starts.
	Start Start
	// Format is the check the source applies at the edge: FormatRaw
	// (default) or FormatJSON.
	Format string
	// OnError is the policy for records that fail Format's check or the
	// source's Codec. Default OnErrorFail.
	OnError OnError
	// DeadLetterTopic receives failed records under OnErrorDeadLetter. A
	// record that passes Format's check but that the Codec rejects is
	// written by the task to the sink of this topic, which Job.Sinks lists
	// (so it is committed exactly once, with the task's output).
	DeadLetterTopic string
}

// Delivery is a sink's guarantee.
type Delivery string

// The deliveries.
const (
	// DeliveryExactlyOnce commits the sink's Kafka transactions when a
	// checkpoint completes (the default).
	DeliveryExactlyOnce Delivery = "exactly-once"
	// DeliveryAtLeastOnce writes with an idempotent producer flushed at each
	// checkpoint.
	DeliveryAtLeastOnce Delivery = "at-least-once"
)

// KafkaSink describes an output topic.
type KafkaSink struct {
	Topic string
	// Delivery defaults to DeliveryExactlyOnce.
	Delivery Delivery
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
// definition the runtime instantiates once per task.
type Job struct {
	name string

	mu      sync.Mutex
	err     error
	built   bool
	sources []*sourceDef
	sinks   []KafkaSink
	nodes   []*node
	ops     map[string]string // keyed operator names -> where defined
	// dlqSink maps dead-letter topics to their sink index.
	dlqSink map[string]int
}

// node is what the job knows about one stream: where it was defined, and
// whether anything consumes it.
type node struct {
	what   string // "Map", "From(clicks)"...
	where  string // file:line of the builder call
	outs   int    // operators that consume the stream
	rekeys bool   // the key is not the record key any more
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
	j := &Job{name: name, ops: make(map[string]string), dlqSink: make(map[string]int)}
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

// Build checks the whole job and freezes it: it returns the first problem a
// builder call recorded, or else any of: no source, no sink, a stream that
// reaches no sink. After Build, builder calls on the job fail. Build is
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
			if n.outs == 0 {
				j.err = fmt.Errorf("%w: the stream of %s (%s) reaches no sink: send it to one with stream.To, or remove it", ErrInvalidJob, n.what, n.where)
				break
			}
		}
	}
	j.built = true
	return j.err
}

// Sources returns the job's sources, in definition order. A job has one
// stage for now: the runtime reads partition i of every topic of every
// source in task i.
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

// failf records a definition problem at where.
func (j *Job) failf(where string, format string, args ...any) {
	j.fail(fmt.Errorf("%w: "+format+" (%s)", append(append([]any{ErrInvalidJob}, args...), where)...))
}

func (j *Job) addNode(what, where string, rekeys bool) *node {
	n := &node{what: what, where: where, rekeys: rekeys}
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

func validTopic(t string) bool {
	return t != "" && len(t) <= 249 && !strings.ContainsAny(t, " /\\\x00") && t != "." && t != ".."
}
