package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/expression"
	"github.com/weir-stream/weir/format"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/stream"
)

// devExample is an example job `processor dev` runs, on the sample clicks
// ({"user": ..., "page": ..., "ts": ...}, keyed by user) of the clicks topic.
type devExample struct {
	name   string // the job's name, the --example flag's value
	what   string // what it does, for the banner
	output string // its output topic
	// topics are the other topics it writes (a window's late_topic),
	// created with the input and the output.
	topics []string
	// pipeline is the job section, as in examples/<name>.yaml (a test
	// keeps them the same).
	pipeline string
	// file is the job file of --job (then pipeline is empty), and
	// sources its source topics (devJob); the examples read clicks.
	file    string
	sources []string
}

// inputs returns the topics the job reads.
func (e devExample) inputs() []string {
	if e.file != "" {
		return e.sources
	}
	return []string{"clicks"}
}

// devJob describes the job of a --job file: its source topics, its output
// (the last sink of job.pipeline, else the first sink) and its other sinks.
func devJob(cfg *config.Config) (devExample, error) {
	j, err := pipeline.Compile(cfg.Job)
	if err != nil {
		return devExample{}, cfg.Annotate(err)
	}
	ex := devExample{name: cfg.Job.Name, what: "the YAML job of the file"}
	for _, s := range j.Sources() {
		ex.sources = append(ex.sources, s.Topics...)
	}
	if steps := cfg.Job.Pipeline; len(steps) > 0 && steps[len(steps)-1].Sink != nil {
		ex.output = steps[len(steps)-1].Sink.Topic
	}
	for _, k := range j.Sinks() {
		if ex.output == "" {
			ex.output = k.Topic
		}
		if k.Topic != ex.output && !slices.Contains(ex.topics, k.Topic) {
			ex.topics = append(ex.topics, k.Topic)
		}
	}
	if len(ex.sources) == 0 || ex.output == "" {
		return devExample{}, errors.New("the job has no source or no sink")
	}
	return ex, nil
}

// devInput is one --input: a file of records for one of the job's source
// topics.
type devInput struct{ topic, file string }

// parseDevInputs reads the --input flags: topic=FILE, or FILE for the
// first of sources (the job's source topics, tables included).
func parseDevInputs(flags []string, sources []string) ([]devInput, error) {
	var out []devInput
	for _, f := range flags {
		in := devInput{topic: sources[0], file: f}
		if t, file, ok := strings.Cut(f, "="); ok && slices.Contains(sources, t) {
			in = devInput{topic: t, file: file}
		} else if ok && !fileExists(f) {
			return nil, fmt.Errorf("--input %s: %s is not a topic the job reads (%s)", f, t, strings.Join(sources, ", "))
		}
		if slices.ContainsFunc(out, func(o devInput) bool { return o.topic == in.topic }) {
			return nil, fmt.Errorf("--input %s: a second file for %s", f, in.topic)
		}
		out = append(out, in)
	}
	return out, nil
}

// fileExists reports whether name is a file (an --input FILE whose name
// holds '=').
func fileExists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

// devWriteInput writes the records of in.file (one a line: a value, or
// key<TAB>value; empty lines skipped) to in.topic, and waits until Kafka
// has them all.
func devWriteInput(ctx context.Context, brokers []string, in devInput) error {
	f, err := os.Open(in.file)
	if err != nil {
		return fmt.Errorf("--input: %w", err)
	}
	defer f.Close()
	recs, err := readRecords(f, in.file, func(b []byte) ([]byte, error) { return b, nil })
	if err != nil {
		return fmt.Errorf("--input: %w", err)
	}
	if _, err := produceRecords(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, in.topic, recs); err != nil {
		return fmt.Errorf("--input: %w", err)
	}
	return nil
}

// devExamples returns the examples, the default first.
func devExamples() []devExample {
	return []devExample{{
		name:   "clicks-per-user",
		what:   "clicks → count per user → clicks-per-user",
		output: "clicks-per-user",
		pipeline: `
job:
  name: clicks-per-user
  pipeline:
    - source: {topics: [clicks], format: json, start: earliest}
    - aggregate: {op: count}
    - sink: {topic: clicks-per-user, format: json, delivery: exactly-once}
`,
	}, {
		name:   "views-per-page",
		what:   "clicks (keyed by user) → key_by page → count per page → views-per-page (two stages, joined by a shuffle topic)",
		output: "views-per-page",
		pipeline: `
job:
  name: views-per-page
  pipeline:
    - source: {topics: [clicks], format: json}
    - key_by: {field: page}
    - aggregate: {op: count}
    - sink: {topic: views-per-page, format: json, delivery: exactly-once}
`,
	}, {
		name:   "views-per-page-per-minute",
		what:   "clicks → key_by page → tumbling one-minute windows in event time (the clicks' ts) → count per page and minute, once the watermark passes the minute's end + 10s → page-views-per-minute; later clicks → clicks-late",
		output: "page-views-per-minute",
		topics: []string{"clicks-late"},
		pipeline: `
job:
  name: views-per-page-per-minute
  pipeline:
    - source: {topics: [clicks], format: json, timestamp: {field: ts, format: unix_ms}, watermark: {max_out_of_orderness: 5s, idle_timeout: 30s}}
    - key_by: {field: page}
    - window: {type: tumbling, size: 1m, allowed_lateness: 10s, late_topic: clicks-late}
    - aggregate: {op: count}
    - sink: {topic: page-views-per-minute, format: json, delivery: exactly-once}
`,
	}}
}

// devExampleNames returns the examples' names, "a, b or c".
func devExampleNames() string {
	var names []string
	for _, e := range devExamples() {
		names = append(names, e.name)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// devExampleNamed returns the example named name.
func devExampleNamed(name string) (devExample, error) {
	var names []string
	for _, e := range devExamples() {
		if e.name == name {
			return e, nil
		}
		names = append(names, e.name)
	}
	return devExample{}, fmt.Errorf("--example %s: no such example (there are %s)", name, strings.Join(names, ", "))
}

// devSettings are the settings of every example job; the blanks are the
// embedded broker, the state directory, the checkpoint storage and the HTTP
// address.
const devSettings = `
kafka: {brokers: [%s]}
checkpoint: {interval: 2s, storage: %q}
state: {dir: %q}
http: {address: %q}
log: {level: warn}
process: {replica_id: dev, grace_period: 10s}
`

func newDevCmd(job *stream.Job) *cobra.Command {
	var (
		dir        string
		rate       int
		users      int
		partitions int32
		httpAddr   string
		quiet      bool
		example    string
		jobFile    string
		inputs     []string
		genValue   string
		genKey     string
		inFormat   string
		registry   string
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run an example job on an embedded Kafka and a local object store",
		Long: `dev runs everything in one process, for trying Weir out: an in-process Kafka
(franz-go's kfake) persisted under --dir, a file:// object store under --dir,
an example job, and a generator of sample clicks keyed by user. The
example (--example) is clicks-per-user (count clicks per user, exactly
once; examples/clicks-per-user.yaml), views-per-page (count views per
page: a key_by page re-keys the clicks, which makes two stages joined by a
shuffle topic; examples/views-per-page.yaml) or views-per-page-per-minute
(count views per page in one-minute event-time windows, each result once
after the minute's end plus 15s; examples/views-per-page-per-minute.yaml). It prints the job's output as it is committed —
each line is one output record, visible to read_committed consumers — and
serves metrics on --http.

With --format avro or --format protobuf and --registry URL (a schema
registry's Confluent-compatible API), the sample clicks are written in that
format, in the Confluent wire format, under a schema dev registers as
weir-dev-clicks-<format>, and the example's source reads them with that
format. No registry can be embedded: without --registry, dev says what to
start.

Stop it with Ctrl-C: it says which checkpoint completed last and how many
output records are committed. Start it again: it resumes from that
checkpoint, no click is counted twice, and it prints only the output
committed after it started. Output it printed as committed survives a
kill -9: after an unclean stop, dev aborts the transactions the embedded
Kafka left open, as Kafka does after their timeout (docs/dev.md).

With --job FILE, dev runs the YAML job of FILE instead (its job section;
the embedded Kafka and the local stores replace its other settings): it
creates the job's topics, writes the records of each --input TOPIC=FILE
to TOPIC, a topic the job reads (one record a line: a JSON value, or
key<TAB>value; --input FILE: the first source topic), or without --input
generates sample records into the first source topic, and prints the
committed output of every sink as "<time>  <topic>  [<key>  ]<value>".
The sample records are the clicks, or, with --generate EXPR, records
shaped for the job: EXPR is an expression of the YAML language
(docs/yaml.md) evaluated for each sample, with offset the sample's number
(0, 1, 2, ...) and timestamp the time it is generated, and its result,
written as JSON, is the record's value; --generate-key EXPR computes the
key, with value the generated value. For example:

  processor dev --job orders.yaml --rate 50 \
    --generate '{"id": "o-" + string(offset), "amount": offset * 37 % 500, "country": ["DE", "FR", "US"][offset % 3]}' \
    --generate-key 'value.id'`,
		Args: cobra.NoArgs,
		// A program built around a Go job lists no dev: dev runs Weir's
		// examples or a YAML job, not the program's job.
		Hidden: job != nil,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if job != nil {
				return fmt.Errorf("dev runs Weir's example job, not the job %s defined in this program: run it with `%s run -c FILE`", job.Name(), cmd.Root().Name())
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			var ex devExample
			switch {
			case jobFile != "" && cmd.Flags().Changed("example"):
				return errors.New("--job and --example: run one job")
			case jobFile == "" && len(inputs) > 0:
				return errors.New("--input needs --job: the examples read the sample clicks")
			case jobFile == "" && (genValue != "" || genKey != ""):
				return errors.New("--generate needs --job: the examples read the sample clicks")
			case len(inputs) > 0 && (genValue != "" || genKey != ""):
				return errors.New("--input and --generate: give the job one input")
			case genKey != "" && genValue == "":
				return errors.New("--generate-key needs --generate")
			case inFormat != config.FormatJSON && jobFile != "":
				return errors.New("--format and --job: the job file's source says its format")
			case !slices.Contains(devFormats, inFormat):
				return fmt.Errorf("--format %s: want %s", inFormat, strings.Join(devFormats, ", "))
			case inFormat != config.FormatJSON && registry == "":
				return fmt.Errorf(devNoRegistry, inFormat, inFormat)
			case inFormat == config.FormatJSON && registry != "":
				return errors.New("--registry needs --format avro or protobuf")
			case jobFile != "":
				ex = devExample{file: jobFile}
			default:
				var err error
				if ex, err = devExampleNamed(example); err != nil {
					return err
				}
			}
			var gen *devGenerator
			if genValue != "" {
				var err error
				if gen, err = newDevGenerator(genValue, genKey); err != nil {
					return err
				}
			}
			return runDev(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), devOptions{
				program: os.Args[0], example: ex, dir: dir, rate: rate, users: users, partitions: partitions, http: httpAddr, quiet: quiet, inputs: inputs, generate: gen,
				format:           config.Format{Type: inFormat, Registry: registry},
				allowNonRestored: cmd.Flags().Lookup(allowNonRestoredFlag).Value.String() == "true",
			})
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".weir-dev", "where the embedded Kafka, the state and the checkpoints live")
	addAllowNonRestoredFlag(cmd.Flags())
	cmd.Flags().IntVar(&rate, "rate", 20, "sample clicks generated per second (0: none)")
	cmd.Flags().IntVar(&users, "users", 10, "distinct users in the sample clicks")
	cmd.Flags().Int32Var(&partitions, "partitions", 4, "partitions of the input topic (tasks of the job), on first start")
	cmd.Flags().StringVar(&httpAddr, "http", "127.0.0.1:9464", "address of /metrics, /healthz, /livez, /readyz")
	cmd.Flags().BoolVar(&quiet, "quiet", false, "do not print the output records")
	cmd.Flags().StringVar(&example, "example", devExamples()[0].name, "the example job: "+devExampleNames())
	cmd.Flags().StringVar(&jobFile, "job", "", "run the YAML job of this file instead of an example")
	cmd.Flags().StringArrayVar(&inputs, "input", nil, "with --job: write the records of a file (one a line: a JSON value, or key<TAB>value) to a topic the job reads, as TOPIC=FILE, or FILE for its first source topic, instead of sample records (repeatable: one file per topic)")
	cmd.Flags().StringVar(&genValue, "generate", "", "with --job: generate sample records whose value is this expression (offset: the sample's number, timestamp: now) instead of clicks, --rate a second")
	cmd.Flags().StringVar(&inFormat, "format", config.FormatJSON, "the sample clicks' format: json, or avro or protobuf (in the Confluent wire format, with --registry)")
	cmd.Flags().StringVar(&registry, "registry", "", "with --format avro or protobuf: the URL of a schema registry's Confluent-compatible API")
	cmd.Flags().StringVar(&genKey, "generate-key", "", "with --generate: the sample records' key, an expression over the generated value")
	return cmd
}

type devOptions struct {
	program    string // the program as it was started (os.Args[0]), to say how to start it again
	example    devExample
	dir        string
	rate       int
	users      int
	partitions int32
	http       string
	quiet      bool
	inputs     []string      // the --input flags: files of input records, with example.file
	generate   *devGenerator // sample records for example.file, or nil: clicks
	format     config.Format // the sample clicks' format and registry
	// allowNonRestored is --allow-non-restored-state.
	allowNonRestored bool
}

// devFormats are the formats of the sample clicks (--format).
var devFormats = []string{config.FormatJSON, config.FormatAvro, config.FormatProtobuf}

// devNoRegistry is the error of --format avro or protobuf without
// --registry: a schema registry is a server of its own (Confluent's,
// Karapace and Apicurio are Java or Python services), which this binary
// cannot embed, so the user has to start one.
const devNoRegistry = `--format %s needs a schema registry (--registry URL), and dev cannot embed one: the registries are servers of their own. Start one, then run again with --registry:
  in a Weir checkout: bash scripts/registry.sh up   (Apicurio Registry 3.3.3 from Maven Central; needs Java 21 or later)
      then: processor dev --format %s --registry http://127.0.0.1:19120/apis/ccompat/v7
  with Docker: docker run -p 8081:8080 apicurio/apicurio-registry:3.3.3
      then: --registry http://127.0.0.1:8081/apis/ccompat/v7
  (Confluent Schema Registry or Karapace: --registry http://host:8081)`

// The sample clicks' schemas (--format).
const (
	devClickAvro = `{"type":"record","name":"Click","namespace":"weir.dev","fields":[
  {"name":"user","type":"string"},{"name":"page","type":"string"},{"name":"ts","type":"long"}]}`
	devClickProto = `syntax = "proto3";
package weir.dev;
message Click { string user = 1; string page = 2; int64 ts = 3; }`
)

// devClickEncoder returns how the sample clicks are written in f: as JSON,
// or as Avro or Protobuf under the schema it registers as
// weir-dev-clicks-<format>: not <topic>-value, which in a registry that
// real jobs share may be a real topic's subject (and of another format).
func devClickEncoder(ctx context.Context, f config.Format, topic string) (func(map[string]any) ([]byte, error), string, error) {
	if f.Type == config.FormatJSON {
		return func(v map[string]any) ([]byte, error) { return json.Marshal(v) }, "", nil
	}
	reg, err := format.NewRegistry(format.RegistryConfig{URL: f.Registry, MaxBackoff: time.Second})
	if err != nil {
		return nil, "", err
	}
	var enc interface {
		Prepare(context.Context) error
		Append([]byte, any) ([]byte, error)
		SchemaID() int
	}
	subject := "weir-dev-" + topic + "-" + f.Type
	if f.Type == config.FormatAvro {
		enc, err = format.NewAvroEncoder(reg, format.AvroEncoderConfig{Subject: subject}, devClickAvro)
	} else {
		enc, err = format.NewProtoEncoder(reg, format.ProtoEncoderConfig{Subject: subject}, devClickProto)
	}
	if err != nil {
		return nil, "", err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := enc.Prepare(pctx); err != nil {
		return nil, "", fmt.Errorf("--registry %s: register the clicks' schema: %w", f.Registry, err)
	}
	what := fmt.Sprintf("%s, schema %d (subject %s) at %s", f.Type, enc.SchemaID(), subject, f.Registry)
	return func(v map[string]any) ([]byte, error) { return enc.Append(nil, v) }, what, nil
}

func runDev(ctx context.Context, out, logOut io.Writer, o devOptions) error {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	kafka, err := startDevKafka(ctx, dir)
	if err != nil {
		return err
	}
	defer func() {
		if err := kafka.close(); err != nil {
			fmt.Fprintf(logOut, "weir dev: stop the embedded Kafka: %v\n", err)
		}
	}()
	brokers := kafka.brokers

	settings := fmt.Sprintf(devSettings, brokers[0], "file://"+filepath.ToSlash(filepath.Join(dir, "checkpoints")),
		filepath.Join(dir, "state"), o.http)
	var cfg *config.Config
	if o.example.file != "" {
		// The file's job, and the dev settings over its others.
		if cfg, err = config.Load(config.Source{File: o.example.file, YAML: []byte(settings), NoEnv: true}); err != nil {
			return err
		}
		file := o.example.file
		if o.example, err = devJob(cfg); err != nil {
			return err
		}
		o.example.file = file
	} else if cfg, err = config.Load(config.Source{YAML: []byte(o.example.pipeline + settings), NoEnv: true}); err != nil {
		return fmt.Errorf("embedded job: %w", err)
	}

	inputs, err := parseDevInputs(o.inputs, o.example.inputs())
	if err != nil {
		return err
	}
	encode := func(v map[string]any) ([]byte, error) { return json.Marshal(v) }
	if o.format.UsesRegistry() {
		// The example reads the clicks in their format; its steps and its
		// output are the same.
		cfg.Job.Pipeline[0].Source.Format = o.format
		var what string
		if encode, what, err = devClickEncoder(ctx, o.format, o.example.inputs()[0]); err != nil {
			return err
		}
		o.example.what = strings.Replace(o.example.what, "clicks", "clicks ("+o.format.Type+")", 1)
		defer fmt.Fprintf(out, "weir dev: the clicks were %s\n", what)
	}
	if err := devTopics(ctx, brokers, o.partitions, o.example.inputs(), append([]string{o.example.output}, o.example.topics...)...); err != nil {
		return err
	}
	// The printer starts where the output is committed now, before the
	// job runs: it prints what this run commits (and what it commits of
	// the last run's checkpoint), not what earlier runs printed.
	printFrom, err := devCommittedEnds(ctx, brokers, append([]string{o.example.output}, o.example.topics...))
	if err != nil {
		return fmt.Errorf("read the output's committed end: %w", err)
	}
	fmt.Fprintf(out, "weir dev: Kafka (embedded) at %s, state and checkpoints in %s\n", brokers[0], dir)
	if kafka.recovered > 0 {
		fmt.Fprintf(out, "weir dev: the last run did not stop cleanly (killed?): its %d open transactions are aborted, as Kafka aborts them after their timeout; the job resumes from its last completed checkpoint\n", kafka.recovered)
	}
	fmt.Fprintf(out, "weir dev: job %s: %s (exactly once, checkpoint every %v)\n", o.example.name, o.example.what, cfg.Checkpoint.Interval)
	if o.http != "" {
		fmt.Fprintf(out, "weir dev: metrics on http://%s/metrics; Ctrl-C stops, running again resumes\n", o.http)
	}
	fmt.Fprintf(out, "weir dev: while dev runs, other commands reach its Kafka with --kafka.brokers %s: `%s resume -c %s --kafka.brokers %s` after the job failed\n",
		brokers[0], o.program, devJobFile(o.example), brokers[0])

	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	switch {
	case len(inputs) > 0:
		for _, in := range inputs {
			if err := devWriteInput(ctx, brokers, in); err != nil {
				return err
			}
		}
	case o.generate != nil && o.rate > 0:
		go o.generate.run(gctx, logOut, brokers, o.example.inputs()[0], o.rate)
	case o.rate > 0:
		go devGenerate(gctx, logOut, brokers, o.example.inputs()[0], o.rate, o.users, encode)
	}
	printed := make(chan struct{})
	if o.quiet {
		close(printed)
	} else {
		go func() {
			defer close(printed)
			devPrint(gctx, out, brokers, printFrom, o.example.file != "")
		}()
	}
	cfg.Process.AllowNonRestoredState = o.allowNonRestored
	if err := serve(ctx, cfg, nil, logOut, nil); err != nil {
		if errors.Is(err, sink.ErrTxnAborted) && kafka.recovered > 0 {
			// What dev does not promise (docs/dev.md), said as such.
			return fmt.Errorf("the last run was killed after a checkpoint completed and before its output was committed, "+
				"and the embedded Kafka does not keep such transactions across a kill: that checkpoint's output is lost. "+
				"Start over with a fresh --dir (or remove %s). The job's own words: %w", dir, err)
		}
		return err
	}
	cancel()
	<-printed
	devSummary(out, cfg, brokers, o)
	return nil
}

// devSummary says, after Ctrl-C, what is committed and how to resume: the
// newest completed checkpoint (from the commit topic) and the records
// read_committed consumers see in the output topic.
func devSummary(out io.Writer, cfg *config.Config, brokers []string, o devOptions) {
	ex := o.example
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	hist, err := controltopic.ReadHistory(ctx, opts, controltopic.NewTopics(cfg.Kafka.TopicPrefix), control.TopicCommit)
	if err != nil {
		fmt.Fprintf(out, "weir dev: stopped; could not read the checkpoints: %v\n", err)
		return
	}
	var last ckpt.ID
	for _, rec := range hist.Records {
		if c, ok := rec.Msg.(control.Complete); ok {
			last = max(last, c.ID)
		}
	}
	again := devAgain(o)
	if last == 0 {
		fmt.Fprintf(out, "weir dev: stopped before the first checkpoint completed: nothing is committed yet.\n")
		fmt.Fprintf(out, "weir dev: run `%s` again to start over from the records already in %s.\n", again, strings.Join(ex.inputs(), ", "))
		return
	}
	records := "?"
	if n, err := devCommittedRecords(ctx, brokers, ex.output); err == nil {
		records = strconv.FormatInt(n, 10)
	}
	fmt.Fprintf(out, "weir dev: stopped. Last completed checkpoint: %d; %s holds %s committed records (what read_committed consumers see). Output after checkpoint %d was not committed and will be produced again.\n",
		last, ex.output, records, last)
	fmt.Fprintf(out, "weir dev: run `%s` again to resume from checkpoint %d: no input record counts twice.\n", again, last)
}

// devAgain is the command that starts this dev again on the same data:
// the program as it was started, its --dir and job, and not its --input
// (which would write the records again).
func devAgain(o devOptions) string {
	again := o.program + " dev"
	if o.dir != ".weir-dev" {
		again += " --dir " + o.dir
	}
	switch {
	case o.example.file != "":
		again += " --job " + o.example.file
	case o.example.name != devExamples()[0].name:
		again += " --example " + o.example.name
	}
	return again
}

// devJobFile is the job file of ex: its --job file, or the example's file
// in a Weir checkout.
func devJobFile(ex devExample) string {
	if ex.file != "" {
		return ex.file
	}
	return "examples/" + ex.name + ".yaml"
}

// devCommittedRecords counts the records of topic that read_committed
// consumers see: it reads up to each partition's last stable offset,
// keeping transaction markers to know where it is.
func devCommittedRecords(ctx context.Context, brokers []string, topic string) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	remaining := map[int32]int64{} // partition -> last stable offset not yet reached
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})
	if len(remaining) == 0 {
		return 0, ends.Error()
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	var n int64
	for len(remaining) > 0 {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return n, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				n++
			}
			if r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
	}
	return n, nil
}

// devTopics creates the input topics and the outputs, unless they exist.
func devTopics(ctx context.Context, brokers []string, partitions int32, inputs []string, outputs ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, t := range append(slices.Clone(inputs), outputs...) {
		resp, err := adm.CreateTopic(ctx, partitions, 1, nil, t)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	return nil
}

// devGenerate produces sample clicks to topic, keyed by user, written by
// encode.
func devGenerate(ctx context.Context, logOut io.Writer, brokers []string, topic string, rate, users int, encode func(map[string]any) ([]byte, error)) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		return
	}
	defer cl.Close()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	pages := []string{"/", "/pricing", "/docs", "/blog", "/signup"}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		user := fmt.Sprintf("user-%d", rand.IntN(users))
		v, err := encode(map[string]any{"user": user, "page": pages[rand.IntN(len(pages))], "ts": time.Now().UnixMilli()})
		if err != nil {
			fmt.Fprintf(logOut, "weir dev: a sample click: %v\n", err)
			return
		}
		cl.Produce(ctx, &kgo.Record{Key: []byte(user), Value: v}, nil)
	}
}

// devGenerator makes sample records from expressions (--generate,
// --generate-key): sample n's value is value evaluated with offset n and
// timestamp now, written as JSON; its key is key evaluated with the value.
type devGenerator struct {
	value, key *expression.Program
	ev         *expression.Evaluator
}

// newDevGenerator compiles the expressions and makes sample 0, so that an
// expression that fails on every record is an error before the job starts.
func newDevGenerator(value, key string) (*devGenerator, error) {
	g := &devGenerator{ev: expression.NewEvaluator()}
	var err error
	if g.value, err = expression.Compile(value, expression.Any); err != nil {
		return nil, fmt.Errorf("--generate %q: %w", value, err)
	}
	if key != "" {
		if g.key, err = expression.Compile(key, expression.Any); err != nil {
			return nil, fmt.Errorf("--generate-key %q: %w", key, err)
		}
	}
	if _, err := g.record(0, time.Now()); err != nil {
		return nil, err
	}
	return g, nil
}

// record makes sample n.
func (g *devGenerator) record(n int64, now time.Time) (*kgo.Record, error) {
	vars := expression.Vars{Offset: n, Timestamp: now}
	v, err := g.ev.Eval(g.value, &vars)
	if err != nil {
		return nil, fmt.Errorf("--generate, sample %d: %w", n, err)
	}
	r := &kgo.Record{Timestamp: now}
	if r.Value, err = pipeline.AppendJSON(nil, v, nil); err != nil {
		return nil, fmt.Errorf("--generate, sample %d: %w", n, err)
	}
	if g.key != nil {
		vars.Value = v
		if r.Key, err = g.ev.Key(g.key, &vars, nil); err != nil {
			return nil, fmt.Errorf("--generate-key, sample %d: %w", n, err)
		}
	}
	return r, nil
}

// run produces rate samples a second to topic until ctx ends or a sample
// fails (said on logOut).
func (g *devGenerator) run(ctx context.Context, logOut io.Writer, brokers []string, topic string, rate int) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		fmt.Fprintf(logOut, "weir dev: the sample generator: %v\n", err)
		return
	}
	defer cl.Close()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for n := int64(0); ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r, err := g.record(n, time.Now())
		if err != nil {
			fmt.Fprintf(logOut, "weir dev: sample generation stopped: %v\n", err)
			return
		}
		cl.Produce(ctx, r, nil)
	}
}

// devCommittedEnds returns, for each partition of topics, the offset up
// to which read_committed consumers see its records (its last stable
// offset): where the printer starts, so that each start of dev prints only
// the output committed after it.
func devCommittedEnds(ctx context.Context, brokers []string, topics []string) (map[string]map[int32]kgo.Offset, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	if err := ends.Error(); err != nil {
		return nil, err
	}
	from := map[string]map[int32]kgo.Offset{}
	ends.Each(func(o kadm.ListedOffset) {
		if from[o.Topic] == nil {
			from[o.Topic] = map[int32]kgo.Offset{}
		}
		from[o.Topic][o.Partition] = kgo.NewOffset().At(o.Offset)
	})
	return from, nil
}

// devPrint prints the records of the partitions of from, from its
// offsets on, as read_committed consumers see them: "<time>  <value>", or
// with withTopic "<time>  <topic>  [<key>  ]<value>".
func devPrint(ctx context.Context, out io.Writer, brokers []string, from map[string]map[int32]kgo.Offset, withTopic bool) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumePartitions(from),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachRecord(func(r *kgo.Record) {
			switch {
			case !withTopic:
				fmt.Fprintf(out, "%s  %s\n", r.Timestamp.Format("15:04:05"), r.Value)
			case len(r.Key) > 0:
				fmt.Fprintf(out, "%s  %s  %s  %s\n", r.Timestamp.Format("15:04:05"), r.Topic, r.Key, r.Value)
			default:
				fmt.Fprintf(out, "%s  %s  %s\n", r.Timestamp.Format("15:04:05"), r.Topic, r.Value)
			}
		})
	}
}
