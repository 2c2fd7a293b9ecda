package config

import (
	"os"
	"time"

	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/keygroup"
)

// Config is the whole configuration of a processor replica and its job.
// Keys are snake_case; the path of a field is its sections' keys joined by
// dots ("checkpoint.max_concurrent"), and its environment variable is
// WEIR_ followed by the path in upper case with dots as underscores
// (WEIR_CHECKPOINT_MAX_CONCURRENT).
type Config struct {
	Job        Job        `mapstructure:"job"`
	Kafka      Kafka      `mapstructure:"kafka"`
	Checkpoint Checkpoint `mapstructure:"checkpoint"`
	State      State      `mapstructure:"state"`
	HTTP       HTTP       `mapstructure:"http"`
	Log        Log        `mapstructure:"log"`
	Process    Process    `mapstructure:"process"`

	// origins maps key paths to where Load found their values (Origin).
	origins map[string]string
	// goJob is the name of the job defined in Go that this configuration
	// runs (Source.GoJob), empty for a YAML pipeline.
	goJob string
	// offline is Source.Offline.
	offline bool
}

// Job names the job and describes its dataflow.
type Job struct {
	// Name namespaces every control topic, consumer group, transactional ID
	// and object-store prefix of the job. Required.
	Name string `mapstructure:"name"`
	// Pipeline is the job's steps, from its source to its sink (or route).
	Pipeline []Step `mapstructure:"pipeline"`
	// Streams are the job's named pipelines (job.streams.<name>), in the
	// order written: the other sides of interval joins, and the branches
	// of routes.
	Streams []NamedStream `mapstructure:"streams"`
	// Parallelism is the number of tasks of each stage downstream of a
	// key_by that sets no parallelism; 0 means the input topics' partition
	// count. The source stage always has one task per input partition.
	Parallelism int `mapstructure:"parallelism"`
	// MaxParallelism is the number of key groups: the partition count of
	// every shuffle topic, and the most tasks a downstream stage can have.
	// It is fixed at the job's first start (the shuffle topics are created
	// with it).
	MaxParallelism int `mapstructure:"max_parallelism"`
}

// Step is one step of a pipeline: exactly one of its kinds (the pointer
// fields) is set.
type Step struct {
	// ID names the state of a step that keeps state (aggregate, dedupe,
	// join) in place of the name derived from its kind: it stays the
	// state's identity whatever is edited around the step (Flink's uid;
	// docs/operations.md, "Upgrading a job").
	ID        string         `mapstructure:"id"`
	Source    *SourceStep    `mapstructure:"source"`
	Filter    *FilterStep    `mapstructure:"filter"`
	Map       *MapStep       `mapstructure:"map"`
	FlatMap   *FlatMapStep   `mapstructure:"flat_map"`
	KeyBy     *KeyByStep     `mapstructure:"key_by"`
	Window    *WindowStep    `mapstructure:"window"`
	Aggregate *AggregateStep `mapstructure:"aggregate"`
	Dedupe    *DedupeStep    `mapstructure:"dedupe"`
	Join      *JoinStep      `mapstructure:"join"`
	Route     *RouteStep     `mapstructure:"route"`
	Sink      *SinkStep      `mapstructure:"sink"`
}

// SourceStep reads Kafka topics. All its topics must have the same number
// of partitions: task i reads partition i of each.
type SourceStep struct {
	Topics []string `mapstructure:"topics"`
	// Format of record values: "json" (each value must be a JSON
	// document), "raw" (any bytes), "avro" or "protobuf" (in the
	// Confluent wire format, with a schema registry: `format: {type:
	// avro, registry: …}`).
	Format Format `mapstructure:"format"`
	// KeyFormat of record keys: "raw" (the default: the key's bytes, as
	// they are), "avro" or "protobuf" (the key becomes its JSON document's
	// text, as a value does).
	KeyFormat Format `mapstructure:"key_format"`
	// Start is where a job with no completed checkpoint starts reading:
	// "earliest", "latest", or a time (RFC 3339).
	Start string `mapstructure:"start"`
	// OnError is what happens to a record that does not decode: "fail"
	// (stop the job), "skip" (count and drop it) or "dead-letter" (count it
	// and copy it to DeadLetterTopic).
	OnError         string `mapstructure:"on_error"`
	DeadLetterTopic string `mapstructure:"dead_letter_topic"`
	// Timestamp is where each record's event time comes from: nil for the
	// Kafka record timestamp, or a top-level JSON field.
	Timestamp *TimestampSpec `mapstructure:"timestamp"`
	// Watermark configures the source's watermarks, which windows read.
	// Unset fields take their defaults; setting it without a window is an
	// error (nothing would read the watermarks).
	Watermark *WatermarkSpec `mapstructure:"watermark"`
}

// Format is a source's or a sink's record format. In YAML it is the type
// alone (`format: json`) or a mapping with the type and its settings
// (`format: {type: avro, registry: http://registry:8081}`).
type Format struct {
	// Type is "json", "raw" (sources, and keys), "avro" or "protobuf".
	Type string `mapstructure:"type"`
	// Registry is the URL of the schema registry's Confluent-compatible
	// API (avro, protobuf): http://host:8081 for Confluent or Karapace,
	// http://host:8080/apis/ccompat/v7 for Apicurio.
	Registry string `mapstructure:"registry"`
	// RegistryUsername and RegistryPassword, if set, are sent as HTTP
	// basic auth (the password is best set through its environment
	// variable; it is no part of the job's fingerprint).
	RegistryUsername string `mapstructure:"registry_username"`
	RegistryPassword string `mapstructure:"registry_password" json:"-"`
	// Subject is where a sink registers its schema (default
	// "<topic>-value", or "<topic>-key" for a key: the TopicNameStrategy).
	Subject string `mapstructure:"subject"`
	// SubjectStrategy derives the subject instead: "topic" (the default,
	// as above), "record" (the schema's record or message full name: the
	// RecordNameStrategy) or "topic_record" ("<topic>-<full name>": the
	// TopicRecordNameStrategy).
	SubjectStrategy string `mapstructure:"subject_strategy"`
	// Schema is a sink's schema (Avro: its JSON text; Protobuf: a .proto
	// file, which may import only the well-known types), registered under
	// Subject when the job starts, after the registry's compatibility
	// check; or SchemaFile, a file holding it (relative to the working
	// directory); or SchemaID, a schema the registry already holds, used
	// as it is. Exactly one of the three.
	Schema     string `mapstructure:"schema"`
	SchemaFile string `mapstructure:"schema_file"`
	SchemaID   int    `mapstructure:"schema_id"`
	// Message is the Protobuf message a sink writes, by name (a full name
	// or one relative to the file's package; default the file's first).
	Message string `mapstructure:"message"`
}

// UsesRegistry reports whether the format reads or writes its schemas in
// a schema registry (avro, protobuf).
func (f Format) UsesRegistry() bool { return f.Type == FormatAvro || f.Type == FormatProtobuf }

// TimestampSpec takes a record's event time from a top-level field of its
// JSON value. A record whose field is missing or malformed does not
// decode: the source's on_error applies to it.
type TimestampSpec struct {
	// Field is the top-level field.
	Field string `mapstructure:"field"`
	// Format is how the field writes the time: "unix_ms" (a JSON number
	// of milliseconds since the Unix epoch; the default), "unix_s" (of
	// seconds) or "rfc3339" (a JSON string).
	Format string `mapstructure:"format"`
}

// WatermarkSpec is the source's watermark generation (bounded
// out-of-orderness, per input partition).
type WatermarkSpec struct {
	// MaxOutOfOrderness is how far behind the latest event time seen a
	// record may arrive and still be on time: the watermark is the
	// greatest event time seen minus it (minus 1ms). Default 0.
	MaxOutOfOrderness time.Duration `mapstructure:"max_out_of_orderness"`
	// IdleTimeout marks a partition that received nothing for this long
	// (processing time) idle, so that it stops holding the watermark back;
	// 0, the default, never does.
	IdleTimeout time.Duration `mapstructure:"idle_timeout"`
	// Interval between watermark emissions. Default 200ms.
	Interval time.Duration `mapstructure:"interval"`
}

// WindowStep groups the records of each key into event-time windows; an
// aggregate step must follow it, and computes one result per window.
type WindowStep struct {
	// Type is "tumbling" (fixed, back-to-back windows of Size), "sliding"
	// (windows of Size starting every Slide) or "session" (a window per
	// burst of records less than Gap apart).
	Type  string        `mapstructure:"type"`
	Size  time.Duration `mapstructure:"size"`
	Slide time.Duration `mapstructure:"slide"`
	Gap   time.Duration `mapstructure:"gap"`
	// AllowedLateness keeps a window open this long after its end (in
	// event time): its result is emitted when the watermark passes end +
	// AllowedLateness, and records up to then count.
	AllowedLateness time.Duration `mapstructure:"allowed_lateness"`
	// LateTopic receives, as they were read, the records that arrive after
	// every window they belong to was emitted; empty drops them (they are
	// counted either way).
	LateTopic string `mapstructure:"late_topic"`
	// EmitEvery > 0 emits early results of an open window every EmitEvery
	// of processing time while it gets new records, marked "early": true.
	EmitEvery time.Duration `mapstructure:"emit_every"`
}

// KeyByStep re-keys each record by a top-level field of its JSON value
// (Field) or by an expression (Expr). If a keyed step (aggregate, dedupe,
// join, window) follows, the job is cut there into two stages joined by a
// shuffle topic.
type KeyByStep struct {
	// Field is the top-level field whose value (a string's text, or a
	// number as written) becomes the key. Exactly one of Field and Expr.
	Field string `mapstructure:"field"`
	// Expr computes the key: a string's text, a number as JSON writes it,
	// anything else as its JSON text.
	Expr *Expr `mapstructure:"expr"`
	// OnError applies to a record whose key expression fails.
	OnError         string `mapstructure:"on_error"`
	DeadLetterTopic string `mapstructure:"dead_letter_topic"`
	// Parallelism is the number of tasks of the stage after the shuffle;
	// 0 means job.parallelism.
	Parallelism int `mapstructure:"parallelism"`
}

// AggregateStep is a keyed aggregate over the current key: the record key,
// or the key of the key_by before it.
//
// After a window step it emits one result per window; otherwise, for every
// input record, its key's running result.
type AggregateStep struct {
	// Op is the aggregate of the one-aggregate form
	// (`aggregate: {op: sum, field: amount}`): "count" (records), "sum",
	// "min", "max" or "avg" (of Field), LegacyAggregateOps. Empty in the
	// named form. Compilers read Aggs, not Op and Field.
	Op string `mapstructure:"op"`
	// Field is the top-level JSON number field that sum, min, max and avg
	// of the one-aggregate form read; count reads none.
	Field string `mapstructure:"field"`
	// Aggs are the named form's aggregates, in the order written:
	// `aggregate: {count: true, total: {sum: value.amount}}`: every key of
	// the step other than op, field, emit, on_error and dead_letter_topic.
	// Load fills it from the one-aggregate form too (one Agg named after
	// its op, over value.<field>, or value["<field>"] if the field is no
	// identifier), so that compilers read only Aggs; so does the default
	// of a step built in Go.
	Aggs []Agg `mapstructure:"-"`
	// Emit is when results are emitted: "update" (every input record, the
	// default without a window) or "close" (when the window closes, the
	// default and the only choice with a window).
	Emit string `mapstructure:"emit"`
	// OnError applies to a record on which an aggregate's expression fails.
	OnError         string `mapstructure:"on_error"`
	DeadLetterTopic string `mapstructure:"dead_letter_topic"`
}

// SinkStep writes to a Kafka topic.
type SinkStep struct {
	Topic string `mapstructure:"topic"`
	// Format of the values written: "json", "avro" or "protobuf"
	// (`format: {type: avro, registry: …, schema_file: …}`).
	Format Format `mapstructure:"format"`
	// KeyFormat of the keys written: "raw" (the default: the key's bytes)
	// or "avro" or "protobuf" (the key, a JSON document or a string, is
	// encoded under the key schema, subject "<topic>-key" by default).
	KeyFormat Format `mapstructure:"key_format"`
	// Delivery is "exactly-once" (Kafka transactions committed when a
	// checkpoint completes) or "at-least-once" (idempotent producer,
	// flushed at each checkpoint).
	Delivery string `mapstructure:"delivery"`
	// TransactionTimeout is the sink's transaction.timeout.ms. A transaction
	// stays open from its epoch's first record until its checkpoint
	// completes, so it must be at least MinTransactionTimeout, and not exceed
	// the broker's transaction.max.timeout.ms (checked at start).
	TransactionTimeout time.Duration `mapstructure:"transaction_timeout"`
}

// Kafka is how the replica reaches Kafka.
type Kafka struct {
	// Brokers are the bootstrap addresses, host:port.
	Brokers []string `mapstructure:"brokers"`
	// ClientID is sent to the brokers; default "weir-<job>".
	ClientID string `mapstructure:"client_id"`
	// TopicPrefix prefixes the job's control topics, consumer groups and
	// transactional IDs; default "_weir.<job>.".
	TopicPrefix string `mapstructure:"topic_prefix"`
	// ReplicationFactor of the topics the job creates; -1 takes the broker's
	// default.
	ReplicationFactor int `mapstructure:"replication_factor"`
	// SessionTimeout of the replicas' membership group: how long a silent
	// replica keeps its tasks.
	SessionTimeout time.Duration `mapstructure:"session_timeout"`
	// MetadataMaxAge is how often the coordinator asks the brokers for
	// the input topics' partition count: partitions added to them get
	// tasks within about this long (docs/operations.md, "Input partitions
	// added").
	MetadataMaxAge time.Duration `mapstructure:"metadata_max_age"`
	// TLS secures the connections to every broker.
	TLS TLS `mapstructure:"tls"`
	// SASL authenticates the connections to every broker.
	SASL SASL `mapstructure:"sasl"`
}

// TLS configures TLS to the brokers. The files are read again when they
// change, checked at each new connection: a renewed certificate is used
// from the next connection on.
type TLS struct {
	// Enabled turns TLS on.
	Enabled bool `mapstructure:"enabled"`
	// CAFile is a PEM bundle of the authorities to trust; empty trusts the
	// system's pool.
	CAFile string `mapstructure:"ca_file"`
	// CertFile and KeyFile are the client certificate and key (PEM) for
	// mutual TLS: both or neither.
	CertFile string `mapstructure:"cert_file"`
	KeyFile  string `mapstructure:"key_file"`
	// ServerName is sent as SNI and verified in the broker's certificate;
	// empty uses each broker's host.
	ServerName string `mapstructure:"server_name"`
	// InsecureSkipVerify accepts any broker certificate: for tests only,
	// and warned about at start.
	InsecureSkipVerify bool `mapstructure:"insecure_skip_verify"`
}

// SASL configures SASL authentication to the brokers. Secrets come from a
// file (read again when it changes) or an environment variable; written in
// the configuration file they work, with a warning.
type SASL struct {
	// Mechanism is one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER
	// and AWS_MSK_IAM; empty turns SASL off.
	Mechanism string `mapstructure:"mechanism"`
	// Username of PLAIN and SCRAM.
	Username string `mapstructure:"username"`
	// Password of PLAIN and SCRAM (WEIR_KAFKA_SASL_PASSWORD), or
	// PasswordFile, a file that holds it.
	Password     string `mapstructure:"password"`
	PasswordFile string `mapstructure:"password_file"`
	// Token is a static OAUTHBEARER token (WEIR_KAFKA_SASL_TOKEN), or
	// TokenFile, a file that holds it.
	Token     string `mapstructure:"token"`
	TokenFile string `mapstructure:"token_file"`
	// OAuth fetches OAUTHBEARER tokens through the OIDC client-credentials
	// flow.
	OAuth OAuth `mapstructure:"oauth"`
}

// OAuth is an OIDC client-credentials grant (RFC 6749 section 4.4).
type OAuth struct {
	// TokenURL is the token endpoint.
	TokenURL string `mapstructure:"token_url"`
	// ClientID and ClientSecret (WEIR_KAFKA_SASL_OAUTH_CLIENT_SECRET), or
	// ClientSecretFile, a file that holds the secret.
	ClientID         string `mapstructure:"client_id"`
	ClientSecret     string `mapstructure:"client_secret"`
	ClientSecretFile string `mapstructure:"client_secret_file"`
	// Scopes requested.
	Scopes []string `mapstructure:"scopes"`
}

// The SASL mechanisms.
const (
	SASLPlain       = "PLAIN"
	SASLScram256    = "SCRAM-SHA-256"
	SASLScram512    = "SCRAM-SHA-512"
	SASLOAuthBearer = "OAUTHBEARER"
	SASLAWSMSKIAM   = "AWS_MSK_IAM"
)

// SASLMechanisms returns the values of kafka.sasl.mechanism.
func SASLMechanisms() []string {
	return []string{SASLPlain, SASLScram256, SASLScram512, SASLOAuthBearer, SASLAWSMSKIAM}
}

// SecretKeys returns the key paths whose values are secrets: never logged,
// printed or put in an error.
func SecretKeys() []string {
	return []string{"kafka.sasl.password", "kafka.sasl.token", "kafka.sasl.oauth.client_secret"}
}

// Checkpoint configures checkpointing (DESIGN.md section 5).
type Checkpoint struct {
	// Interval between periodic checkpoints.
	Interval time.Duration `mapstructure:"interval"`
	// Timeout after which a pending checkpoint is aborted.
	Timeout time.Duration `mapstructure:"timeout"`
	// MinPause is the least time between the end of one checkpoint and the
	// trigger of the next.
	MinPause time.Duration `mapstructure:"min_pause"`
	// MaxConcurrent is the most checkpoints pending at once.
	MaxConcurrent int `mapstructure:"max_concurrent"`
	// TolerableFailures is how many checkpoints in a row may fail before
	// the job restarts from the last completed one.
	TolerableFailures int `mapstructure:"tolerable_failures"`
	// Retained is how many completed checkpoints are kept.
	Retained int `mapstructure:"retained"`
	// PurgeInterval is the least time between two purges of the shuffle
	// topics (DeleteRecords below the retained checkpoints' positions); 0
	// purges after every completed checkpoint.
	PurgeInterval time.Duration `mapstructure:"purge_interval"`
	// Storage is the object store URL: file:///path, s3://bucket?...,
	// gs://bucket, azblob://container. Default: file://<state.dir>/checkpoints.
	Storage string `mapstructure:"storage"`
	// Mode is "exactly-once" (aligned barriers) or "at-least-once".
	Mode string `mapstructure:"mode"`
}

// State configures local state.
type State struct {
	// Dir holds one Pebble database per task.
	Dir string `mapstructure:"dir"`
	// BlockCacheBytes is the size of the block cache all tasks share.
	BlockCacheBytes int64 `mapstructure:"block_cache_bytes"`
	// RecordCacheBytes bounds each task's record cache (value, aggregate
	// and reduce state in front of Pebble); 0 turns it off.
	RecordCacheBytes int64 `mapstructure:"record_cache_bytes"`
}

// HTTP configures the metrics, health and admin endpoints.
type HTTP struct {
	// Address to listen on, host:port; empty turns HTTP off.
	Address string `mapstructure:"address"`
	// Pprof also serves Go's profiler under /debug/pprof/ (net/http/pprof).
	// Off by default: profiles show internals, and a CPU profile costs CPU.
	Pprof bool `mapstructure:"pprof"`
	// BusyTime accounts each task's busy, backpressured and idle time
	// (weir_task_busy_ms_per_second...); off saves its small cost
	// (docs/benchmarks.md).
	BusyTime bool `mapstructure:"busy_time"`
	// ReportInterval is how often the replica writes its report (its
	// tasks' figures, whether it coordinates) to the ack topic, from which
	// every replica's REST API shows the whole job (docs/api.md).
	ReportInterval time.Duration `mapstructure:"report_interval"`
	// Admin configures the REST API's write actions.
	Admin HTTPAdmin `mapstructure:"admin"`
}

// HTTPAdmin configures the REST API's write actions (savepoint, stop,
// resume): off unless Enabled, and then only with the bearer token held
// in TokenFile (a mounted Kubernetes Secret).
type HTTPAdmin struct {
	Enabled   bool   `mapstructure:"enabled"`
	TokenFile string `mapstructure:"token_file"`
}

// Log configures logging.
type Log struct {
	Level  string `mapstructure:"level"`  // debug, info, warn, error
	Format string `mapstructure:"format"` // text or json
}

// Process configures the replica's lifecycle.
type Process struct {
	// ReplicaID names this replica in the membership group and in task
	// assignments. It must be stable across restarts (a StatefulSet pod
	// name) so that a restarted replica gets its tasks, and their local
	// state, back. Default: the host name.
	ReplicaID string `mapstructure:"replica_id"`
	// GracePeriod is how long a replica may take to stop after SIGTERM.
	GracePeriod time.Duration `mapstructure:"grace_period"`
	// LivenessTimeout is how long the replica's main loop may go without
	// progress before /livez fails (a stuck replica, for Kubernetes'
	// liveness probe to restart).
	LivenessTimeout time.Duration `mapstructure:"liveness_timeout"`
	// AllowNonRestoredState lets a replica restore a checkpoint that has
	// state its job no longer has (a removed operator or aggregate): that
	// state is dropped. Off, such a restore is refused (Flink's
	// --allowNonRestoredState; docs/operations.md, "Upgrading a job").
	AllowNonRestoredState bool `mapstructure:"allow_non_restored_state"`
}

// Default returns the defaults of every setting. Job.Name, Job.Pipeline and
// Kafka.Brokers have none; Job.Parallelism's is 0 (the input partition
// count).
func Default() Config {
	return Config{
		Job: Job{MaxParallelism: keygroup.DefaultMaxParallelism},
		Kafka: Kafka{
			ReplicationFactor: -1,
			SessionTimeout:    10 * time.Second,
			MetadataMaxAge:    30 * time.Second,
		},
		Checkpoint: Checkpoint{
			Interval:          10 * time.Second,
			Timeout:           10 * time.Minute,
			MinPause:          0,
			MaxConcurrent:     1,
			TolerableFailures: 0,
			Retained:          3,
			PurgeInterval:     30 * time.Second,
			Mode:              ModeExactlyOnce,
		},
		State: State{
			Dir:              "weir-state",
			BlockCacheBytes:  256 << 20,
			RecordCacheBytes: 8 << 20,
		},
		HTTP:    HTTP{Address: ":9464", BusyTime: true, ReportInterval: 5 * time.Second},
		Log:     Log{Level: "info", Format: "text"},
		Process: Process{GracePeriod: 30 * time.Second, LivenessTimeout: 2 * time.Minute},
	}
}

// The subject strategies of a sink format (Format.SubjectStrategy).
const (
	SubjectTopic       = "topic"
	SubjectRecord      = "record"
	SubjectTopicRecord = "topic_record"
)

// The values of checkpoint.mode. A sink's delivery, a source's start and
// the on_error and timestamp.format settings take the values of package
// kafkaio, which defines them for the YAML language, the Go job API and the
// Kafka reader and writer.
const (
	ModeExactlyOnce = "exactly-once"
	ModeAtLeastOnce = "at-least-once"
)

// Values of the other enumerated settings.
const (
	FormatJSON      = "json"
	FormatRaw       = "raw"
	FormatAvro      = "avro"
	FormatProtobuf  = "protobuf"
	OpCount         = "count"
	OpSum           = "sum"
	OpMin           = "min"
	OpMax           = "max"
	OpAvg           = "avg"
	OpCountDistinct = "count_distinct"
	OpFirst         = "first"
	OpLast          = "last"
	OpCollect       = "collect"
	OpMaxBy         = "max_by"
	OpMinBy         = "min_by"
	EmitUpdate      = "update"
	EmitClose       = "close"
	JoinLeft        = "left"
	JoinInner       = "inner"
	WindowTumbling  = "tumbling"
	WindowSliding   = "sliding"
	WindowSession   = "session"
)

// AggregateOps returns the aggregates of the named form, in the order the
// docs list them. The one-aggregate form (aggregate.op) takes the first
// five (LegacyAggregateOps).
func AggregateOps() []string {
	return []string{OpCount, OpSum, OpMin, OpMax, OpAvg, OpCountDistinct, OpFirst, OpLast, OpCollect, OpMaxBy, OpMinBy}
}

// HasLimit reports whether aggregate op keeps a bounded list and takes a
// limit: collect, max_by and min_by.
func HasLimit(op string) bool { return op == OpCollect || op == OpMaxBy || op == OpMinBy }

// HasBy reports whether aggregate op orders its values by a second
// expression (by): max_by and min_by.
func HasBy(op string) bool { return op == OpMaxBy || op == OpMinBy }

// LegacyAggregateOps returns the values of aggregate.op, the
// one-aggregate form.
func LegacyAggregateOps() []string { return []string{OpCount, OpSum, OpMin, OpMax, OpAvg} }

// OnErrors returns the values of on_error (kafkaio.OnErrors).
func OnErrors() []string { return names(kafkaio.OnErrors()) }

// Deliveries returns the values of sink.delivery (kafkaio.Deliveries).
func Deliveries() []string { return names(kafkaio.Deliveries()) }

// names returns the YAML names of enum values.
func names[T ~string](values []T) []string {
	out := make([]string, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return out
}

// DefaultCollectLimit is the default limit of collect, max_by and min_by,
// and MaxCollectLimit their largest: the list lives in one state value.
const (
	DefaultCollectLimit = 100
	MaxCollectLimit     = 10000
)

// WindowTypes returns the values of window.type.
func WindowTypes() []string { return []string{WindowTumbling, WindowSliding, WindowSession} }

// TimestampFormats returns the values of source.timestamp.format
// (kafkaio.TimestampFormats).
func TimestampFormats() []string { return names(kafkaio.TimestampFormats()) }

// DefaultWatermarkInterval is the default of source.watermark.interval
// (Flink's autoWatermarkInterval).
const DefaultWatermarkInterval = 200 * time.Millisecond

// stepDefaults fills the unset fields of the steps of the pipeline and of
// every stream.
func (c *Config) stepDefaults() {
	stepsDefaults(c.Job.Pipeline)
	for _, s := range c.Job.Streams {
		stepsDefaults(s.Steps)
	}
}

// stepsDefaults fills the unset fields of one list of steps.
func stepsDefaults(steps []Step) {
	windowed := false
	for i := range steps {
		s := &steps[i]
		if s.Source != nil {
			if s.Source.Format.Type == "" {
				s.Source.Format.Type = FormatJSON
			}
			if s.Source.KeyFormat.Type == "" {
				s.Source.KeyFormat.Type = FormatRaw
			}
			if s.Source.Start == "" {
				s.Source.Start = kafkaio.Start{Kind: kafkaio.StartEarliest}.String()
			}
			if s.Source.OnError == "" {
				s.Source.OnError = string(kafkaio.OnErrorFail)
			}
			if ts := s.Source.Timestamp; ts != nil && ts.Format == "" {
				ts.Format = string(kafkaio.TimestampUnixMs)
			}
			if wm := s.Source.Watermark; wm != nil && wm.Interval == 0 {
				wm.Interval = DefaultWatermarkInterval
			}
		}
		if onErr, _ := stepOnError(s); onErr != nil && *onErr == "" {
			*onErr = string(kafkaio.OnErrorFail)
		}
		if s.Window != nil {
			windowed = true
		}
		if a := s.Aggregate; a != nil {
			if len(a.Aggs) == 0 && a.Op != "" {
				// A step built in Go rather than loaded from YAML.
				a.Aggs = []Agg{legacyAgg(a.Op, a.Field)}
			}
			for j := range a.Aggs {
				if HasLimit(a.Aggs[j].Op) && a.Aggs[j].Limit == 0 {
					a.Aggs[j].Limit = DefaultCollectLimit
				}
			}
			if a.Emit == "" {
				a.Emit = EmitUpdate
				if windowed {
					a.Emit = EmitClose
				}
			}
			windowed = false
		}
		if j := s.Join; j != nil {
			switch {
			case j.Table != nil:
				if j.Type == "" {
					j.Type = JoinLeft
				}
				if j.As == "" {
					j.As = "table"
				}
				if j.Table.Format == "" {
					j.Table.Format = FormatJSON
				}
			case j.Stream != nil:
				if j.Type == "" {
					j.Type = JoinInner
				}
				if j.As == "" {
					j.As = j.Stream.Name
				}
			}
		}
		if s.Sink != nil {
			if s.Sink.Format.Type == "" {
				s.Sink.Format.Type = FormatJSON
			}
			if f := &s.Sink.Format; f.UsesRegistry() && f.Subject == "" && s.Sink.Topic != "" && oneOf(f.SubjectStrategy, "", SubjectTopic) {
				f.Subject = s.Sink.Topic + "-value" // TopicNameStrategy
			}
			if f := &s.Sink.KeyFormat; f.Type == "" {
				f.Type = FormatRaw
			} else if f.UsesRegistry() && f.Subject == "" && s.Sink.Topic != "" && oneOf(f.SubjectStrategy, "", SubjectTopic) {
				f.Subject = s.Sink.Topic + "-key"
			}
			if s.Sink.Delivery == "" {
				s.Sink.Delivery = string(kafkaio.DeliveryExactlyOnce)
			}
			// TransactionTimeout stays 0 when unset: the runtime gives
			// every sink its default (SinkTransactionTimeout), the
			// dead-letter sink too.
		}
	}
}

// stepOnError returns the on_error and dead_letter_topic settings of a
// step that evaluates expressions, nils for the others (a source's are its
// own: they apply to decoding).
func stepOnError(s *Step) (onError, deadLetterTopic *string) {
	switch {
	case s.Filter != nil:
		return &s.Filter.OnError, &s.Filter.DeadLetterTopic
	case s.Map != nil:
		return &s.Map.OnError, &s.Map.DeadLetterTopic
	case s.FlatMap != nil:
		return &s.FlatMap.OnError, &s.FlatMap.DeadLetterTopic
	case s.KeyBy != nil:
		return &s.KeyBy.OnError, &s.KeyBy.DeadLetterTopic
	case s.Aggregate != nil:
		return &s.Aggregate.OnError, &s.Aggregate.DeadLetterTopic
	case s.Dedupe != nil:
		return &s.Dedupe.OnError, &s.Dedupe.DeadLetterTopic
	}
	return nil, nil
}

// MinTransactionTimeout is the shortest transaction timeout an exactly-once
// sink may have: a transaction opens up to one interval before its barrier,
// waits up to checkpoint.timeout for its checkpoint, may be carried to the
// next checkpoint if that one fails (one more interval), and must survive
// the failover of a replica (a minute). The same rule as
// sink.Timeouts, which checks it again against the broker at start.
func (c *Config) MinTransactionTimeout() time.Duration {
	return 2*c.Checkpoint.Interval + c.Checkpoint.Timeout + time.Minute
}

// SinkTransactionTimeout returns the transaction timeout of an exactly-once
// sink whose own setting is set (0: unset). Unset, it is the least the
// checkpoint settings allow, MinTransactionTimeout: if that exceeds the
// brokers' transaction.max.timeout.ms, the start-time check says which of
// the two settings to change. It is the default of sink.transaction_timeout
// and of every sink that has no such setting (a dead-letter topic's).
func (c *Config) SinkTransactionTimeout(set time.Duration) time.Duration {
	if set > 0 {
		return set
	}
	return c.MinTransactionTimeout()
}

// derivedDefaults fills settings whose defaults depend on others.
func (c *Config) derivedDefaults() {
	if c.Kafka.TopicPrefix == "" && c.Job.Name != "" {
		c.Kafka.TopicPrefix = "_weir." + c.Job.Name + "."
	}
	if c.Kafka.ClientID == "" && c.Job.Name != "" {
		c.Kafka.ClientID = "weir-" + c.Job.Name
	}
	if c.Process.ReplicaID == "" {
		if h, err := os.Hostname(); err == nil {
			c.Process.ReplicaID = h
		}
	}
	if c.Checkpoint.Storage == "" && c.State.Dir != "" {
		c.Checkpoint.Storage = "file://" + absPath(c.State.Dir) + "/checkpoints"
	}
	c.stepDefaults()
}
