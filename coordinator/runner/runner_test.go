package runner_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	_ "gocloud.dev/blob/memblob"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/coordinator"
	"github.com/weir-stream/weir/coordinator/runner"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/internal/testlog"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/state/objstore"
)

var tasks = []control.TaskID{{Stage: "count", Index: 0}, {Stage: "count", Index: 1}}

type env struct {
	t      *testing.T
	c      *kafkatest.Cluster
	opts   []kgo.Opt
	topics controltopic.Topics
	txid   string
	store  *objstore.Store
	log    *slog.Logger
}

func newEnv(t *testing.T, c *kafkatest.Cluster) *env {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := kafkatest.Name(t, "_weir") + "."
	e := &env{
		t: t, c: c,
		opts:   []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
		topics: controltopic.NewTopics(prefix),
		txid:   controltopic.CoordinatorTransactionalID(prefix),
		log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if testing.Verbose() {
		e.log = slog.New(slog.NewTextHandler(testlog.New(t, ""), &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if err := controltopic.EnsureTopics(ctx, c.Admin(t), e.topics, -1); err != nil {
		t.Fatal(err)
	}
	store, err := objstore.Open(ctx, "mem://", "job", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e.store = store
	return e
}

func (e *env) runner(seed uint64) *runner.Runner { return e.runnerWith(seed, nil) }

// runnerWith is runner with options changed by mod.
func (e *env) runnerWith(seed uint64, mod func(*runner.Options)) *runner.Runner {
	opts := runner.Options{
		Core: coordinator.Config{
			Interval: 150 * time.Millisecond, Timeout: 20 * time.Second, MaxConcurrent: 1,
			Retained: 2, Random: rand.New(rand.NewPCG(seed, seed)),
		},
		Kafka: e.opts, Topics: e.topics, TransactionalID: e.txid,
		Metadata:     runner.ObjectStoreMetadata{Store: e.store},
		TickInterval: 20 * time.Millisecond,
		Logger:       e.log, Registerer: prometheus.NewRegistry(),
	}
	if mod != nil {
		mod(&opts)
	}
	r, err := runner.New(opts)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// fakeTasks play the job's tasks: they follow the commit and trigger topics,
// report themselves running in each new generation, and acknowledge every
// trigger of their generation while acking is on.
type fakeTasks struct {
	e       *env
	mu      sync.Mutex
	current *runner.Runner
	acking  atomic.Bool
	gen     atomic.Uint64
	lastTrg atomic.Uint64
	// skipped is the first trigger of the current generation left
	// unacknowledged because acking was off: a checkpoint that cannot
	// complete.
	skipped atomic.Uint64
	// shuffle, if set, gives each ack's shuffle positions.
	shuffle func(id ckpt.ID, task control.TaskID) []control.Position
}

func (f *fakeTasks) setRunner(r *runner.Runner) { f.mu.Lock(); f.current = r; f.mu.Unlock() }

func (f *fakeTasks) run(ctx context.Context) error {
	tail, err := controltopic.NewTail(f.e.opts, f.e.topics, map[control.Topic]kgo.Offset{
		control.TopicCommit:  kgo.NewOffset().AtStart(),
		control.TopicTrigger: kgo.NewOffset().AtStart(),
	}, f.e.log)
	if err != nil {
		return err
	}
	defer tail.Close()
	acks, err := controltopic.NewAckWriter(f.e.opts, f.e.topics)
	if err != nil {
		return err
	}
	defer acks.Close()
	for {
		rec, err := tail.Next(ctx)
		if err != nil {
			return err
		}
		switch m := rec.Msg.(type) {
		case control.Generation:
			f.gen.Store(m.Gen)
			f.mu.Lock()
			r := f.current
			f.mu.Unlock()
			for _, task := range tasks {
				// The runner that wrote the generation may already be gone
				// (killed); its successor starts a newer generation anyway.
				sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_ = r.Submit(sctx, coordinator.TaskRunning{Gen: m.Gen, Task: task})
				cancel()
			}
		case control.Trigger:
			f.lastTrg.Store(uint64(m.ID))
			if m.Gen != f.gen.Load() {
				continue
			}
			if !f.acking.Load() {
				f.skipped.CompareAndSwap(0, uint64(m.ID))
				continue
			}
			for _, task := range tasks {
				a := control.Ack{ID: m.ID, Gen: m.Gen, Task: task, Handle: fmt.Sprintf("chk-%d/%s.manifest", m.ID, task)}
				if f.shuffle != nil {
					a.Shuffle = f.shuffle(m.ID, task)
				}
				if err := acks.Send(ctx, a); err != nil {
					return err
				}
			}
		}
	}
}

// history returns the trigger and complete IDs written so far, in order.
func (e *env) history(ctx context.Context) (triggers, completes []ckpt.ID, gens []uint64) {
	e.t.Helper()
	for _, topic := range []control.Topic{control.TopicTrigger, control.TopicCommit} {
		h, err := controltopic.ReadHistory(ctx, e.opts, e.topics, topic)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, r := range h.Records {
			switch m := r.Msg.(type) {
			case control.Trigger:
				triggers = append(triggers, m.ID)
			case control.Complete:
				completes = append(completes, m.ID)
			case control.Generation:
				gens = append(gens, m.Gen)
			}
		}
	}
	return triggers, completes, gens
}

// runAcked runs r with fake tasks that acknowledge every trigger, and
// assigns them; stop ends both and returns r's error.
func (e *env) runAcked(ctx context.Context, r *runner.Runner) (stop func() error) {
	e.t.Helper()
	f := &fakeTasks{e: e}
	f.setRunner(r)
	f.acking.Store(true)
	tasksCtx, stopTasks := context.WithCancel(ctx)
	tasksDone := make(chan error, 1)
	go func() { tasksDone <- f.run(tasksCtx) }()
	runCtx, stopRun := context.WithCancel(ctx)
	runDone := make(chan error, 1)
	go func() { runDone <- r.Run(runCtx) }()
	assign(ctx, e.t, r)
	return func() error {
		stopRun()
		err := <-runDone
		stopTasks()
		<-tasksDone
		return err
	}
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func assign(ctx context.Context, t *testing.T, r *runner.Runner) {
	t.Helper()
	err := r.Submit(ctx, coordinator.Assign{Assignment: control.Assignment{"replica-0": tasks}})
	if err != nil {
		t.Fatalf("assign: %v", err)
	}
}

// TestCoordinatorKilledAndReplaced: a coordinator dies with a checkpoint
// pending; its successor rebuilds from the topics, starts a new generation,
// and continues with higher IDs; no checkpoint ID is triggered or completed
// twice, and _metadata exists for every completed one.
func TestCoordinatorKilledAndReplaced(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		e := newEnv(t, c)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()

		first := e.runner(1)
		f := &fakeTasks{e: e}
		f.setRunner(first)
		f.acking.Store(true)
		tasksCtx, stopTasks := context.WithCancel(ctx)
		tasksDone := make(chan error, 1)
		go func() { tasksDone <- f.run(tasksCtx) }()
		defer func() { stopTasks(); <-tasksDone }()

		firstCtx, kill := context.WithCancel(ctx)
		firstDone := make(chan error, 1)
		go func() { firstDone <- first.Run(firstCtx) }()
		assign(ctx, t, first)

		waitFor(t, "three completed checkpoints", 30*time.Second, func() bool {
			_, done, _ := e.history(ctx)
			return len(done) >= 3
		})
		// A task stops acknowledging: the next checkpoint it sees stays
		// pending (one already acknowledged may still complete).
		f.acking.Store(false)
		waitFor(t, "a pending checkpoint", 10*time.Second, func() bool { return f.skipped.Load() > 0 })
		pendingID := ckpt.ID(f.skipped.Load())
		kill() // the coordinator dies mid-checkpoint
		if err := <-firstDone; err != nil {
			t.Fatalf("first coordinator: %v", err)
		}
		e.c.WaitStable(t, e.topics.Commit) // its last commit's markers are in
		_, doneBefore, _ := e.history(ctx) // everything the first one completed
		if slices.Contains(doneBefore, pendingID) {
			t.Fatalf("checkpoint %d completed without every task's ack: %v", pendingID, doneBefore)
		}

		second := e.runner(2)
		f.setRunner(second)
		f.acking.Store(true)
		secondCtx, stopSecond := context.WithCancel(ctx)
		secondDone := make(chan error, 1)
		go func() { secondDone <- second.Run(secondCtx) }()
		assign(ctx, t, second)
		waitFor(t, "two checkpoints completed by the successor", 30*time.Second, func() bool {
			_, done, _ := e.history(ctx)
			return len(done) >= len(doneBefore)+2
		})
		stopSecond()
		if err := <-secondDone; err != nil {
			t.Fatalf("second coordinator: %v", err)
		}

		triggers, completes, gens := e.history(ctx)
		t.Logf("triggers %v, completes %v, generations %v, pending at the kill %d", triggers, completes, gens, pendingID)
		strictlyIncreasing(t, "trigger IDs", triggers)
		strictlyIncreasing(t, "complete IDs", completes)
		strictlyIncreasing(t, "generations", gens)
		if len(gens) != 2 {
			t.Errorf("generations %v, want 2 (one per coordinator)", gens)
		}
		for _, id := range completes {
			if id == pendingID {
				t.Errorf("checkpoint %d, pending when its coordinator died, was completed by the successor", id)
			}
			if _, err := e.store.Get(ctx, objstore.MetadataKey(id)); err != nil {
				t.Errorf("complete %d without _metadata: %v", id, err)
			}
		}
		if completes[len(doneBefore)] <= pendingID {
			t.Errorf("the successor completed %d, not above the pending %d", completes[len(doneBefore)], pendingID)
		}
	})
}

// TestZombieCoordinatorFenced: once a second coordinator takes over, the
// first one's next write fails and it stops with a fencing error; nothing it tried
// to write is visible.
func TestZombieCoordinatorFenced(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		e := newEnv(t, c)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()

		f := &fakeTasks{e: e}
		zombie := e.runner(1)
		f.setRunner(zombie)
		f.acking.Store(true)
		tasksCtx, stopTasks := context.WithCancel(ctx)
		tasksDone := make(chan error, 1)
		go func() { tasksDone <- f.run(tasksCtx) }()
		defer func() { stopTasks(); <-tasksDone }()

		zombieDone := make(chan error, 1)
		go func() { zombieDone <- zombie.Run(ctx) }()
		assign(ctx, t, zombie)
		waitFor(t, "a completed checkpoint", 30*time.Second, func() bool {
			_, done, _ := e.history(ctx)
			return len(done) >= 1
		})

		// The successor takes the transactional ID, without running its loop
		// yet: the zombie still ticks, and its next trigger must fail.
		w, err := controltopic.NewWriter(ctx, e.opts, e.topics, e.txid)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		fencedAt, _, _ := e.history(ctx)
		select {
		case err := <-zombieDone:
			// How the zombie learns it is fenced depends on where the
			// fence lands. Before its produce: INVALID_PRODUCER_EPOCH
			// (ErrFenced). Between its produce and its EndTxn: the
			// fence aborted its transaction and bumped the epoch, and
			// EndTxn(commit) at the old epoch gets INVALID_TXN_STATE
			// (transactions v2's retry check: the last end was an
			// abort), from kfake and from Apache Kafka 4.4 alike (a CI
			// rehearsal); Kafka 4.4 also once answered
			// UNKNOWN_SERVER_ERROR. Whatever the error, the zombie
			// must stop without writing: that is checked below.
			if !errors.Is(err, controltopic.ErrFenced) && !errors.Is(err, kerr.InvalidTxnState) && !errors.Is(err, kerr.UnknownServerError) {
				t.Fatalf("zombie stopped with %v, want a fencing error", err)
			}
			t.Logf("zombie stopped: %v", err)
		case <-time.After(20 * time.Second):
			t.Fatal("zombie coordinator still running 20s after it was fenced")
		}
		triggers, _, _ := e.history(ctx)
		if len(triggers) != len(fencedAt) {
			t.Fatalf("the zombie wrote triggers after it was fenced: %v then %v", fencedAt, triggers)
		}
	})
}

func strictlyIncreasing[T ckpt.ID | uint64](t *testing.T, what string, ids []T) {
	t.Helper()
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Errorf("%s not strictly increasing: %v", what, ids)
			return
		}
	}
}

// TestTriggersOnTime: a periodic trigger comes when it is due, not at the
// runner's next tick: with ticks an hour apart, checkpoints are still
// triggered every interval, each trigger's timestamp an interval after the
// last one's, or, after a checkpoint that took longer than the interval, its
// completion's (within scheduling slack), so intervals do not grow by a tick.
func TestTriggersOnTime(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		e := newEnv(t, c)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		const interval = 150 * time.Millisecond
		r := e.runnerWith(1, func(o *runner.Options) { o.TickInterval = time.Hour })
		stop := e.runAcked(ctx, r)
		waitFor(t, "six completed checkpoints", 30*time.Second, func() bool {
			_, completes, _ := e.history(ctx)
			return len(completes) >= 6
		})
		if err := stop(); err != nil {
			t.Fatalf("coordinator: %v", err)
		}
		var trgs []control.Trigger
		completedAt := map[ckpt.ID]int64{}
		for _, topic := range []control.Topic{control.TopicTrigger, control.TopicCommit} {
			h, err := controltopic.ReadHistory(ctx, e.opts, e.topics, topic)
			if err != nil {
				t.Fatal(err)
			}
			for _, rec := range h.Records {
				switch m := rec.Msg.(type) {
				case control.Trigger:
					if m.Kind == ckpt.KindCheckpoint {
						trgs = append(trgs, m)
					}
				case control.Complete:
					completedAt[m.ID] = m.TS
				}
			}
		}
		if len(trgs) < 6 {
			t.Fatalf("%d triggers, want at least 6", len(trgs))
		}
		// Each trigger comes an interval after the one before, or, when
		// that one took longer (MaxConcurrent 1), as soon as it completes:
		// a trigger left to a tick would come an hour late. The slack
		// covers the Complete record's transaction and the scheduler.
		const slack = 200 * time.Millisecond
		for i := 1; i < len(trgs); i++ {
			prev, cur := trgs[i-1], trgs[i]
			gap := time.Duration(cur.TS-prev.TS) * time.Millisecond
			due := time.UnixMilli(prev.TS).Add(interval)
			if done, ok := completedAt[prev.ID]; ok && time.UnixMilli(done).After(due) {
				due = time.UnixMilli(done)
			}
			late := time.UnixMilli(cur.TS).Sub(due)
			if gap < interval || late > slack {
				t.Errorf("trigger %d came %v after trigger %d, %v after it was due; want at least %v and at most %v late",
					cur.ID, gap, prev.ID, late, interval, slack)
			}
		}
	})
}
