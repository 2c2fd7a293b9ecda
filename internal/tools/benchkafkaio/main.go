// Command benchkafkaio measures, on the real broker and in one run, how close
// Weir's exactly-once Kafka path comes to what the machine allows. It copies
// the same N records from an input topic to an output topic twice:
//
//   - raw: the baseline, a plain franz-go pipe. Per input partition one
//     consumer (read_committed, from the start) and one idempotent producer;
//     each polled record is produced to the same partition of the output
//     topic. A record is through when its produce is acknowledged.
//   - weir: per input partition one task, a source.Source (read_committed)
//     feeding a sink.Sink in exactly-once mode. A simulated coordinator
//     triggers checkpoint n in every task each checkpoint interval; between
//     two batches the task places barrier n (Source.Barrier) and calls
//     PreCommit(n), and a background goroutine waits for the pre-commit's
//     flush and then completes the checkpoint at once (Sink.NotifyComplete,
//     Source.Complete). A record is through when its transaction is
//     committed.
//
// Both pipes run the same number of partitions concurrently, one goroutine
// per partition, with the same producer options, a new output record per
// input record, and the same clock: it starts after the producers are ready
// (raw: InitProducerID; weir: Sink.Recover, which fences the pool) and before
// the consumers are created, and stops when the last record is through.
// Each round copies the input once with each pipe, into fresh output topics;
// rounds alternate which pipe goes first, and each throughput is over all
// rounds.
//
// At the end the weir output topic is read back read_committed: it must hold
// every input record exactly once, or the program fails without printing a
// figure. It prints one line per figure,
//
//	result: <name> = <value> <unit>
//
// plus a human summary on standard error: per pass, the wall time, the CPU
// time of this process and of the broker process (the whole broker, so
// including anything else it serves meanwhile), where the partitions'
// goroutines spent their time, and for weir the checkpoints and their flush
// and commit latencies. -cpuprofile and -raw-cpuprofile write CPU profiles
// of the first round's passes. Every topic and the consumer group
// it creates are unique to the run and deleted at the end (the transactional
// IDs stay on the broker until it expires them). Run it with
// `make bench-kafkaio`, or:
//
//	eval $(bash scripts/kafka.sh env) && go run ./internal/tools/benchkafkaio [-short]
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/bits"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/benchutil"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/kafkaio/source"
)

type config struct {
	brokers    []string
	records    int
	size       int
	partitions int
	interval   time.Duration
	rounds     int
	rawPoll    int
	srcBatch   int
	timeout    time.Duration
	cpuProfile string
	rawProfile string
	brokerPID  int
}

func main() {
	var c config
	var brokers string
	short := flag.Bool("short", false, "quick smoke run: 50,000 records (overrides -records)")
	flag.StringVar(&brokers, "brokers", os.Getenv(kafkatest.EnvBrokers), "comma-separated seed brokers (env "+kafkatest.EnvBrokers+")")
	flag.IntVar(&c.records, "records", envInt("WEIR_BENCH_KAFKAIO_RECORDS", 1_000_000), "records copied by each pipe (env WEIR_BENCH_KAFKAIO_RECORDS)")
	flag.IntVar(&c.size, "size", envInt("WEIR_BENCH_KAFKAIO_SIZE", 100), "record value size in bytes, at least 8 (env WEIR_BENCH_KAFKAIO_SIZE)")
	flag.IntVar(&c.partitions, "partitions", envInt("WEIR_BENCH_KAFKAIO_PARTITIONS", 8), "partitions of each topic, and pipes run concurrently (env WEIR_BENCH_KAFKAIO_PARTITIONS)")
	flag.DurationVar(&c.interval, "interval", envDuration("WEIR_BENCH_KAFKAIO_INTERVAL", time.Second), "checkpoint interval of the weir pipe (env WEIR_BENCH_KAFKAIO_INTERVAL)")
	flag.IntVar(&c.rounds, "rounds", envInt("WEIR_BENCH_KAFKAIO_ROUNDS", 2), "rounds of both pipes, alternating which goes first; throughputs are over all rounds (env WEIR_BENCH_KAFKAIO_ROUNDS)")
	flag.IntVar(&c.rawPoll, "raw-poll-records", 0, "the raw consumer polls at most this many records at a time (PollRecords); 0: whole fetches (PollFetches)")
	flag.IntVar(&c.srcBatch, "source-batch", 0, "the weir source's MaxBatchRecords; 0: kafkaio's default")
	flag.DurationVar(&c.timeout, "timeout", 10*time.Minute, "give up after this long")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the weir pipe (first round) to this file")
	flag.StringVar(&c.rawProfile, "raw-cpuprofile", "", "write a CPU profile of the raw pipe (first round) to this file")
	flag.IntVar(&c.brokerPID, "broker-pid", 0, "broker process to report the CPU time of (default: the pid file of scripts/kafka.sh, if found)")
	flag.Parse()
	if *short {
		c.records = 50_000
	}
	c.brokers = strings.Split(brokers, ",")
	var errs []error
	if brokers == "" {
		errs = append(errs, fmt.Errorf("brokers: none; set %s (eval $(bash scripts/kafka.sh env)) or -brokers", kafkatest.EnvBrokers))
	}
	if c.partitions < 1 {
		errs = append(errs, fmt.Errorf("partitions: %d, want at least 1", c.partitions))
	}
	if c.records < c.partitions {
		errs = append(errs, fmt.Errorf("records: %d, want at least one per partition (%d)", c.records, c.partitions))
	}
	if c.size < 8 {
		errs = append(errs, fmt.Errorf("size: %d, want at least 8 (the record's sequence number)", c.size))
	}
	if c.rounds < 1 {
		errs = append(errs, fmt.Errorf("rounds: %d, want at least 1", c.rounds))
	}
	if c.interval <= 0 {
		errs = append(errs, fmt.Errorf("interval: %v, want more than 0", c.interval))
	}
	if err := errors.Join(errs...); err != nil {
		fatal(err)
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

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "benchkafkaio: FAILED:", err)
	os.Exit(1)
}

func envInt(k string, def int) int {
	if v := os.Getenv(k); v != "" {
		n, err := strconv.Atoi(strings.ReplaceAll(v, "_", ""))
		if err != nil {
			fatal(fmt.Errorf("%s=%q: %w", k, v, err))
		}
		return n
	}
	return def
}

func envDuration(k string, def time.Duration) time.Duration {
	if v := os.Getenv(k); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			fatal(fmt.Errorf("%s=%q: %w", k, v, err))
		}
		return d
	}
	return def
}

// bench is one run: its unique names, the input layout and the names of
// the current round.
type bench struct {
	c     config
	adm   *kadm.Client
	id    string // unique to the run
	in    string
	group string
	// want[p] is the number of records in input partition p: record i is
	// in partition i % partitions.
	want []int
	// topics are the topics the run created, for cleanup.
	topics []string

	// The current round's output topics and transactional ID prefix.
	rawOut, eosOut, txnPrefix string
}

func run(ctx context.Context, c config) error {
	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...))
	if err != nil {
		return err
	}
	defer admCl.Close()
	if _, err := kafkatest.Ping(ctx, c.brokers); err != nil {
		return fmt.Errorf("broker at %s: %w", strings.Join(c.brokers, ","), err)
	}
	id := "weir-bench-kafkaio-" + strings.ToLower(rand.Text()[:10])
	b := &bench{
		c: c, adm: kadm.NewClient(admCl), id: id,
		in: id + "-in", group: id + "-source",
		want: make([]int, c.partitions),
	}
	for i := range c.records {
		b.want[i%c.partitions]++
	}
	benchutil.Info("%d records of %d bytes over %d partitions, checkpoint every %v, %d round(s); topics %s-*",
		c.records, c.size, c.partitions, c.interval, c.rounds, id)
	defer b.cleanup()
	if err := b.createTopic(ctx, b.in); err != nil {
		return err
	}
	if err := b.preload(ctx); err != nil {
		return err
	}

	// Rounds alternate the order (raw, weir; weir, raw; ...), so that
	// whatever the first pass of a round pays for (the broker still
	// settling after the preload, say) falls on both pipes alike.
	var rawWall, eosWall time.Duration
	var passes []measurement
	var ratios []string
	for round := 1; round <= c.rounds; round++ {
		b.rawOut = fmt.Sprintf("%s-r%d-raw-out", id, round)
		b.eosOut = fmt.Sprintf("%s-r%d-eos-out", id, round)
		b.txnPrefix = fmt.Sprintf("%s.r%d.", id, round)
		for _, t := range []string{b.rawOut, b.eosOut} {
			if err := b.createTopic(ctx, t); err != nil {
				return err
			}
		}
		rawProfile, eosProfile := c.rawProfile, c.cpuProfile
		if round > 1 {
			rawProfile, eosProfile = "", ""
		}
		for i := range 2 {
			if (round+i)%2 == 1 {
				m, err := b.measure(ctx, round, "raw", rawProfile, b.rawPipe)
				if err == nil {
					err = b.checkRawOutput(ctx)
				}
				if err != nil {
					return fmt.Errorf("round %d: raw pipe: %w", round, err)
				}
				rawWall += m.wall
				passes = append(passes, m)
			} else {
				m, err := b.measure(ctx, round, "weir", eosProfile, b.weirPipe)
				if err == nil {
					err = b.checkEOSOutput(ctx)
				}
				if err != nil {
					return fmt.Errorf("round %d: weir pipe: %w", round, err)
				}
				eosWall += m.wall
				passes = append(passes, m)
			}
		}
		r, w := passes[len(passes)-2], passes[len(passes)-1]
		if r.name != "raw" {
			r, w = w, r
		}
		ratios = append(ratios, fmt.Sprintf("%.3f", r.wall.Seconds()/w.wall.Seconds()))
	}

	total := float64(c.records) * float64(c.rounds)
	rawRate, eosRate := total/rawWall.Seconds(), total/eosWall.Seconds()
	benchutil.Result("kafkaio_raw_pipe_throughput", "%.0f", rawRate, "records/s")
	benchutil.Result("kafkaio_weir_eos_throughput", "%.0f", eosRate, "records/s")
	benchutil.Result("kafkaio_eos_vs_raw_ratio", "%.3f", eosRate/rawRate, "ratio")
	for _, m := range passes {
		benchutil.Info("round %d %-4s %8.0f records/s (%5.1f MB/s of values): %v wall; CPU %v this process, %s broker%s",
			m.round, m.name, float64(c.records)/m.wall.Seconds(), float64(c.records)*float64(c.size)/m.wall.Seconds()/1e6,
			m.wall.Round(time.Millisecond), m.cpu.Round(time.Millisecond), m.brokerCPUString(), m.extra)
	}
	benchutil.Info("weir/raw = %.3f over %d round(s) (goal >= 0.9; per round: %s); weir output verified each round: %d records, each exactly once, read_committed",
		eosRate/rawRate, c.rounds, strings.Join(ratios, ", "), c.records)
	return nil
}

func (b *bench) createTopic(ctx context.Context, t string) error {
	if err := benchutil.CreateTopic(ctx, b.adm, t, b.c.partitions); err != nil {
		return err
	}
	b.topics = append(b.topics, t)
	return nil
}

// cleanup deletes what the run created, with a fresh context: it also runs
// after an interrupt or a timeout.
func (b *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := b.adm.DeleteGroup(ctx, b.group); err != nil {
		benchutil.Info("delete group %s: %v", b.group, err)
	}
	if len(b.topics) == 0 {
		return
	}
	resp, err := b.adm.DeleteTopics(ctx, b.topics...)
	if err == nil {
		for _, r := range resp.Sorted() {
			if r.Err != nil {
				err = errors.Join(err, fmt.Errorf("%s: %w", r.Topic, r.Err))
			}
		}
	}
	if err != nil {
		benchutil.Info("delete topics: %v", err)
	}
}

// preload writes the input: record i goes to partition i % partitions, its
// value is i (8 bytes, big-endian) followed by random letters, so that
// values compress about as well as ordinary text does.
func (b *bench) preload(ctx context.Context) error {
	start := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.DefaultProduceTopic(b.in),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
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
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 "
	rng := mrand.New(mrand.NewPCG(1, 2))
	buf := make([]byte, 0, 1<<20)
	for i := range b.c.records {
		if cap(buf)-len(buf) < b.c.size {
			buf = make([]byte, 0, 1<<20)
		}
		v := binary.BigEndian.AppendUint64(buf[len(buf):], uint64(i))
		for len(v) < b.c.size {
			v = append(v, letters[rng.IntN(len(letters))])
		}
		buf = buf[:len(buf)+len(v)]
		cl.Produce(ctx, &kgo.Record{Value: v, Partition: int32(i % b.c.partitions)}, promise)
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	if p := failed.Load(); p != nil {
		return fmt.Errorf("preload: %w", *p)
	}
	benchutil.Info("preloaded %s in %v", b.in, time.Since(start).Round(time.Millisecond))
	return nil
}

// producerOpts are the options of every output producer, raw and weir.
func (b *bench) producerOpts(topic string) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(b.c.brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner())}
}

// measurement is one pipe's run.
type measurement struct {
	round     int
	name      string
	wall      time.Duration
	cpu       time.Duration // this process, user + system
	brokerCPU time.Duration // -1 if unknown
	extra     string
}

func (m measurement) brokerCPUString() string {
	if m.brokerCPU < 0 {
		return "unknown"
	}
	return m.brokerCPU.Round(time.Millisecond).String()
}

// pipe prepares a pipe (untimed), and returns the timed part and a cleanup.
type pipe func(ctx context.Context) (timed func(ctx context.Context) (string, error), done func(), err error)

// measure runs a pipe, timing only its timed part, under a CPU profile if
// profile is set.
func (b *bench) measure(ctx context.Context, round int, name, profile string, p pipe) (measurement, error) {
	timed, done, err := p(ctx)
	if err != nil {
		return measurement{}, err
	}
	defer done()
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return measurement{}, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return measurement{}, err
		}
		defer pprof.StopCPUProfile()
	}
	cpu0, bcpu0 := benchutil.ProcessCPU(), benchutil.ProcCPU(b.c.brokerPID)
	start := time.Now()
	extra, err := timed(ctx)
	m := measurement{round: round, name: name, wall: time.Since(start), cpu: benchutil.ProcessCPU() - cpu0, brokerCPU: -1, extra: extra}
	if bcpu1 := benchutil.ProcCPU(b.c.brokerPID); bcpu0 >= 0 && bcpu1 >= 0 {
		m.brokerCPU = bcpu1 - bcpu0
	}
	return m, err
}

// taskTimes is where the partitions' goroutines spent the measured time,
// summed over partitions: start (client creation, NewSource), read (poll or
// Next, including the barriers Next returns), write (building and producing
// the output records), barrier (PreCommit) and tail (raw: the final flush;
// weir: after the last barrier, waiting for the checkpoints still flushing
// or committing).
type taskTimes struct {
	start, read, write, barrier, tail atomic.Int64
}

func since(t *time.Time) int64 {
	now := time.Now()
	d := now.Sub(*t)
	*t = now
	return int64(d)
}

// String gives each part as a share of partitions × wall.
func (tt *taskTimes) String(partitions int, wall time.Duration) string {
	total := float64(partitions) * float64(wall)
	pct := func(v *atomic.Int64) float64 { return 100 * float64(v.Load()) / total }
	return fmt.Sprintf("; task time: start %.0f%%, read %.0f%%, write %.0f%%, barrier %.0f%%, tail %.0f%%",
		pct(&tt.start), pct(&tt.read), pct(&tt.write), pct(&tt.barrier), pct(&tt.tail))
}

// firstError keeps the first error of concurrent goroutines and cancels
// them all.
type firstError struct {
	once   sync.Once
	err    error
	cancel context.CancelFunc
}

func (f *firstError) set(err error) {
	f.once.Do(func() { f.err = err; f.cancel() })
}

// rawPipe is the baseline: per partition a read_committed consumer and an
// idempotent producer, polled and produced from one goroutine.
func (b *bench) rawPipe(ctx context.Context) (func(context.Context) (string, error), func(), error) {
	prods := make([]*kgo.Client, b.c.partitions)
	closeAll := func() {
		for _, cl := range prods {
			if cl != nil {
				cl.Close()
			}
		}
	}
	for p := range prods {
		cl, err := kgo.NewClient(b.producerOpts(b.rawOut)...)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		prods[p] = cl
		if _, _, err := cl.ProducerID(ctx); err != nil { // InitProducerID, as Recover does for weir
			closeAll()
			return nil, nil, fmt.Errorf("init producer: %w", err)
		}
	}
	timed := func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		fe := &firstError{cancel: cancel}
		var tt taskTimes
		start := time.Now()
		var wg sync.WaitGroup
		for p := range b.c.partitions {
			wg.Go(func() {
				if err := b.rawPartition(ctx, int32(p), prods[p], &tt); err != nil {
					fe.set(fmt.Errorf("partition %d: %w", p, err))
				}
			})
		}
		wg.Wait()
		return tt.String(b.c.partitions, time.Since(start)), fe.err
	}
	return timed, closeAll, nil
}

func (b *bench) rawPartition(ctx context.Context, p int32, prod *kgo.Client, tt *taskTimes) error {
	t := time.Now()
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
	tt.start.Add(since(&t))
	for got := 0; got < b.want[p]; {
		var fs kgo.Fetches
		if b.c.rawPoll > 0 {
			fs = cons.PollRecords(ctx, b.c.rawPoll)
		} else {
			fs = cons.PollFetches(ctx)
		}
		tt.read.Add(since(&t))
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fetchErrors(fs); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			prod.Produce(ctx, outRecord(r, p), promise)
		})
		tt.write.Add(since(&t))
	}
	err = prod.Flush(ctx)
	tt.tail.Add(since(&t))
	if err != nil {
		return err
	}
	if e := failed.Load(); e != nil {
		return *e
	}
	return nil
}

// outRecord is the operator of both pipes: a new output record per input
// record, carrying its key, value, timestamp and headers (a Weir record keeps
// its timestamp, DESIGN.md section 2), to partition p of the output topic.
func outRecord(r *kgo.Record, p int32) *kgo.Record {
	return &kgo.Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Headers: r.Headers, Partition: p}
}

// coordinator stands in for Weir's checkpoint coordinator: it owns the
// checkpoint IDs and triggers the next checkpoint in every running task each
// interval, and a last one in a task that has read all its input. A task
// takes its pending checkpoints between two batches and places their
// barriers there. Its input is written before it starts, so its polls never
// wait on an idle partition before its last barrier, and it needs no
// wake-up on a trigger (runtime/task's trigger queue has one).
type coordinator struct {
	mu    sync.Mutex
	last  ckpt.ID
	tasks map[int32][]ckpt.ID // running tasks' pending checkpoints; a finished task leaves
}

// add registers a task for the periodic checkpoints.
func (c *coordinator) add(p int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tasks[p] = nil
}

// trigger queues the next checkpoint in every running task.
func (c *coordinator) trigger() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.tasks) == 0 {
		return
	}
	c.last++
	for p, pending := range c.tasks {
		c.tasks[p] = append(pending, c.last)
	}
}

// take appends task p's pending checkpoints to ids and forgets them.
func (c *coordinator) take(p int32, ids []ckpt.ID) []ckpt.ID {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids = append(ids, c.tasks[p]...)
	c.tasks[p] = c.tasks[p][:0]
	return ids
}

// finish stops the periodic checkpoints of task p, and appends to ids its
// pending checkpoints and then its last one, whose ID it returns too.
func (c *coordinator) finish(p int32, ids []ckpt.ID) ([]ckpt.ID, ckpt.ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids = append(ids, c.tasks[p]...)
	delete(c.tasks, p)
	c.last++
	return append(ids, c.last), c.last
}

// weirStats are counted by the tasks of the weir pipe.
type weirStats struct {
	checkpoints  atomic.Int64 // checkpoints completed, summed over tasks
	transactions atomic.Int64 // non-empty epochs committed
	committed    atomic.Int64 // records in committed transactions
	waitNanos    atomic.Int64 // pre-commit flush waits (PreCommit → Wait returned)
	commitNanos  atomic.Int64 // NotifyComplete
}

// weirPipe is Weir's path: per partition a task with a source and an
// exactly-once sink, and one coordinator.
func (b *bench) weirPipe(ctx context.Context) (func(context.Context) (string, error), func(), error) {
	sinks := make([]*sink.Sink, b.c.partitions)
	closeAll := func() {
		for _, s := range sinks {
			if s != nil {
				if err := s.Close(context.Background()); err != nil {
					benchutil.Info("close sink: %v", err)
				}
			}
		}
	}
	reg := prometheus.NewRegistry()
	met, err := sink.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	// Recover the sinks concurrently: fencing is one InitProducerID round
	// trip per pool slot.
	errs := make([]error, b.c.partitions)
	var wg sync.WaitGroup
	for p := range sinks {
		s, err := sink.New(sink.Config{
			ClientOpts:            b.producerOpts(b.eosOut),
			TransactionalIDPrefix: b.txnPrefix,
			Stage:                 "bench",
			Partition:             int32(p),
			TransactionTimeout:    time.Minute,
			Metrics:               met,
		})
		if err != nil {
			return nil, nil, err
		}
		sinks[p] = s
		wg.Go(func() { errs[p] = s.Recover(ctx, nil) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("recover sinks: %w", err)
	}

	timed := func(ctx context.Context) (string, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		fe := &firstError{cancel: cancel}
		coord := &coordinator{tasks: make(map[int32][]ckpt.ID, b.c.partitions)}
		var st weirStats
		var tt taskTimes
		start := time.Now()
		tickDone := make(chan struct{})
		go func() {
			defer close(tickDone)
			t := time.NewTicker(b.c.interval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					coord.trigger()
				}
			}
		}()
		var wg sync.WaitGroup
		for p := range b.c.partitions {
			wg.Go(func() {
				if err := b.weirTask(ctx, int32(p), sinks[p], coord, &st, &tt); err != nil {
					fe.set(fmt.Errorf("task %d: %w", p, err))
				}
			})
		}
		wg.Wait()
		wall := time.Since(start)
		cancel()
		<-tickDone
		if fe.err != nil {
			return "", fe.err
		}
		if got := st.committed.Load(); got != int64(b.c.records) {
			return "", fmt.Errorf("tasks committed %d records, want %d", got, b.c.records)
		}
		if periodic := int(coord.last) - b.c.partitions; periodic < 3 {
			benchutil.Info("only %d periodic checkpoint(s) in this weir pass of %v: the last checkpoint's flush and commit weigh more than in a long-running job; raise -records for a pass of many checkpoint intervals",
				max(periodic, 0), wall.Round(time.Millisecond))
		}
		txns := max(st.transactions.Load(), 1)
		return tt.String(b.c.partitions, wall) + fmt.Sprintf("; sink pool wait %v", histogramSum(reg, "weir_sink_pool_wait_seconds").Round(time.Millisecond)) +
			fmt.Sprintf("; %d checkpoints completed (over %d tasks), %d transactions committed, mean flush wait %v, mean commit %v",
				st.checkpoints.Load(), b.c.partitions, st.transactions.Load(),
				(time.Duration(st.waitNanos.Load())/time.Duration(txns)).Round(time.Microsecond),
				(time.Duration(st.commitNanos.Load())/time.Duration(txns)).Round(time.Microsecond)), nil
	}
	return timed, closeAll, nil
}

// histogramSum is the sum of the samples of every series of a histogram, or
// -1 if it cannot be read.
func histogramSum(reg *prometheus.Registry, name string) time.Duration {
	mfs, err := reg.Gather()
	if err != nil {
		return -1
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetHistogram().GetSampleSum()
		}
	}
	return time.Duration(sum * float64(time.Second))
}

// epoch is a barrier handed from the task goroutine to its completer.
type epoch struct {
	pc      *sink.PreCommit
	records int
	at      time.Time
}

// weirTask is one task: the task goroutine reads the source and writes the
// sink, and handles barriers synchronously (PreCommit); its completer
// goroutine does the asynchronous part and, standing in for the coordinator's
// `complete n`, commits as soon as the flush is done.
func (b *bench) weirTask(ctx context.Context, p int32, sink *sink.Sink, coord *coordinator, st *weirStats, tt *taskTimes) error {
	t := time.Now()
	src, err := source.New(ctx, source.Config{
		ClientOpts:      []kgo.Opt{kgo.SeedBrokers(b.c.brokers...)},
		Topics:          []string{b.in},
		Partition:       p,
		Start:           kafkaio.Start{Kind: kafkaio.StartEarliest},
		Group:           b.group,
		MaxBatchRecords: b.c.srcBatch,
		Name:            "bench-" + strconv.Itoa(int(p)),
	})
	if err != nil {
		return err
	}
	defer src.Close()
	coord.add(p)
	tt.start.Add(since(&t))

	epochs := make(chan epoch, 64)
	completerErr := make(chan error, 1)
	go func() {
		var err error
		for e := range epochs {
			if err != nil {
				continue // drain
			}
			err = b.complete(ctx, e, sink, src, st)
		}
		completerErr <- err
	}()
	err = b.taskLoop(ctx, p, sink, src, coord, epochs, tt)
	close(epochs)
	t = time.Now()
	err = errors.Join(err, <-completerErr)
	tt.tail.Add(since(&t))
	return err
}

func (b *bench) taskLoop(ctx context.Context, p int32, sink *sink.Sink, src *source.Source, coord *coordinator, epochs chan<- epoch, tt *taskTimes) error {
	var out []*kgo.Record
	var ids []ckpt.ID // checkpoints to place before the next batch
	got, inEpoch := 0, 0
	var final ckpt.ID // the last barrier's checkpoint, once all input is read
	t := time.Now()
	for {
		if got == b.want[p] && final == 0 {
			ids, final = coord.finish(p, ids[:0])
		} else {
			ids = coord.take(p, ids[:0])
		}
		for _, n := range ids {
			if _, err := src.Barrier(ctx, n); err != nil {
				return err
			}
			pc, err := sink.PreCommit(ctx, n)
			if err != nil {
				return err
			}
			epochs <- epoch{pc: pc, records: inEpoch, at: time.Now()}
			tt.barrier.Add(since(&t))
			inEpoch = 0
			if n == final {
				return nil
			}
		}
		recs, err := src.Next(ctx)
		tt.read.Add(since(&t))
		if err != nil {
			return err
		}
		if got += len(recs); got > b.want[p] {
			return fmt.Errorf("read %d records, the input partition has %d", got, b.want[p])
		}
		out = out[:0]
		for _, r := range recs {
			out = append(out, outRecord(r, p))
		}
		err = sink.WriteBatch(ctx, out)
		tt.write.Add(since(&t))
		if err != nil {
			return err
		}
		inEpoch += len(out)
	}
}

// complete is the asynchronous part of a checkpoint and its completion.
func (b *bench) complete(ctx context.Context, e epoch, sink *sink.Sink, src *source.Source, st *weirStats) error {
	n := e.pc.Checkpoint()
	if _, err := e.pc.Wait(ctx); err != nil {
		return fmt.Errorf("pre-commit %d: %w", n, err)
	}
	t := time.Now()
	if err := sink.NotifyComplete(ctx, n); err != nil {
		return fmt.Errorf("complete %d: sink: %w", n, err)
	}
	if e.records > 0 {
		st.transactions.Add(1)
		st.waitNanos.Add(int64(t.Sub(e.at)))
		st.commitNanos.Add(int64(time.Since(t)))
	}
	st.committed.Add(int64(e.records))
	if err := src.Complete(ctx, n); err != nil {
		return fmt.Errorf("complete %d: source: %w", n, err)
	}
	st.checkpoints.Add(1)
	return nil
}

// checkRawOutput checks that the raw output topic holds every record: it has
// no transactions, so its end offsets count its records.
func (b *bench) checkRawOutput(ctx context.Context) error {
	ends, err := b.adm.ListEndOffsets(ctx, b.rawOut)
	if err != nil {
		return fmt.Errorf("list end offsets of %s: %w", b.rawOut, err)
	}
	var total int64
	var errs []error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, o.Err)
		}
		total += o.Offset
	})
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("list end offsets of %s: %w", b.rawOut, err)
	}
	if total != int64(b.c.records) {
		return fmt.Errorf("output %s holds %d records, want %d", b.rawOut, total, b.c.records)
	}
	return nil
}

// checkEOSOutput reads the weir output topic read_committed to its end and
// checks that it holds every input record exactly once, each in the
// partition it came from.
func (b *bench) checkEOSOutput(ctx context.Context) error {
	start := time.Now()
	end, err := b.settledEnds(ctx)
	if err != nil {
		return err
	}
	benchutil.Info("weir output: no transaction open %v after the last commit returned (not measured)", time.Since(start).Round(time.Millisecond))
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{b.eosOut: offsetsAtStart(b.c.partitions)}))
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	seen := make([]uint64, (b.c.records+63)/64)
	count := make(map[int32]int, b.c.partitions)
	var dups, strays, wrongPart int
	for len(end) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read back %s: %w (partitions not read to the end: %v)", b.eosOut, err, end)
		}
		if err := fetchErrors(fs); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= end[r.Partition] {
				delete(end, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			count[r.Partition]++
			if len(r.Value) < 8 {
				strays++
				return
			}
			i := binary.BigEndian.Uint64(r.Value)
			switch {
			case i >= uint64(b.c.records):
				strays++
			case seen[i/64]&(1<<(i%64)) != 0:
				dups++
			default:
				seen[i/64] |= 1 << (i % 64)
				if int32(i%uint64(b.c.partitions)) != r.Partition {
					wrongPart++
				}
			}
		})
	}
	total, unique := 0, 0
	for _, n := range count {
		total += n
	}
	for _, w := range seen {
		unique += bits.OnesCount64(w)
	}
	if total != b.c.records || unique != b.c.records || dups != 0 || strays != 0 || wrongPart != 0 {
		return fmt.Errorf("output %s read read_committed holds %d records (%d distinct input records, %d duplicates, %d not from the input, %d in the wrong partition); want each of the %d input records exactly once",
			b.eosOut, total, unique, dups, strays, wrongPart, b.c.records)
	}
	for p := range b.c.partitions {
		if count[int32(p)] != b.want[p] {
			return fmt.Errorf("output %s partition %d holds %d records, want %d", b.eosOut, p, count[int32(p)], b.want[p])
		}
	}
	return nil
}

// fetchErrors joins the errors of a poll.
func fetchErrors(fs kgo.Fetches) error {
	var errs []error
	fs.EachError(func(t string, p int32, err error) { errs = append(errs, fmt.Errorf("fetch %s[%d]: %w", t, p, err)) })
	return errors.Join(errs...)
}

// settledEnds waits until no transaction is open on the weir output topic,
// and returns the end offset of each partition that is not empty. A commit
// returns once the transaction coordinator logged it; the markers that end
// the transaction on each partition (and move its last stable offset) are
// written right after.
func (b *bench) settledEnds(ctx context.Context) (map[int32]int64, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		ends, err := b.adm.ListEndOffsets(ctx, b.eosOut)
		if err != nil {
			return nil, fmt.Errorf("list end offsets of %s: %w", b.eosOut, err)
		}
		stable, err := b.adm.ListCommittedOffsets(ctx, b.eosOut)
		if err != nil {
			return nil, fmt.Errorf("list last stable offsets of %s: %w", b.eosOut, err)
		}
		end := make(map[int32]int64, b.c.partitions)
		var errs, open []error
		ends.Each(func(o kadm.ListedOffset) {
			s, _ := stable.Lookup(o.Topic, o.Partition)
			switch {
			case o.Err != nil || s.Err != nil:
				errs = append(errs, fmt.Errorf("partition %d: list offsets: %w", o.Partition, errors.Join(o.Err, s.Err)))
			case s.Offset != o.Offset:
				open = append(open, fmt.Errorf("partition %d: a transaction is open: last stable offset %d, end %d", o.Partition, s.Offset, o.Offset))
			case o.Offset > 0:
				end[o.Partition] = o.Offset
			}
		})
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		if len(open) == 0 {
			return end, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("output %s: transactions still open 30s after the last commit: %w", b.eosOut, errors.Join(open...))
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func offsetsAtStart(partitions int) map[int32]kgo.Offset {
	m := make(map[int32]kgo.Offset, partitions)
	for p := range partitions {
		m[int32(p)] = kgo.NewOffset().AtStart()
	}
	return m
}
