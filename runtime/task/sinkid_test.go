package task

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/plan"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// sinkChange is how the job changes between the checkpoint and the restart
// in TestSinkIdentityAcrossJobChange.
type sinkChange int

const (
	// sinkAdded: a second sink, defined before the first (it takes index
	// 0 in Job.Sinks, the first sink's index moves to 1).
	sinkAdded sinkChange = iota
	// sinkRemoved: the job writes another topic instead of the first.
	sinkRemoved
	// legacyCheckpoint: the job is unchanged, but the checkpoint is
	// rewritten as builds before sink pools wrote it (transactions by sink
	// index), and the pool under the name those builds used holds a
	// transaction open.
	legacyCheckpoint
)

// countsTo counts the input's records per key, as oneStageJob does, and
// writes each count to every topic of outs, in that order.
func countsTo(name, in string, outs ...string) *stream.Job {
	j := stream.NewJob(name)
	s := stream.From(j, stream.KafkaSource{Topics: []string{in}}, stream.RawCodec{})
	n := stream.Count(s, "count")
	text := stream.Map(n, func(c int64) (string, error) { return strconv.FormatInt(c, 10), nil })
	for _, out := range outs {
		stream.To(text, stream.KafkaSink{Topic: out, TransactionTimeout: testTxnTimeout}, stream.StringCodec{})
	}
	return j
}

// TestSinkIdentityAcrossJobChange: a job with one sink completes checkpoint
// 1, then takes checkpoint 2 (its _metadata written: complete) and stops
// before it hears of the completion, so that checkpoint 2's transactions
// are pre-committed and recorded, not committed; a zombie holds a
// transaction open on a slot of the sink's pool that nothing recorded.
// The job restarts from checkpoint 2 changed:
//
//   - sink-added: a sink is added before the first. The first keeps its
//     transactional IDs (its pool in checkpoint 3 is the one of checkpoint
//     2), its recorded transactions are committed, the zombie is fenced;
//     the new sink starts with a fresh pool and writes the counts after
//     the restore.
//   - sink-removed: the job writes another topic instead. The removed
//     sink's recorded output becomes visible to a read_committed reader
//     exactly once as the restore opens the tasks, the zombie is fenced,
//     and the restore logs it once per task.
//   - legacy-checkpoint: the job is unchanged, checkpoint 2 is rewritten as
//     older builds wrote it, and the zombie is on the pool those builds
//     named "<stage>-<partition>-<slot>": the restore commits what the
//     checkpoint recorded and fences the old pool as well as the new.
//
// Every count of every key is then committed exactly once. On kfake and on
// the real broker.
func TestSinkIdentityAcrossJobChange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change sinkChange
	}{
		{"sink-added", sinkAdded},
		{"sink-removed", sinkRemoved},
		{"legacy-checkpoint", legacyCheckpoint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) { sinkIdentity(t, c, tc.change) })
		})
	}
}

func sinkIdentity(t *testing.T, c *kafkatest.Cluster, change sinkChange) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r := newRig(t, ctx, c, rigConfig{inParts: 2, outParts: 2, build: oneStageJob})
	name := strings.TrimSuffix(r.prefix, ".")
	other := name + "-other"
	c.CreateTopic(t, other, 2, nil)
	main0 := control.TaskID{Stage: "main", Index: 0}
	want := map[string]int{}

	g1 := r.newGen(1)
	tasks1 := r.openAll(ctx, g1, 0)
	r.produce(ctx, want, keys(60, 6)...)
	r.waitConsumed(ctx, slices.Collect(maps.Values(tasks1))...)
	r.checkpoint(ctx, 1, 1, tasks1)

	// Checkpoint 2 completes, but its tasks stop before they hear of it.
	r.produce(ctx, want, keys(60, 6)...)
	r.waitConsumed(ctx, slices.Collect(maps.Values(tasks1))...)
	r.trigger(2, tasks1)
	acks2 := r.ackLog.wait(t, ctx, 2, 1, slices.Collect(mapsKeys(tasks1))...)
	r.writeMetadata(ctx, 2, 1, acks2)
	for _, tk := range tasks1 {
		r.stop(tk)
	}
	at2 := maps.Clone(want)
	pools2 := recordedPools(t, ctx, r, acks2[main0].Handle)
	if len(pools2) != 1 || pools2[0].Topic != r.out || pools2[0].Pool != "main@"+r.out || len(pools2[0].Txns) == 0 {
		t.Fatalf("checkpoint 2 of %s records the sinks %+v, want %s with its transactions", main0, pools2, r.out)
	}

	// The zombie: a transaction open on an unrecorded slot of the pool.
	zombiePool := pools2[0].Pool
	if change == legacyCheckpoint {
		zombiePool = "main"
		for _, task := range slices.Collect(mapsKeys(acks2)) {
			rewriteLegacy(t, ctx, r, acks2[task].Handle)
		}
	}
	zombie := openZombie(t, ctx, c, r.out, unrecordedSlot(t, r.prefix, zombiePool, pools2[0]))

	// The restart, with the job changed.
	var logs *capture
	switch change {
	case sinkAdded:
		r.rebuild(t, func(name, in, out string) *stream.Job { return countsTo(name, in, other, out) })
	case sinkRemoved:
		r.rebuild(t, func(name, in, out string) *stream.Job { return countsTo(name, in, other) })
		logs = &capture{}
		r.log = slog.New(captureHandler{c: logs, next: r.log.Handler()})
	}
	g2 := r.newGen(2)
	tasks2 := r.openAll(ctx, g2, 2)
	if err := zombie.Flush(ctx); err == nil {
		if err := zombie.EndTransaction(ctx, kgo.TryCommit); err == nil {
			t.Fatal("the zombie committed its transaction after the restore: the pool was not fenced")
		}
	}
	if change == sinkRemoved {
		// Before anything runs: the removed sink's recorded output is
		// committed, once, and nothing is left open on its topic.
		r.verifyCounts(ctx, want)
		n := logs.count("is no longer in the job: its")
		if n != len(tasks2) {
			t.Errorf("the restore logged the removed sink %d times, want once per task (%d): %q", n, len(tasks2), logs.all())
		}
	}

	r.produce(ctx, want, keys(60, 6)...)
	r.waitConsumed(ctx, slices.Collect(maps.Values(tasks2))...)
	acks3 := r.checkpoint(ctx, 3, 2, tasks2)

	switch change {
	case sinkAdded:
		r.verifyCounts(ctx, want)
		r.verifyCountsIn(ctx, other, at2, want)
		pools3 := recordedPools(t, ctx, r, acks3[main0].Handle)
		topics := []string{}
		for _, p := range pools3 {
			topics = append(topics, p.Topic)
			if p.Topic == r.out && (p.Pool != pools2[0].Pool || p.Size != pools2[0].Size) {
				t.Errorf("sink %s ran pool %s of %d in checkpoint 2, %s of %d after a sink was added", r.out, pools2[0].Pool, pools2[0].Size, p.Pool, p.Size)
			}
		}
		if !slices.Equal(topics, []string{other, r.out}) {
			t.Errorf("checkpoint 3 records the sinks %v, want [%s %s]", topics, other, r.out)
		}
	case sinkRemoved:
		r.verifyCountsIn(ctx, r.out, nil, at2) // nothing more
		r.verifyCountsIn(ctx, other, at2, want)
	case legacyCheckpoint:
		r.verifyCounts(ctx, want)
	}
}

// rebuild replaces the rig's job with build's (same name and topics), as a
// person who changed the job file and restarted it.
func (r *rig) rebuild(t *testing.T, build func(name, in, out string) *stream.Job) {
	t.Helper()
	r.job = build(strings.TrimSuffix(r.prefix, "."), r.in, r.out)
	p, err := plan.Build(r.job, plan.Inputs{SourcePartitions: r.inParts, TopicPrefix: r.prefix})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	r.plan = p
}

// verifyCountsIn checks that topic holds, for every key of to, exactly the
// counts from[k]+1..to[k] in order, and no other key.
func (r *rig) verifyCountsIn(ctx context.Context, topic string, from, to map[string]int) {
	r.t.Helper()
	r.c.WaitStable(r.t, topic)
	got := map[string][]int{}
	for _, rec := range r.c.ReadCommitted(ctx, r.t, topic) {
		n, err := strconv.Atoi(string(rec.Value))
		if err != nil {
			r.t.Fatalf("output %s/%d@%d: value %q", rec.Topic, rec.Partition, rec.Offset, rec.Value)
		}
		got[string(rec.Key)] = append(got[string(rec.Key)], n)
	}
	for k, n := range to {
		var want []int
		for i := from[k] + 1; i <= n; i++ {
			want = append(want, i)
		}
		if !slices.Equal(got[k], want) {
			r.t.Errorf("%s: key %s: committed counts %v, want %v", topic, k, got[k], want)
		}
	}
	for k, seq := range got {
		if _, ok := to[k]; !ok {
			r.t.Errorf("%s: key %s: committed counts %v, want none", topic, k, seq)
		}
	}
	if r.t.Failed() {
		r.t.FailNow()
	}
}

// recordedPools returns the sink pools the manifest at handle records.
func recordedPools(t *testing.T, ctx context.Context, r *rig, handle string) []sinkPool {
	t.Helper()
	m, err := state.ReadManifest(ctx, r.store, handle)
	if err != nil {
		t.Fatal(err)
	}
	var op operatorState
	if err := json.Unmarshal(m.OperatorState, &op); err != nil {
		t.Fatal(err)
	}
	return op.SinkPools
}

// rewriteLegacy rewrites the manifest at handle as builds before sink
// pools wrote it: the sinks' transactions by index only.
func rewriteLegacy(t *testing.T, ctx context.Context, r *rig, handle string) {
	t.Helper()
	m, err := state.ReadManifest(ctx, r.store, handle)
	if err != nil {
		t.Fatal(err)
	}
	var op operatorState
	if err := json.Unmarshal(m.OperatorState, &op); err != nil {
		t.Fatal(err)
	}
	if len(op.Sinks) == 0 {
		t.Fatalf("manifest %s records no sinks by index", handle)
	}
	op.SinkPools = nil
	if m.OperatorState, err = json.Marshal(op); err != nil {
		t.Fatal(err)
	}
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := r.store.Put(ctx, handle, b); err != nil {
		t.Fatal(err)
	}
}

// unrecordedSlot returns a transactional ID of partition 0's pool named
// pool (of p's size) that p's transactions do not use.
func unrecordedSlot(t *testing.T, prefix, pool string, p sinkPool) string {
	t.Helper()
	for slot := range p.Size {
		id := sink.TxnID(prefix, pool, 0, slot)
		if !slices.ContainsFunc(p.Txns, func(h sink.TxnHandle) bool { return h.TransactionalID == id }) {
			return id
		}
	}
	t.Fatalf("every slot of pool %s is recorded: %+v", pool, p.Txns)
	return ""
}

// openZombie begins a transaction on txnID, writes a record to partition 0
// of topic in it, and leaves it open, as an instance that was cut off would.
// A read_committed reader cannot read past it until it is fenced.
func openZombie(t *testing.T, ctx context.Context, c *kafkatest.Cluster, topic, txnID string) *kgo.Client {
	t.Helper()
	cl := c.Client(t, kgo.TransactionalID(txnID), kgo.TransactionTimeout(testTxnTimeout),
		kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("zombie"), Value: []byte("999"), Partition: 0}).FirstErr(); err != nil {
		t.Fatalf("zombie write on %s: %v", txnID, err)
	}
	return cl
}

// capture keeps the messages logged through captureHandler.
type capture struct {
	mu   sync.Mutex
	msgs []string
}

func (c *capture) count(substr string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

func (c *capture) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.msgs)
}

// captureHandler records every message in c and passes on to next what
// next is enabled for.
type captureHandler struct {
	c    *capture
	next slog.Handler
}

func (h captureHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h captureHandler) Handle(ctx context.Context, r slog.Record) error {
	h.c.mu.Lock()
	h.c.msgs = append(h.c.msgs, r.Message)
	h.c.mu.Unlock()
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return captureHandler{c: h.c, next: h.next.WithAttrs(as)}
}

func (h captureHandler) WithGroup(name string) slog.Handler {
	return captureHandler{c: h.c, next: h.next.WithGroup(name)}
}
