// Command bench is Weir's product benchmark (issue 6, `make bench`): real
// `processor run` replicas, as separate processes, running the YAML count
// job on the real broker, exactly once, with a checkpoint every second. In
// one run it measures:
//
//  1. Throughput. N JSON records over K keys (uniform, seeded) are produced
//     once into an input topic (P partitions, keyed, franz-go's default
//     murmur2 partitioner), and then copied by
//     - the raw pipe, the baseline: in this process, per input partition one
//     franz-go consumer (read_committed, from the start) and one idempotent
//     producer writing each record to the same partition of an output
//     topic: the same shape as the job, whose task i has one source
//     consumer and one sink producer for partition i. It runs twice, before
//     and after the headline job (the machine's load drifts), and its
//     figure is over both passes;
//     - the count job (source json → aggregate count → sink json
//     exactly-once) with each replica count of -replicas (default 1 and 3):
//     a fresh job name and output topic each, over the same input.
//     Both clocks start before the first client or process is started and
//     stop when an independent read_committed consumer of the output topic
//     (started beforehand, in this process in both cases) has seen N
//     records, so the job's figure includes its start-up (process start,
//     group join, first generation) and the wait for its first and last
//     checkpoints; the broker is warmed up before (its internal topics for
//     groups and transactions created, as on any broker in use), so that
//     the first job does not pay for them. The sinks' weir_sink_records_written_total, scraped
//     every 100ms, splits it: start to first output written (start-up), and
//     first to N-th output written (processing; records/s also given as a
//     ratio to the raw pipe). The headline figures are those of the first
//     -replicas entry: on a machine with few cores one replica is the fair
//     comparison, one process with the same parallelism (P tasks, P clients
//     each way) and all the cores, as the raw pipe has; more replicas on
//     the same cores add processes, not CPU.
//  2. Checkpoint durations (p50, p99) of the headline job's run, per
//     checkpoint: the trigger time ("ts" of the trigger message on the job's
//     trigger topic) to the completion time (the timestamp of the complete
//     record on its commit topic), for the checkpoints triggered between
//     the job's start and its last output. Not the complete record's "ts":
//     the coordinator's clock advances only at its 100ms ticks, so that ts
//     and the weir_checkpoint_duration_seconds histogram (both printed as a
//     cross-check) come out up to 100ms short.
//  3. End-to-end latency (p50, p99), on the last -replicas job once it has
//     caught up: input is produced at a steady rate (-rate), each record's
//     timestamp set at its produce call; the job's output records carry
//     their input record's timestamp (stream and runtime/task pass it to
//     the sink), so the latency of an output record is the time a
//     read_committed consumer receives it minus its timestamp.
//  4. Recovery after kill -9, on the same job (at least two replicas, three
//     by default) with steady input: a replica that is not the coordinator
//     is killed with SIGKILL, and the recovery time is the time from the
//     kill until every output partition has new committed output (a
//     read_committed consumer positioned at the committed end offsets taken
//     just before the kill sees a record on it). Every partition, not the
//     total, because the tasks of surviving replicas may still commit an
//     already completed checkpoint right after the kill. The replica is
//     restarted and, as extra figures, the same is measured for a kill -9 of
//     the coordinator's replica (restarted too) and for a SIGTERM of a
//     replica (it leaves the group at once: no session timeout).
//
// With -two-stage the run measures a two-stage job instead (issue 12): the
// input is clicks, {"i":…,"user":…,"page":…}, keyed by user (-keys users,
// -pages pages, each drawn uniformly), and in one run
//
//   - the raw two-hop pipe, the baseline, before, between and after the
//     job's passes (its figure is over all its passes): in this process, per input
//     partition a read_committed consumer and an idempotent producer that
//     writes each record, keyed by its page, to an intermediate topic of
//     one partition per key group (128, as the job's shuffle topic), and
//     per second-stage task (as many as input partitions) a consumer of
//     its contiguous range of those partitions and an idempotent producer
//     to the output topic, keyed by page; both hops run at once;
//   - the YAML views-per-page job (source json → key_by page → aggregate
//     count → sink json exactly-once) with the first -replicas entry, as
//     the count job above, -passes times (passes.go), each a new job:
//     throughput from its start to the N-th output committed, over all
//     passes, and of the last pass the checkpoint durations (p50, p99)
//     and the alignment time (align_ms of the second-stage tasks' acks,
//     p50, p99);
//   - the end-to-end latency (p50, p99) on the last pass's job at the
//     steady -rate, whose goal for a two-stage job is p99 <= checkpoint
//     interval + 300ms;
//   - the verification of every pass's output: each page's counts exactly
//     1..n.
//
// The ratio's goal is 0.6 end to end. No recovery is measured.
//
// With -expr the run measures only the cost of one expression evaluation
// per record (expr.go), expr-lang against cel-go, without a broker; the
// default run starts with the same figures.
//
// With -formats the run measures only what a record format costs per
// record (formats.go): decode and encode, Avro and Protobuf against JSON,
// no broker.
//
// With -avro the run measures the count job on Avro input instead
// (avro.go): the same records in the Confluent wire format, registered in
// the schema registry of -registry (WEIR_REGISTRY_URL), read with source
// format avro, against the raw pipe on the same input: throughput, its
// ratio, checkpoint durations, and the verified output.
//
// With -rolling the run measures a rolling update instead (rolling.go,
// issue 31): the count job on the last -replicas entry of replicas under
// steady input, each replica replaced in turn with v2 of the job (a map
// step added) as the chart's StatefulSet does it; the time from the first
// replica's stop to v2's first committed output, and the verified output.
//
// With -window the run measures the tumbling-window job of issue 13
// instead (window.go): throughput against the raw two-hop pipe, checkpoint
// durations with one open window per input record (a million by default),
// the time to fire them all, and the delay from a window's end (event time,
// steady input at wall-clock time) to its result being visible to
// read_committed; every result is verified.
//
// With -grow-partitions N the run measures input partitions added to a
// running job instead (issue 31, growth.go): N partitions are added one at
// a time to the count job's input, each timed from its addition to its
// first committed output, at the default kafka.metadata_max_age; every
// count is verified.
//
// With -yaml the run measures the YAML language job of issue 14 instead
// (yaml.go): filter → map → key_by an expression → three aggregates at
// once → exactly-once sink, against the raw two-hop pipe: throughput, its
// ratio (goal 0.5), checkpoint durations, and its verified output.
//
// With -tls the run measures what TLS and SASL cost instead (issue 11):
// the raw pipe and the count job with the first -replicas entry, each over
// the broker's plaintext listener and over its SASL_SSL listener with
// SCRAM-SHA-512 (scripts/kafka.sh: -sasl-ssl-brokers and -tls-dir, from
// the environment that `kafka.sh env` sets). The raw pipe's clients use
// franz-go's own TLS (kgo.DialTLSConfig) and SCRAM (kgo.SASL); the job's
// file gets kafka.tls (the test CA) and kafka.sasl (user weir, the password
// in a file). Each runs twice per listener, in the order raw P, raw S,
// job P, job S, job S, job P, raw S, raw P, so that the machine's drifting
// load weighs on both alike, and each figure is over its two passes:
// throughput, the SASL_SSL/plaintext ratios, the job against the raw pipe
// over the same listener, and the CPU seconds per million records (µs per
// record) of the measured processes (the replicas; for the raw pipe this
// process, pipe and observer) and of the broker, over both listeners and
// as a ratio. The admin client, the input, the observers and the
// verification use the plaintext listener in both cases: the instruments
// stay the same. -tls measures no latency or recovery (run without it for
// those), and all four job outputs are verified.
//
// At the end the outputs of the headline job and of the last job are
// verified with a read_committed consumer: for every key the counts must be
// exactly 1..n, each once (exactly once) and in that order; the violations
// of each kind are result lines too, and any makes the run fail after every
// figure is printed.
//
// Standard output gets one line per figure,
//
//	result: <name> = <value> <unit>
//
// and standard error a human account (lines starting with #), with the CPU
// time of the processes involved. Topics, groups and job names are unique to
// the run; the topics and groups are deleted at the end (-keep keeps them
// and the work directory), and every process started is killed on exit. Run
// it with `make bench` (ARGS=-short for a quick check) or:
//
//	make build && eval $(bash scripts/kafka.sh env) && go run ./internal/tools/bench -processor bin/processor [-short] [-tls | -two-stage | -window | -yaml | -expr]
//
// The replicas start without the WEIR_* variables of this process's
// environment (`kafka.sh env` exports WEIR_KAFKA_BROKERS, which the
// product would take over the job file's brokers).
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/benchutil"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/internal/txnwatch"
	"github.com/weir-stream/weir/kafkaio/shuffle"
	"github.com/weir-stream/weir/keygroup"
)

type config struct {
	processor  string
	brokers    []string
	records    int
	keys       int
	partitions int
	// maxParallelism is job.max_parallelism of the jobs with a key_by (and
	// the partition count of the raw two-hop pipe's intermediate topic).
	maxParallelism int
	interval       time.Duration
	replicas       []int
	sessionTimeout time.Duration
	rate           int
	latencyFor     time.Duration
	skipRecovery   bool
	verify         bool
	keep           bool
	clean          bool
	logLevel       string
	pprof          bool
	profile        string
	timeout        time.Duration
	brokerPID      int
	// -busy-cost: the count job with http.busy_time on and off.
	busyCost bool
	// -tls: the broker's SASL_SSL listener and TLS directory
	// (scripts/kafka.sh).
	tls     bool
	saslSSL []string
	tlsDir  string
	// -two-stage: the views-per-page job (key_by page) against the raw
	// two-hop pipe, over clicks of -keys users on pages pages.
	twoStage bool
	pages    int
	// -window: the tumbling-window job (window.go): win is its windows,
	// latWin the latency job's; holdCheckpoints the checkpoints measured
	// with every window open.
	window          bool
	win, latWin     windowSpec
	holdCheckpoints int
	// -yaml: the YAML language job of issue 14 (yaml.go) against the raw
	// two-hop pipe, over clicks with amounts.
	yaml bool
	// passes is how many times -two-stage and -yaml run their job, each a
	// new job on the same input, between passes of the raw two-hop pipe
	// (passes.go).
	passes int
	// -avro: the count job on Avro input (avro.go), against the raw pipe
	// on the same input; registry is the schema registry's URL.
	avro     bool
	registry string
	// -rolling: a rolling update of the count job to v2 (rolling.go).
	rolling bool
	// -api: the REST API's latency under the count job's full load
	// (api.go), a request every apiEvery.
	api      bool
	apiEvery time.Duration
	// -grow-partitions: partitions added one at a time to the running
	// count job's input (growth.go).
	growRounds int
}

func main() {
	var c config
	var brokers, replicas, saslSSL string
	formatsOnly := flag.Bool("formats", false, "measure only what a record format costs per record, Avro against JSON, decode and encode (formats.go; no broker needed)")
	exprOnly := flag.Bool("expr", false, "measure only the cost of one expression evaluation per record, expr-lang vs cel-go (expr.go; no broker needed); the default run includes it")
	short := flag.Bool("short", false, "quick check: 100,000 records over 10,000 keys, 10s of latency input (overrides -records, -keys, -latency-duration)")
	flag.StringVar(&c.processor, "processor", "bin/processor", "the processor binary (make build)")
	flag.StringVar(&brokers, "brokers", os.Getenv(kafkatest.EnvBrokers), "comma-separated seed brokers (env "+kafkatest.EnvBrokers+")")
	flag.IntVar(&c.records, "records", 1_000_000, "records of the throughput input")
	flag.IntVar(&c.keys, "keys", 100_000, "distinct keys of the input")
	flag.IntVar(&c.partitions, "partitions", 8, "partitions of every topic (tasks of the job)")
	flag.IntVar(&c.maxParallelism, "max-parallelism", keygroup.DefaultMaxParallelism, "job.max_parallelism (key groups: the shuffle topics' partition count) of the jobs with a key_by, and the partition count of the raw two-hop pipe's intermediate topic")
	flag.DurationVar(&c.interval, "interval", time.Second, "checkpoint.interval of the job")
	flag.StringVar(&replicas, "replicas", "1,3", "replica counts the count job's throughput is measured with, in order; the first gives the headline figures, the last (at least 2) runs the latency and recovery measurements")
	flag.DurationVar(&c.sessionTimeout, "session-timeout", 6*time.Second, "kafka.session_timeout of the job (the broker's minimum is 6s by default)")
	flag.IntVar(&c.rate, "rate", 2000, "records/s of the steady input during the latency and recovery measurements")
	flag.DurationVar(&c.latencyFor, "latency-duration", 20*time.Second, "how long steady input is produced for the latency measurement")
	flag.BoolVar(&c.skipRecovery, "skip-recovery", false, "skip the recovery measurements")
	flag.BoolVar(&c.verify, "verify", true, "verify the outputs (every key's counts exactly 1..n) at the end")
	flag.BoolVar(&c.keep, "keep", false, "keep the work directory (job files, replica logs, state, checkpoints) and the topics")
	flag.BoolVar(&c.clean, "clean", false, "first delete the topics that earlier runs left on the broker (weir-bench-*, _weir.weir-bench-*: -keep, or a killed run); without it the run only warns of them")
	flag.StringVar(&c.logLevel, "log-level", "info", "log.level of every replica (debug shows the start-up's steps with their times; with -keep the logs stay in the work directory)")
	flag.StringVar(&c.profile, "profile", "", "save Go profiles of every replica stopped with SIGTERM into this directory: <job>-<replica>.cpu.pprof (the whole run) and .alloc.pprof (processor run --cpu-profile, --alloc-profile); replicas the recovery measurement kills write none (make bench-profile)")
	flag.BoolVar(&c.pprof, "pprof", false, "serve Go's profiler on every replica's HTTP address (http.pprof), printed as each starts: curl -o cpu.prof http://ADDR/debug/pprof/profile?seconds=10")
	flag.DurationVar(&c.timeout, "timeout", 30*time.Minute, "give up after this long")
	flag.IntVar(&c.brokerPID, "broker-pid", 0, "broker process whose CPU time is reported (default: the pid file of scripts/kafka.sh, if found)")
	flag.BoolVar(&c.busyCost, "busy-cost", false, "measure what accounting busy, backpressured and idle time (http.busy_time) costs: the headline count job with it on and off, interleaved, 2 passes each (no latency or recovery measurements)")
	flag.BoolVar(&c.tls, "tls", false, "measure TLS: the raw pipe and the headline count job over plaintext and over SASL_SSL with SCRAM-SHA-512, interleaved (no latency or recovery measurements)")
	flag.StringVar(&saslSSL, "sasl-ssl-brokers", os.Getenv(kafkatest.EnvSASLSSL), "with -tls: comma-separated SASL_SSL listeners of the same broker (env "+kafkatest.EnvSASLSSL+")")
	flag.StringVar(&c.tlsDir, "tls-dir", os.Getenv(kafkatest.EnvTLSDir), "with -tls: the broker's TLS directory, holding ca.pem (env "+kafkatest.EnvTLSDir+")")
	flag.BoolVar(&c.twoStage, "two-stage", false, "measure a two-stage job: the YAML views-per-page job (clicks keyed by user, key_by page, count) with the first -replicas entry against a raw two-hop franz-go pipe through an intermediate topic; checkpoint durations, alignment, latency (no recovery)")
	flag.IntVar(&c.pages, "pages", 500, "with -two-stage: distinct pages of the clicks (the keys of the second stage); -keys is the number of users; with -window: pages of the throughput input, by default as many as -records (one open window per record)")
	flag.BoolVar(&c.window, "window", false, "measure the tumbling-window job of issue 13 (timestamp from the JSON field ts, key_by page, window, count) with the first -replicas entry against the raw two-hop pipe: throughput, checkpoint durations with every window open, the time to fire them, the delay from a window's end to its result (no recovery)")
	flag.DurationVar(&c.win.size, "window-size", time.Minute, "with -window: the window size of the throughput and hold jobs (all their input falls into one window)")
	flag.DurationVar(&c.win.lateness, "allowed-lateness", 10*time.Second, "with -window: allowed_lateness of the throughput and hold jobs")
	flag.DurationVar(&c.win.bound, "max-out-of-orderness", 5*time.Second, "with -window: watermark.max_out_of_orderness of every window job, and how far behind the input's event times are")
	flag.DurationVar(&c.win.idle, "idle-timeout", 30*time.Second, "with -window: watermark.idle_timeout of every window job")
	flag.DurationVar(&c.latWin.size, "latency-window-size", time.Second, "with -window: the window size of the latency job")
	flag.DurationVar(&c.latWin.lateness, "latency-lateness", 0, "with -window: allowed_lateness of the latency job")
	flag.IntVar(&c.holdCheckpoints, "hold-checkpoints", 10, "with -window: checkpoints measured with every window open")
	flag.BoolVar(&c.yaml, "yaml", false, "measure the YAML language job of issue 14 (filter, map, key_by expression, three aggregates at once, exactly-once sink) with the first -replicas entry against the raw two-hop pipe: throughput, checkpoint durations (no latency or recovery)")
	flag.IntVar(&c.passes, "passes", 3, "with -two-stage and -yaml: how many times the job runs, each a new job on the same input, between passes of the raw two-hop pipe (one more of them); throughput figures are over all passes, checkpoint, alignment and latency figures from the last")
	flag.BoolVar(&c.avro, "avro", false, "measure the count job on Avro input (the same records in the Confluent wire format, source format avro) against the raw pipe on that input: throughput, checkpoint durations (no latency or recovery); needs -registry")
	flag.IntVar(&c.growRounds, "grow-partitions", 0, "measure only input partitions added to a running count job (growth.go): this many are added one at a time, each timed from its addition to its first committed output (goal <= 35s at the default kafka.metadata_max_age), with steady input (-rate) to the others; every count verified")
	flag.StringVar(&c.registry, "registry", os.Getenv("WEIR_REGISTRY_URL"), "with -avro: the schema registry's Confluent-compatible API (env WEIR_REGISTRY_URL: eval $(bash scripts/registry.sh env))")
	flag.BoolVar(&c.api, "api", false, "measure the REST API's latency (issue 34): the count job with the first -replicas entry processes the preloaded input while every replica's /api/v1 endpoints are asked in turn, one request every -api-every; p50, p99 and max under that load, and the job's throughput (no latency or recovery)")
	flag.DurationVar(&c.apiEvery, "api-every", 20*time.Millisecond, "with -api: the pause between two API requests")
	flag.BoolVar(&c.rolling, "rolling", false, "measure a rolling update (issue 31): the count job on the last -replicas entry of replicas under steady input (-rate), each replica replaced in turn with v2 (a map step added) as a StatefulSet does; the time from the first replica's stop to v2's first committed output (no throughput, latency or recovery)")
	flag.Parse()
	if *exprOnly {
		runExpr()
		return
	}
	if *formatsOnly {
		if err := runFormats(); err != nil {
			fmt.Fprintln(os.Stderr, "bench -formats:", err)
			os.Exit(1)
		}
		return
	}
	if *short {
		c.records, c.keys, c.latencyFor = 100_000, 10_000, 10*time.Second
	}
	if c.window {
		pagesSet := false
		flag.Visit(func(f *flag.Flag) { pagesSet = pagesSet || f.Name == "pages" })
		if !pagesSet {
			c.pages = c.records
		}
		c.latWin.bound, c.latWin.idle = c.win.bound, c.win.idle
	}
	c.brokers = strings.Split(brokers, ",")
	var errs []error
	if brokers == "" {
		errs = append(errs, fmt.Errorf("brokers: none; set %s (eval $(bash scripts/kafka.sh env)) or -brokers", kafkatest.EnvBrokers))
	}
	for _, s := range strings.Split(replicas, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("replicas: %q is not a positive count", s))
			continue
		}
		c.replicas = append(c.replicas, n)
	}
	if c.partitions < 1 || c.records < c.partitions || c.keys < 1 {
		errs = append(errs, fmt.Errorf("partitions %d, records %d, keys %d: want at least one record per partition and one key", c.partitions, c.records, c.keys))
	}
	if c.passes < 1 {
		errs = append(errs, fmt.Errorf("passes: %d, want at least 1", c.passes))
	}
	if c.tls {
		if saslSSL == "" || c.tlsDir == "" {
			errs = append(errs, fmt.Errorf("tls: no SASL_SSL listener or TLS directory; set %s and %s (eval $(bash scripts/kafka.sh env)) or -sasl-ssl-brokers and -tls-dir", kafkatest.EnvSASLSSL, kafkatest.EnvTLSDir))
		}
		c.saslSSL = strings.Split(saslSSL, ",")
	}
	if modes := btoi(c.busyCost) + btoi(c.twoStage) + btoi(c.tls) + btoi(c.window) + btoi(c.yaml) + btoi(c.avro) + btoi(c.rolling) + btoi(c.api) + btoi(c.growRounds > 0); modes > 1 {
		errs = append(errs, errors.New("busy-cost, two-stage, tls, window, yaml, avro, rolling, api and grow-partitions: choose one"))
	}
	if c.growRounds < 0 {
		errs = append(errs, fmt.Errorf("grow-partitions: %d, want 0 (off) or more", c.growRounds))
	}
	if c.avro && c.registry == "" {
		errs = append(errs, errors.New("avro: no registry; set WEIR_REGISTRY_URL (eval $(bash scripts/registry.sh env)) or -registry"))
	}
	if c.window && (c.win.size <= c.win.bound || c.win.bound <= 0 || c.latWin.size <= 0 || c.win.lateness < 0 || c.latWin.lateness < 0 || c.holdCheckpoints < 1) {
		errs = append(errs, fmt.Errorf("window: size %v must exceed max-out-of-orderness %v > 0; latency-window-size %v > 0; lateness >= 0; hold-checkpoints %d >= 1",
			c.win.size, c.win.bound, c.latWin.size, c.holdCheckpoints))
	}
	if (c.twoStage || c.window || c.yaml) && c.pages < 1 {
		errs = append(errs, fmt.Errorf("pages: %d, want at least 1", c.pages))
	}
	if c.rate < 100 {
		errs = append(errs, fmt.Errorf("rate: %d, want at least 100 records/s", c.rate))
	}
	if _, err := os.Stat(c.processor); err != nil {
		errs = append(errs, fmt.Errorf("processor: %w (make build)", err))
	}
	if err := errors.Join(errs...); err != nil {
		fatal(err)
	}
	if abs, err := filepath.Abs(c.processor); err == nil {
		c.processor = abs
	}
	if c.brokerPID == 0 {
		c.brokerPID = benchutil.BrokerPID(c.brokers[0])
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := run(ctx, c); err != nil {
		fatal(err)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench: FAILED:", err)
	os.Exit(1)
}

// bench is one run.
type bench struct {
	c      config
	adm    *kadm.Client
	id     string
	dir    string
	in     string
	topics []string
	jobs   []string
	// plain is the broker's plaintext listener; secured (-tls only) its
	// SASL_SSL one.
	plain, secured *transport

	mu    sync.Mutex
	procs []*proc // every process started, for the cleanup

	// perKey counts the input records per key, for the verification;
	// preloadPerKey only those of the throughput input.
	perKey, preloadPerKey map[string]int
	// t0 is the start of the -window input's window, Unix ms.
	t0 int64
	// yamlWant is, per page, the -yaml job's final aggregates.
	yamlWant map[string]*pageAgg
	// avro is the -avro input's registered schema; avroJob and avroPass
	// the job measured on it.
	avro     *avroInput
	avroJob  *job
	avroPass pass
}

// transport is how the raw pipe's clients and a job's replicas reach the
// broker: its plaintext listener or (-tls) its SASL_SSL listener with
// SCRAM-SHA-512. Everything else (the admin client, the input, the
// observers, the verification) always uses the plaintext listener: the
// instruments stay the same whichever listener the measured clients use.
type transport struct {
	name    string // in the human account
	suffix  string // in result names, after raw_pipe or count_job
	brokers []string
	opts    []kgo.Opt // the raw pipe clients' TLS and SASL options
	yaml    string    // the job's kafka.tls and kafka.sasl, indented under kafka:
	top     string    // more top-level sections of the job file
}

// saslSSL is the transport over the SASL_SSL listener: franz-go's own TLS
// and SCRAM-SHA-512 for the raw pipe, and for the job the kafka.tls and
// kafka.sasl sections with the password in a file of the work directory.
func (b *bench) saslSSL(ctx context.Context) (*transport, error) {
	sec := kafkatest.SecureAt(b.c.saslSSL, nil, b.c.tlsDir)
	opts, err := sec.SCRAMOpts()
	if err != nil {
		return nil, fmt.Errorf("SASL_SSL: %w", err)
	}
	if _, err := kafkatest.Ping(ctx, sec.SASLSSL, opts...); err != nil {
		return nil, fmt.Errorf("SASL_SSL listener at %s (SCRAM-SHA-512 as %s): %w", strings.Join(sec.SASLSSL, ","), kafkatest.User, err)
	}
	pw := filepath.Join(b.dir, "scram-password")
	if err := os.WriteFile(pw, []byte(kafkatest.SCRAMPassword), 0o600); err != nil {
		return nil, err
	}
	return &transport{
		name: "SASL_SSL (SCRAM-SHA-512)", suffix: "_sasl_ssl", brokers: sec.SASLSSL, opts: opts,
		yaml: fmt.Sprintf("  tls: {enabled: true, ca_file: %s}\n  sasl: {mechanism: SCRAM-SHA-512, username: %s, password_file: %s}\n",
			strconv.Quote(sec.CAFile), kafkatest.User, strconv.Quote(pw)),
	}, nil
}

func run(ctx context.Context, c config) (err error) {
	if _, err := kafkatest.Ping(ctx, c.brokers); err != nil {
		return fmt.Errorf("broker at %s: %w", strings.Join(c.brokers, ","), err)
	}
	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...))
	if err != nil {
		return err
	}
	defer admCl.Close()
	id := "weir-bench-" + strings.ToLower(rand.Text()[:8])
	if c.profile != "" {
		if c.profile, err = filepath.Abs(c.profile); err == nil {
			err = os.MkdirAll(c.profile, 0o755)
		}
		if err != nil {
			return fmt.Errorf("-profile: %w", err)
		}
		defer func() {
			benchutil.Info("profiles of the replicas stopped with SIGTERM: %s (go tool pprof -top %s/<job>-<replica>.cpu.pprof)", c.profile, c.profile)
		}()
	}
	dir, err := os.MkdirTemp("", id+"-")
	if err != nil {
		return err
	}
	b := &bench{c: c, adm: kadm.NewClient(admCl), id: id, dir: dir, in: id + "-in", perKey: map[string]int{},
		plain: &transport{name: "plaintext", brokers: c.brokers}}
	defer func() {
		b.killAll()
		if c.keep {
			benchutil.Info("topics kept: %s-* and the jobs' control topics _weir.%s-*", id, id)
		} else {
			b.cleanup()
		}
		if err != nil || c.keep {
			benchutil.Info("work directory kept: %s (job files, replica logs, state, checkpoints)", dir)
		} else {
			_ = os.RemoveAll(dir)
		}
	}()
	if c.tls {
		if b.secured, err = b.saslSSL(ctx); err != nil {
			return err
		}
		benchutil.Info("-tls: %d records over %d keys, %d partitions, checkpoint every %v, exactly-once; the raw pipe and the count job with %d replica(s), each over plaintext (%s) and over %s (%s); run %s; %d CPUs, load average %s",
			c.records, c.keys, c.partitions, c.interval, c.replicas[0], strings.Join(c.brokers, ","), b.secured.name, strings.Join(b.secured.brokers, ","), id, runtime.NumCPU(), loadAvg())
	} else if c.window {
		b.t0 = time.Now().Add(-10 * time.Minute).Truncate(c.win.size).UnixMilli()
		benchutil.Info("-window: %d records over %d pages in one window of %v (allowed lateness %v, out-of-orderness %v, idle timeout %v), %d partitions, checkpoint every %v, exactly-once; the window job with %d replica(s) vs the raw two-hop pipe; latency job: windows of %v, lateness %v, %d records/s; run %s; %d CPUs, load average %s",
			c.records, c.pages, c.win.size, c.win.lateness, c.win.bound, c.win.idle, c.partitions, c.interval, c.replicas[0],
			c.latWin.size, c.latWin.lateness, c.rate, id, runtime.NumCPU(), loadAvg())
	} else if c.yaml {
		benchutil.Info("-yaml: %d clicks with amounts of %d users on %d pages, %d partitions, checkpoint every %v, exactly-once; the YAML language job (filter, map, key_by expression, count + sum + max) with %d replica(s) vs the raw two-hop pipe; run %s; %d CPUs, load average %s",
			c.records, c.keys, c.pages, c.partitions, c.interval, c.replicas[0], id, runtime.NumCPU(), loadAvg())
	} else if c.avro {
		benchutil.Info("-avro: %d records over %d keys as Avro (registry %s), %d partitions, checkpoint every %v, exactly-once; the count job (source format avro) with %d replica(s) vs the raw pipe on the same input; run %s; %d CPUs, load average %s",
			c.records, c.keys, c.registry, c.partitions, c.interval, c.replicas[0], id, runtime.NumCPU(), loadAvg())
	} else if c.rolling {
		benchutil.Info("-rolling: the count job on %d replicas, %d partitions, checkpoint every %v, exactly-once, steady input of %d records/s over %d keys, updated to v2 one replica at a time; session timeout %v; run %s; %d CPUs, load average %s",
			max(c.replicas[len(c.replicas)-1], 2), c.partitions, c.interval, c.rate, c.keys, c.sessionTimeout, id, runtime.NumCPU(), loadAvg())
	} else if c.api {
		benchutil.Info("-api: %d records over %d keys, %d partitions, checkpoint every %v, exactly-once; the count job with %d replica(s), its REST API asked every %v; run %s; %d CPUs, load average %s",
			c.records, c.keys, c.partitions, c.interval, c.replicas[0], c.apiEvery, id, runtime.NumCPU(), loadAvg())
	} else if c.growRounds > 0 {
		benchutil.Info("-grow-partitions: %d partition(s) added one at a time to the %d-partition input of the count job with %d replica(s), steady input of %d records/s over %d keys, checkpoint every %v, exactly-once, kafka.metadata_max_age 30s (default); run %s; %d CPUs, load average %s",
			c.growRounds, c.partitions, c.replicas[0], c.rate, c.keys, c.interval, id, runtime.NumCPU(), loadAvg())
	} else if c.twoStage {
		benchutil.Info("-two-stage: %d clicks of %d users on %d pages, %d partitions, checkpoint every %v, exactly-once; the views-per-page job (key_by page, %d second-stage tasks, %d key groups) with %d replica(s) vs the raw two-hop pipe; run %s; %d CPUs, load average %s",
			c.records, c.keys, c.pages, c.partitions, c.interval, c.partitions, c.maxParallelism, c.replicas[0], id, runtime.NumCPU(), loadAvg())
	} else {
		benchutil.Info("%d records over %d keys, %d partitions, checkpoint every %v, exactly-once; replicas %v; session timeout %v; run %s; %d CPUs, load average %s",
			c.records, c.keys, c.partitions, c.interval, c.replicas, c.sessionTimeout, id, runtime.NumCPU(), loadAvg())
	}
	if err := b.leftovers(ctx); err != nil {
		return err
	}

	if err := b.createTopic(ctx, b.in); err != nil {
		return err
	}
	if err := b.warmBroker(ctx); err != nil {
		return err
	}
	if c.growRounds > 0 {
		return b.runGrowth(ctx) // its own input, no preload
	}
	if c.avro {
		if err := b.registerAvro(ctx); err != nil {
			return err
		}
	}
	if c.rolling {
		return b.runRolling(ctx) // steady input only: no preload
	}
	if err := b.preload(ctx); err != nil {
		return err
	}
	if c.tls {
		return b.runTLS(ctx)
	}
	if c.api {
		return b.runAPI(ctx)
	}
	if c.busyCost {
		return b.runBusyCost(ctx)
	}
	if c.twoStage {
		return b.runTwoStage(ctx)
	}
	if c.window {
		return b.runWindow(ctx)
	}
	if c.yaml {
		return b.runYAML(ctx)
	}
	if c.avro {
		return b.runAvro(ctx)
	}

	// 0. The cost of one expression evaluation (no broker; the machine is
	// idle before the first job starts).
	runExpr()

	// 1. The raw pipe before and after the headline job (the machine's
	// load drifts: its figure is over both passes), and the count job with
	// each replica count; the last job stays running.
	var raws []pass
	raw := func(n int) error {
		p, err := b.rawPipe(ctx, n, b.plain)
		if err != nil {
			return fmt.Errorf("raw pipe: %w", err)
		}
		raws = append(raws, p)
		return nil
	}
	if err := raw(1); err != nil {
		return err
	}
	var last *job
	var outputs []*job
	var tputs []pass
	for i, n := range c.replicas {
		ckpt := ""
		if i == 0 {
			ckpt = "checkpoint_duration"
		}
		j, t, err := b.throughput(ctx, i, n, b.plain, ckpt)
		if err != nil {
			return fmt.Errorf("count job, %d replica(s): %w", n, err)
		}
		outputs, tputs = append(outputs, j), append(tputs, t)
		if i < len(c.replicas)-1 {
			if err := j.stopAll(); err != nil {
				return err
			}
		} else {
			last = j
		}
		if i == 0 {
			if err := raw(2); err != nil {
				return err
			}
		}
	}
	rawRate := sum(raws).rate(c.records)
	for i, t := range tputs {
		suffix := ""
		if i > 0 {
			suffix = fmt.Sprintf("_%d_replicas", c.replicas[i])
		}
		rate := t.rate(c.records)
		benchutil.Result("count_job_throughput"+suffix, "%.0f", rate, "records/s")
		if i == 0 {
			benchutil.Result("raw_pipe_throughput", "%.0f", rawRate, "records/s")
		}
		benchutil.Result("count_job_vs_raw_ratio"+suffix, "%.3f", rate/rawRate, "ratio")
		if proc := t.processingRate(c.records); proc > 0 {
			benchutil.Result("count_job_startup"+suffix, "%.2f", t.startup.Seconds(), "s")
			benchutil.Result("count_job_processing_throughput"+suffix, "%.0f", proc, "records/s")
			benchutil.Result("count_job_processing_vs_raw_ratio"+suffix, "%.3f", proc/rawRate, "ratio")
		}
	}
	benchutil.Info("load average now %s", loadAvg())
	head, headProc := tputs[0].rate(c.records), tputs[0].processingRate(c.records)
	benchutil.Info("headline: %d replica(s) %.0f records/s vs raw %.0f records/s: %.3f (goal >= 0.7); processing alone (first to last output written): %.0f records/s, %.3f of raw",
		c.replicas[0], head, rawRate, head/rawRate, headProc, headProc/rawRate)

	// 3. Latency on the last job.
	if err := b.latency(ctx, last); err != nil {
		return fmt.Errorf("latency: %w", err)
	}

	// 4. Recovery on the last job.
	if c.skipRecovery || len(last.running()) < 2 {
		benchutil.Info("recovery not measured: %s", map[bool]string{true: "-skip-recovery", false: "the last -replicas entry has fewer than 2 replicas"}[c.skipRecovery])
	} else if err := b.recovery(ctx, last); err != nil {
		return fmt.Errorf("recovery: %w", err)
	}
	if !c.verify {
		return last.stopAll()
	}
	// The last job first commits the output of the last input (a replica
	// that stops aborts its open transactions), so it is verified before
	// it stops. The headline job read exactly the preloaded input.
	total := 0
	for _, n := range b.perKey {
		total += n
	}
	list := []output{{last, b.perKey, total}}
	if outputs[0] != last {
		list = append([]output{{outputs[0], b.preloadPerKey, c.records}}, list...)
	}
	vs, err := b.verifyOutputs(ctx, list)
	if err != nil {
		return err
	}
	if err := last.stopAll(); err != nil {
		return err
	}
	return verdict(vs)
}

// runTLS is the rest of a -tls run: the raw pipe and the count job (the
// first -replicas entry), each twice over plaintext and twice over
// SASL_SSL, in the order
//
//	raw P, raw S, job P, job S, job S, job P, raw S, raw P
//
// so that a drift of the machine's load weighs on both transports alike;
// each figure is over its two passes. Every job reads the preloaded input
// and is stopped after its pass; all four outputs are verified at the end.
func (b *bench) runTLS(ctx context.Context) error {
	plain, secured := b.plain, b.secured
	raws, tputs := map[*transport][]pass{}, map[*transport][]pass{}
	var outputs []*job
	order := []struct {
		job bool
		tr  *transport
	}{{false, plain}, {false, secured}, {true, plain}, {true, secured}, {true, secured}, {true, plain}, {false, secured}, {false, plain}}
	for i, step := range order {
		if !step.job {
			p, err := b.rawPipe(ctx, i+1, step.tr)
			if err != nil {
				return fmt.Errorf("raw pipe over %s: %w", step.tr.name, err)
			}
			raws[step.tr] = append(raws[step.tr], p)
			continue
		}
		ckpt := ""
		if len(tputs[step.tr]) == 0 {
			ckpt = "checkpoint_duration" + step.tr.suffix
		}
		j, p, err := b.throughput(ctx, i, b.c.replicas[0], step.tr, ckpt)
		if err != nil {
			return fmt.Errorf("count job over %s: %w", step.tr.name, err)
		}
		outputs, tputs[step.tr] = append(outputs, j), append(tputs[step.tr], p)
		if err := j.stopAll(); err != nil {
			return err
		}
	}

	n := b.c.records
	rp, rs, jp, js := sum(raws[plain]), sum(raws[secured]), sum(tputs[plain]), sum(tputs[secured])
	res := benchutil.Result
	res("raw_pipe_throughput", "%.0f", rp.rate(n), "records/s")
	res("raw_pipe_sasl_ssl_throughput", "%.0f", rs.rate(n), "records/s")
	res("raw_pipe_sasl_ssl_vs_plaintext_ratio", "%.3f", rs.rate(n)/rp.rate(n), "ratio")
	res("count_job_throughput", "%.0f", jp.rate(n), "records/s")
	res("count_job_vs_raw_ratio", "%.3f", jp.rate(n)/rp.rate(n), "ratio")
	res("count_job_sasl_ssl_throughput", "%.0f", js.rate(n), "records/s")
	res("count_job_sasl_ssl_vs_plaintext_ratio", "%.3f", js.rate(n)/jp.rate(n), "ratio")
	res("count_job_sasl_ssl_vs_raw_sasl_ssl_ratio", "%.3f", js.rate(n)/rs.rate(n), "ratio")
	if pp, ps := jp.processingRate(n), js.processingRate(n); pp > 0 && ps > 0 {
		res("count_job_startup", "%.2f", jp.startup.Seconds(), "s")
		res("count_job_sasl_ssl_startup", "%.2f", js.startup.Seconds(), "s")
		res("count_job_processing_throughput", "%.0f", pp, "records/s")
		res("count_job_sasl_ssl_processing_throughput", "%.0f", ps, "records/s")
		res("count_job_sasl_ssl_processing_vs_plaintext_ratio", "%.3f", ps/pp, "ratio")
	}
	// CPU seconds per million records (µs per record), over plaintext, over
	// SASL_SSL, and their ratio.
	cpu := func(prefix, what string, plain, secured pass, d func(pass) time.Duration) {
		if d(plain) < 0 || d(secured) < 0 {
			return
		}
		p, s := plain.cpuPerMillion(d(plain), n), secured.cpuPerMillion(d(secured), n)
		res(prefix+what+"_cpu_per_million_records", "%.2f", p, "s")
		res(prefix+"_sasl_ssl"+what+"_cpu_per_million_records", "%.2f", s, "s")
		res(prefix+"_sasl_ssl"+what+"_cpu_vs_plaintext_ratio", "%.3f", s/p, "ratio")
	}
	procCPU := func(p pass) time.Duration { return p.cpu }
	brokerCPU := func(p pass) time.Duration { return p.brokerCPU }
	cpu("raw_pipe", "", rp, rs, procCPU)
	cpu("raw_pipe", "_broker", rp, rs, brokerCPU)
	cpu("count_job", "", jp, js, procCPU)
	cpu("count_job", "_broker", jp, js, brokerCPU)

	benchutil.Info("load average now %s", loadAvg())
	benchutil.Info("SASL_SSL vs plaintext: raw pipe %.0f vs %.0f records/s (%.3f), count job %.0f vs %.0f records/s (%.3f); count job vs raw pipe: %.3f over plaintext, %.3f over SASL_SSL",
		rs.rate(n), rp.rate(n), rs.rate(n)/rp.rate(n), js.rate(n), jp.rate(n), js.rate(n)/jp.rate(n), jp.rate(n)/rp.rate(n), js.rate(n)/rs.rate(n))
	benchutil.Info("CPU per million records, plaintext -> SASL_SSL: raw pipe %s, its broker %s; count job replicas %s, their broker %s",
		cpuChange(rp, rs, procCPU, n), cpuChange(rp, rs, brokerCPU, n), cpuChange(jp, js, procCPU, n), cpuChange(jp, js, brokerCPU, n))

	if !b.c.verify {
		return nil
	}
	var list []output
	for _, j := range outputs {
		list = append(list, output{j, b.preloadPerKey, n})
	}
	vs, err := b.verifyOutputs(ctx, list)
	if err != nil {
		return err
	}
	return verdict(vs)
}

// runTwoStage is the rest of a -two-stage run: the raw two-hop pipe and
// the views-per-page job with the first -replicas entry, alternately
// (passes.go); on the last pass's job, the alignment and checkpoint
// durations of its throughput run and the latency at the steady rate;
// the verification of every pass's output (each page's counts exactly
// 1..n).
func (b *bench) runTwoStage(ctx context.Context) error {
	n := b.c.records
	// Alignment, latency and the steady checkpoints: on the last pass's
	// job, right after its throughput run.
	var align, steadyDurs, steadyAlign []time.Duration
	var steadyFrom, steadyTo time.Time
	var measured *job
	measure := func(j *job, t pass) error {
		measured = j
		var err error
		if align, err = b.alignTimes(ctx, j.name, t.start, t.end); err != nil {
			return fmt.Errorf("alignment times: %w", err)
		}
		steadyFrom = time.Now()
		if err := b.latency(ctx, j); err != nil {
			return fmt.Errorf("latency: %w", err)
		}
		// The checkpoints of the steady input: the latency's share of them.
		steadyTo = time.Now()
		if steadyDurs, _, err = b.checkpointDurations(ctx, j.name, steadyFrom, steadyTo); err != nil {
			return fmt.Errorf("checkpoint durations: %w", err)
		}
		if steadyAlign, err = b.alignTimes(ctx, j.name, steadyFrom, steadyTo); err != nil {
			return fmt.Errorf("alignment times: %w", err)
		}
		return nil
	}
	check := func(j *job, last bool) ([]*verification, error) {
		// The last pass's job also has the latency input's outputs.
		perKey, total := b.preloadPerKey, 0
		if last {
			perKey = b.perKey
		}
		for _, k := range perKey {
			total += k
		}
		return b.verifyOutputs(ctx, []output{{j, perKey, total}})
	}
	passes, raws, vs, err := b.alternate(ctx, "views-per-page job", "two_stage_checkpoint_duration", measure, check)
	if err != nil {
		return err
	}
	t, raw := reportPasses("two_stage", n, passes, raws)
	res := benchutil.Result
	if len(align) > 0 {
		res("two_stage_alignment_p50", "%.0f", ms(quantile(align, 0.5)), "ms")
		res("two_stage_alignment_p99", "%.0f", ms(quantile(align, 0.99)), "ms")
		benchutil.Info("alignment of the second stage's tasks during the throughput run: %d acks, p50 %v, p99 %v, max %v (align_ms of the acks)",
			len(align), quantile(align, 0.5), quantile(align, 0.99), slices.Max(align))
	} else {
		benchutil.Info("no ack of a second-stage task for a checkpoint triggered during the throughput run")
	}
	if len(steadyDurs) > 0 && len(steadyAlign) > 0 {
		res("two_stage_steady_checkpoint_duration_p50", "%.0f", ms(quantile(steadyDurs, 0.5)), "ms")
		res("two_stage_steady_checkpoint_duration_p99", "%.0f", ms(quantile(steadyDurs, 0.99)), "ms")
		res("two_stage_steady_alignment_p99", "%.0f", ms(quantile(steadyAlign, 0.99)), "ms")
		benchutil.Info("at the steady %d records/s of the latency measurement: %d checkpoints, duration p50 %v, p99 %v; alignment over %d acks p50 %v, p99 %v, max %v",
			b.c.rate, len(steadyDurs), quantile(steadyDurs, 0.5), quantile(steadyDurs, 0.99),
			len(steadyAlign), quantile(steadyAlign, 0.5), quantile(steadyAlign, 0.99), slices.Max(steadyAlign))
	}
	if ph, err := b.checkpointPhases(ctx, measured.name, steadyFrom, steadyTo); err != nil {
		benchutil.Info("checkpoint phases at the steady rate: %v", err)
	} else {
		ph.report("checkpoint phases at the steady rate")
	}
	benchutil.Info("load average now %s", loadAvg())
	benchutil.Info("headline: views-per-page, %d replica(s), %.0f records/s vs the raw two-hop pipe's %.0f records/s: %.3f (goal >= 0.6)",
		b.c.replicas[0], t.rate(n), raw.rate(n), t.rate(n)/raw.rate(n))
	if !b.c.verify {
		return nil
	}
	return verdict(vs)
}

// rawTwoHop copies the input through an intermediate topic, the baseline
// of a two-stage job, in this process; n numbers the pass. The
// intermediate topic has one partition per key group (the job's shuffle
// topic's count, -max-parallelism). Hop one, per input
// partition: a read_committed consumer and an idempotent producer writing
// each record, keyed by its page (decoded from the JSON value, as the
// job's key_by does), to the partition of the page's key group; the topic
// has the shuffle topic's configuration (shuffle.TopicConfigs). Hop two,
// per task of the job's second stage (as many as input partitions): a
// consumer of the task's contiguous range of intermediate partitions
// (keygroup.Range) and an idempotent producer writing each record, keyed
// by its page, to the output topic (franz-go's default partitioner, the
// job's sink's). Both hops run at once; the clock stops when an
// independent read_committed consumer has seen N output records.
func (b *bench) rawTwoHop(ctx context.Context, n int) (pass, error) {
	mid, out := fmt.Sprintf("%s-hop%d-mid", b.id, n), fmt.Sprintf("%s-hop%d-out", b.id, n)
	groups := b.c.maxParallelism
	// The intermediate topic is configured as the job's shuffle topic is.
	if err := benchutil.CreateTopicWith(ctx, b.adm, mid, groups, shuffle.TopicConfigs()); err != nil {
		return pass{}, err
	}
	b.topics = append(b.topics, mid)
	if err := b.createTopic(ctx, out); err != nil {
		return pass{}, err
	}
	cnt := newCounter(b.c.records)
	obs, err := b.observe(ctx, out, nil, cnt.record)
	if err != nil {
		return pass{}, err
	}
	defer obs.stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	cpu0, bcpu0 := benchutil.ProcessCPU(), benchutil.ProcCPU(b.c.brokerPID)
	start := time.Now()
	errc := make(chan error, 2*b.c.partitions)
	for p := range b.c.partitions {
		go func() { errc <- b.hopOne(ctx, mid, int32(p), groups) }()
		go func() { errc <- b.hopTwo(ctx, mid, out, p, groups) }()
	}
	// Hop one's goroutines end when their input partition is copied; hop
	// two's run until the observer has seen every record.
	deadline := time.After(10 * time.Minute)
wait:
	for {
		select {
		case err := <-errc:
			if err != nil {
				return pass{}, err
			}
		case <-cnt.reached:
			break wait
		case <-ctx.Done():
			return pass{}, ctx.Err()
		case <-deadline:
			return pass{}, fmt.Errorf("observer saw %d of %d records after 10 minutes", cnt.seen.Load(), b.c.records)
		}
	}
	end := time.Unix(0, cnt.doneAt.Load())
	p := pass{passes: 1, wall: end.Sub(start), cpu: benchutil.ProcessCPU() - cpu0,
		brokerCPU: cpuDelta(bcpu0, benchutil.ProcCPU(b.c.brokerPID)), start: start, end: end}
	benchutil.Info("raw two-hop pipe, pass %d: %d records in %v: %.0f records/s; CPU: this process (pipe + observer) %v, broker %s",
		n, b.c.records, p.wall.Round(time.Millisecond), p.rate(b.c.records), p.cpu.Round(time.Millisecond), cpuString(p.brokerCPU))
	return p, nil
}

// hopOne copies input partition p to the intermediate topic mid, each
// record to the partition of its page's key group among groups.
func (b *bench) hopOne(ctx context.Context, mid string, p int32, groups int) error {
	ends, err := b.adm.ListEndOffsets(ctx, b.in)
	if err != nil {
		return err
	}
	end, ok := ends.Lookup(b.in, p)
	if !ok || end.Err != nil {
		return fmt.Errorf("end offset of %s[%d]: %v", b.in, p, end.Err)
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.DefaultProduceTopic(mid),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer prod.Close()
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{b.in: {p: kgo.NewOffset().AtStart()}}))
	if err != nil {
		return err
	}
	defer cons.Close()
	var failed atomic.Pointer[error]
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	for next := int64(0); next < end.Offset; {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = errors.Join(ferr, fmt.Errorf("%s[%d]: %w", t, p, err)) })
		if ferr != nil {
			return ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			var click struct {
				Page string `json:"page"`
			}
			if err := json.Unmarshal(r.Value, &click); err != nil {
				failed.CompareAndSwap(nil, &err)
				return
			}
			page := []byte(click.Page)
			prod.Produce(ctx, &kgo.Record{Key: page, Value: r.Value, Timestamp: r.Timestamp,
				Partition: int32(keygroup.Of(page, groups))}, promise)
		})
	}
	if err := prod.Flush(ctx); err != nil {
		return err
	}
	if e := failed.Load(); e != nil {
		return *e
	}
	return nil
}

// hopTwo copies the intermediate partitions of task index's key groups to
// the output topic, keyed by page, until ctx ends.
func (b *bench) hopTwo(ctx context.Context, mid, out string, index, groups int) error {
	lo, hi := keygroup.Range(index, b.c.partitions, groups)
	parts := map[int32]kgo.Offset{}
	for g := lo; g < hi; g++ {
		parts[int32(g)] = kgo.NewOffset().AtStart()
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.DefaultProduceTopic(out))
	if err != nil {
		return err
	}
	defer prod.Close()
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{mid: parts}))
	if err != nil {
		return err
	}
	defer cons.Close()
	var failed atomic.Pointer[error]
	promise := func(_ *kgo.Record, err error) {
		if err != nil && !errors.Is(err, context.Canceled) {
			failed.CompareAndSwap(nil, &err)
		}
	}
	for ctx.Err() == nil {
		fs := cons.PollFetches(ctx)
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				ferr = errors.Join(ferr, fmt.Errorf("%s[%d]: %w", t, p, err))
			}
		})
		if ferr != nil {
			return ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			prod.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}, promise)
		})
		if e := failed.Load(); e != nil {
			return *e
		}
	}
	return nil
}

// pass is what one throughput pass of the raw pipe or of a count job
// measured, or (sum) the total of several.
type pass struct {
	passes int
	// wall: start to the N-th record seen committed by the observer.
	wall time.Duration
	// The job's start to its first output written, and first to N-th
	// output written (the sinks' counters); processing is zero when the
	// counters were not scraped in time.
	startup, processing time.Duration
	// cpu is the CPU time of the measured processes: the replicas, or for
	// the raw pipe this process (the pipe and the observer). brokerCPU is
	// the broker's during the pass, negative if unknown.
	cpu, brokerCPU time.Duration
	// start and end of a single pass (not summed): the clock's start and
	// the N-th record seen committed.
	start, end time.Time
}

// sum totals passes; the startup of the total is the mean.
func sum(ps []pass) pass {
	var t pass
	for _, p := range ps {
		t.passes += p.passes
		t.wall += p.wall
		t.startup += p.startup
		t.cpu += p.cpu
		if p.processing == 0 || t.processing < 0 {
			t.processing = -1
		} else {
			t.processing += p.processing
		}
		if p.brokerCPU < 0 || t.brokerCPU < 0 {
			t.brokerCPU = -1
		} else {
			t.brokerCPU += p.brokerCPU
		}
	}
	if t.passes > 0 {
		t.startup /= time.Duration(t.passes)
	}
	t.processing = max(t.processing, 0)
	return t
}

// rate is records/s, for passes of records each.
func (p pass) rate(records int) float64 {
	return float64(p.passes*records) / p.wall.Seconds()
}

// processingRate is records/s from first to last output written, 0 if
// unknown.
func (p pass) processingRate(records int) float64 {
	if p.processing <= 0 {
		return 0
	}
	return float64(p.passes*records) / p.processing.Seconds()
}

// cpuPerMillion is CPU seconds per million records of d over p's passes.
func (p pass) cpuPerMillion(d time.Duration, records int) float64 {
	return d.Seconds() / (float64(p.passes*records) / 1e6)
}

func cpuChange(plain, secured pass, d func(pass) time.Duration, records int) string {
	if d(plain) < 0 || d(secured) < 0 {
		return "unknown"
	}
	p, s := plain.cpuPerMillion(d(plain), records), secured.cpuPerMillion(d(secured), records)
	return fmt.Sprintf("%.2f -> %.2f s (%+.0f%%)", p, s, (s/p-1)*100)
}

// output is a job's output topic to verify, with the input it read.
type output struct {
	j      *job
	perKey map[string]int
	total  int
}

func (b *bench) verifyOutputs(ctx context.Context, list []output) ([]*verification, error) {
	var vs []*verification
	for _, o := range list {
		v, err := b.verify(ctx, o.j.out, o.perKey, o.total)
		if err != nil {
			return nil, fmt.Errorf("verify %s: %w", o.j.name, err)
		}
		vs = append(vs, v)
	}
	return vs, nil
}

// verdict prints the violations the verifications found and fails if
// there are any.
func verdict(vs []*verification) error {
	var eos, order int
	var failed []string
	for _, v := range vs {
		eos += v.lost + v.duplicated
		order += v.disordered
		if !v.ok() {
			failed = append(failed, fmt.Sprintf("%s: %d lost, %d duplicated, %d out of order; first problems:\n  %s",
				v.topic, v.lost, v.duplicated, v.disordered, strings.Join(v.problems, "\n  ")))
		}
	}
	benchutil.Result("verify_exactly_once_violations", "%d", eos, "outputs")
	benchutil.Result("verify_order_violations", "%d", order, "outputs")
	if len(failed) > 0 {
		return fmt.Errorf("verification: the committed output is not every key's counts 1..n, each once, in order:\n%s", strings.Join(failed, "\n"))
	}
	return nil
}

// ---- topics, input ----

func (b *bench) createTopic(ctx context.Context, t string) error {
	if err := benchutil.CreateTopic(ctx, b.adm, t, b.c.partitions); err != nil {
		return err
	}
	b.topics = append(b.topics, t)
	return nil
}

// cleanup deletes the run's topics (with the jobs' control topics) and
// groups, with a fresh context: it also runs after an interrupt.
func (b *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topics := slices.Clone(b.topics)
	var prefixes []string
	for _, j := range b.jobs {
		prefixes = append(prefixes, "_weir."+j+".")
	}
	if len(prefixes) > 0 {
		if listed, err := b.adm.ListTopics(ctx); err == nil {
			for _, t := range listed.Names() {
				for _, p := range prefixes {
					if strings.HasPrefix(t, p) {
						topics = append(topics, t)
					}
				}
			}
		}
		if groups, err := b.adm.ListGroups(ctx); err == nil {
			var del []string
			for _, g := range groups.Groups() {
				for _, p := range prefixes {
					if strings.HasPrefix(g, p) {
						del = append(del, g)
					}
				}
			}
			if len(del) > 0 {
				if _, err := b.adm.DeleteGroups(ctx, del...); err != nil {
					benchutil.Info("delete groups: %v", err)
				}
			}
		}
	}
	if len(topics) == 0 {
		return
	}
	resp, err := b.adm.DeleteTopics(ctx, topics...)
	if err == nil {
		for _, r := range resp.Sorted() {
			if r.Err != nil {
				err = errors.Join(err, fmt.Errorf("%s: %w", r.Topic, r.Err))
			}
		}
	}
	if err != nil {
		benchutil.Info("delete topics: %v", err)
	} else {
		benchutil.Info("deleted %d topics", len(topics))
	}
}

func keyName(k int) string { return fmt.Sprintf("user-%06d", k) }

func pageName(p int) string { return fmt.Sprintf("page-%04d", p) }

// inputValue is input record i of key: {"i":i,"user":key}, and with a page
// (-two-stage) {"i":i,"user":key,"page":page}.
func inputValue(buf []byte, i int, key, page string) []byte {
	buf = append(buf[:0], `{"i":`...)
	buf = strconv.AppendInt(buf, int64(i), 10)
	buf = append(buf, `,"user":"`...)
	buf = append(buf, key...)
	if page != "" {
		buf = append(buf, `","page":"`...)
		buf = append(buf, page...)
	}
	return append(buf, `"}`...)
}

// nextInput draws input record i: its key (a user, uniform), its value and
// the key the job counts it under: the key itself, or with -two-stage its
// page (uniform, independent of the user).
func (b *bench) nextInput(rng *mrand.Rand, i int) (key string, value []byte, counted string) {
	key = keyName(rng.IntN(b.c.keys))
	if b.c.yaml {
		page := pageName(rng.IntN(b.c.pages))
		return key, yamlValue(nil, i, key, page), page
	}
	if b.c.window {
		page := b.windowPage(i)
		return key, windowValue(nil, i, key, page, b.windowTS(rng, i)), page
	}
	if b.c.avro {
		return key, b.avroValue(i, key), key
	}
	if !b.c.twoStage {
		return key, inputValue(nil, i, key, ""), key
	}
	page := pageName(rng.IntN(b.c.pages))
	return key, inputValue(nil, i, key, page), page
}

// warmBroker makes the broker what any broker that has served a consumer
// group and a transactional producer is: a fresh one creates its internal
// topics (__consumer_offsets, __transaction_state, 50 partitions each) on
// first use, which would land in the first job's start-up only (the raw
// pipe uses neither). One committed transaction and one group commit on a
// scratch topic of the run.
func (b *bench) warmBroker(ctx context.Context) error {
	start := time.Now()
	topic := b.in + "-warmup"
	if err := b.createTopic(ctx, topic); err != nil {
		return err
	}
	txn, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.DefaultProduceTopic(topic),
		kgo.TransactionalID(topic))
	if err != nil {
		return err
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	if err := txn.ProduceSync(ctx, kgo.StringRecord("warm-up")).FirstErr(); err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	txnwatch.AwaitPartitionsPublished(ctx, txn, topic) // internal/txnwatch
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	group := topic + "-group"
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumerGroup(group), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.DisableAutoCommit())
	if err != nil {
		return err
	}
	defer cons.Close()
	for n := 0; n == 0; {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("warm up: %w", err)
		}
		n = fs.NumRecords()
	}
	if err := cons.CommitUncommittedOffsets(ctx); err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	cons.Close()
	if _, err := b.adm.DeleteGroups(ctx, group); err != nil {
		benchutil.Info("delete group %s: %v", group, err)
	}
	benchutil.Info("broker warmed up (internal topics for groups and transactions) in %v", time.Since(start).Round(time.Millisecond))
	return nil
}

// preload writes the throughput input: N records, keys drawn uniformly
// (seeded), partitioned by key.
func (b *bench) preload(ctx context.Context) error {
	start := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.DefaultProduceTopic(b.in))
	if err != nil {
		return err
	}
	defer cl.Close()
	var failed atomic.Pointer[error]
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	rng := mrand.New(mrand.NewPCG(1, 2))
	b.preloadPerKey = map[string]int{}
	var bytes int
	for i := range b.c.records {
		k, v, counted := b.nextInput(rng, i)
		b.preloadPerKey[counted]++
		if b.c.yaml {
			b.wantYAML(counted, i)
		}
		bytes += len(v) + len(k)
		cl.Produce(ctx, &kgo.Record{Key: []byte(k), Value: v}, promise)
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	if p := failed.Load(); p != nil {
		return fmt.Errorf("preload: %w", *p)
	}
	for k, n := range b.preloadPerKey {
		b.perKey[k] += n
	}
	benchutil.Info("preloaded %d records (%.1f MB of keys and values) into %s in %v", b.c.records, float64(bytes)/1e6, b.in, time.Since(start).Round(time.Millisecond))
	return nil
}

// ---- observing output ----

// observer is an independent read_committed consumer of a topic.
type observer struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
}

// observe consumes topic read_committed (unless opts say otherwise) from
// the given offsets (nil: from the start) and calls fn for every record with the time the poll returned,
// from one goroutine, until stop.
func (b *bench) observe(ctx context.Context, topic string, from map[int32]int64, fn func(r *kgo.Record, seen time.Time), opts ...kgo.Opt) (*observer, error) {
	offs := map[int32]kgo.Offset{}
	for p := range b.c.partitions {
		o := kgo.NewOffset().AtStart()
		if from != nil {
			o = kgo.NewOffset().At(from[int32(p)])
		}
		offs[int32(p)] = o
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.c.brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: offs}),
		// Bounds how late an idle fetch returns, should the broker not
		// answer a waiting read_committed fetch as soon as a commit lands.
		kgo.FetchMaxWait(100 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	o := &observer{cl: cl, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(o.done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) { fn(r, now) })
		}
	}()
	return o, nil
}

func (o *observer) stop() {
	o.cancel()
	<-o.done
	o.cl.Close()
}

// committedEnds returns the read_committed end offsets (last stable
// offsets) of topic's partitions.
func (b *bench) committedEnds(ctx context.Context, topic string) (map[int32]int64, error) {
	ends, err := b.adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	var errs error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = errors.Join(errs, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	if errs != nil {
		return nil, errs
	}
	if len(out) != b.c.partitions {
		return nil, fmt.Errorf("%s: end offsets of %d partitions, want %d", topic, len(out), b.c.partitions)
	}
	return out, nil
}

// counter counts observed records and closes reached when n are seen.
type counter struct {
	n       int64
	seen    atomic.Int64
	first   atomic.Int64 // unix nanos of the first record
	doneAt  atomic.Int64 // unix nanos of the n-th record
	reached chan struct{}
}

func newCounter(n int) *counter { return &counter{n: int64(n), reached: make(chan struct{})} }

func (c *counter) record(_ *kgo.Record, now time.Time) {
	s := c.seen.Add(1)
	if s == 1 {
		c.first.Store(now.UnixNano())
	}
	if s == c.n {
		c.doneAt.Store(now.UnixNano())
		close(c.reached)
	}
}

// ---- 1. the raw pipe ----

// rawPipe copies the input with the raw pipe, its clients connected over
// tr; n numbers the pass.
func (b *bench) rawPipe(ctx context.Context, n int, tr *transport) (pass, error) {
	out := fmt.Sprintf("%s-raw%d-out", b.id, n)
	if err := b.createTopic(ctx, out); err != nil {
		return pass{}, err
	}
	cnt := newCounter(b.c.records)
	obs, err := b.observe(ctx, out, nil, cnt.record)
	if err != nil {
		return pass{}, err
	}
	defer obs.stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	cpu0, bcpu0 := benchutil.ProcessCPU(), benchutil.ProcCPU(b.c.brokerPID)
	start := time.Now()
	errc := make(chan error, b.c.partitions)
	for p := range b.c.partitions {
		go func() { errc <- b.rawPartition(ctx, out, int32(p), tr) }()
	}
	// A partition's goroutine ends when its consumer has caught up with the
	// input's end and its producer is flushed.
	for range b.c.partitions {
		select {
		case err := <-errc:
			if err != nil {
				return pass{}, err
			}
		case <-ctx.Done():
			return pass{}, ctx.Err()
		}
	}
	select {
	case <-cnt.reached:
	case <-ctx.Done():
		return pass{}, ctx.Err()
	case <-time.After(time.Minute):
		return pass{}, fmt.Errorf("observer saw %d of %d records", cnt.seen.Load(), b.c.records)
	}
	p := pass{passes: 1, wall: time.Unix(0, cnt.doneAt.Load()).Sub(start), cpu: benchutil.ProcessCPU() - cpu0,
		brokerCPU: cpuDelta(bcpu0, benchutil.ProcCPU(b.c.brokerPID))}
	benchutil.Info("raw pipe, pass %d, %s: %d records in %v: %.0f records/s; CPU: this process (pipe + observer) %v, broker %s",
		n, tr.name, b.c.records, p.wall.Round(time.Millisecond), p.rate(b.c.records), p.cpu.Round(time.Millisecond), cpuString(p.brokerCPU))
	return p, nil
}

func (b *bench) rawPartition(ctx context.Context, out string, p int32, tr *transport) error {
	ends, err := b.adm.ListEndOffsets(ctx, b.in)
	if err != nil {
		return err
	}
	end, ok := ends.Lookup(b.in, p)
	if !ok || end.Err != nil {
		return fmt.Errorf("end offset of %s[%d]: %v", b.in, p, end.Err)
	}
	prod, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(tr.brokers...), kgo.DefaultProduceTopic(out),
		kgo.RecordPartitioner(kgo.ManualPartitioner())}, tr.opts...)...)
	if err != nil {
		return err
	}
	defer prod.Close()
	cons, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(tr.brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{b.in: {p: kgo.NewOffset().AtStart()}})}, tr.opts...)...)
	if err != nil {
		return err
	}
	defer cons.Close()
	var failed atomic.Pointer[error]
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	for next := int64(0); next < end.Offset; {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) { ferr = errors.Join(ferr, fmt.Errorf("%s[%d]: %w", t, p, err)) })
		if ferr != nil {
			return ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			prod.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Partition: p}, promise)
		})
	}
	if err := prod.Flush(ctx); err != nil {
		return err
	}
	if e := failed.Load(); e != nil {
		return *e
	}
	return nil
}

// ---- the job's processes ----

type proc struct {
	id   string
	http string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
	// stopping is set before the bench stops the process on purpose.
	stopping atomic.Bool
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// job is one count job: its name, output topic and replicas.
type job struct {
	b     *bench
	name  string
	out   string
	dir   string
	cfg   string
	procs []*proc
}

// newJob writes the job file of a count job whose replicas connect over tr:
// with -two-stage the views-per-page job, which counts per page (key_by
// page; the second stage has the default parallelism, the input's
// partition count).
func (b *bench) newJob(ctx context.Context, name string, tr *transport) (*job, error) {
	j := &job{b: b, name: name, out: name + "-out", dir: filepath.Join(b.dir, name)}
	b.jobs = append(b.jobs, name)
	if err := os.MkdirAll(j.dir, 0o755); err != nil {
		return nil, err
	}
	if err := b.createTopic(ctx, j.out); err != nil {
		return nil, err
	}
	j.cfg = filepath.Join(j.dir, "job.yaml")
	keyBy, agg := "", "    - aggregate: {op: count}\n"
	if b.c.twoStage {
		keyBy = "    - key_by: {field: page}\n"
	}
	if b.c.yaml {
		keyBy, agg = "", yamlSteps
	}
	srcFormat := "json"
	if b.c.avro {
		srcFormat = fmt.Sprintf("{type: avro, registry: %q}", b.c.registry)
	}
	yaml := fmt.Sprintf(`job:
  name: %s
  max_parallelism: %d
  pipeline:
    - source: {topics: [%s], format: %s, start: earliest}
%s%s    - sink: {topic: %s, format: json, delivery: exactly-once}
kafka:
  brokers: [%s]
%s  session_timeout: %s
checkpoint:
  interval: %s
  timeout: 1m
  storage: file://%s
log:
  level: %s
%s`, name, b.c.maxParallelism, b.in, srcFormat, keyBy, agg, j.out, strings.Join(tr.brokers, ", "), tr.yaml, b.c.sessionTimeout, b.c.interval, filepath.Join(j.dir, "checkpoints"), b.c.logLevel, tr.top)
	return j, os.WriteFile(j.cfg, []byte(yaml), 0o600)
}

// start starts replica id (state kept across its restarts) on a free port.
func (j *job) start(id string) (*proc, error) { return j.startWith(id, j.cfg) }

// startWith is start with the job file cfg (-rolling: v2 of the job).
func (j *job) startWith(id, cfg string) (*proc, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p := &proc{id: id, http: "127.0.0.1:" + strconv.Itoa(port), log: filepath.Join(j.dir, id+".log"), done: make(chan struct{})}
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(j.b.c.processor, "run", "-c", cfg,
		"--process.replica_id="+id,
		"--state.dir="+filepath.Join(j.dir, "state-"+id),
		"--http.address="+p.http,
	)
	if dir := j.b.c.profile; dir != "" {
		base := filepath.Join(dir, j.name+"-"+id)
		p.cmd.Args = append(p.cmd.Args, "--cpu-profile="+base+".cpu.pprof", "--alloc-profile="+base+".alloc.pprof")
	}
	if j.b.c.pprof {
		p.cmd.Args = append(p.cmd.Args, "--http.pprof=true")
		benchutil.Info("replica %s of %s serves its profiler at http://%s/debug/pprof/", id, j.name, p.http)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// The job file and these flags alone configure the replica: the
	// product reads WEIR_<SECTION>_<KEY> variables, and `kafka.sh env`
	// exports WEIR_KAFKA_BROKERS (the plaintext listener), which would
	// override the file's brokers.
	p.cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "WEIR_") })
	// Dies with this process, however it ends.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	j.b.mu.Lock()
	j.b.procs = append(j.b.procs, p)
	j.b.mu.Unlock()
	j.procs = append(j.procs, p)
	return p, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (j *job) running() []*proc {
	var out []*proc
	for _, p := range j.procs {
		if p.alive() {
			out = append(out, p)
		}
	}
	return out
}

// check fails if a replica exited that the bench did not stop.
func (j *job) check() error {
	for _, p := range j.procs {
		if !p.alive() && !p.stopping.Load() {
			return fmt.Errorf("replica %s of %s exited: %v; its log ends:\n%s", p.id, j.name, p.err, tail(p.log, 30))
		}
	}
	return nil
}

func (j *job) kill(p *proc) {
	p.stopping.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// term sends SIGTERM and waits for the exit, which must be 0.
func (j *job) term(p *proc) error {
	p.stopping.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			return fmt.Errorf("replica %s after SIGTERM: %v (want exit 0)", p.id, p.err)
		}
		return nil
	case <-time.After(60 * time.Second):
		j.kill(p)
		return fmt.Errorf("replica %s did not exit within 60s of SIGTERM", p.id)
	}
}

func (j *job) stopAll() error {
	var errs error
	for _, p := range j.running() {
		p.stopping.Store(true)
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range j.procs {
		select {
		case <-p.done:
		case <-time.After(60 * time.Second):
			j.kill(p)
			errs = errors.Join(errs, fmt.Errorf("replica %s did not exit within 60s of SIGTERM", p.id))
		}
	}
	return errs
}

func (b *bench) killAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.procs {
		if p.alive() {
			p.stopping.Store(true)
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			<-p.done
		}
	}
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ---- 1, 2. the count job's throughput and checkpoints ----

// jobKind names the measured job in the human account.
func (b *bench) jobKind() string {
	if b.c.twoStage {
		return "views-per-page job"
	}
	if b.c.yaml {
		return "YAML language job"
	}
	return "count job"
}

// throughput runs a count job over the input with its replicas connected
// over tr, and returns the pass: the wall time from the start of its
// processes to the last output committed; the time from the start to the
// first output written (not yet committed), and from then to the N-th
// output written (zero if unknown). With several replicas, outputs written
// before the generation change of the start-up are written again, so the
// processing figure overstates. The checkpoint durations of the run are
// result lines <ckpt>_p50 and <ckpt>_p99 unless ckpt is empty.
func (b *bench) throughput(ctx context.Context, idx, replicas int, tr *transport, ckpt string) (*job, pass, error) {
	j, err := b.newJob(ctx, fmt.Sprintf("%s-j%d-%dr%s", b.id, idx+1, replicas, strings.ReplaceAll(tr.suffix, "_", "-")), tr)
	if err != nil {
		return nil, pass{}, err
	}
	cnt := newCounter(b.c.records)
	obs, err := b.observe(ctx, j.out, nil, cnt.record)
	if err != nil {
		return nil, pass{}, err
	}
	defer obs.stop()

	cpu0, bcpu0 := benchutil.ProcessCPU(), benchutil.ProcCPU(b.c.brokerPID)
	start := time.Now()
	for r := range replicas {
		if _, err := j.start(fmt.Sprintf("r%d", r+1)); err != nil {
			return nil, pass{}, err
		}
	}
	// The sinks' written-records counters, scraped every 100ms: when the
	// first record and the N-th were written (acknowledged, not yet
	// committed), separating start-up and the final commit from processing.
	var firstWritten, allWritten atomic.Int64
	scrapeCtx, stopScrape := context.WithCancel(ctx)
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-scrapeCtx.Done():
				return
			case <-t.C:
			}
			now := time.Now().UnixNano()
			n := j.scrapeSum(scrapeCtx, "weir_sink_records_written_total")
			if n > 0 && firstWritten.Load() == 0 {
				firstWritten.Store(now)
			}
			if n >= float64(b.c.records) {
				allWritten.Store(now)
				return
			}
		}
	}()
	defer func() { stopScrape(); <-scraped }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Minute)
wait:
	for {
		select {
		case <-cnt.reached:
			break wait
		case <-ctx.Done():
			return nil, pass{}, ctx.Err()
		case <-deadline:
			return nil, pass{}, fmt.Errorf("observer saw %d of %d records after 10 minutes", cnt.seen.Load(), b.c.records)
		case <-tick.C:
			if err := j.check(); err != nil {
				return nil, pass{}, err
			}
		}
	}
	end := time.Unix(0, cnt.doneAt.Load())
	t := pass{passes: 1, wall: end.Sub(start), brokerCPU: cpuDelta(bcpu0, benchutil.ProcCPU(b.c.brokerPID)), start: start, end: end}
	rate := t.rate(b.c.records)
	for _, p := range j.procs {
		t.cpu += benchutil.ProcCPU(p.cmd.Process.Pid)
	}
	selfCPU := benchutil.ProcessCPU() - cpu0
	first := time.Unix(0, cnt.first.Load())
	stopScrape()
	<-scraped
	if fw, aw := firstWritten.Load(), allWritten.Load(); fw > 0 && aw > fw {
		t.startup = time.Unix(0, fw).Sub(start)
		t.processing = time.Unix(0, aw).Sub(time.Unix(0, fw))
		benchutil.Info("%s, %d replica(s), %s: %d records in %v: %.0f records/s; first output written %v after the start, all written %v later (%.0f records/s), all committed %v after that; first output committed %v after the start",
			b.jobKind(), replicas, tr.name, b.c.records, t.wall.Round(time.Millisecond), rate, t.startup.Round(time.Millisecond),
			t.processing.Round(time.Millisecond), t.processingRate(b.c.records),
			end.Sub(time.Unix(0, aw)).Round(time.Millisecond), first.Sub(start).Round(time.Millisecond))
	} else {
		benchutil.Info("%s, %d replica(s), %s: %d records in %v: %.0f records/s; first output committed %v after the start (the written-records counters were not scraped in time)",
			b.jobKind(), replicas, tr.name, b.c.records, t.wall.Round(time.Millisecond), rate, first.Sub(start).Round(time.Millisecond))
	}
	benchutil.Info("  CPU: replicas %v, broker %s, this process (observer) %v", t.cpu.Round(time.Millisecond), cpuString(t.brokerCPU), selfCPU.Round(time.Millisecond))
	if read := j.scrapeSum(ctx, shuffle.MetricRecordsRead); read > 0 {
		benchutil.Info("  shuffle: %.0f records read (%.2f per input record), %.0f dropped (%s)", read, read/float64(b.c.records),
			j.scrapeSum(ctx, "weir_shuffle_dropped_records_total"), j.scrapeLabels(ctx, "weir_shuffle_dropped_records_total", "reason"))
	}

	// 2. Checkpoint durations over the run.
	durs, byCoord, err := b.checkpointDurations(ctx, j.name, start, end)
	if err != nil {
		return nil, pass{}, fmt.Errorf("checkpoint durations: %w", err)
	}
	hist := j.scrapeHistogram()
	if len(durs) == 0 {
		benchutil.Info("  no checkpoint completed during the run (it lasted %v)", t.wall.Round(time.Millisecond))
	} else {
		p50, p99 := quantile(durs, 0.50), quantile(durs, 0.99)
		if ckpt != "" {
			benchutil.Result(ckpt+"_p50", "%.0f", ms(p50), "ms")
			benchutil.Result(ckpt+"_p99", "%.0f", ms(p99), "ms")
		}
		benchutil.Info("  %d checkpoints triggered during the run completed: duration p50 %v, p99 %v, max %v (trigger's ts to the timestamp of the complete record on the commit topic)",
			len(durs), p50, p99, slices.Max(durs))
		benchutil.Info("  as the coordinator reports them (its clock ticks every 100ms): complete's ts: p50 %v, p99 %v; weir_checkpoint_duration_seconds: %s",
			quantile(byCoord, 0.5), quantile(byCoord, 0.99), hist)
	}
	return j, t, nil
}

// checkpointDurations reads a job's trigger and commit topics and returns
// complete.ts − trigger.ts of every completed checkpoint triggered within
// [from, to].
func (b *bench) checkpointDurations(ctx context.Context, jobName string, from, to time.Time) (exact, byCoord []time.Duration, err error) {
	type msg struct {
		Type string `json:"type"`
		ID   uint64 `json:"id"`
		TS   int64  `json:"ts"`
	}
	prefix := "_weir." + jobName + "."
	triggers, completes, coordTS := map[uint64]int64{}, map[uint64]int64{}, map[uint64]int64{}
	for _, t := range []string{prefix + "trigger", prefix + "commit"} {
		err := b.readControl(ctx, t, func(r *kgo.Record) {
			var m msg
			if json.Unmarshal(r.Value, &m) != nil {
				return
			}
			switch m.Type {
			case "trigger":
				triggers[m.ID] = m.TS
			case "complete":
				// The record's own timestamp: the coordinator's ts is
				// the time of its last clock tick (every 100ms), not
				// of the completion.
				completes[m.ID] = r.Timestamp.UnixMilli()
				coordTS[m.ID] = m.TS
			}
		})
		if err != nil {
			return nil, nil, err
		}
	}
	var out []time.Duration
	for id, tts := range triggers {
		cts, ok := completes[id]
		if !ok || tts < from.UnixMilli() || tts > to.UnixMilli() {
			continue
		}
		out = append(out, time.Duration(cts-tts)*time.Millisecond)
		byCoord = append(byCoord, time.Duration(coordTS[id]-tts)*time.Millisecond)
	}
	slices.Sort(out)
	slices.Sort(byCoord)
	return out, byCoord, nil
}

// readControl calls fn for every record of the control topic t, from its
// start up to its end offsets of now (read_committed; transaction markers
// skipped).
func (b *bench) readControl(ctx context.Context, t string, fn func(*kgo.Record)) error {
	// Read up to the end offsets of now: the topics keep growing (a
	// checkpoint a second). Control records are kept so that the position
	// reaches the end even when the last offset is a transaction marker.
	ends, err := b.adm.ListCommittedOffsets(ctx, t)
	if err != nil {
		return err
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.ConsumeTopics(t),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	deadline := time.Now().Add(time.Minute)
	for len(left) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not read to its end within a minute", t)
		}
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
			if !r.Attrs.IsControl() {
				fn(r)
			}
		})
	}
	return nil
}

// alignTimes reads a job's trigger and ack topics and returns the align_ms
// of every ack of a checkpoint triggered within [from, to] by a task of a
// downstream stage (a task ID not "main/<i>"), sorted.
func (b *bench) alignTimes(ctx context.Context, jobName string, from, to time.Time) ([]time.Duration, error) {
	type msg struct {
		Type    string `json:"type"`
		ID      uint64 `json:"id"`
		TS      int64  `json:"ts"`
		Task    string `json:"task"`
		Metrics struct {
			AlignMS int64 `json:"align_ms"`
		} `json:"metrics"`
	}
	prefix := "_weir." + jobName + "."
	triggers := map[uint64]int64{}
	var acks []msg
	for _, t := range []string{prefix + "trigger", prefix + "ack"} {
		err := b.readControl(ctx, t, func(r *kgo.Record) {
			var m msg
			if json.Unmarshal(r.Value, &m) != nil {
				return
			}
			switch m.Type {
			case "trigger":
				triggers[m.ID] = m.TS
			case "ack":
				acks = append(acks, m)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	var out []time.Duration
	for _, a := range acks {
		ts, ok := triggers[a.ID]
		if !ok || ts < from.UnixMilli() || ts > to.UnixMilli() || strings.HasPrefix(a.Task, "main/") {
			continue
		}
		out = append(out, time.Duration(a.Metrics.AlignMS)*time.Millisecond)
	}
	slices.Sort(out)
	return out, nil
}

// scrapeSum returns the sum of metric (all its label sets) over the running
// replicas' /metrics; replicas not answering count 0.
func (j *job) scrapeSum(ctx context.Context, metric string) float64 {
	var sum float64
	j.scrape(ctx, metric, func(_ string, v float64) { sum += v })
	return sum
}

// scrapeLabels sums metric over the replicas' /metrics by the value of
// its label, as "value n, …".
func (j *job) scrapeLabels(ctx context.Context, metric, label string) string {
	sums := map[string]float64{}
	j.scrape(ctx, metric, func(name string, v float64) {
		if _, l, ok := strings.Cut(name, label+`="`); ok {
			l, _, _ = strings.Cut(l, `"`)
			sums[l] += v
		}
	})
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(sums)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, sums[k]))
	}
	return strings.Join(parts, ", ")
}

// scrape calls fn with each sample of metric (its name with labels, and
// value) on every running replica's /metrics; replicas not answering are
// left out.
func (j *job) scrape(ctx context.Context, metric string, fn func(name string, v float64)) {
	for _, p := range j.running() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.http+"/metrics", nil)
		if err != nil {
			continue
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(data), "\n") {
			name, val, ok := strings.Cut(line, " ")
			if !ok || (name != metric && !strings.HasPrefix(name, metric+"{")) {
				continue
			}
			if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
				fn(name, v)
			}
		}
	}
}

// scrapeHistogram sums weir_checkpoint_duration_seconds over the replicas'
// /metrics (only the coordinator's observes) and describes it.
func (j *job) scrapeHistogram() string {
	buckets := map[float64]float64{}
	var count, sum float64
	for _, p := range j.running() {
		resp, err := http.Get("http://" + p.http + "/metrics")
		if err != nil {
			return "scrape: " + err.Error()
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(data), "\n") {
			name, val, ok := strings.Cut(line, " ")
			if !ok {
				continue
			}
			v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
			if err != nil {
				continue
			}
			switch {
			case strings.HasPrefix(name, `weir_checkpoint_duration_seconds_bucket{le="`):
				le := strings.TrimSuffix(strings.TrimPrefix(name, `weir_checkpoint_duration_seconds_bucket{le="`), `"}`)
				f, err := strconv.ParseFloat(le, 64)
				if err != nil { // +Inf
					continue
				}
				buckets[f] += v
			case name == "weir_checkpoint_duration_seconds_count":
				count += v
			case name == "weir_checkpoint_duration_seconds_sum":
				sum += v
			}
		}
	}
	if count == 0 {
		return "empty"
	}
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	slices.Sort(les)
	q := func(q float64) string {
		for _, le := range les {
			if buckets[le] >= q*count {
				return fmt.Sprintf("<= %gms", le*1000)
			}
		}
		return "> last bucket"
	}
	return fmt.Sprintf("%.0f checkpoints since the start, mean %.0fms, p50 %s, p99 %s", count, sum/count*1000, q(0.5), q(0.99))
}

// ---- 3. latency ----

// steady produces input at the configured rate until stop, every record's
// timestamp its produce call's time, and counts its keys into b.perKey.
type steady struct {
	stopc    chan struct{}
	done     chan struct{}
	produced atomic.Int64
	err      error
}

func (b *bench) startSteady(ctx context.Context, seed uint64) (*steady, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.DefaultProduceTopic(b.in), kgo.ProducerLinger(0))
	if err != nil {
		return nil, err
	}
	s := &steady{stopc: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer cl.Close()
		var failed atomic.Pointer[error]
		promise := func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		}
		rng := mrand.New(mrand.NewPCG(seed, 3))
		perKey := map[string]int{}
		const tick = 10 * time.Millisecond
		t := time.NewTicker(tick)
		defer t.Stop()
		start := time.Now()
		i := 0
	loop:
		for {
			select {
			case <-s.stopc:
				break loop
			case <-ctx.Done():
				break loop
			case now := <-t.C:
				// As many records as the rate asks for by now.
				want := int(now.Sub(start).Seconds() * float64(b.c.rate))
				for ; i < want; i++ {
					k, v, counted := b.nextInput(rng, -1-i)
					perKey[counted]++
					cl.Produce(ctx, &kgo.Record{Key: []byte(k), Value: v, Timestamp: time.Now()}, promise)
				}
			}
		}
		if err := cl.Flush(context.WithoutCancel(ctx)); err != nil {
			s.err = err
		}
		if p := failed.Load(); p != nil {
			s.err = errors.Join(s.err, *p)
		}
		b.mu.Lock()
		for k, n := range perKey {
			b.perKey[k] += n
		}
		b.mu.Unlock()
		s.produced.Store(int64(i))
	}()
	return s, nil
}

func (s *steady) stop() (int, error) {
	close(s.stopc)
	<-s.done
	return int(s.produced.Load()), s.err
}

func (b *bench) latency(ctx context.Context, j *job) error {
	from, err := b.committedEnds(ctx, j.out)
	if err != nil {
		return err
	}
	var mu sync.Mutex
	var lats []time.Duration
	var seen atomic.Int64
	obs, err := b.observe(ctx, j.out, from, func(r *kgo.Record, now time.Time) {
		mu.Lock()
		lats = append(lats, now.Sub(r.Timestamp))
		mu.Unlock()
		seen.Add(1)
	})
	if err != nil {
		return err
	}
	defer obs.stop()
	replicaCPU := func() (d time.Duration) {
		for _, p := range j.running() {
			d += benchutil.ProcCPU(p.cmd.Process.Pid)
		}
		return d
	}
	// CPU per second: what the job, the broker and this process (producer
	// and observer) spend, with the job idle and then while the latency is
	// measured.
	perSec := func(d, over time.Duration) string {
		if d < 0 {
			return "unknown"
		}
		return fmt.Sprintf("%.2f", d.Seconds()/over.Seconds())
	}
	const idleFor = 5 * time.Second
	cpu0, bcpu0, self0 := replicaCPU(), benchutil.ProcCPU(b.c.brokerPID), benchutil.ProcessCPU()
	if err := sleep(ctx, idleFor); err != nil {
		return err
	}
	benchutil.Info("  CPU of the job without input (checkpoints only), in cores: replicas %s, broker %s, this process %s",
		perSec(replicaCPU()-cpu0, idleFor), perSec(cpuDelta(bcpu0, benchutil.ProcCPU(b.c.brokerPID)), idleFor), perSec(benchutil.ProcessCPU()-self0, idleFor))
	cpu0, bcpu0, self0 = replicaCPU(), benchutil.ProcCPU(b.c.brokerPID), benchutil.ProcessCPU()
	s, err := b.startSteady(ctx, 10)
	if err != nil {
		return err
	}
	select {
	case <-time.After(b.c.latencyFor):
	case <-ctx.Done():
	}
	n, err := s.stop()
	if err != nil {
		return fmt.Errorf("steady input: %w", err)
	}
	benchutil.Info("  CPU during the steady input, in cores: replicas %s, broker %s, this process (producer and observer) %s",
		perSec(replicaCPU()-cpu0, b.c.latencyFor), perSec(cpuDelta(bcpu0, benchutil.ProcCPU(b.c.brokerPID)), b.c.latencyFor), perSec(benchutil.ProcessCPU()-self0, b.c.latencyFor))
	deadline := time.Now().Add(time.Minute)
	for seen.Load() < int64(n) {
		if err := j.check(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("saw %d of %d outputs a minute after the input stopped", seen.Load(), n)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if int64(len(lats)) != int64(n) {
		return fmt.Errorf("%d outputs for %d inputs", len(lats), n)
	}
	slices.Sort(lats)
	p50, p99 := quantile(lats, 0.5), quantile(lats, 0.99)
	prefix := ""
	if b.c.twoStage {
		prefix = "two_stage_"
		benchutil.Info("latency goal of a two-stage job: p99 <= checkpoint interval + 300ms = %v (p99 %v)", b.c.interval+300*time.Millisecond, p99.Round(time.Millisecond))
	}
	benchutil.Result(prefix+"e2e_latency_p50", "%.0f", ms(p50), "ms")
	benchutil.Result(prefix+"e2e_latency_p99", "%.0f", ms(p99), "ms")
	benchutil.Info("latency, %d replicas: %d records at %d records/s over %v: p50 %v, p99 %v, min %v, max %v (checkpoint interval %v)",
		len(j.running()), n, b.c.rate, b.c.latencyFor, p50.Round(time.Millisecond), p99.Round(time.Millisecond),
		lats[0].Round(time.Millisecond), lats[len(lats)-1].Round(time.Millisecond), b.c.interval)
	return nil
}

// ---- 4. recovery ----

// coordinatorOf returns the running replica whose /metrics show it
// triggering checkpoints (weir_checkpoint_triggered_total growing).
func (j *job) coordinatorOf(ctx context.Context) (*proc, error) {
	read := func() map[*proc]float64 {
		out := map[*proc]float64{}
		for _, p := range j.running() {
			resp, err := http.Get("http://" + p.http + "/metrics")
			if err != nil {
				continue
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			for _, line := range strings.Split(string(data), "\n") {
				if v, ok := strings.CutPrefix(line, "weir_checkpoint_triggered_total "); ok {
					out[p], _ = strconv.ParseFloat(strings.TrimSpace(v), 64)
				}
			}
		}
		return out
	}
	before := read()
	if err := sleep(ctx, 2*j.b.c.interval+500*time.Millisecond); err != nil {
		return nil, err
	}
	after := read()
	var found *proc
	for p, v := range after {
		if v > before[p] {
			if found != nil {
				return nil, fmt.Errorf("replicas %s and %s both trigger checkpoints", found.id, p.id)
			}
			found = p
		}
	}
	if found == nil {
		return nil, errors.New("no replica triggered a checkpoint")
	}
	return found, nil
}

// recovery measures the kill -9 of a non-coordinator replica (the headline),
// of the coordinator's replica, and a SIGTERM, with steady input.
func (b *bench) recovery(ctx context.Context, j *job) error {
	s, err := b.startSteady(ctx, 20)
	if err != nil {
		return err
	}
	defer func() {
		if s != nil {
			_, _ = s.stop()
		}
	}()
	if err := b.waitSteady(ctx, j); err != nil {
		return err
	}

	// kill -9 of a replica that is not the coordinator.
	coord, err := j.coordinatorOf(ctx)
	if err != nil {
		return err
	}
	var victim *proc
	for _, p := range j.running() {
		if p != coord {
			victim = p
			break
		}
	}
	d, err := b.outage(ctx, j, victim, syscall.SIGKILL)
	if err != nil {
		return err
	}
	benchutil.Result("recovery_after_kill_seconds", "%.2f", d.Seconds(), "s")
	benchutil.Info("recovery after kill -9 of %s (not the coordinator, %d replicas): %.2fs, with kafka.session_timeout %v",
		victim.id, len(j.running())+1, d.Seconds(), b.c.sessionTimeout)

	// The killed replica comes back; then the coordinator's replica.
	if _, err := j.start(victim.id); err != nil {
		return err
	}
	if err := b.waitSteady(ctx, j); err != nil {
		return err
	}
	coord, err = j.coordinatorOf(ctx)
	if err != nil {
		return err
	}
	d, err = b.outage(ctx, j, coord, syscall.SIGKILL)
	if err != nil {
		return err
	}
	benchutil.Result("recovery_after_coordinator_kill_seconds", "%.2f", d.Seconds(), "s")
	benchutil.Info("recovery after kill -9 of %s (the coordinator): %.2fs", coord.id, d.Seconds())
	if _, err := j.start(coord.id); err != nil {
		return err
	}
	if err := b.waitSteady(ctx, j); err != nil {
		return err
	}

	// Graceful: SIGTERM of a non-coordinator replica.
	coord, err = j.coordinatorOf(ctx)
	if err != nil {
		return err
	}
	for _, p := range j.running() {
		if p != coord {
			victim = p
			break
		}
	}
	d, err = b.outage(ctx, j, victim, syscall.SIGTERM)
	if err != nil {
		return err
	}
	benchutil.Result("recovery_after_sigterm_seconds", "%.2f", d.Seconds(), "s")
	benchutil.Info("recovery after SIGTERM of %s (leaves the group): %.2fs", victim.id, d.Seconds())

	n, err := s.stop()
	s = nil
	if err != nil {
		return fmt.Errorf("steady input: %w", err)
	}
	benchutil.Info("steady input during the recovery measurements: %d records at %d records/s", n, b.c.rate)
	return j.check()
}

// waitSteady waits until every output partition has new committed output,
// and then two checkpoint intervals.
func (b *bench) waitSteady(ctx context.Context, j *job) error {
	if _, err := b.firstOutputs(ctx, j, func() error { return nil }, 2*time.Minute); err != nil {
		return fmt.Errorf("waiting for steady output: %w", err)
	}
	return sleep(ctx, 2*b.c.interval)
}

// outage signals p and returns the time from the signal until every output
// partition has new committed output.
func (b *bench) outage(ctx context.Context, j *job, p *proc, sig syscall.Signal) (time.Duration, error) {
	var at time.Time
	last, err := b.firstOutputs(ctx, j, func() error {
		at = time.Now()
		if sig == syscall.SIGKILL {
			j.kill(p)
			return nil
		}
		return j.term(p)
	}, 3*time.Minute)
	if err != nil {
		return 0, err
	}
	return last.Sub(at), nil
}

// firstOutputs positions a read_committed consumer at the committed end
// offsets of j's output, calls act, and returns when every partition has
// shown a record, the time of the last of these firsts.
func (b *bench) firstOutputs(ctx context.Context, j *job, act func() error, timeout time.Duration) (time.Time, error) {
	from, err := b.committedEnds(ctx, j.out)
	if err != nil {
		return time.Time{}, err
	}
	var mu sync.Mutex
	firsts := map[int32]time.Time{}
	obs, err := b.observe(ctx, j.out, from, func(r *kgo.Record, now time.Time) {
		mu.Lock()
		if _, ok := firsts[r.Partition]; !ok {
			firsts[r.Partition] = now
		}
		mu.Unlock()
	})
	if err != nil {
		return time.Time{}, err
	}
	defer obs.stop()
	if err := act(); err != nil {
		return time.Time{}, err
	}
	deadline := time.Now().Add(timeout)
	for {
		mu.Lock()
		n := len(firsts)
		var last time.Time
		for _, t := range firsts {
			if t.After(last) {
				last = t
			}
		}
		mu.Unlock()
		if n == b.c.partitions {
			return last, nil
		}
		if err := j.check(); err != nil {
			return time.Time{}, err
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("only %d of %d output partitions had new committed output within %v", n, b.c.partitions, timeout)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

// ---- verification ----

// verification is what verify found in one output.
type verification struct {
	topic string
	// lost and duplicated count the outputs missing from or repeated in
	// the exact sequence 1..n of their key (exactly-once violations);
	// disordered counts the outputs with a lower count than the output
	// of the same key before them (per-key order violations).
	lost, duplicated, disordered int
	problems                     []string
}

func (v *verification) ok() bool { return v.lost == 0 && v.duplicated == 0 && v.disordered == 0 }

// verify reads topic read_committed from the start until it has total
// records (and a second more), and checks that every key's counts are
// exactly 1, 2, …, perKey[key], each once (exactly once), and in that order.
func (b *bench) verify(ctx context.Context, topic string, perKey map[string]int, total int) (*verification, error) {
	start := time.Now()
	v := &verification{topic: topic}
	counts := map[string][]int32{}
	note := func(format string, args ...any) {
		if len(v.problems) < 10 {
			v.problems = append(v.problems, fmt.Sprintf(format, args...))
		}
	}
	var seen atomic.Int64
	obs, err := b.observe(ctx, topic, nil, func(r *kgo.Record, _ time.Time) {
		var out struct {
			Key   string `json:"key"`
			Count int32  `json:"count"`
		}
		seen.Add(1)
		if err := json.Unmarshal(r.Value, &out); err != nil || out.Key != string(r.Key) {
			v.duplicated++ // not a count of its key: an output too many
			note("%s[%d]@%d: %q is not the count of key %q", r.Topic, r.Partition, r.Offset, r.Value, r.Key)
			return
		}
		cs := counts[out.Key]
		if n := len(cs); n > 0 && out.Count < cs[n-1] {
			v.disordered++
			note("%s[%d]@%d (timestamp %s): key %s: count %d after %d", r.Topic, r.Partition, r.Offset,
				r.Timestamp.UTC().Format("15:04:05.000"), out.Key, out.Count, cs[n-1])
		}
		counts[out.Key] = append(cs, out.Count)
	})
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for seen.Load() < int64(total) && time.Now().Before(deadline) {
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			obs.stop()
			return nil, err
		}
	}
	// A little longer, to see an output too many.
	_ = sleep(ctx, time.Second)
	obs.stop()
	for k, cs := range counts {
		if _, ok := perKey[k]; !ok {
			v.duplicated += len(cs)
			note("key %s: %d outputs for a key never produced", k, len(cs))
		}
	}
	for k, n := range perKey {
		cs := slices.Clone(counts[k])
		slices.Sort(cs)
		have := map[int32]int{}
		for _, c := range cs {
			have[c]++
		}
		for c := int32(1); c <= int32(n); c++ {
			switch m := have[c]; {
			case m == 0:
				v.lost++
				note("key %s: count %d missing (%d inputs)", k, c, n)
			case m > 1:
				v.duplicated += m - 1
				note("key %s: count %d %d times", k, c, m)
			}
			delete(have, c)
		}
		for c, m := range have {
			v.duplicated += m
			note("key %s: count %d, beyond its %d inputs", k, c, n)
		}
	}
	benchutil.Info("verified %s: %d outputs for %d inputs over %d keys in %v: %d lost, %d duplicated (exactly-once violations), %d out of order per key",
		topic, seen.Load(), total, len(perKey), time.Since(start).Round(time.Millisecond), v.lost, v.duplicated, v.disordered)
	return v, nil
}

// ---- helpers ----

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// quantile is the nearest-rank quantile of sorted ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	i := int(float64(len(ds))*q+0.999999) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// loadAvg is benchutil.LoadAvg.
func loadAvg() string { return benchutil.LoadAvg() }

// leftovers reports the topics earlier runs left on the broker (-keep, or
// a run that was killed), and with -clean deletes them. Every partition
// costs the broker CPU in the background (its scheduler walks them all:
// ISR checks, high-watermark checkpoints); about 800 of them, left by
// three -keep runs of -two-stage, lowered the next runs' ratios by a
// tenth.
func (b *bench) leftovers(ctx context.Context) error {
	tds, err := b.adm.ListTopics(ctx)
	if err != nil {
		benchutil.Info("could not list the broker's topics: %v", err)
		return nil
	}
	var topics []string
	var parts int
	for _, td := range tds.Sorted() {
		if strings.HasPrefix(td.Topic, "weir-bench-") || strings.HasPrefix(td.Topic, "_weir.weir-bench-") {
			topics = append(topics, td.Topic)
			parts += len(td.Partitions)
		}
	}
	switch {
	case len(topics) == 0:
		return nil
	case !b.c.clean:
		benchutil.Info("WARNING: the broker holds %d topics (%d partitions) left by earlier runs; they slow it down: run with -clean to delete them first", len(topics), parts)
		return nil
	}
	resps, err := b.adm.DeleteTopics(ctx, topics...)
	if err == nil {
		err = resps.Error()
	}
	if err != nil {
		return fmt.Errorf("delete the topics of earlier runs: %w", err)
	}
	benchutil.Info("deleted %d topics (%d partitions) left by earlier runs", len(topics), parts)
	return nil
}

// cpuDelta is b − a, or -1 if either is unknown (negative).
func cpuDelta(a, b time.Duration) time.Duration {
	if a < 0 || b < 0 {
		return -1
	}
	return b - a
}

func cpuString(d time.Duration) string {
	if d < 0 {
		return "unknown"
	}
	return d.Round(time.Millisecond).String()
}
