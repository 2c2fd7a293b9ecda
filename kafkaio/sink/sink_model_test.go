package sink_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/sink"
)

// TestSinkRandomCrashes drives a sink as a task and a coordinator would, in a
// random order: records, barriers, completions (which subsume older pending
// checkpoints), aborts, and crashes — the sink is abandoned or closed, a new
// one recovers from the newest completed checkpoint's handles, and the input
// is replayed from that checkpoint's offset. At the end, a read_committed
// consumer must see every input record exactly once (DESIGN.md section 13,
// invariants 1 and 5, for the sink).
func TestSinkRandomCrashes(t *testing.T) {
	sinkModelSeeds(t, []uint64{1, 2, 3}, func(pool int) func(*sink.Config) {
		return func(cfg *sink.Config) { cfg.PoolSize = pool }
	})
}

// sinkModelSeeds runs the model with the sink configured by config(pool):
// on kfake with the given seeds, 80 steps each; on the real broker with one
// seed from the clock, 50 steps.
func sinkModelSeeds(t *testing.T, kfakeSeeds []uint64, config func(pool int) func(*sink.Config)) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		seeds, steps := kfakeSeeds, 80
		if c.Kind == kafkatest.Real {
			seeds, steps = []uint64{uint64(time.Now().UnixNano())}, 50
		}
		for _, seed := range seeds {
			t.Run("seed_"+strconv.FormatUint(seed, 10), func(t *testing.T) { sinkModelRun(t, c, seed, steps, config) })
		}
	})
}

// sinkModelSnapshot is what a task snapshot holds for the sink: the input
// offset at the barrier and the sink's handles.
type sinkModelSnapshot struct {
	offset  int
	handles []sink.TxnHandle
}

func sinkModelRun(t *testing.T, c *kafkatest.Cluster, seed uint64, steps int, config func(pool int) func(*sink.Config)) {
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	ctx := sinkCtx(t)
	e := newSinkEnv(t, c, 2)
	const pool = 6
	mod := config(pool)

	s := e.sink(t, ctx, nil, mod)
	var (
		next         int // next input record
		nextCkpt     = ckpt.ID(1)
		snapshots    = map[ckpt.ID]sinkModelSnapshot{}
		pendingCkpts []ckpt.ID // acknowledged, neither completed nor aborted
		lastComplete ckpt.ID
		held         []ckpt.ID // barriers not covered by a completion yet: a bound on the sink's pre-committed producers
		log          []string
	)
	write := func(n int) {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for range n {
			if err := s.Write(wctx, &kgo.Record{Value: []byte("v" + strconv.Itoa(next)), Partition: int32(next % 2)}); err != nil {
				t.Fatalf("write v%d: %v\nops: %v", next, err, log)
			}
			next++
		}
	}
	barrier := func() {
		id := nextCkpt
		nextCkpt++
		snapshots[id] = sinkModelSnapshot{offset: next, handles: sinkPreCommit(t, ctx, s, id)}
		pendingCkpts = append(pendingCkpts, id)
		held = append(held, id)
	}
	complete := func(i int) {
		id := pendingCkpts[i]
		if err := s.NotifyComplete(ctx, id); err != nil {
			t.Fatalf("complete %d: %v\nops: %v", id, err, log)
		}
		lastComplete = id
		pendingCkpts = pendingCkpts[i+1:] // older pending ones are subsumed
		held = slices.DeleteFunc(held, func(b ckpt.ID) bool { return b <= id })
	}
	crash := func(closeIt bool) {
		old := s
		if closeIt {
			_ = old.Close(ctx)
		}
		snap := snapshots[lastComplete]
		s = e.sink(t, ctx, snap.handles, mod)
		next = snap.offset
		pendingCkpts = nil
		held = nil
	}

	for range steps {
		if len(held) >= pool-1 {
			// Every producer may be taken: a completion must come
			// before the next epoch can open. The newest
			// checkpoint covers every held one.
			log = append(log, "barrier", "complete-newest")
			barrier()
			complete(len(pendingCkpts) - 1)
			continue
		}
		switch p := rng.IntN(100); {
		case p < 45:
			n := rng.IntN(20)
			log = append(log, "write"+strconv.Itoa(n))
			write(n)
		case p < 70:
			log = append(log, "barrier")
			barrier()
		case p < 85 && len(pendingCkpts) > 0:
			i := rng.IntN(len(pendingCkpts))
			log = append(log, "complete"+pendingCkpts[i].String())
			complete(i)
		case p < 92 && len(pendingCkpts) > 0:
			i := rng.IntN(len(pendingCkpts))
			id := pendingCkpts[i]
			log = append(log, "abort"+id.String())
			s.Abort(id)
			pendingCkpts = slices.Delete(pendingCkpts, i, i+1)
		case p >= 92:
			closeIt := rng.IntN(2) == 0
			log = append(log, "crash(close="+strconv.FormatBool(closeIt)+")")
			crash(closeIt)
		}
	}
	// Drain: one last checkpoint covers everything.
	barrier()
	complete(len(pendingCkpts) - 1)
	t.Logf("ops: %v", log)

	want := make([]string, next)
	for i := range want {
		want[i] = "v" + strconv.Itoa(i)
	}
	sinkWantValues(t, "after the run", sinkCommitted(t, ctx, c, e.topic, len(want), 500*time.Millisecond), want)
}
