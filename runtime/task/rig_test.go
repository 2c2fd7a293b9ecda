package task

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/internal/testlog"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/kafkaio/shuffle"
	"github.com/weir-stream/weir/plan"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

// The rig runs a job's tasks in-process the way a replica does (task.Open,
// Run, Trigger, Complete, Abort, Stop), without a coordinator: the test is
// the coordinator. It reads the acks back from the ack topic and writes
// each checkpoint's _metadata object itself, as the coordinator does
// (control.Metadata at objstore.MetadataKey).

// testTxnTimeout is the sinks' transaction timeout: long enough for any
// step of a test, below the real broker's transaction.max.timeout.ms.
const testTxnTimeout = time.Minute

// oneStageJob counts the input's records per record key in stage main and
// writes each count as decimal text.
func oneStageJob(name, in, out string) *stream.Job {
	j := stream.NewJob(name)
	s := stream.From(j, stream.KafkaSource{Topics: []string{in}}, stream.RawCodec{})
	n := stream.Count(s, "count")
	text := stream.Map(n, func(c int64) (string, error) { return strconv.FormatInt(c, 10), nil })
	stream.To(text, stream.KafkaSink{Topic: out, TransactionTimeout: testTxnTimeout}, stream.StringCodec{})
	return j
}

// twoStageJob re-keys the input by its value (main), and counts per new key
// in stage downstream (parallelism tasks), after g's filter.
func twoStageJob(name, in, out, downstream string, parallelism int, g *gate) *stream.Job {
	j := stream.NewJob(name)
	s := stream.From(j, stream.KafkaSource{Topics: []string{in}}, stream.RawCodec{})
	byValue := stream.KeyBy(s, func(v []byte) ([]byte, error) { return v, nil }, stream.Named(downstream), stream.Parallelism(parallelism))
	kept := stream.Filter(byValue, g.filter)
	n := stream.Count(kept, "count")
	text := stream.Map(n, func(c int64) (string, error) { return strconv.FormatInt(c, 10), nil })
	stream.To(text, stream.KafkaSink{Topic: out, TransactionTimeout: testTxnTimeout}, stream.StringCodec{})
	return j
}

// errCrash is what a gated downstream task fails with when released.
var errCrash = errors.New("injected crash")

// gate holds a downstream task on a gate record (value "gate-..."): while
// armed, the task that reaches one signals entered and blocks until release
// is closed, then fails with errCrash. Disarmed, gate records are dropped.
// The filter runs in the downstream stage, after the KeyBy.
type gate struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

// open releases the held tasks (they fail with errCrash).
func (g *gate) open() { g.once.Do(func() { close(g.release) }) }

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (g *gate) filter(v []byte) (bool, error) {
	if !bytes.HasPrefix(v, []byte("gate-")) {
		return true, nil
	}
	if !g.armed.Load() {
		return false, nil
	}
	g.entered <- struct{}{}
	<-g.release
	return false, errCrash
}

type rigConfig struct {
	inParts, outParts int
	maxParallelism    int
	// build makes the job on the rig's topics.
	build func(name, in, out string) *stream.Job
}

type rig struct {
	t       *testing.T
	c       *kafkatest.Cluster
	kopts   []kgo.Opt
	log     *slog.Logger
	job     *stream.Job
	plan    *plan.Plan
	in, out string
	inParts int
	prefix  string
	store   *objstore.Store
	acks    *controltopic.AckWriter
	ackLog  *ackLog
	cache   *pebble.Cache
	dir     string
	// produced counts the input records written, to spread them over the
	// input partitions.
	produced int

	mu    sync.Mutex
	tasks []*Task
	gone  map[*Task]bool // stopped
}

// newRig creates the job's topics (input, output, shuffles, control) on c,
// its object store in a temporary directory and its ack writer and reader.
// Every task it opens is stopped when the test ends.
func newRig(t *testing.T, ctx context.Context, c *kafkatest.Cluster, cfg rigConfig) *rig {
	t.Helper()
	name := kafkatest.Name(t, "task")
	r := &rig{
		t: t, c: c, kopts: append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, c.Opts...),
		log: slog.New(slog.NewTextHandler(testlog.New(t, ""), &slog.HandlerOptions{Level: slog.LevelWarn})),
		in:  name + "-in", out: name + "-out", inParts: cfg.inParts, prefix: name + ".",
		dir: t.TempDir(), gone: map[*Task]bool{},
	}
	c.CreateTopic(t, r.in, int32(cfg.inParts), nil)
	c.CreateTopic(t, r.out, int32(cfg.outParts), nil)
	r.job = cfg.build(name, r.in, r.out)
	p, err := plan.Build(r.job, plan.Inputs{SourcePartitions: cfg.inParts, MaxParallelism: cfg.maxParallelism, TopicPrefix: r.prefix})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	r.plan = p
	adm := c.Admin(t)
	topics := controltopic.NewTopics(r.prefix)
	if err := controltopic.EnsureTopics(ctx, adm, topics, 1); err != nil {
		t.Fatal(err)
	}
	if len(p.Shuffles) > 0 {
		sh := map[string]int{}
		for _, s := range p.Shuffles {
			sh[s.Topic] = s.Partitions
		}
		if err := shuffle.EnsureTopics(ctx, adm, sh, 1); err != nil {
			t.Fatal(err)
		}
	}
	store, err := objstore.Open(ctx, "file://"+filepath.Join(r.dir, "checkpoints"), name, objstore.Options{Logger: r.log})
	if err != nil {
		t.Fatal(err)
	}
	r.store = store
	if r.acks, err = controltopic.NewAckWriter(r.kopts, topics); err != nil {
		t.Fatal(err)
	}
	tail, err := controltopic.NewTail(r.kopts, topics, map[control.Topic]kgo.Offset{control.TopicAck: kgo.NewOffset().AtStart()}, r.log)
	if err != nil {
		t.Fatal(err)
	}
	r.ackLog = &ackLog{tail: tail, acks: map[ackKey]control.Ack{}}
	r.cache = pebble.NewCache(8 << 20)
	t.Cleanup(func() {
		r.mu.Lock()
		tasks := slices.Clone(r.tasks)
		r.mu.Unlock()
		for _, tk := range tasks {
			r.stop(tk)
		}
		tail.Close()
		r.acks.Close()
		_ = store.Close()
		r.cache.Unref()
	})
	return r
}

// gen is one generation of the job's tasks: its number and the metrics its
// tasks share (as a replica's do).
type gen struct {
	n   uint64
	reg *prometheus.Registry
	met *Metrics
}

func (r *rig) newGen(n uint64) *gen {
	r.t.Helper()
	reg := prometheus.NewRegistry()
	met, err := NewMetrics(reg)
	if err != nil {
		r.t.Fatal(err)
	}
	return &gen{n: n, reg: reg, met: met}
}

// open opens task id of generation g, restored from checkpoint from (0:
// empty), with a state directory of its own (as if on another machine).
func (r *rig) open(ctx context.Context, g *gen, id control.TaskID, from ckpt.ID) *Task {
	r.t.Helper()
	tk, err := Open(ctx, Config{
		Job: r.job, ID: id, Gen: g.n, RestoreFrom: from,
		Kafka: r.kopts, Prefix: r.prefix, Store: r.store,
		StateDir: filepath.Join(r.dir, fmt.Sprintf("gen-%d", g.n), StateName(id)),
		Cache:    r.cache, Acks: r.acks, Plan: r.plan, Metrics: g.met,
		Sinks: r.job.Sinks(), MaxConcurrentCheckpoints: 1,
		Logger: r.log.With("test_gen", g.n), Registerer: g.reg,
	})
	if err != nil {
		r.t.Fatalf("open %s (generation %d, from checkpoint %d): %v", id, g.n, from, err)
	}
	r.mu.Lock()
	r.tasks = append(r.tasks, tk)
	r.mu.Unlock()
	return tk
}

// openAll opens every task of the plan in generation g and runs them.
func (r *rig) openAll(ctx context.Context, g *gen, from ckpt.ID) map[control.TaskID]*Task {
	r.t.Helper()
	out := map[control.TaskID]*Task{}
	for _, id := range r.plan.Tasks() {
		out[id] = r.open(ctx, g, id, from)
	}
	for _, tk := range out {
		tk.Run()
	}
	return out
}

// stop stops tk once; an error is logged (a fenced zombie's sink may not
// abort cleanly).
func (r *rig) stop(tk *Task) {
	r.mu.Lock()
	if r.gone[tk] {
		r.mu.Unlock()
		return
	}
	r.gone[tk] = true
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tk.Stop(ctx); err != nil {
		r.t.Logf("stop %s (generation %d): %v", tk.cfg.ID, tk.cfg.Gen, err)
	}
}

// produce writes one input record per key (key and value both the key),
// spread over the input partitions, and adds them to counts (gate records
// excepted: the two-stage job drops them).
func (r *rig) produce(ctx context.Context, counts map[string]int, keys ...string) {
	r.t.Helper()
	r.produceTo(ctx, counts, -1, keys...)
}

// produceTo is produce into one input partition (-1: spread).
func (r *rig) produceTo(ctx context.Context, counts map[string]int, partition int32, keys ...string) {
	r.t.Helper()
	cl := r.c.Client(r.t, kgo.DefaultProduceTopic(r.in), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	recs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		p := partition
		if p < 0 {
			p = int32(r.produced % r.inParts)
		}
		recs[i] = &kgo.Record{Key: []byte(k), Value: []byte(k), Partition: p}
		r.produced++
		if counts != nil && !bytes.HasPrefix([]byte(k), []byte("gate-")) {
			counts[k]++
		}
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		r.t.Fatalf("produce: %v", err)
	}
}

// keys returns n keys, cycling over k distinct ones ("k-00"...).
func keys(n, k int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("k-%02d", i%k)
	}
	return out
}

// waitConsumed waits until each of the source tasks has read its input
// partition to its end: a barrier triggered now follows every record.
func (r *rig) waitConsumed(ctx context.Context, tasks ...*Task) {
	r.t.Helper()
	ends, err := r.c.Admin(r.t).ListEndOffsets(ctx, r.in)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, tk := range tasks {
		src := tk.in.(*sourceInput).src
		p := int32(tk.cfg.ID.Index)
		end, _ := ends.Lookup(r.in, p)
		deadline := time.Now().Add(time.Minute)
		for {
			pos, _ := src.Positions().Lookup(r.in, p)
			if pos >= end.Offset {
				break
			}
			if time.Now().After(deadline) {
				r.t.Fatalf("%s (generation %d) at offset %d of %s/%d after a minute, want %d", tk.cfg.ID, tk.cfg.Gen, pos, r.in, p, end.Offset)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// trigger is `trigger n` for each source task.
func (r *rig) trigger(n ckpt.ID, tasks map[control.TaskID]*Task) {
	r.t.Helper()
	for id, tk := range tasks {
		if r.plan.Stage(id.Stage).Kafka {
			if err := tk.Trigger(barrierOf(n)); err != nil {
				r.t.Fatalf("trigger %d on %s: %v", n, id, err)
			}
		}
	}
}

// complete is `complete n` for each task.
func (r *rig) complete(ctx context.Context, n ckpt.ID, tasks map[control.TaskID]*Task) {
	r.t.Helper()
	for id, tk := range tasks {
		if err := tk.Complete(ctx, n); err != nil {
			r.t.Fatalf("complete %d on %s: %v", n, id, err)
		}
	}
}

// writeMetadata writes checkpoint n's _metadata from its acks, as the
// coordinator does when every task has acknowledged.
func (r *rig) writeMetadata(ctx context.Context, n ckpt.ID, gen uint64, acks map[control.TaskID]control.Ack) {
	r.t.Helper()
	md := control.Metadata{ID: n, Gen: gen, Kind: ckpt.KindCheckpoint, TS: time.Now().UnixMilli()}
	for _, a := range acks {
		md.Tasks = append(md.Tasks, control.TaskState{Task: a.Task, Handle: a.Handle, Metrics: a.Metrics, Shuffle: a.Shuffle})
	}
	slices.SortFunc(md.Tasks, func(a, b control.TaskState) int { return a.Task.Compare(b.Task) })
	b, err := control.Encode(md)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.store.PutIfAbsent(ctx, objstore.MetadataKey(n), b); err != nil {
		r.t.Fatal(err)
	}
}

// checkpoint triggers n on the source tasks of tasks (all of generation
// gen), waits for every task's ack, writes _metadata and completes n on
// each task. It returns the acks.
func (r *rig) checkpoint(ctx context.Context, n ckpt.ID, gen uint64, tasks map[control.TaskID]*Task) map[control.TaskID]control.Ack {
	r.t.Helper()
	r.trigger(n, tasks)
	acks := r.ackLog.wait(r.t, ctx, n, gen, slices.Collect(mapsKeys(tasks))...)
	r.writeMetadata(ctx, n, gen, acks)
	r.complete(ctx, n, tasks)
	return acks
}

func mapsKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// committed returns the output's committed counts per key, in order; it
// first waits until no transaction is open on the output.
func (r *rig) committed(ctx context.Context) map[string][]int {
	r.t.Helper()
	r.c.WaitStable(r.t, r.out)
	got := map[string][]int{}
	for _, rec := range r.c.ReadCommitted(ctx, r.t, r.out) {
		n, err := strconv.Atoi(string(rec.Value))
		if err != nil {
			r.t.Fatalf("output %s/%d@%d: value %q", rec.Topic, rec.Partition, rec.Offset, rec.Value)
		}
		got[string(rec.Key)] = append(got[string(rec.Key)], n)
	}
	return got
}

// verifyCounts checks that the committed output holds, for every key of
// want, exactly the counts 1..want[k] in order (no duplicate, no gap), and
// no other key.
func (r *rig) verifyCounts(ctx context.Context, want map[string]int) {
	r.t.Helper()
	got := r.committed(ctx)
	total := 0
	for k, n := range want {
		total += n
		seq := got[k]
		ok := len(seq) == n
		for i := 0; ok && i < n; i++ {
			ok = seq[i] == i+1
		}
		if !ok {
			r.t.Errorf("key %s: committed counts %v, want 1..%d", k, seq, n)
		}
	}
	for k, seq := range got {
		if _, ok := want[k]; !ok {
			r.t.Errorf("key %s: committed counts %v, want none", k, seq)
		}
	}
	if r.t.Failed() {
		r.t.FailNow()
	}
	r.t.Logf("output: %d keys, %d counts, each exactly once", len(want), total)
}

type ackKey struct {
	id   ckpt.ID
	gen  uint64
	task control.TaskID
}

// ackLog reads the ack topic from its start and keeps every ack.
type ackLog struct {
	tail *controltopic.Tail
	acks map[ackKey]control.Ack
}

// wait returns the acks of checkpoint n of generation gen from tasks, once
// all have arrived; a decline of n fails the test.
func (l *ackLog) wait(t *testing.T, ctx context.Context, n ckpt.ID, gen uint64, tasks ...control.TaskID) map[control.TaskID]control.Ack {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		got := map[control.TaskID]control.Ack{}
		for _, id := range tasks {
			if a, ok := l.acks[ackKey{n, gen, id}]; ok {
				got[id] = a
			}
		}
		if len(got) == len(tasks) {
			return got
		}
		if err := l.read(t, ctx); err != nil {
			t.Fatalf("acks of checkpoint %d (generation %d): have %d of %v: %v", n, gen, len(got), tasks, err)
		}
	}
}

// read reads the next record of the ack topic.
func (l *ackLog) read(t *testing.T, ctx context.Context) error {
	t.Helper()
	rec, err := l.tail.Next(ctx)
	if err != nil {
		return err
	}
	switch m := rec.Msg.(type) {
	case control.Ack:
		if m.Handle == "" {
			t.Fatalf("ack without a handle: %+v", m)
		}
		l.acks[ackKey{m.ID, m.Gen, m.Task}] = m
	case control.Decline:
		t.Fatalf("task %s declined checkpoint %d (generation %d): %s", m.Task, m.ID, m.Gen, m.Reason)
	}
	return nil
}

// quiet reads the ack topic for d and fails the test if an ack of
// checkpoint n of generation gen from one of tasks arrives.
func (l *ackLog) quiet(t *testing.T, ctx context.Context, d time.Duration, n ckpt.ID, gen uint64, tasks ...control.TaskID) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for l.read(t, ctx) == nil {
	}
	for _, id := range tasks {
		if a, ok := l.acks[ackKey{n, gen, id}]; ok {
			t.Fatalf("%s acknowledged checkpoint %d (generation %d): %+v", id, n, gen, a)
		}
	}
}

// dropped returns weir_shuffle_dropped_records_total of stage and reason
// on reg.
func dropped(t *testing.T, reg *prometheus.Registry, stage, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "weir_shuffle_dropped_records_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["stage"] == stage && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
