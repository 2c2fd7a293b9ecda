package e2etest

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// Job is the YAML count job the end-to-end tests run: source (json) →
// aggregate count → exactly-once sink, or with KeyBy set the two-stage job
// source (json) → key_by → aggregate count → exactly-once sink; Steps
// replaces the count (a window and its aggregate, say). Zero fields take
// the defaults noted.
type Job struct {
	Name    string
	Input   string
	Output  string
	Brokers []string

	// KeyBy is the JSON field of a key_by step before the count; "" counts
	// per record key in one stage.
	KeyBy string
	// Parallelism is job.parallelism, the task count of the stage after a
	// key_by; 0 leaves the product's default (the input's partition count).
	Parallelism int

	// Source is more of the source's flow mapping, as YAML ("timestamp:
	// {field: ts, format: unix_ms}, watermark: {…}"), after its topics,
	// format, start and error policy.
	Source string
	// Steps are the steps between the source (and key_by) and the sink,
	// each a YAML flow mapping such as "aggregate: {op: count}", the
	// default.
	Steps []string

	OnError         string // source.on_error; "" leaves the product's default (fail)
	DeadLetterTopic string // with OnError "dead-letter"

	SessionTimeout     time.Duration // kafka.session_timeout; default 6s (the broker's least)
	Interval           time.Duration // checkpoint.interval; default 1s
	CheckpointTimeout  time.Duration // checkpoint.timeout; default 30s
	TransactionTimeout time.Duration // sink.transaction_timeout; 0 leaves the product's default
	LogLevel           string        // log.level; default info
	// Kafka is more of the kafka section (tls, sasl), as YAML lines
	// indented by two spaces.
	Kafka string
}

// YAML renders the job's configuration file.
func (j Job) YAML() string {
	or := func(d, def time.Duration) time.Duration {
		if d == 0 {
			return def
		}
		return d
	}
	var src strings.Builder
	fmt.Fprintf(&src, "topics: [%s], format: json, start: earliest", j.Input)
	if j.OnError != "" {
		fmt.Fprintf(&src, ", on_error: %s", j.OnError)
	}
	if j.DeadLetterTopic != "" {
		fmt.Fprintf(&src, ", dead_letter_topic: %s", j.DeadLetterTopic)
	}
	if j.Source != "" {
		fmt.Fprintf(&src, ", %s", j.Source)
	}
	sink := fmt.Sprintf("topic: %s, format: json, delivery: exactly-once", j.Output)
	if j.TransactionTimeout > 0 {
		sink += fmt.Sprintf(", transaction_timeout: %s", j.TransactionTimeout)
	}
	level := j.LogLevel
	if level == "" {
		level = "info"
	}
	var job strings.Builder
	if j.Parallelism > 0 {
		fmt.Fprintf(&job, "  parallelism: %d\n", j.Parallelism)
	}
	job.WriteString("  pipeline:\n")
	fmt.Fprintf(&job, "    - source: {%s}\n", src.String())
	if j.KeyBy != "" {
		fmt.Fprintf(&job, "    - key_by: {field: %s}\n", j.KeyBy)
	}
	steps := j.Steps
	if len(steps) == 0 {
		steps = []string{"aggregate: {op: count}"}
	}
	for _, st := range steps {
		fmt.Fprintf(&job, "    - %s\n", st)
	}
	return fmt.Sprintf(`job:
  name: %s
%s    - sink: {%s}
kafka:
  brokers: [%s]
  session_timeout: %s
%scheckpoint:
  interval: %s
  timeout: %s
http:
  address: ""
log:
  level: %s
`, j.Name, job.String(), sink, strings.Join(j.Brokers, ", "),
		or(j.SessionTimeout, 6*time.Second), j.Kafka, or(j.Interval, time.Second),
		or(j.CheckpointTimeout, 30*time.Second), level)
}

// Write writes the job's configuration to path.
func (j Job) Write(path string) error {
	return os.WriteFile(path, []byte(j.YAML()), 0o600)
}
