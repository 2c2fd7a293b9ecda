package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/weir-stream/weir/config"
)

const clicksJob = `
job:
  name: clicks-per-user
  pipeline:
    - source: {topics: [clicks], format: json, start: earliest}
    - aggregate: {op: count}     # per record key; emits on every update
    - sink: {topic: clicks-per-user, format: json, delivery: exactly-once}
kafka:
  brokers: [127.0.0.1:9092]
checkpoint:
  interval: 1s
`

// setEnv makes m the only WEIR_* configuration variables for the rest of
// the test, whatever the shell set (the test Kafka's WEIR_KAFKA_BROKERS).
func setEnv(t *testing.T, m map[string]string) {
	t.Helper()
	for _, k := range config.Keys() {
		name := config.EnvName(k)
		if old, ok := os.LookupEnv(name); ok {
			if err := os.Unsetenv(name); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.Setenv(name, old) })
		}
	}
	for k, v := range m {
		t.Setenv(k, v)
	}
}

func TestLoadClicksJob(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(path, []byte(clicksJob), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.Source{File: path, NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Job.Name != "clicks-per-user" || len(cfg.Job.Pipeline) != 3 {
		t.Fatalf("job %+v", cfg.Job)
	}
	src, agg, sink := cfg.Job.Pipeline[0].Source, cfg.Job.Pipeline[1].Aggregate, cfg.Job.Pipeline[2].Sink
	if src == nil || !slices.Equal(src.Topics, []string{"clicks"}) || src.OnError != "fail" {
		t.Fatalf("source %+v", src)
	}
	if agg == nil || agg.Op != "count" || sink == nil || sink.Topic != "clicks-per-user" || sink.Delivery != config.ModeExactlyOnce {
		t.Fatalf("aggregate %+v sink %+v", agg, sink)
	}
	if cfg.Checkpoint.Interval != time.Second || cfg.Checkpoint.Retained != 3 || cfg.Checkpoint.MaxConcurrent != 1 {
		t.Fatalf("checkpoint %+v", cfg.Checkpoint)
	}
	if cfg.Kafka.TopicPrefix != "_weir.clicks-per-user." || cfg.Kafka.ClientID != "weir-clicks-per-user" {
		t.Fatalf("derived kafka settings %+v", cfg.Kafka)
	}
	if !strings.HasPrefix(cfg.Checkpoint.Storage, "file:///") || !strings.HasSuffix(cfg.Checkpoint.Storage, "/weir-state/checkpoints") {
		t.Fatalf("default storage %q", cfg.Checkpoint.Storage)
	}
	if sink.TransactionTimeout != 0 || cfg.SinkTransactionTimeout(sink.TransactionTimeout) != cfg.MinTransactionTimeout() {
		t.Fatalf("transaction timeout %v (default %v): want unset, defaulting to the least the checkpoints need, %v",
			sink.TransactionTimeout, cfg.SinkTransactionTimeout(sink.TransactionTimeout), cfg.MinTransactionTimeout())
	}
}

func TestPrecedenceYAMLEnvFlags(t *testing.T) {
	flags := pflag.NewFlagSet("t", pflag.ContinueOnError)
	flags.Duration("checkpoint.interval", 0, "")
	flags.StringSlice("kafka.brokers", nil, "")
	flags.Int("checkpoint.retained", 0, "")
	if err := flags.Parse([]string{"--checkpoint.interval=250ms"}); err != nil {
		t.Fatal(err)
	}
	setEnv(t, map[string]string{
		"WEIR_KAFKA_BROKERS":             "a:1,b:2",
		"WEIR_CHECKPOINT_INTERVAL":       "5s", // the flag wins
		"WEIR_CHECKPOINT_MAX_CONCURRENT": "2",
		"WEIR_LOG_FORMAT":                "json",
	})
	cfg, err := config.Load(config.Source{YAML: []byte(clicksJob), Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Kafka.Brokers, []string{"a:1", "b:2"}) {
		t.Errorf("brokers %v, want the environment's", cfg.Kafka.Brokers)
	}
	if cfg.Checkpoint.Interval != 250*time.Millisecond {
		t.Errorf("interval %v, want the flag's 250ms", cfg.Checkpoint.Interval)
	}
	if cfg.Checkpoint.MaxConcurrent != 2 || cfg.Log.Format != "json" {
		t.Errorf("max_concurrent %d format %q, want the environment's", cfg.Checkpoint.MaxConcurrent, cfg.Log.Format)
	}
	if cfg.Checkpoint.Retained != 3 {
		t.Errorf("retained %d: an unset flag must not override the default", cfg.Checkpoint.Retained)
	}
}

func TestUnknownKeysByPath(t *testing.T) {
	bad := strings.Replace(clicksJob, "  interval: 1s\n", "  intervall: 2s\n", 1) + "state:\n  dri: /tmp\n"
	bad = strings.Replace(bad, "aggregate: {op: count}", "aggregate: {op: count, window: 5s}", 1)
	_, err := config.Load(config.Source{YAML: []byte(bad), NoEnv: true})
	if err == nil {
		t.Fatal("unknown keys accepted")
	}
	for _, want := range []string{
		"checkpoint.intervall: unknown key",
		"state.dri: unknown key",
		"job.pipeline[1].aggregate.window: unknown key",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

func TestEveryProblemReportedByPath(t *testing.T) {
	yaml := `
job:
  name: "bad name!"
  pipeline:
    - aggregate: {op: mean}
    - source: {topics: [], format: xml, start: yesterday, on_error: dead-letter}
    - sink: {topic: "", delivery: maybe}
kafka:
  brokers: [nohostport]
checkpoint:
  interval: 1ms
  retained: 0
  max_concurrent: 0
  storage: "ftp://x"
  mode: sometimes
log:
  level: loud
`
	_, err := config.Load(config.Source{YAML: []byte(yaml), NoEnv: true})
	if err == nil {
		t.Fatal("bad config accepted")
	}
	var paths []string
	for _, e := range unjoin(err) {
		var fe *config.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("problem %q is no FieldError", e)
		}
		paths = append(paths, fe.Path)
	}
	for _, want := range []string{
		"job.name",
		"job.pipeline[0]",
		"job.pipeline[0].aggregate.op",
		"job.pipeline[1].source",
		"job.pipeline[1].source.topics",
		"job.pipeline[1].source.format",
		"job.pipeline[1].source.start",
		"job.pipeline[1].source.dead_letter_topic",
		"job.pipeline[2].sink.topic",
		"job.pipeline[2].sink.delivery",
		"kafka.brokers[0]",
		"checkpoint.interval",
		"checkpoint.retained",
		"checkpoint.max_concurrent",
		"checkpoint.storage",
		"checkpoint.mode",
		"log.level",
	} {
		if !slices.Contains(paths, want) {
			t.Errorf("no problem reported at %s; got %v", want, paths)
		}
	}
}

func TestTransactionTimeoutMustExceedCheckpoint(t *testing.T) {
	yaml := strings.Replace(clicksJob, "delivery: exactly-once}", "delivery: exactly-once, transaction_timeout: 30s}", 1)
	_, err := config.Load(config.Source{YAML: []byte(yaml), NoEnv: true})
	if err == nil || !strings.Contains(err.Error(), "job.pipeline[2].sink.transaction_timeout") {
		t.Fatalf("short transaction timeout: %v", err)
	}
}

func TestMissingBrokersNamesTheVariable(t *testing.T) {
	yaml := strings.Replace(clicksJob, "  brokers: [127.0.0.1:9092]\n", "  client_id: x\n", 1)
	_, err := config.Load(config.Source{YAML: []byte(yaml), NoEnv: true})
	if err == nil || !strings.Contains(err.Error(), "kafka.brokers: required") || !strings.Contains(err.Error(), "WEIR_KAFKA_BROKERS") {
		t.Fatalf("missing brokers: %v", err)
	}
}

func TestKeysHaveEnvNames(t *testing.T) {
	keys := config.Keys()
	if !slices.Contains(keys, "checkpoint.max_concurrent") || slices.Contains(keys, "job.pipeline") {
		t.Fatalf("keys %v", keys)
	}
	if got := config.EnvName("checkpoint.max_concurrent"); got != "WEIR_CHECKPOINT_MAX_CONCURRENT" {
		t.Fatalf("EnvName = %s", got)
	}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, unjoin(e)...)
		}
		return out
	}
	return []error{err}
}

// TestReferenceDocumentsEveryKey keeps docs/configuration.md in step with
// the struct: every key must be documented there.
func TestReferenceDocumentsEveryKey(t *testing.T) {
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range config.Keys() {
		if !strings.Contains(string(doc), "`"+k+"`") {
			t.Errorf("docs/configuration.md does not document %s", k)
		}
	}
}

// TestProblemsSayWhereAndWhat checks each problem of a value that does not
// decode: its origin (file:line:column, variable, flag), key path, value and
// what was expected, in the user's words, and no knock-on problem.
func TestProblemsSayWhereAndWhat(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "job.yaml")
	yaml := strings.Replace(clicksJob, "  interval: 1s\n", "  interval: 2\n  retained: three\n  intervall: 5s\n", 1)
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	flags := pflag.NewFlagSet("t", pflag.ContinueOnError)
	flags.String("checkpoint.timeout", "", "")
	flags.String("http.pprof", "", "")
	if err := flags.Parse([]string{"--checkpoint.timeout=30", "--http.pprof=yes"}); err != nil {
		t.Fatal(err)
	}
	setEnv(t, map[string]string{"WEIR_CHECKPOINT_MAX_CONCURRENT": "two"})
	_, err := config.Load(config.Source{File: path, Flags: flags})
	if err == nil {
		t.Fatal("bad values accepted")
	}
	got := unjoin(err)
	want := []string{
		path + ":11:13: checkpoint.interval: 2: a duration needs a unit: write 2s, 2ms or 2m",
		path + `:12:13: checkpoint.retained: "three": want a whole number`,
		path + ":13:3: checkpoint.intervall: unknown key (did you mean interval?)",
		`environment variable WEIR_CHECKPOINT_MAX_CONCURRENT: checkpoint.max_concurrent: "two": want a whole number`,
		"flag --checkpoint.timeout: checkpoint.timeout: 30: a duration needs a unit",
		`flag --http.pprof: http.pprof: "yes": want true or false`,
	}
	for _, w := range want {
		found := false
		for _, e := range got {
			found = found || strings.HasPrefix(e.Error(), w)
		}
		if !found {
			t.Errorf("no problem %q in:\n%v", w, err)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d problems, want %d (no knock-on ones):\n%v", len(got), len(want), err)
	}
	for _, bad := range []string{"strconv", "cannot parse", "ns:", "mapstructure"} {
		if strings.Contains(err.Error(), bad) {
			t.Errorf("problems leak %q:\n%v", bad, err)
		}
	}
}

// TestYAMLSyntaxErrorAlone: a file that is not YAML gives one problem at
// its line, not the "required" problems of everything it failed to set.
func TestYAMLSyntaxErrorAlone(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(path, []byte("job:\n  name: x\n   pipeline: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := config.Load(config.Source{File: path, NoEnv: true})
	if err == nil {
		t.Fatal("broken YAML accepted")
	}
	if ps := unjoin(err); len(ps) != 1 || !strings.HasPrefix(err.Error(), path+":3: YAML syntax: ") {
		t.Fatalf("want one problem at %s:3, got:\n%v", path, err)
	}
}

// TestOriginsOfValidationProblems: a value that decodes but is invalid is
// reported where it was set too, list items included, and a flag that
// replaces a YAML list takes the list's place.
func TestOriginsOfValidationProblems(t *testing.T) {
	yaml := strings.Replace(clicksJob, "[127.0.0.1:9092]", "[127.0.0.1:9092, nohostport]", 1)
	_, err := config.Load(config.Source{YAML: []byte(yaml), NoEnv: true})
	if err == nil || !strings.Contains(err.Error(), `yaml:9:29: kafka.brokers[1]: "nohostport" is not host:port`) {
		t.Fatalf("want the list item's position: %v", err)
	}
	flags := pflag.NewFlagSet("t", pflag.ContinueOnError)
	flags.String("kafka.brokers", "", "")
	if err := flags.Parse([]string{"--kafka.brokers=a:1,nohost"}); err != nil {
		t.Fatal(err)
	}
	_, err = config.Load(config.Source{YAML: []byte(clicksJob), NoEnv: true, Flags: flags})
	if err == nil || !strings.Contains(err.Error(), `flag --kafka.brokers: kafka.brokers[1]: "nohost" is not host:port`) {
		t.Fatalf("want the flag: %v", err)
	}
}

// TestStorageURLChecked: checkpoint.storage must name a known scheme and a
// bucket, and take only the query parameters of its scheme's opener in
// gocloud.dev/blob, with near misses named.
func TestStorageURLChecked(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"s3://", `"s3://": no bucket`},
		{"s3://bucket?regoin=eu", `query parameter "regoin" is not one s3 takes (did you mean region?)`},
		{"s3://bucket?region=eu&use_path_style=yes", `use_path_style="yes": want true or false`},
		{"s3://bucket/checkpoints", `s3 ignores the path "/checkpoints": write s3://bucket?prefix=checkpoints/`},
		{"gs://bucket?anonymus=true", `(did you mean anonymous?)`},
		{"azblob://?domain=x", `no container`},
		{"azblob://c?storage_acount=x", `(did you mean storage_account?)`},
		{"file://tmp/chk", `write file:///tmp/chk (three slashes)`},
		{"file:///tmp/chk?create_dirs=true", `(did you mean create_dir?)`},
		{"ftp://host/x", `scheme "ftp" is not one of azblob, file, gs, mem, s3`},
		{"/tmp/x", `"/tmp/x" has no scheme: for a local directory write file:///tmp/x`},
		{"bucket", `"bucket" has no scheme: for a local directory write file:///absolute/path (absolute, three slashes); for a bucket s3://bucket?region=…, gs://bucket or azblob://bucket`},
		{"chk/run1", `for a bucket s3://chk?region=…`},
	} {
		yaml := clicksJob + "  storage: \"" + tc.url + "\"\n"
		_, err := config.Load(config.Source{YAML: []byte(yaml), NoEnv: true})
		if err == nil || !strings.Contains(err.Error(), "checkpoint.storage: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("storage %q: want a problem saying %q, got %v", tc.url, tc.want, err)
		}
	}
	for _, ok := range []string{
		"s3://weir?region=us-east-1&endpoint=http://127.0.0.1:19000&use_path_style=true&prefix=jobs/",
		"gs://bucket", "azblob://c?protocol=http&domain=127.0.0.1:10000", "file:///var/lib/weir/chk", "mem://",
	} {
		yaml := clicksJob + "  storage: \"" + ok + "\"\n"
		if _, err := config.Load(config.Source{YAML: []byte(yaml), NoEnv: true}); err != nil {
			t.Errorf("storage %q refused: %v", ok, err)
		}
	}
}

const viewsJob = `
job:
  name: views-per-page
  parallelism: 4
  pipeline:
    - source: {topics: [clicks], format: json}
    - key_by: {field: page, parallelism: 6}
    - aggregate: {op: count}
    - sink: {topic: views-per-page, format: json, delivery: exactly-once}
kafka:
  brokers: [127.0.0.1:9092]
`

func TestKeyByAndParallelism(t *testing.T) {
	cfg, err := config.Load(config.Source{YAML: []byte(viewsJob), NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	if k := cfg.Job.Pipeline[1].KeyBy; k == nil || k.Field != "page" || k.Parallelism != 6 {
		t.Fatalf("key_by %+v", k)
	}
	if cfg.Job.Parallelism != 4 || cfg.Job.MaxParallelism != 128 {
		t.Fatalf("parallelism %d, max %d: want 4 and the default 128", cfg.Job.Parallelism, cfg.Job.MaxParallelism)
	}
	setEnv(t, map[string]string{"WEIR_JOB_PARALLELISM": "2", "WEIR_JOB_MAX_PARALLELISM": "16"})
	cfg, err = config.Load(config.Source{YAML: []byte(viewsJob)})
	if err != nil || cfg.Job.Parallelism != 2 || cfg.Job.MaxParallelism != 16 {
		t.Fatalf("from the environment: %v, %+v", err, cfg.Job)
	}

	for _, c := range []struct{ from, to, want string }{
		{"field: page, parallelism: 6", "parallelism: 6", "yaml:7:15: job.pipeline[1].key_by.field: required: the top-level JSON field to key by"},
		{"parallelism: 6}", "parallelism: -1}", "yaml:7:42: job.pipeline[1].key_by.parallelism: -1: must be at least 1 (or left out for job.parallelism)"},
		{"parallelism: 6}", "parallelism: 200}", "yaml:7:42: job.pipeline[1].key_by.parallelism: 200: must not exceed job.max_parallelism (128): each task of the stage reads at least one key group"},
		{"parallelism: 4", "parallelism: -2", "yaml:4:16: job.parallelism: -2: must be 0 (the input partition count) or more"},
		{"parallelism: 4", "parallelism: 4\n  max_parallelism: 2", "yaml:4:16: job.parallelism: 4: must not exceed job.max_parallelism (2): each task of a stage after a key_by reads at least one key group"},
		{"parallelism: 4", "max_parallelism: 0", "yaml:4:20: job.max_parallelism: 0: must be between 1 and 32768"},
		{"parallelism: 4", "max_parallelism: 40000", "yaml:4:20: job.max_parallelism: 40000: must be between 1 and 32768"},
		{"key_by: {field: page, parallelism: 6}", "key_by: {field: page}\n      aggregate: {op: count}", "yaml:7:7: job.pipeline[1]: must have exactly one of source, filter, map, flat_map, key_by, window, aggregate, dedupe, join, route, sink (has key_by and aggregate)"},
	} {
		_, err := config.Load(config.Source{YAML: []byte(strings.Replace(viewsJob, c.from, c.to, 1)), NoEnv: true})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant %s", c.to, err, c.want)
		}
	}
}

// TestGoJob: a configuration for a job defined in Go (cli.Main) has no
// pipeline; job.name defaults to the Go job's name, and a different name or
// a pipeline is refused at its line, by key path.
func TestGoJob(t *testing.T) {
	const settings = "kafka: {brokers: [127.0.0.1:9092]}\n"
	cfg, err := config.Load(config.Source{YAML: []byte(settings), NoEnv: true, GoJob: "views-per-page-go"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Job.Name != "views-per-page-go" || cfg.Kafka.TopicPrefix != "_weir.views-per-page-go." {
		t.Fatalf("job %+v, topic prefix %q: want the Go job's name and the prefix derived from it", cfg.Job, cfg.Kafka.TopicPrefix)
	}
	if _, err := config.Load(config.Source{YAML: []byte("job: {name: views-per-page-go}\n" + settings), NoEnv: true, GoJob: "views-per-page-go"}); err != nil {
		t.Fatalf("the Go job's own name refused: %v", err)
	}

	_, err = config.Load(config.Source{YAML: []byte("job: {name: other}\n" + settings), NoEnv: true, GoJob: "views-per-page-go"})
	if want := `yaml:1:13: job.name: "other", but this program runs the job "views-per-page-go" defined in Go`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("want %q, got %v", want, err)
	}
	_, err = config.Load(config.Source{YAML: []byte(clicksJob), NoEnv: true, GoJob: "clicks-per-user"})
	if want := `yaml:5:5: job.pipeline: must be empty: this program runs the job "clicks-per-user" defined in Go`; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("want %q, got %v", want, err)
	}
	if ps := unjoin(err); len(ps) != 1 {
		t.Fatalf("want the pipeline's problem alone, not its steps' too: %v", err)
	}
}

// TestEnvAndFlagLayers pins how the environment and the flags (resolved by
// viper) sit over the YAML: an empty variable sets the empty string, and a
// flag the user gave hides its variable, even a bad one.
func TestEnvAndFlagLayers(t *testing.T) {
	setEnv(t, map[string]string{
		"WEIR_KAFKA_CLIENT_ID":           "",
		"WEIR_CHECKPOINT_MAX_CONCURRENT": "two", // hidden by the flag
	})
	flags := pflag.NewFlagSet("t", pflag.ContinueOnError)
	for _, k := range config.Keys() {
		flags.String(k, "", "")
	}
	if err := flags.Parse([]string{"--checkpoint.max_concurrent=3"}); err != nil {
		t.Fatal(err)
	}
	y := strings.Replace(clicksJob, "  brokers: [127.0.0.1:9092]\n", "  brokers: [127.0.0.1:9092]\n  client_id: from-yaml\n", 1)
	cfg, err := config.Load(config.Source{YAML: []byte(y), Flags: flags})
	if err != nil {
		t.Fatal(err)
	}
	// The empty variable replaced the YAML's value (and the derived default
	// then filled it).
	if got := cfg.Origin("kafka.client_id"); got != "environment variable WEIR_KAFKA_CLIENT_ID" || cfg.Kafka.ClientID == "from-yaml" {
		t.Errorf("client_id %q from %q, want the empty variable's", cfg.Kafka.ClientID, got)
	}
	if cfg.Checkpoint.MaxConcurrent != 3 {
		t.Errorf("max_concurrent %d, want the flag's 3", cfg.Checkpoint.MaxConcurrent)
	}
	if got := cfg.Origin("checkpoint.max_concurrent"); got != "flag --checkpoint.max_concurrent" {
		t.Errorf("origin %q", got)
	}
	cfg, err = config.Load(config.Source{YAML: []byte(y), NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.ClientID != "from-yaml" || cfg.Checkpoint.MaxConcurrent == 3 {
		t.Errorf("NoEnv: client_id %q, max_concurrent %d", cfg.Kafka.ClientID, cfg.Checkpoint.MaxConcurrent)
	}
}

// TestMetadataMaxAge: kafka.metadata_max_age defaults to 30s (the
// coordinator's reading of the input's partition count, issue 31), and a
// value outside [100ms, 1h] is a problem named by its key path.
func TestMetadataMaxAge(t *testing.T) {
	cfg, err := config.Load(config.Source{YAML: []byte(clicksJob), NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.MetadataMaxAge != 30*time.Second {
		t.Errorf("default kafka.metadata_max_age %v, want 30s", cfg.Kafka.MetadataMaxAge)
	}
	for _, v := range []string{"10ms", "2h"} {
		yaml := strings.Replace(clicksJob, "  brokers: [127.0.0.1:9092]\n", "  brokers: [127.0.0.1:9092]\n  metadata_max_age: "+v+"\n", 1)
		_, err := config.Load(config.Source{YAML: []byte(yaml), NoEnv: true})
		if err == nil || !strings.Contains(err.Error(), "kafka.metadata_max_age") || !strings.Contains(err.Error(), "between 100ms and 1h") {
			t.Errorf("metadata_max_age %s: %v; want a problem naming kafka.metadata_max_age and its bounds", v, err)
		}
	}
}

// TestYAMLSyntaxErrorInFlowCollection: a YAML syntax error inside a flow
// mapping or sequence ({…}, […]) is reported at the line and column of the
// token that breaks it (yaml.v3 gives only the line where the collection
// starts, counted from 0), with what usually causes it: an unquoted
// expression with a flow indicator.
func TestYAMLSyntaxErrorInFlowCollection(t *testing.T) {
	for _, tc := range []struct{ yaml, at string }{
		{"job:\n  name: v\n  pipeline:\n    - source: {topics: [orders]}\n    - map: {value: {tier: value.customer?.tier}}\n", ":5:41: "},
		{"job:\n  name: v\n  pipeline:\n    - map: {value: {tier: \"value.a?.b\", x: value.a b: 1}}\n", ":4:53: "},
		{"job:\n  name: v\n  pipeline: [\n   {source: {topics: [orders]}},\n   {map: {value: {tier: 'it''s', t: value.c?.t}}}]\n", ":5:44: "},
		{"job:\n  name: v\n  pipeline:\n    - source: {topics: [orders}\n", ":4:31: "},
	} {
		path := filepath.Join(t.TempDir(), "job.yaml")
		if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := config.Load(config.Source{File: path, NoEnv: true})
		if err == nil || !strings.HasPrefix(err.Error(), path+tc.at+"YAML syntax: did not find expected ',' or ") ||
			!strings.Contains(err.Error(), "must be quoted") {
			t.Errorf("%q: %v, want a YAML syntax error at %s", tc.yaml, err, tc.at)
		}
	}
}
