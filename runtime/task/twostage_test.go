package task

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/shuffle"
	"github.com/weir-stream/weir/keygroup"
	"github.com/weir-stream/weir/stream"
)

// The two-stage job of these tests: two input partitions (main/0, main/1)
// re-keyed by value into a shuffle of 8 key groups, counted by two
// downstream tasks of stage by-key.
const (
	twoStage    = "by-key"
	twoStageMax = 8
)

var (
	upstreamIDs   = []control.TaskID{{Stage: "main", Index: 0}, {Stage: "main", Index: 1}}
	downstreamIDs = []control.TaskID{{Stage: twoStage, Index: 0}, {Stage: twoStage, Index: 1}}
)

func newTwoStageRig(t *testing.T, ctx context.Context, c *kafkatest.Cluster, g *gate) *rig {
	t.Helper()
	r := newRig(t, ctx, c, rigConfig{inParts: 2, outParts: 2, maxParallelism: twoStageMax,
		build: func(name, in, out string) *stream.Job { return twoStageJob(name, in, out, twoStage, 2, g) }})
	// The keys must reach both downstream tasks, or the test shows less
	// than it says.
	owners := map[int]bool{}
	for _, k := range keys(12, 12) {
		owners[keygroup.Owner(keygroup.Of([]byte(k), twoStageMax), 2, twoStageMax)] = true
	}
	if len(owners) != 2 {
		t.Fatalf("the test keys reach downstream tasks %v, want both", owners)
	}
	return r
}

// gateKeys returns one gate record's value per downstream task: each is
// read by that task only.
func gateKeys(t *testing.T) []string {
	t.Helper()
	out := make([]string, len(downstreamIDs))
	for i := 0; slices.Contains(out, ""); i++ {
		k := fmt.Sprintf("gate-%d", i)
		if o := keygroup.Owner(keygroup.Of([]byte(k), twoStageMax), len(downstreamIDs), twoStageMax); out[o] == "" {
			out[o] = k
		}
	}
	return out
}

func pick(tasks map[control.TaskID]*Task, ids []control.TaskID) []*Task {
	out := make([]*Task, len(ids))
	for i, id := range ids {
		out[i] = tasks[id]
	}
	return out
}

// crashPoint is where generation 1 of the two-stage job dies in checkpoint 2.
type crashPoint int

const (
	// beforeDownstreamSnapshot: the upstream tasks acknowledged 2 (their
	// barriers are in the shuffle topic), the downstream tasks are held on
	// a record before those barriers and never snapshot 2.
	beforeDownstreamSnapshot crashPoint = iota
	// afterDownstreamAck: every task acknowledged 2, no _metadata 2.
	afterDownstreamAck
	// afterMetadata: _metadata 2 is written, nobody got `complete 2`:
	// generation 2 restores checkpoint 2 and commits its transactions.
	afterMetadata
)

// TestTwoStageCrashInCheckpoint runs the two-stage job in-process with the
// test as coordinator. Checkpoint 1 completes; generation 1 then dies
// during checkpoint 2, and generation 2 takes over (restored from the last
// checkpoint with _metadata) while generation 1's upstream tasks still run
// and write to the shuffle. Checkpoint 3 completes; an independent
// read_committed consumer finds every key's counts exactly 1..N, and the
// downstream tasks dropped the older generation's records as stale. On
// kfake and on the real broker.
func TestTwoStageCrashInCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name  string
		crash crashPoint
	}{
		{"before-downstream-snapshot", beforeDownstreamSnapshot},
		{"after-downstream-ack", afterDownstreamAck},
		{"after-metadata", afterMetadata},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) { twoStageCrash(t, c, tc.crash) })
		})
	}
}

func twoStageCrash(t *testing.T, c *kafkatest.Cluster, crash crashPoint) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	g := newGate()
	defer g.open()
	r := newTwoStageRig(t, ctx, c, g)
	want := map[string]int{}

	g1 := r.newGen(1)
	tasks1 := r.openAll(ctx, g1, 0)
	r.produce(ctx, want, keys(120, 12)...)
	r.waitConsumed(ctx, pick(tasks1, upstreamIDs)...)
	r.checkpoint(ctx, 1, 1, tasks1)
	r.verifyCounts(ctx, want)

	// Checkpoint 2, with more records before it.
	epoch2 := keys(120, 12)
	if crash == beforeDownstreamSnapshot {
		g.armed.Store(true)
		epoch2 = append(epoch2, gateKeys(t)...)
	}
	r.produce(ctx, want, epoch2...)
	r.waitConsumed(ctx, pick(tasks1, upstreamIDs)...)
	if crash == beforeDownstreamSnapshot {
		// Both downstream tasks hold on their gate record, which precedes
		// every upstream task's barrier 2 in its partition.
		for range downstreamIDs {
			select {
			case <-g.entered:
			case <-ctx.Done():
				t.Fatal("the downstream tasks did not reach their gate records")
			}
		}
	}
	r.trigger(2, tasks1)
	r.ackLog.wait(t, ctx, 2, 1, upstreamIDs...)
	from := ckpt.ID(1)
	switch crash {
	case beforeDownstreamSnapshot:
		r.ackLog.quiet(t, ctx, time.Second, 2, 1, downstreamIDs...)
	case afterDownstreamAck:
		r.ackLog.wait(t, ctx, 2, 1, downstreamIDs...)
	case afterMetadata:
		acks := r.ackLog.wait(t, ctx, 2, 1, r.plan.Tasks()...)
		r.writeMetadata(ctx, 2, 1, acks)
		from = 2
	}
	restored := r.ackLog.positions(from, 1)

	// The crash. A held downstream task stays a zombie until its
	// successor has fenced its sink; the others stop now (their open
	// transactions abort; pre-committed ones stay for the next owner to
	// commit or fence). The upstream tasks go on as zombies of
	// generation 1, writing to the shuffle what follows.
	g.armed.Store(false)
	if crash != beforeDownstreamSnapshot {
		for _, tk := range pick(tasks1, downstreamIDs) {
			r.stop(tk)
		}
	}
	g2 := r.newGen(2)
	tasks2 := r.openAll(ctx, g2, from)
	r.produce(ctx, want, keys(60, 12)...)
	// What generation 1 wrote above checkpoint from's positions: epoch 2
	// and barrier 2 of each upstream task on every partition (unless
	// from is 2), and the 60 records after. All of it must be in the
	// shuffle before its writers stop.
	stale := 60
	if from == 1 {
		stale += len(epoch2) + len(upstreamIDs)*twoStageMax
	}
	r.waitStaleInShuffle(ctx, restored, 1, stale)
	if crash == beforeDownstreamSnapshot {
		g.open()
		for _, tk := range pick(tasks1, downstreamIDs) {
			select {
			case <-tk.Done():
			case <-ctx.Done():
				t.Fatalf("%s did not end after its gate opened", tk.cfg.ID)
			}
			if err := tk.Err(); !errors.Is(err, errCrash) {
				t.Fatalf("%s (generation 1) ended with %v, want the injected crash", tk.cfg.ID, err)
			}
		}
	}
	for _, tk := range tasks1 {
		r.stop(tk)
	}

	r.waitConsumed(ctx, pick(tasks2, upstreamIDs)...)
	r.checkpoint(ctx, 3, 2, tasks2)
	r.verifyCounts(ctx, want)

	if got := r.staleInShuffle(ctx, restored, 1); got != stale {
		t.Fatalf("%d records of generation 1 above the positions of checkpoint %d, want %d", got, from, stale)
	}
	r.waitDropped(g2, "stale", stale, false)
}

// TestStaleShuffleTail restores the downstream tasks with an older
// generation's tail in the shuffle topic above their checkpoint's
// positions (what the upstream tasks wrote after it), before any upstream
// task of their own generation runs: every such record is dropped as stale
// (weir_shuffle_dropped_records_total{reason="stale"} counts exactly them,
// and nothing is acknowledged or committed), and after the restored
// upstream tasks re-emit them nothing is counted twice. On kfake and on
// the real broker.
func TestStaleShuffleTail(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		g := newGate()
		r := newTwoStageRig(t, ctx, c, g)
		want := map[string]int{}

		g1 := r.newGen(1)
		tasks1 := r.openAll(ctx, g1, 0)
		r.produce(ctx, want, keys(100, 12)...)
		r.waitConsumed(ctx, pick(tasks1, upstreamIDs)...)
		r.checkpoint(ctx, 1, 1, tasks1)
		restored := r.ackLog.positions(1, 1)
		r.verifyCounts(ctx, want)
		atCheckpoint1 := maps.Clone(want)

		// Generation 1 writes a tail of 80 records to the shuffle, which
		// its downstream tasks count in their open transactions; then it
		// stops without a checkpoint.
		r.produce(ctx, want, keys(80, 12)...)
		r.waitConsumed(ctx, pick(tasks1, upstreamIDs)...)
		tail := r.waitShuffleAbove(ctx, restored, 80)
		for _, tk := range tasks1 {
			r.stop(tk)
		}
		stale := r.staleInShuffle(ctx, restored, 1)
		if stale < tail {
			t.Fatalf("%d records of generation 1 above checkpoint 1, want at least %d", stale, tail)
		}

		// Generation 2's downstream tasks alone: the whole tail is stale.
		g2 := r.newGen(2)
		down := map[control.TaskID]*Task{}
		for _, id := range downstreamIDs {
			down[id] = r.open(ctx, g2, id, 1)
		}
		for _, tk := range down {
			tk.Run()
		}
		r.waitShuffleRead(ctx, g2, restored)
		r.waitDropped(g2, "stale", stale, true)
		r.ackLog.quiet(t, ctx, 500*time.Millisecond, 2, 2, downstreamIDs...)
		r.verifyCounts(ctx, atCheckpoint1)

		// Generation 2's upstream tasks re-emit the tail; checkpoint 2
		// counts it once.
		up := map[control.TaskID]*Task{}
		for _, id := range upstreamIDs {
			up[id] = r.open(ctx, g2, id, 1)
		}
		for _, tk := range up {
			tk.Run()
		}
		r.waitConsumed(ctx, pick(up, upstreamIDs)...)
		all := maps.Clone(up)
		maps.Copy(all, down)
		r.checkpoint(ctx, 2, 2, all)
		r.verifyCounts(ctx, want)
		if got := dropped(t, g2.reg, twoStage, "stale"); got != float64(stale) {
			t.Fatalf("generation 2 dropped %v records as stale by checkpoint 2, want the %d of the tail", got, stale)
		}
	})
}

// positions returns the shuffle positions the acks of checkpoint n of
// generation gen record, by partition.
func (l *ackLog) positions(n ckpt.ID, gen uint64) map[int32]int64 {
	out := map[int32]int64{}
	for k, a := range l.acks {
		if k.id == n && k.gen == gen {
			for _, p := range a.Shuffle {
				out[p.Partition] = p.Offset
			}
		}
	}
	return out
}

// shuffleTopic is the two-stage job's shuffle topic.
func (r *rig) shuffleTopic() string { return r.plan.Stage(twoStage).Input.Topic }

// waitShuffleAbove waits until the shuffle topic holds at least n records
// above the positions from, and returns how many it holds.
func (r *rig) waitShuffleAbove(ctx context.Context, from map[int32]int64, n int) int {
	r.t.Helper()
	adm := r.c.Admin(r.t)
	deadline := time.Now().Add(time.Minute)
	for {
		ends, err := adm.ListEndOffsets(ctx, r.shuffleTopic())
		if err != nil {
			r.t.Fatal(err)
		}
		above := 0
		for p := range int32(twoStageMax) {
			end, _ := ends.Lookup(r.shuffleTopic(), p)
			above += int(end.Offset - from[p])
		}
		if above >= n {
			return above
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d records in %s above %v after a minute, want %d", above, r.shuffleTopic(), from, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// staleInShuffle reads the shuffle topic from the positions from (every
// partition must have one) to its end, and returns how many records (data
// and barriers) generation gen wrote there.
func (r *rig) staleInShuffle(ctx context.Context, from map[int32]int64, gen uint64) int {
	r.t.Helper()
	topic := r.shuffleTopic()
	ends, err := r.c.Admin(r.t).ListEndOffsets(ctx, topic)
	if err != nil {
		r.t.Fatal(err)
	}
	start := map[int32]kgo.Offset{}
	left := map[int32]int64{}
	for p := range int32(twoStageMax) {
		off, ok := from[p]
		if !ok {
			r.t.Fatalf("no restored position of %s/%d in %v", topic, p, from)
		}
		if end, _ := ends.Lookup(topic, p); end.Offset > off {
			start[p] = kgo.NewOffset().At(off)
			left[p] = end.Offset
		}
	}
	if len(start) == 0 {
		return 0
	}
	cl := r.c.Client(r.t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}))
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	genText := fmt.Sprint(gen)
	n := 0
	for len(left) > 0 {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			r.t.Fatalf("%s not read to its end: %v left", topic, left)
		}
		fs.EachError(func(_ string, p int32, err error) { r.t.Fatalf("fetch %s/%d: %v", topic, p, err) })
		fs.EachRecord(func(rec *kgo.Record) {
			end, ok := left[rec.Partition]
			if !ok || rec.Offset >= end {
				return
			}
			for _, h := range rec.Headers {
				if h.Key == shuffle.HeaderGen && string(h.Value) == genText {
					n++
				}
			}
			if rec.Offset == end-1 {
				delete(left, rec.Partition)
			}
		})
	}
	return n
}

// waitStaleInShuffle waits until generation gen wrote at least n records
// above the positions from.
func (r *rig) waitStaleInShuffle(ctx context.Context, from map[int32]int64, gen uint64, n int) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := r.staleInShuffle(ctx, from, gen)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%d records of generation %d above %v after a minute, want %d", got, gen, from, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitDropped waits until the downstream stage of generation g has dropped
// at least n records for reason. With exact, it must be exactly n: the
// caller first waits until the tasks have read every record that could be
// dropped (waitShuffleRead), so that none is still to come.
func (r *rig) waitDropped(g *gen, reason string, n int, exact bool) {
	r.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got := dropped(r.t, g.reg, twoStage, reason)
		if exact && got > float64(n) {
			r.t.Fatalf("generation %d dropped %v records as %s, want %d", g.n, got, reason, n)
		}
		if got >= float64(n) {
			n = int(got)
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("generation %d dropped %v records as %s after a minute, want %d", g.n, got, reason, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.t.Logf("generation %d dropped %d records as %s", g.n, n, reason)
}

// TestShuffleReadFailureEndsTask: a shuffle read that no retry can fix ends
// the downstream task with the reader's error (the replica then restores
// the generation), instead of being taken for an abort's wake and polled
// again forever. The failure is made deterministic: a downstream task
// holds partition 0 of its range (both upstream tasks' barrier 1 are there,
// the other partitions' are not) while a record follows on it; that
// partition is then purged above the held record, and the other
// partitions' barriers release it: re-reading it is out of range. The test
// writes the shuffle records itself, as the upstream tasks would. On kfake
// and on the real broker.
func TestShuffleReadFailureEndsTask(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		r := newTwoStageRig(t, ctx, c, newGate())
		topic := r.shuffleTopic()
		g1 := r.newGen(1)
		id := downstreamIDs[0]
		tk := r.open(ctx, g1, id, 0)
		tk.Run()
		lo, hi := r.plan.KeyGroups(id)

		cl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		write := func(recs ...*kgo.Record) {
			t.Helper()
			if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		meta := func(up control.TaskID) []kgo.RecordHeader {
			return []kgo.RecordHeader{{Key: shuffle.HeaderTask, Value: []byte(up.String())}, {Key: shuffle.HeaderGen, Value: []byte("1")}}
		}
		barrier := func(p int32, up control.TaskID) *kgo.Record {
			return &kgo.Record{Topic: topic, Partition: p, Headers: append(meta(up), kgo.RecordHeader{Key: shuffle.HeaderBarrier, Value: []byte("1")})}
		}
		held := int32(lo)
		write(barrier(held, upstreamIDs[0]), barrier(held, upstreamIDs[1]),
			&kgo.Record{Topic: topic, Partition: held, Key: []byte("k"), Value: []byte("k"), Headers: meta(upstreamIDs[0])})
		// The task has read the barriers and holds the partition.
		deadline := time.Now().Add(time.Minute)
		for readTotal(t, g1, topic) < 2 {
			if time.Now().After(deadline) {
				t.Fatal("the downstream task did not read the barriers within a minute")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := shuffle.Purge(ctx, c.Admin(t), topic, map[int32]int64{held: 3}); err != nil {
			t.Fatal(err)
		}
		for p := int32(lo) + 1; p < int32(hi); p++ {
			write(barrier(p, upstreamIDs[0]), barrier(p, upstreamIDs[1]))
		}
		r.ackLog.wait(t, ctx, 1, 1, id)
		select {
		case <-tk.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("the downstream task still runs 30s after its shuffle read failed")
		}
		var re *shuffle.ReadError
		if err := tk.Err(); !errors.As(err, &re) || re.Partition != held {
			t.Fatalf("the task ended with %v, want the shuffle read error of partition %d", err, held)
		}
	})
}

// readTotal is weir_shuffle_records_read_total of topic in generation g.
func readTotal(t *testing.T, g *gen, topic string) float64 {
	t.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "weir_shuffle_records_read_total" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "topic" && l.GetValue() == topic {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return 0
}

// TestAbortReleasesAlignment: checkpoint 2 reaches upstream task main/0
// only, so the downstream tasks hold its inputs (its records after barrier
// 2 are skipped, to be re-read) while main/1's records go on being
// processed, and never snapshot 2. `abort 2` releases them: each partition
// is read again from the first skipped record, main/1's records there are
// dropped as replayed, main/0's are processed. Checkpoint 3 then completes
// with every record counted exactly once. On kfake and on the real broker.
func TestAbortReleasesAlignment(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		r := newTwoStageRig(t, ctx, c, newGate())
		want := map[string]int{}
		g1 := r.newGen(1)
		tasks := r.openAll(ctx, g1, 0)
		r.produce(ctx, want, keys(60, 12)...)
		r.waitConsumed(ctx, pick(tasks, upstreamIDs)...)
		r.checkpoint(ctx, 1, 1, tasks)

		if err := tasks[upstreamIDs[0]].Trigger(barrierOf(2)); err != nil {
			t.Fatal(err)
		}
		r.ackLog.wait(t, ctx, 2, 1, upstreamIDs[0])
		r.produceTo(ctx, want, 0, keys(60, 12)...)
		r.waitConsumed(ctx, tasks[upstreamIDs[0]])
		r.waitDropped(g1, "skipped", 60, false)
		r.produceTo(ctx, want, 1, keys(60, 12)...)
		r.waitConsumed(ctx, tasks[upstreamIDs[1]])
		r.waitShuffleRead(ctx, g1, nil)
		r.ackLog.quiet(t, ctx, 500*time.Millisecond, 2, 1, downstreamIDs...)
		if n := dropped(t, g1.reg, twoStage, "replayed"); n != 0 {
			t.Fatalf("%v records replayed before the abort, want none", n)
		}

		for _, tk := range tasks {
			tk.Abort(ctx, 2)
		}
		r.waitDropped(g1, "replayed", 1, false)
		r.checkpoint(ctx, 3, 1, tasks)
		r.verifyCounts(ctx, want)
	})
}

// waitShuffleRead waits until the downstream tasks of generation g, which
// read the shuffle topic from the positions from (its start where from has
// none), have read every record in it.
func (r *rig) waitShuffleRead(ctx context.Context, g *gen, from map[int32]int64) {
	r.t.Helper()
	ends, err := r.c.Admin(r.t).ListEndOffsets(ctx, r.shuffleTopic())
	if err != nil {
		r.t.Fatal(err)
	}
	var total int64
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset - from[o.Partition] })
	deadline := time.Now().Add(time.Minute)
	for readTotal(r.t, g, r.shuffleTopic()) < float64(total) {
		if time.Now().After(deadline) {
			r.t.Fatalf("the downstream tasks read %v of the %d records of %s above %v within a minute", readTotal(r.t, g, r.shuffleTopic()), total, r.shuffleTopic(), from)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
