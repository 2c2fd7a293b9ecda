package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/keygroup"
)

// FieldError is one problem with one setting.
type FieldError struct {
	// Path is the key path of the setting: "checkpoint.interval",
	// "job.pipeline[2].sink.topic".
	Path string
	// Msg says what is wrong: the value, and what was expected.
	Msg string
	// Origin is where the value came from: "job.yaml:9:13" (file, line,
	// column), "environment variable WEIR_CHECKPOINT_INTERVAL", "flag
	// --checkpoint.interval"; empty for a default or a missing setting.
	Origin string
}

// Error reads "origin: path: msg", like a compiler's message, or "path:
// msg" without an origin.
func (e *FieldError) Error() string {
	if e.Origin != "" {
		return e.Origin + ": " + e.Path + ": " + e.Msg
	}
	return e.Path + ": " + e.Msg
}

// jobNameRE keeps job names usable inside Kafka topic names and object keys.
var jobNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,99}$`)

// Validate checks every setting and returns all problems at once, joined;
// each is a *FieldError (errors.As) whose Error() starts with its key path.
func (c *Config) Validate() error {
	var v validator

	// job
	switch {
	case c.Job.Name == "":
		v.add("job.name", "required: it names the job's topics, groups and checkpoints")
	case !jobNameRE.MatchString(c.Job.Name):
		v.add("job.name", "%q: use 1 to 100 letters, digits, '.', '_' or '-', starting with a letter or digit", c.Job.Name)
	case c.goJob != "" && c.Job.Name != c.goJob:
		v.add("job.name", "%q, but this program runs the job %q defined in Go: leave job.name out, or set it to %q", c.Job.Name, c.goJob, c.goJob)
	}
	if c.goJob != "" {
		if len(c.Job.Pipeline) > 0 {
			v.add("job.pipeline", "must be empty: this program runs the job %q defined in Go, not a YAML pipeline; remove job.pipeline (or run the YAML job with the stock processor binary)", c.goJob)
		}
	} else {
		c.validatePipeline(&v)
	}
	// keygroup.Limit bounds the partition count of the shuffle topics.
	if m := c.Job.MaxParallelism; m < 1 || m > keygroup.Limit {
		v.add("job.max_parallelism", "%d: must be between 1 and %d", m, keygroup.Limit)
	}
	if p := c.Job.Parallelism; p < 0 {
		v.add("job.parallelism", "%d: must be 0 (the input partition count) or more", p)
	} else if p > c.Job.MaxParallelism && c.Job.MaxParallelism >= 1 {
		v.add("job.parallelism", "%d: must not exceed job.max_parallelism (%d): each task of a stage after a key_by reads at least one key group", p, c.Job.MaxParallelism)
	}

	// kafka
	if len(c.Kafka.Brokers) == 0 && !c.offline {
		v.add("kafka.brokers", "required: at least one host:port (environment: %s)", EnvName("kafka.brokers"))
	}
	for i, b := range c.Kafka.Brokers {
		if _, _, err := net.SplitHostPort(strings.TrimSpace(b)); err != nil {
			v.add(fmt.Sprintf("kafka.brokers[%d]", i), "%q is not host:port", b)
		}
	}
	if c.Kafka.ReplicationFactor == 0 || c.Kafka.ReplicationFactor < -1 {
		v.add("kafka.replication_factor", "%d: must be -1 (the broker's default) or at least 1", c.Kafka.ReplicationFactor)
	}
	// Kafka's own bounds for group.min/max.session.timeout.ms defaults.
	if c.Kafka.SessionTimeout < 6*time.Second || c.Kafka.SessionTimeout > 30*time.Minute {
		v.add("kafka.session_timeout", "%v: must be between 6s and 30m (the broker's default group session bounds)", c.Kafka.SessionTimeout)
	}
	// Each check is one metadata request of the coordinator: more often
	// than every 100ms only loads the brokers; less often than every hour
	// leaves new partitions unread for longer than anyone expects.
	if m := c.Kafka.MetadataMaxAge; m < 100*time.Millisecond || m > time.Hour {
		v.add("kafka.metadata_max_age", "%v: must be between 100ms and 1h", m)
	}

	c.validateTLS(&v)
	c.validateSASL(&v)

	// checkpoint
	cp := c.Checkpoint
	if cp.Interval < 10*time.Millisecond {
		v.add("checkpoint.interval", "%v: must be at least 10ms", cp.Interval)
	}
	if cp.Timeout <= 0 {
		v.add("checkpoint.timeout", "%v: must be positive", cp.Timeout)
	}
	if cp.MinPause < 0 {
		v.add("checkpoint.min_pause", "%v: must not be negative", cp.MinPause)
	}
	if cp.MaxConcurrent < 1 {
		v.add("checkpoint.max_concurrent", "%d: must be at least 1", cp.MaxConcurrent)
	}
	if cp.TolerableFailures < 0 {
		v.add("checkpoint.tolerable_failures", "%d: must not be negative", cp.TolerableFailures)
	}
	if cp.Retained < 1 {
		v.add("checkpoint.retained", "%d: must be at least 1 (the job restores from the newest)", cp.Retained)
	}
	if cp.PurgeInterval < 0 {
		v.add("checkpoint.purge_interval", "%v: must not be negative", cp.PurgeInterval)
	}
	if cp.Mode != ModeExactlyOnce && cp.Mode != ModeAtLeastOnce {
		v.add("checkpoint.mode", "%q: must be %q or %q", cp.Mode, ModeExactlyOnce, ModeAtLeastOnce)
	}
	validateStorage(&v, cp.Storage)

	// state
	if c.State.Dir == "" {
		v.add("state.dir", "required")
	}
	if c.State.RecordCacheBytes < 0 {
		v.add("state.record_cache_bytes", "%d: must be 0 (off) or more", c.State.RecordCacheBytes)
	}
	if c.State.BlockCacheBytes < 1<<20 {
		v.add("state.block_cache_bytes", "%d: must be at least 1 MiB", c.State.BlockCacheBytes)
	}

	// http, log, process
	if c.HTTP.Address != "" {
		if _, _, err := net.SplitHostPort(c.HTTP.Address); err != nil {
			v.add("http.address", "%q is not host:port (or :port)", c.HTTP.Address)
		}
	}
	if c.HTTP.ReportInterval < 100*time.Millisecond || c.HTTP.ReportInterval > 5*time.Minute {
		v.add("http.report_interval", "%v: must be between 100ms and 5m", c.HTTP.ReportInterval)
	}
	if c.HTTP.Admin.Enabled && c.HTTP.Admin.TokenFile == "" {
		v.add("http.admin.token_file", "required when http.admin.enabled is true: a file holding the bearer token of the write actions (a mounted Secret)")
	}
	if !oneOf(c.Log.Level, "debug", "info", "warn", "error") {
		v.add("log.level", "%q: must be debug, info, warn or error", c.Log.Level)
	}
	if !oneOf(c.Log.Format, "text", "json") {
		v.add("log.format", "%q: must be text or json", c.Log.Format)
	}
	if c.Process.ReplicaID != "" && !jobNameRE.MatchString(c.Process.ReplicaID) {
		v.add("process.replica_id", "%q: use 1 to 100 letters, digits, '.', '_' or '-'", c.Process.ReplicaID)
	}
	if c.Process.GracePeriod <= 0 {
		v.add("process.grace_period", "%v: must be positive", c.Process.GracePeriod)
	}
	// The main loop wakes every second even when idle: a shorter timeout
	// would fail /livez on a healthy replica.
	if c.Process.LivenessTimeout < 5*time.Second {
		v.add("process.liveness_timeout", "%v: must be at least 5s", c.Process.LivenessTimeout)
	}
	return v.err()
}

// validateDuration checks an event-time duration: not negative, positive
// if required, and a whole number of milliseconds (event time is in
// milliseconds).
func validateDuration(v *validator, path string, d time.Duration, required bool) {
	switch {
	case d < 0:
		v.add(path, "%v: must not be negative", d)
	case d == 0 && required:
		v.add(path, "must be positive")
	case d%time.Millisecond != 0:
		v.add(path, "%v: must be a whole number of milliseconds (event time is in milliseconds)", d)
	}
}

// validateWindow checks a window step. As in Flink, a sliding window's size
// need not be a multiple of its slide; a slide longer than the size would
// leave records between windows, so it is refused.
func (c *Config) validateWindow(v *validator, path string, w *WindowStep) {
	notFor := func(key string, d time.Duration) {
		if d != 0 {
			v.add(path+"."+key, "set, but a %s window has no %s: remove it", w.Type, key)
		}
	}
	switch w.Type {
	case WindowTumbling:
		validateDuration(v, path+".size", w.Size, true)
		notFor("slide", w.Slide)
		notFor("gap", w.Gap)
	case WindowSliding:
		validateDuration(v, path+".size", w.Size, true)
		validateDuration(v, path+".slide", w.Slide, true)
		if w.Slide > w.Size && w.Size > 0 {
			v.add(path+".slide", "%v: must not exceed size (%v): the records between two windows would belong to none", w.Slide, w.Size)
		}
		notFor("gap", w.Gap)
	case WindowSession:
		validateDuration(v, path+".gap", w.Gap, true)
		notFor("size", w.Size)
		notFor("slide", w.Slide)
	case "":
		v.add(path+".type", "required: tumbling, sliding or session")
	default:
		msg := ""
		if s := suggest(w.Type, WindowTypes()); s != "" {
			msg = fmt.Sprintf(" (did you mean %s?)", s)
		}
		v.add(path+".type", "%q: must be tumbling, sliding or session%s", w.Type, msg)
	}
	validateDuration(v, path+".allowed_lateness", w.AllowedLateness, false)
	validateDuration(v, path+".emit_every", w.EmitEvery, false)
	if w.LateTopic != "" {
		checkTopic(v, path+".late_topic", w.LateTopic)
		for _, st := range c.allSteps() {
			switch {
			case st.Source != nil && slices.Contains(st.Source.Topics, w.LateTopic):
				v.add(path+".late_topic", "%q is also an input topic (%s.source.topics): a job must not read its own late records", w.LateTopic, st.path)
			case st.Sink != nil && st.Sink.Topic == w.LateTopic:
				v.add(path+".late_topic", "%q is also the sink's topic (%s.sink.topic): late records are input records, not results; use another topic", w.LateTopic, st.path)
			}
		}
	}
}

func validateTimestamp(v *validator, path string, ts *TimestampSpec) {
	if ts.Field == "" {
		v.add(path+".field", "required: the top-level JSON field that holds the event time (leave timestamp out for the Kafka record timestamp)")
	}
	if !slices.Contains(TimestampFormats(), ts.Format) {
		msg := ""
		if s := suggest(ts.Format, TimestampFormats()); s != "" {
			msg = fmt.Sprintf(" (did you mean %s?)", s)
		}
		v.add(path+".format", "%q: must be unix_ms, unix_s or rfc3339%s", ts.Format, msg)
	}
}

func validateWatermark(v *validator, path string, wm *WatermarkSpec) {
	validateDuration(v, path+".max_out_of_orderness", wm.MaxOutOfOrderness, false)
	validateDuration(v, path+".idle_timeout", wm.IdleTimeout, false)
	// The task loop emits watermarks on its own ticks: a shorter interval
	// would only spend the loop's time.
	switch {
	case wm.Interval < 10*time.Millisecond:
		v.add(path+".interval", "%v: must be at least 10ms", wm.Interval)
	case wm.Interval%time.Millisecond != 0:
		v.add(path+".interval", "%v: must be a whole number of milliseconds", wm.Interval)
	}
}

// topicRE is Kafka's rule for topic names (and "." and ".." are refused).
var topicRE = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

func validTopic(t string) bool { return topicRE.MatchString(t) && t != "." && t != ".." }

func checkTopic(v *validator, path, t string) {
	if !validTopic(t) {
		v.add(path, "%q is not a valid Kafka topic name: use 1 to 249 letters, digits, '.', '_' or '-'", t)
	}
}

func validateSource(v *validator, path string, s *SourceStep) {
	if len(s.Topics) == 0 {
		v.add(path+".topics", "required: at least one topic")
	}
	for i, t := range s.Topics {
		p := fmt.Sprintf("%s.topics[%d]", path, i)
		checkTopic(v, p, t)
		if j := slices.Index(s.Topics[:i], t); j >= 0 {
			v.add(p, "%q is listed twice (also topics[%d])", t, j)
		}
	}
	if s.DeadLetterTopic != "" {
		checkTopic(v, path+".dead_letter_topic", s.DeadLetterTopic)
		if slices.Contains(s.Topics, s.DeadLetterTopic) {
			v.add(path+".dead_letter_topic", "%q is also an input topic: a job must not read its own dead letters", s.DeadLetterTopic)
		}
	}
	validateFormat(v, path+".format", s.Format, false, sourceFormats)
	validateFormat(v, path+".key_format", s.KeyFormat, false, keyFormats)
	if s.Timestamp != nil {
		validateTimestamp(v, path+".timestamp", s.Timestamp)
		if s.Format.Type == FormatRaw {
			v.add(path+".timestamp", "reads a JSON field, but the source's format is raw: use format json, or leave timestamp out for the Kafka record timestamp")
		}
	}
	if s.Watermark != nil {
		validateWatermark(v, path+".watermark", s.Watermark)
	}
	// Empty is a problem here (Load's defaults fill it in), as it is
	// for on_error and delivery, though kafkaio reads it as the default.
	if _, err := kafkaio.ParseStart(s.Start); err != nil || s.Start == "" {
		v.add(path+".start", "%q: must be earliest, latest or an RFC 3339 time", s.Start)
	}
	validateOnError(v, path, s.OnError, s.DeadLetterTopic)
}

// The formats a source's values, a sink's values and keys may have.
var (
	sourceFormats = []string{FormatJSON, FormatRaw, FormatAvro, FormatProtobuf}
	sinkFormats   = []string{FormatJSON, FormatAvro, FormatProtobuf}
	keyFormats    = []string{FormatRaw, FormatAvro, FormatProtobuf}
)

// SubjectStrategies returns the values of a sink format's
// subject_strategy.
func SubjectStrategies() []string { return []string{SubjectTopic, SubjectRecord, SubjectTopicRecord} }

// SourceFormats, SinkFormats and KeyFormats return the values of a
// source's format, a sink's format and key_format.
func SourceFormats() []string { return slices.Clone(sourceFormats) }
func SinkFormats() []string   { return slices.Clone(sinkFormats) }
func KeyFormats() []string    { return slices.Clone(keyFormats) }

// validateFormat checks a source's (sink false) or a sink's format, one
// of allowed.
func validateFormat(v *validator, path string, f Format, sink bool, allowed []string) {
	if !slices.Contains(allowed, f.Type) {
		v.add(path, "%q: must be %s%s", f.Type, orList(allowed), didYouMean(f.Type, allowed))
		return
	}
	if !f.UsesRegistry() {
		for _, k := range formatKeys(f) {
			if k.set {
				v.add(path+"."+k.key, "set, but the format is %s: it applies to avro and protobuf only", f.Type)
			}
		}
		return
	}
	if f.Registry == "" {
		v.add(path+".registry", "required for %s: the URL of a Confluent-compatible schema registry", f.Type)
	} else if u, err := url.Parse(f.Registry); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		v.add(path+".registry", "%q: must be an http:// or https:// URL", f.Registry)
	}
	if f.Message != "" && f.Type != FormatProtobuf {
		v.add(path+".message", "set, but the format is %s: it names a Protobuf message", f.Type)
	}
	n := 0
	for _, set := range []bool{f.Schema != "", f.SchemaFile != "", f.SchemaID != 0} {
		if set {
			n++
		}
	}
	switch {
	case !sink:
		for _, k := range formatKeys(f)[3:] {
			if k.set {
				v.add(path+"."+k.key, "set on a source: a source reads each record with the schema its ID names")
			}
		}
	case n != 1:
		a := "a"
		if f.Type == FormatAvro {
			a = "an"
		}
		v.add(path, "%s %s sink needs exactly one of schema, schema_file and schema_id", a, f.Type)
	case !oneOf(f.SubjectStrategy, "", SubjectTopic, SubjectRecord, SubjectTopicRecord):
		v.add(path+".subject_strategy", "%q: must be topic, record or topic_record%s", f.SubjectStrategy, didYouMean(f.SubjectStrategy, SubjectStrategies()))
	case f.SubjectStrategy != "" && f.SchemaID != 0:
		v.add(path+".subject_strategy", "set, but schema_id names the schema: nothing is registered, under any subject")
	case f.SubjectStrategy != "" && f.SubjectStrategy != SubjectTopic && f.Subject != "":
		v.add(path+".subject", "set, and so is subject_strategy %s, which derives the subject: give one", f.SubjectStrategy)
	case f.SchemaID < 0:
		v.add(path+".schema_id", "%d: must be positive", f.SchemaID)
	}
}

// orList writes "a, b or c".
func orList(l []string) string {
	if len(l) < 2 {
		return strings.Join(l, "")
	}
	return strings.Join(l[:len(l)-1], ", ") + " or " + l[len(l)-1]
}

type formatKey struct {
	key string
	set bool
}

// formatKeys lists which of a registry format's settings are set: the
// registry's three, then the sink's five.
func formatKeys(f Format) []formatKey {
	return []formatKey{
		{"registry", f.Registry != ""}, {"registry_username", f.RegistryUsername != ""}, {"registry_password", f.RegistryPassword != ""},
		{"subject", f.Subject != ""}, {"schema", f.Schema != ""}, {"schema_file", f.SchemaFile != ""}, {"schema_id", f.SchemaID != 0},
		{"message", f.Message != ""}, {"subject_strategy", f.SubjectStrategy != ""},
	}
}

// validateOnError checks a step's on_error and dead_letter_topic.
func validateOnError(v *validator, path, onError, deadLetterTopic string) {
	switch p, err := kafkaio.ParseOnError(onError); {
	case err != nil || onError == "":
		v.add(path+".on_error", "%q: must be fail, skip or dead-letter%s", onError, didYouMean(onError, OnErrors()))
	case p == kafkaio.OnErrorDeadLetter && deadLetterTopic == "":
		v.add(path+".dead_letter_topic", "required when on_error is dead-letter")
	case p != kafkaio.OnErrorDeadLetter && deadLetterTopic != "":
		v.add(path+".dead_letter_topic", "set, but on_error is %q: set on_error to dead-letter or remove it", onError)
	}
}

// didYouMean is " (did you mean X?)" for a near miss of one of options,
// or "".
func didYouMean(got string, options []string) string {
	if s := suggest(got, options); s != "" {
		return fmt.Sprintf(" (did you mean %s?)", s)
	}
	return ""
}

func (c *Config) validateSink(v *validator, path string, s *SinkStep) {
	if s.Topic == "" {
		v.add(path+".topic", "required")
	} else {
		checkTopic(v, path+".topic", s.Topic)
	}
	for _, st := range c.allSteps() {
		if st.Source != nil && slices.Contains(st.Source.Topics, s.Topic) {
			v.add(path+".topic", "%q is also an input topic (%s.source.topics): a job must not read its own output", s.Topic, st.path)
		}
		dlt, key := "", ""
		if st.Source != nil {
			dlt, key = st.Source.DeadLetterTopic, "source"
		} else if _, p := stepOnError(&st.Step); p != nil {
			dlt, key = *p, st.kind()
		}
		if dlt != "" && dlt == s.Topic && s.Delivery == string(kafkaio.DeliveryAtLeastOnce) {
			v.add(path+".topic", "%q is also the dead-letter topic (%s.%s.dead_letter_topic), whose records are written exactly-once: use another topic, or delivery exactly-once", s.Topic, st.path, key)
		}
	}
	validateFormat(v, path+".format", s.Format, true, sinkFormats)
	validateFormat(v, path+".key_format", s.KeyFormat, true, keyFormats)
	if _, err := kafkaio.ParseDelivery(s.Delivery); err != nil || s.Delivery == "" {
		v.add(path+".delivery", "%q: must be exactly-once or at-least-once", s.Delivery)
	}
	if s.Delivery == string(kafkaio.DeliveryExactlyOnce) && c.Checkpoint.Mode == ModeAtLeastOnce {
		v.add(path+".delivery", "exactly-once needs checkpoint.mode exactly-once (it is at-least-once)")
	}
	if s.TransactionTimeout < 0 {
		v.add(path+".transaction_timeout", "%v: must not be negative (leave it out for the default)", s.TransactionTimeout)
	} else if s.Delivery == string(kafkaio.DeliveryExactlyOnce) && s.TransactionTimeout > 0 {
		if need := c.MinTransactionTimeout(); s.TransactionTimeout < need {
			v.add(path+".transaction_timeout", "%v: must be at least 2 × checkpoint.interval + checkpoint.timeout + 1m (%v), or the broker may abort a transaction whose checkpoint completes late or fails once; raise it, or lower checkpoint.timeout", s.TransactionTimeout, need)
		}
	}
}

type validator struct{ problems []error }

func (v *validator) add(path, format string, args ...any) {
	v.problems = append(v.problems, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// addAt adds a problem whose origin is known (an expression's position)
// rather than looked up by path.
func (v *validator) addAt(path, origin, format string, args ...any) {
	v.problems = append(v.problems, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...), Origin: origin})
}

func (v *validator) err() error { return errors.Join(v.problems...) }

func oneOf(s string, options ...string) bool {
	for _, o := range options {
		if s == o {
			return true
		}
	}
	return false
}

// validateTLS checks kafka.tls. Files are checked to exist here, so that a
// typo is a configuration error, not a failed connection.
func (c *Config) validateTLS(v *validator) {
	t := c.Kafka.TLS
	files := []struct{ key, path string }{
		{"kafka.tls.ca_file", t.CAFile}, {"kafka.tls.cert_file", t.CertFile}, {"kafka.tls.key_file", t.KeyFile},
	}
	if !t.Enabled {
		for _, f := range files {
			if f.path != "" {
				v.add(f.key, "set, but kafka.tls.enabled is false: enable TLS, or remove it")
			}
		}
		if t.ServerName != "" {
			v.add("kafka.tls.server_name", "set, but kafka.tls.enabled is false: enable TLS, or remove it")
		}
		return
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		v.add("kafka.tls.cert_file", "mutual TLS needs both kafka.tls.cert_file and kafka.tls.key_file")
	}
	for _, f := range files {
		checkFile(v, f.key, f.path)
	}
}

// validateSASL checks kafka.sasl: a known mechanism and exactly the
// settings it needs.
func (c *Config) validateSASL(v *validator) {
	s := c.Kafka.SASL
	o := s.OAuth
	set := func(key, val string) {
		if val != "" {
			v.add(key, "set, but kafka.sasl.mechanism %s does not use it", orNone(s.Mechanism))
		}
	}
	oneOf := func(what string, keys []string, vals ...string) {
		n := 0
		for _, val := range vals {
			if val != "" {
				n++
			}
		}
		switch {
		case n == 0:
			v.add(keys[0], "required by kafka.sasl.mechanism %s: set %s (or its environment variable %s)", s.Mechanism, strings.Join(keys, " or "), EnvName(keys[len(keys)-1]))
		case n > 1:
			v.add(keys[0], "%s is given more than once: set only one of %s", what, strings.Join(keys, ", "))
		}
	}
	password := func() {
		set("kafka.sasl.token", s.Token)
		set("kafka.sasl.token_file", s.TokenFile)
	}
	noOAuth := func() {
		set("kafka.sasl.oauth.token_url", o.TokenURL)
		set("kafka.sasl.oauth.client_id", o.ClientID)
		set("kafka.sasl.oauth.client_secret", o.ClientSecret)
		set("kafka.sasl.oauth.client_secret_file", o.ClientSecretFile)
		if len(o.Scopes) > 0 {
			set("kafka.sasl.oauth.scopes", strings.Join(o.Scopes, ","))
		}
	}
	switch s.Mechanism {
	case "":
		set("kafka.sasl.username", s.Username)
		set("kafka.sasl.password", s.Password)
		set("kafka.sasl.password_file", s.PasswordFile)
		password()
		noOAuth()
	case SASLPlain, SASLScram256, SASLScram512:
		if s.Username == "" {
			v.add("kafka.sasl.username", "required by kafka.sasl.mechanism %s", s.Mechanism)
		}
		oneOf("the password", []string{"kafka.sasl.password_file", "kafka.sasl.password"}, s.PasswordFile, s.Password)
		checkFile(v, "kafka.sasl.password_file", s.PasswordFile)
		password()
		noOAuth()
	case SASLOAuthBearer:
		set("kafka.sasl.username", s.Username)
		set("kafka.sasl.password", s.Password)
		set("kafka.sasl.password_file", s.PasswordFile)
		oneOf("the token", []string{"kafka.sasl.token_file", "kafka.sasl.oauth.token_url", "kafka.sasl.token"}, s.TokenFile, o.TokenURL, s.Token)
		checkFile(v, "kafka.sasl.token_file", s.TokenFile)
		if o.TokenURL != "" {
			if u, err := url.Parse(o.TokenURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
				v.add("kafka.sasl.oauth.token_url", "%q is not an http(s) URL", o.TokenURL)
			}
			if o.ClientID == "" {
				v.add("kafka.sasl.oauth.client_id", "required with kafka.sasl.oauth.token_url")
			}
			oneOf("the client secret", []string{"kafka.sasl.oauth.client_secret_file", "kafka.sasl.oauth.client_secret"}, o.ClientSecretFile, o.ClientSecret)
			checkFile(v, "kafka.sasl.oauth.client_secret_file", o.ClientSecretFile)
		} else {
			noOAuth()
		}
	case SASLAWSMSKIAM:
		set("kafka.sasl.username", s.Username)
		set("kafka.sasl.password", s.Password)
		set("kafka.sasl.password_file", s.PasswordFile)
		password()
		noOAuth()
		if !c.Kafka.TLS.Enabled {
			v.add("kafka.sasl.mechanism", "AWS_MSK_IAM needs kafka.tls.enabled: true (MSK's IAM listener, port 9098, is TLS only)")
		}
	default:
		v.add("kafka.sasl.mechanism", "%q: use one of %s, or leave it empty for no SASL%s", s.Mechanism,
			strings.Join(SASLMechanisms(), ", "), suggestion(s.Mechanism, SASLMechanisms()))
	}
}

// suggestion is ": did you mean X?" for a near miss of one of options
// (case aside), or "".
func suggestion(got string, options []string) string {
	for _, o := range options {
		if strings.EqualFold(got, o) {
			return "; did you mean " + o + "? (upper case)"
		}
	}
	if s := suggest(strings.ToUpper(got), options); s != "" {
		return "; did you mean " + s + "?"
	}
	return ""
}

func orNone(m string) string {
	if m == "" {
		return "(none)"
	}
	return m
}

// checkFile reports a file setting whose file cannot be read.
func checkFile(v *validator, key, path string) {
	if path == "" {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		v.add(key, "%s", fileProblem(err))
		return
	}
	_ = f.Close()
}

// fileProblem says why a file cannot be opened, without Go's wording.
func fileProblem(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Sprintf("%q does not exist", pe.Path)
		case errors.Is(err, fs.ErrPermission):
			return fmt.Sprintf("%q cannot be read by this process (permission denied)", pe.Path)
		}
		return fmt.Sprintf("%q cannot be read: %v", pe.Path, pe.Err)
	}
	return err.Error()
}

// Warnings returns what is allowed but unwise in c, each with its origin:
// secrets written in the configuration file or a flag, and TLS without
// certificate verification.
func (c *Config) Warnings() []string {
	var out []string
	for _, key := range SecretKeys() {
		o, ok := c.origins[key]
		if !ok || strings.HasPrefix(o, "environment variable") {
			continue
		}
		alt := key + "_file"
		if key == "kafka.sasl.oauth.client_secret" {
			alt = "kafka.sasl.oauth.client_secret_file"
		}
		out = append(out, fmt.Sprintf("%s: %s: a secret written in the configuration; use %s (a mounted Secret) or the environment variable %s", o, key, alt, EnvName(key)))
	}
	if c.Kafka.TLS.Enabled && c.Kafka.TLS.InsecureSkipVerify {
		o := c.Origin("kafka.tls.insecure_skip_verify")
		if o != "" {
			o += ": "
		}
		out = append(out, o+"kafka.tls.insecure_skip_verify: the brokers' certificates are NOT verified: anyone on the network path can read and change the job's data")
	}
	return out
}
