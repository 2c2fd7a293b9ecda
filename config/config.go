package config

import (
	"os"
	"time"
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
}

// Job names the job and describes its dataflow.
type Job struct {
	// Name namespaces every control topic, consumer group, transactional ID
	// and object-store prefix of the job. Required.
	Name string `mapstructure:"name"`
	// Pipeline is the job's steps, from its source to its sink.
	Pipeline []Step `mapstructure:"pipeline"`
}

// Step is one step of a pipeline: exactly one of its fields is set.
type Step struct {
	Source    *SourceStep    `mapstructure:"source"`
	Aggregate *AggregateStep `mapstructure:"aggregate"`
	Sink      *SinkStep      `mapstructure:"sink"`
}

// SourceStep reads Kafka topics. All its topics must have the same number
// of partitions: task i reads partition i of each.
type SourceStep struct {
	Topics []string `mapstructure:"topics"`
	// Format of record values: "json" (each value must be a JSON document)
	// or "raw" (any bytes).
	Format string `mapstructure:"format"`
	// Start is where a job with no completed checkpoint starts reading:
	// "earliest", "latest", or a time (RFC 3339).
	Start string `mapstructure:"start"`
	// OnError is what happens to a record that does not decode: "fail"
	// (stop the job), "skip" (count and drop it) or "dead-letter" (count it
	// and copy it to DeadLetterTopic).
	OnError         string `mapstructure:"on_error"`
	DeadLetterTopic string `mapstructure:"dead_letter_topic"`
}

// AggregateStep is a keyed aggregate over the record key.
type AggregateStep struct {
	// Op is the aggregate: "count" emits, for every input record, the
	// running count of its key.
	Op string `mapstructure:"op"`
}

// SinkStep writes to a Kafka topic.
type SinkStep struct {
	Topic string `mapstructure:"topic"`
	// Format of the values written: "json".
	Format string `mapstructure:"format"`
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
}

// Default returns the defaults of every setting. Job.Name, Job.Pipeline and
// Kafka.Brokers have none.
func Default() Config {
	return Config{
		Kafka: Kafka{
			ReplicationFactor: -1,
			SessionTimeout:    10 * time.Second,
		},
		Checkpoint: Checkpoint{
			Interval:          10 * time.Second,
			Timeout:           10 * time.Minute,
			MinPause:          0,
			MaxConcurrent:     1,
			TolerableFailures: 0,
			Retained:          3,
			Mode:              ModeExactlyOnce,
		},
		State: State{
			Dir:              "weir-state",
			BlockCacheBytes:  256 << 20,
			RecordCacheBytes: 8 << 20,
		},
		HTTP:    HTTP{Address: ":9464"},
		Log:     Log{Level: "info", Format: "text"},
		Process: Process{GracePeriod: 30 * time.Second, LivenessTimeout: 2 * time.Minute},
	}
}

// Values of the enumerated settings.
const (
	ModeExactlyOnce   = "exactly-once"
	ModeAtLeastOnce   = "at-least-once"
	FormatJSON        = "json"
	FormatRaw         = "raw"
	StartEarliest     = "earliest"
	StartLatest       = "latest"
	OnErrorFail       = "fail"
	OnErrorSkip       = "skip"
	OnErrorDeadLetter = "dead-letter"
	OpCount           = "count"
)

// stepDefaults fills the unset fields of pipeline steps.
func (c *Config) stepDefaults() {
	for i := range c.Job.Pipeline {
		s := &c.Job.Pipeline[i]
		if s.Source != nil {
			if s.Source.Format == "" {
				s.Source.Format = FormatJSON
			}
			if s.Source.Start == "" {
				s.Source.Start = StartEarliest
			}
			if s.Source.OnError == "" {
				s.Source.OnError = OnErrorFail
			}
		}
		if s.Sink != nil {
			if s.Sink.Format == "" {
				s.Sink.Format = FormatJSON
			}
			if s.Sink.Delivery == "" {
				s.Sink.Delivery = ModeExactlyOnce
			}
			// TransactionTimeout stays 0 when unset: the runtime gives
			// every sink its default (SinkTransactionTimeout), the
			// dead-letter sink too.
		}
	}
}

// MinTransactionTimeout is the shortest transaction timeout an exactly-once
// sink may have: a transaction opens up to one interval before its barrier,
// waits up to checkpoint.timeout for its checkpoint, may be carried to the
// next checkpoint if that one fails (one more interval), and must survive
// the failover of a replica (a minute). The same rule as
// kafkaio.SinkTimeouts, which checks it again against the broker at start.
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
