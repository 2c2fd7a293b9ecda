// Command nexmarkbench is Weir's Nexmark benchmark (issue 16, `make
// bench-nexmark`): the queries of examples/nexmark, each run by one
// process (`processor run` for a YAML query, the Go job's own binary for
// q4) on the real broker with exactly-once sinks and a checkpoint every
// second, over the same generated events.
//
// It writes -events Nexmark events (package nexmark, seed 0, the
// reference's event rate of 10 000 000 events/s of event time unless
// -event-rate says otherwise) once: every event to <run>-nexmark (q0, q1,
// q2 read it) and the persons and auctions to <run>-nexmark-persons and
// <run>-nexmark-auctions (q3 and q8 join them), -partitions partitions
// each; and to each partition of <run>-nexmark one person an hour of
// event time after the last event, so that the watermark passes every
// window and auction expiry (a task whose inputs are all idle keeps its
// watermark). Then, in one run:
//
//   - the raw pipe, the baseline, before the queries and after them (its
//     figure is over both passes): in this process, per partition of
//     <run>-nexmark a read_committed consumer and an idempotent producer
//     that writes each record to the same partition of another topic; and
//     after the queries, if q3 or q8 ran, twice over the split persons and
//     auctions, their input, as their baseline;
//   - each query: a fresh job and output topic; its clock starts before
//     the process starts and stops once its sources have read every record
//     of their topics (weir_source_records_read_total) and a checkpoint
//     has completed after that (weir_checkpoint_last_completed_id), so that
//     every output is committed (for q4, q5 and q7, whose results come
//     when the watermark passes, also until the output topic has committed
//     records): events/s is the query's input events over
//     that time; also the process's CPU time over it (cores used, and
//     events per core-second), the checkpoint durations of the run (trigger
//     to complete, from its control topics: p50, p99), and its state size
//     at the end (weir_state_snapshot_size_bytes of the last snapshots).
//
// Standard output gets one `result: <name> = <value> <unit>` line per
// figure; standard error a human account. Run it with `make bench-nexmark`
// (ARGS=-short: 1 000 000 events) or:
//
//	make build && eval $(bash scripts/kafka.sh env) && go run ./internal/tools/nexmarkbench -processor bin/processor [-short]
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
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
	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/nexmark"
)

type config struct {
	processor  string
	brokers    []string
	events     int64
	eventRate  int64
	partitions int
	interval   time.Duration
	queries    []string
	examples   string
	keep       bool
}

// queryInputs are the topics (suffixes of <run>) each query reads.
var queryInputs = map[string][]string{
	"q0": {"-nexmark"}, "q1": {"-nexmark"}, "q2": {"-nexmark"},
	"q3": {"-nexmark-persons", "-nexmark-auctions"}, "q4": {"-nexmark"}, "q5": {"-nexmark"},
	"q7": {"-nexmark"}, "q8": {"-nexmark-persons", "-nexmark-auctions"},
}

// closing are the queries whose results come when the watermark passes a
// window's end or an auction's expiry.
var closing = map[string]bool{"q4": true, "q5": true, "q7": true}

// goJobs are the queries defined in Go: examples/nexmark/<q>, a program
// whose topics are set by NEXMARK_TOPIC and <Q>_TOPIC.
var goJobs = map[string]bool{"q4": true}

func main() {
	var c config
	var brokers, queries string
	short := flag.Bool("short", false, "1 000 000 events instead of -events")
	flag.StringVar(&c.processor, "processor", "bin/processor", "the processor binary (make build)")
	flag.StringVar(&brokers, "brokers", os.Getenv(kafkatest.EnvBrokers), "comma-separated seed brokers (env "+kafkatest.EnvBrokers+")")
	flag.Int64Var(&c.events, "events", 10_000_000, "events generated")
	flag.Int64Var(&c.eventRate, "event-rate", nexmark.DefaultEventRate, "events per second of event time (the events' timestamps)")
	flag.IntVar(&c.partitions, "partitions", 8, "partitions of every topic (tasks of each stage)")
	flag.DurationVar(&c.interval, "interval", time.Second, "checkpoint.interval of the jobs")
	flag.StringVar(&queries, "queries", "q0,q1,q2,q3,q4,q5,q7,q8", "the queries run, in order (examples/nexmark/<q>.yaml, or the Go job examples/nexmark/<q>)")
	flag.StringVar(&c.examples, "examples", "examples/nexmark", "the directory of the query files")
	flag.BoolVar(&c.keep, "keep", false, "keep the topics and the work directory")
	flag.Parse()
	if *short {
		c.events = 1_000_000
	}
	c.brokers = strings.Split(brokers, ",")
	c.queries = strings.Split(queries, ",")
	var errs []error
	if brokers == "" {
		errs = append(errs, fmt.Errorf("brokers: none; set %s (eval $(bash scripts/kafka.sh env)) or -brokers", kafkatest.EnvBrokers))
	}
	for _, q := range c.queries {
		if _, ok := queryInputs[q]; !ok {
			errs = append(errs, fmt.Errorf("queries: %q has no job (there are q0, q1, q2, q3, q4, q5, q7, q8)", q))
		}
	}
	if c.events < int64(c.partitions) || c.partitions < 1 || c.eventRate < 1 {
		errs = append(errs, fmt.Errorf("events %d, partitions %d, event-rate %d: want at least one event per partition", c.events, c.partitions, c.eventRate))
	}
	if _, err := os.Stat(c.processor); err != nil {
		errs = append(errs, fmt.Errorf("processor: %w (make build)", err))
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "nexmarkbench:", err)
		os.Exit(2)
	}
	if abs, err := filepath.Abs(c.processor); err == nil {
		c.processor = abs
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "nexmarkbench:", err)
		os.Exit(1)
	}
}

type bench struct {
	c      config
	adm    *kadm.Client
	run    string
	dir    string
	topics []string
	counts map[string]int64 // records per input topic suffix
}

func run(ctx context.Context, c config) (err error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	b := &bench{c: c, adm: kadm.NewClient(cl), run: "weir-nexmark-" + strconv.FormatInt(time.Now().Unix()%1_000_000, 36), counts: map[string]int64{}}
	if b.dir, err = os.MkdirTemp("", b.run+"-"); err != nil {
		return err
	}
	defer b.cleanup(&err)
	benchutil.Info("nexmark: %d events (event rate %d/s), %d partitions, checkpoint every %v, exactly-once sinks; queries %s; run %s; %d CPUs, load average %s",
		c.events, c.eventRate, c.partitions, c.interval, strings.Join(c.queries, " "), b.run, runtime.NumCPU(), benchutil.LoadAvg())
	if err := b.preload(ctx); err != nil {
		return err
	}
	var raw []time.Duration
	rawPass := func() error {
		d, err := b.rawPipe(ctx, len(raw)+1, "-nexmark")
		raw = append(raw, d)
		return err
	}
	if err := rawPass(); err != nil {
		return err
	}
	type fig struct {
		q    string
		rate float64
	}
	var figs []fig
	for _, q := range c.queries {
		rate, err := b.query(ctx, q)
		if err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
		figs = append(figs, fig{q, rate})
	}
	if err := rawPass(); err != nil {
		return err
	}
	rawRate := float64(2*b.counts["-nexmark"]) / (raw[0] + raw[1]).Seconds()
	benchutil.Result("nexmark_raw_pipe_throughput", "%.0f", rawRate, "events/s")
	// The joins read the split topics: their baseline is the raw pipe of
	// those (two passes as well).
	var splitRate float64
	split := []string{"-nexmark-persons", "-nexmark-auctions"}
	if slices.ContainsFunc(figs, func(f fig) bool { return slices.Equal(queryInputs[f.q], split) }) {
		var d time.Duration
		for pass := range 2 {
			p, err := b.rawPipe(ctx, 3+pass, split...)
			if err != nil {
				return err
			}
			d += p
		}
		splitRate = float64(2*(b.counts[split[0]]+b.counts[split[1]])) / d.Seconds()
		benchutil.Result("nexmark_raw_pipe_split_throughput", "%.0f", splitRate, "events/s")
	}
	for _, f := range figs {
		base := rawRate
		if slices.Equal(queryInputs[f.q], split) {
			base = splitRate
		}
		benchutil.Result("nexmark_"+f.q+"_vs_raw_ratio", "%.3f", f.rate/base, "ratio")
	}
	benchutil.Info("load average now %s", benchutil.LoadAvg())
	return nil
}

// preload writes the events: all of them to <run>-nexmark, the persons
// and auctions also to <run>-nexmark-persons and -auctions.
func (b *bench) preload(ctx context.Context) error {
	start := time.Now()
	for _, s := range []string{"-nexmark", "-nexmark-persons", "-nexmark-auctions"} {
		if err := b.createTopic(ctx, b.run+s); err != nil {
			return err
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	g, err := nexmark.NewGenerator(nexmark.Config{Events: b.c.events, EventRate: b.c.eventRate})
	if err != nil {
		return err
	}
	var failed atomic.Pointer[error]
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	var bytes, last int64
	for e, ok := g.Next(); ok; e, ok = g.Next() {
		last = e.DateTime()
		// The records' Kafka timestamps are the time they are written, not
		// their event times (2025 by default, which the jobs read from
		// date_time): a broker's retention would delete segments of
		// records that old as soon as they roll, under the queries.
		v, k := nexmark.AppendJSON(nil, e), nexmark.Key(e)
		bytes += int64(len(v))
		cl.Produce(ctx, &kgo.Record{Topic: b.run + "-nexmark", Key: k, Value: v}, promise)
		b.counts["-nexmark"]++
		switch e.Kind {
		case nexmark.KindPerson:
			cl.Produce(ctx, &kgo.Record{Topic: b.run + "-nexmark-persons", Key: k, Value: v}, promise)
			b.counts["-nexmark-persons"]++
		case nexmark.KindAuction:
			cl.Produce(ctx, &kgo.Record{Topic: b.run + "-nexmark-auctions", Key: k, Value: v}, promise)
			b.counts["-nexmark-auctions"]++
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	if p := failed.Load(); p != nil {
		return fmt.Errorf("preload: %w", *p)
	}
	// The flush: one person per partition, an hour after the last event.
	man, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer man.Close()
	flush := nexmark.Flush(last)
	for p := range int32(b.c.partitions) {
		if err := man.ProduceSync(ctx, &kgo.Record{Topic: b.run + "-nexmark", Partition: p, Key: nexmark.Key(flush), Value: nexmark.AppendJSON(nil, flush)}).FirstErr(); err != nil {
			return fmt.Errorf("preload: flush: %w", err)
		}
		b.counts["-nexmark"]++
	}
	benchutil.Info("preloaded %d events (%.1f MB of values; %d persons, %d auctions also split) in %v",
		b.counts["-nexmark"], float64(bytes)/1e6, b.counts["-nexmark-persons"], b.counts["-nexmark-auctions"], time.Since(start).Round(time.Millisecond))
	return nil
}

func (b *bench) createTopic(ctx context.Context, t string) error {
	b.topics = append(b.topics, t)
	return benchutil.CreateTopic(ctx, b.adm, t, b.c.partitions)
}

// rawPipe copies the input topics (suffixes of <run>) to new topics,
// partition by partition, and returns the time from its start to the last
// record acknowledged.
func (b *bench) rawPipe(ctx context.Context, pass int, inputs ...string) (time.Duration, error) {
	type part struct {
		in, out string
		p       int32
		end     int64
	}
	var parts []part
	var n int64
	for _, in := range inputs {
		out := fmt.Sprintf("%s-raw-%d%s", b.run, pass, in)
		if err := b.createTopic(ctx, out); err != nil {
			return 0, err
		}
		ends, err := b.adm.ListEndOffsets(ctx, b.run+in)
		if err != nil {
			return 0, err
		}
		for p := range int32(b.c.partitions) {
			end, _ := ends.Lookup(b.run+in, p)
			parts = append(parts, part{b.run + in, out, p, end.Offset})
		}
		n += b.counts[in]
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(parts))
	for i, pt := range parts {
		wg.Go(func() { errs[i] = b.rawPartition(ctx, pt.in, pt.out, pt.p, pt.end) })
	}
	wg.Wait()
	d := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	benchutil.Info("raw pipe of %s, pass %d: %d events in %v: %.0f events/s", strings.Join(inputs, " "), pass, n, d.Round(time.Millisecond), float64(n)/d.Seconds())
	return d, nil
}

func (b *bench) rawPartition(ctx context.Context, in, out string, p int32, end int64) error {
	cons, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{in: {p: kgo.NewOffset().AtStart()}}))
	if err != nil {
		return err
	}
	defer cons.Close()
	prod, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer prod.Close()
	var failed atomic.Pointer[error]
	for next := int64(0); next < end; {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			prod.Produce(ctx, &kgo.Record{Topic: out, Partition: p, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}, func(_ *kgo.Record, err error) {
				if err != nil {
					failed.CompareAndSwap(nil, &err)
				}
			})
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

// query runs q's job over the preloaded events and prints its figures;
// it returns its events/s.
func (b *bench) query(ctx context.Context, q string) (float64, error) {
	job := b.run + "-" + q
	dir := filepath.Join(b.dir, q)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	if err := b.createTopic(ctx, b.run+"-nexmark-"+q); err != nil {
		return 0, err
	}
	bin, env := b.c.processor, childEnv()
	var y string
	if goJobs[q] {
		// The Go job: its topics from the environment, its control
		// topics under the prefix a YAML job named job would have.
		var err error
		if bin, err = e2etest.BuildExample(dir, "nexmark/"+q); err != nil {
			return 0, err
		}
		env = append(env, "NEXMARK_TOPIC="+b.run+"-nexmark", strings.ToUpper(q)+"_TOPIC="+b.run+"-nexmark-"+q)
		y = fmt.Sprintf("kafka:\n  brokers: [%s]\n  topic_prefix: _weir.%s.\n", strings.Join(b.c.brokers, ", "), job)
	} else {
		src, err := os.ReadFile(filepath.Join(b.c.examples, q+".yaml"))
		if err != nil {
			return 0, err
		}
		y = strings.ReplaceAll(string(src), "nexmark", b.run+"-nexmark")
		y = strings.ReplaceAll(y, "name: "+b.run+"-nexmark-"+q, "name: "+job)
		y = strings.ReplaceAll(y, "127.0.0.1:9092", strings.Join(b.c.brokers, ", "))
	}
	cfg := filepath.Join(dir, "job.yaml")
	if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
		return 0, err
	}
	var input int64
	for _, s := range queryInputs[q] {
		input += b.counts[s]
	}
	addr, err := freeAddr()
	if err != nil {
		return 0, err
	}
	logf, err := os.Create(filepath.Join(dir, "processor.log"))
	if err != nil {
		return 0, err
	}
	defer logf.Close()
	start := time.Now()
	cmd := exec.CommandContext(ctx, bin, "run", "-c", cfg, "--process.replica_id=r0", "--state.dir="+filepath.Join(dir, "state"),
		"--checkpoint.storage=file://"+filepath.Join(dir, "checkpoints"), "--checkpoint.interval="+b.c.interval.String(), "--http.address="+addr, "--log.level=warn")
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	var read time.Time
	var readCkpt, firstRead float64 = -1, 0
	var firstAt time.Time
	for {
		select {
		case err := <-exited:
			return 0, fmt.Errorf("processor exited: %v (log: %s)", err, logf.Name())
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		m := scrape(addr)
		n, ckpt := m["weir_source_records_read_total"], m["weir_checkpoint_last_completed_id"]
		if firstAt.IsZero() && n > 0 {
			firstAt, firstRead = time.Now(), n
		}
		if read.IsZero() && n >= float64(input) {
			read, readCkpt = time.Now(), ckpt
		}
		if !read.IsZero() && ckpt > readCkpt && (!closing[q] || b.committed(ctx, b.run+"-nexmark-"+q) > 0) {
			break
		}
	}
	done := time.Now()
	wall := done.Sub(start)
	cpu := benchutil.ProcCPU(cmd.Process.Pid)
	state := scrape(addr)["weir_state_snapshot_size_bytes"]
	rate := float64(input) / wall.Seconds()
	benchutil.Result("nexmark_"+q+"_throughput", "%.0f", rate, "events/s")
	if proc := done.Sub(firstAt).Seconds(); proc > 0 {
		benchutil.Result("nexmark_"+q+"_processing_throughput", "%.0f", (float64(input)-firstRead)/proc, "events/s")
	}
	if cpu > 0 {
		benchutil.Result("nexmark_"+q+"_cores", "%.2f", cpu.Seconds()/wall.Seconds(), "cores")
		benchutil.Result("nexmark_"+q+"_per_core", "%.0f", float64(input)/cpu.Seconds(), "events/core-s")
	}
	benchutil.Result("nexmark_"+q+"_state", "%.1f", state/1e6, "MB")
	if cs, err := e2etest.ReadCheckpoints(ctx, b.c.brokers, job); err == nil && len(cs.Durations) > 0 {
		benchutil.Result("nexmark_"+q+"_checkpoint_p50", "%d", e2etest.Quantile(cs.Durations, 0.5).Milliseconds(), "ms")
		benchutil.Result("nexmark_"+q+"_checkpoint_p99", "%d", e2etest.Quantile(cs.Durations, 0.99).Milliseconds(), "ms")
	}
	benchutil.Info("%s: %d input events read and committed %v after the start (first record read after %v); CPU %v",
		q, input, wall.Round(time.Millisecond), firstAt.Sub(start).Round(time.Millisecond), cpu.Round(time.Millisecond))
	b.topics = append(b.topics, "_weir."+job+".trigger", "_weir."+job+".ack", "_weir."+job+".commit", "_weir."+job+".members")
	return rate, nil
}

// committed returns the records of topic visible to read_committed
// consumers (the sum of its partitions' last stable offsets).
func (b *bench) committed(ctx context.Context, topic string) int64 {
	offs, err := b.adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return 0
	}
	var n int64
	offs.Each(func(o kadm.ListedOffset) { n += o.Offset })
	return n
}

// scrape sums each metric's samples at http://addr/metrics.
func scrape(addr string) map[string]float64 {
	out := map[string]float64{}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
			if j := strings.LastIndexByte(line, '}'); j >= 0 {
				rest = strings.TrimSpace(line[j+1:])
			}
		}
		if v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64); err == nil {
			out[name] += v
		}
	}
	return out
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// childEnv is this process's environment without WEIR_* variables, which
// would override the job file.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WEIR_") {
			env = append(env, kv)
		}
	}
	return env
}

func (b *bench) cleanup(err *error) {
	if b.c.keep {
		benchutil.Info("kept: topics %s-*, work directory %s", b.run, b.dir)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, derr := b.adm.DeleteTopics(ctx, b.topics...); derr != nil {
		benchutil.Info("delete topics: %v", derr)
	}
	if *err != nil {
		benchutil.Info("work directory kept: %s", b.dir)
		return
	}
	_ = os.RemoveAll(b.dir)
}
