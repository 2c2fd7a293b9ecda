package runner_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/coordinator"
	"github.com/weir-stream/weir/coordinator/runner"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/state"
)

// stuckDiscarder is a Discarder whose discards wait until open is closed:
// an object store that deletes slower than checkpoints complete.
type stuckDiscarder struct {
	open     chan struct{}
	mu       sync.Mutex
	released []ckpt.ID
}

func (d *stuckDiscarder) Rebuild(context.Context, []control.Complete) error { return nil }
func (d *stuckDiscarder) Register(context.Context, control.Complete) error  { return nil }
func (d *stuckDiscarder) Clock(context.Context) (time.Time, error)          { return time.Now(), nil }
func (d *stuckDiscarder) CollectGarbage(context.Context, time.Time, ckpt.ID) (state.Deleted, error) {
	return state.Deleted{}, nil
}

func (d *stuckDiscarder) Discard(ctx context.Context, dis coordinator.Discard) (state.Deleted, error) {
	select {
	case <-d.open:
	case <-ctx.Done():
		return state.Deleted{}, ctx.Err()
	}
	d.mu.Lock()
	d.released = append(d.released, dis.ID)
	d.mu.Unlock()
	return state.Deleted{Keys: []string{dis.Metadata}}, nil
}

// watchedClock is the runner's clock (time.Now), which counts how often
// the runner's loop has read it at or after a mark: a test waits on the
// loop having seen a span of time pass, not on the test's own sleep, which
// a loaded machine can outrun.
type watchedClock struct {
	mu    sync.Mutex
	mark  time.Time // zero: not counting
	reads int       // readings at or after mark
}

func (c *watchedClock) Now() time.Time {
	now := time.Now()
	c.mu.Lock()
	if !c.mark.IsZero() && !now.Before(c.mark) {
		c.reads++
	}
	c.mu.Unlock()
	return now
}

// markAfter starts counting the readings at or after now+d.
func (c *watchedClock) markAfter(d time.Duration) {
	c.mu.Lock()
	c.mark, c.reads = time.Now().Add(d), 0
	c.mu.Unlock()
}

func (c *watchedClock) readsAfterMark() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// countingHandler counts log records whose message contains substr.
type countingHandler struct {
	slog.Handler
	substr string
	mu     *sync.Mutex
	n      *int
}

func (h countingHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.substr) {
		h.mu.Lock()
		*h.n++
		h.mu.Unlock()
	}
	return h.Handler.Handle(ctx, r)
}

func (h countingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	h.Handler = h.Handler.WithAttrs(as)
	return h
}

func (h countingHandler) WithGroup(name string) slog.Handler {
	h.Handler = h.Handler.WithGroup(name)
	return h
}

// TestPeriodicCheckpointsWaitForDeletes: while the object store does not
// finish deleting, the coordinator triggers periodic checkpoints only until
// more than max_concurrent discards are queued (Flink's
// CheckpointRequestDecider), says so once in its log and in
// weir_checkpoint_gc_backlog; a savepoint still runs; once deletes finish,
// periodic checkpoints go on.
func TestPeriodicCheckpointsWaitForDeletes(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		e := newEnv(t, c)
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		var mu sync.Mutex
		held := 0
		log := slog.New(countingHandler{Handler: e.log.Handler(), substr: "periodic checkpoints wait", mu: &mu, n: &held})
		reg := prometheus.NewRegistry()
		disc := &stuckDiscarder{open: make(chan struct{})}
		clock := &watchedClock{}
		r, err := runner.New(runner.Options{
			Core: coordinator.Config{
				Interval: 50 * time.Millisecond, Timeout: 20 * time.Second, MaxConcurrent: 1,
				Retained: 2, Random: rand.New(rand.NewPCG(3, 3)),
			},
			Kafka: e.opts, Topics: e.topics, TransactionalID: e.txid,
			Metadata:     runner.ObjectStoreMetadata{Store: e.store},
			Discarder:    disc,
			TickInterval: 10 * time.Millisecond,
			Now:          clock.Now,
			Logger:       log, Registerer: reg,
		})
		if err != nil {
			t.Fatal(err)
		}
		stop := e.runAcked(ctx, r)
		defer func() {
			if err := stop(); err != nil {
				t.Errorf("run: %v", err)
			}
		}()

		// retained 2: checkpoint 3 releases 1, 4 releases 2. Neither
		// discard finishes, so after 4 the backlog (2) exceeds
		// max_concurrent (1) and nothing more is triggered.
		waitFor(t, "four completed checkpoints", 30*time.Second, func() bool {
			_, done, _ := e.history(ctx)
			return len(done) >= 4
		})
		waitFor(t, "gc backlog 2", 10*time.Second, func() bool { return gauge(t, reg, "weir_checkpoint_gc_backlog") >= 2 })
		// 40 intervals: without the hold, 40 more checkpoints. The loop
		// reads its clock before each tick and event; a second reading past
		// the mark means the tick of the first one, and any trigger it
		// wrote, is done.
		clock.markAfter(40 * 50 * time.Millisecond)
		waitFor(t, "the coordinator's clock 40 intervals on", 30*time.Second, func() bool { return clock.readsAfterMark() >= 2 })
		triggers, done, _ := e.history(ctx)
		if len(done) != 4 || len(triggers) != 4 {
			t.Fatalf("with discards stuck and max_concurrent 1: triggers %v, completes %v; want 4 of each", triggers, done)
		}
		if b := gauge(t, reg, "weir_checkpoint_gc_backlog"); b != 2 {
			t.Errorf("weir_checkpoint_gc_backlog %v, want 2", b)
		}
		mu.Lock()
		n := held
		mu.Unlock()
		if n != 1 {
			t.Errorf("logged %d times that periodic checkpoints wait, want once", n)
		}

		// A savepoint is not held back.
		if err := r.Submit(ctx, coordinator.RequestSavepoint{Kind: ckpt.KindSavepoint, Target: "sp"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the savepoint", 30*time.Second, func() bool {
			_, done, _ := e.history(ctx)
			return len(done) == 5
		})

		// The store catches up: the backlog empties, checkpoints go on.
		close(disc.open)
		waitFor(t, "more periodic checkpoints", 30*time.Second, func() bool {
			_, done, _ := e.history(ctx)
			return len(done) >= 8
		})
		waitFor(t, "gc backlog within max_concurrent", 10*time.Second, func() bool { return gauge(t, reg, "weir_checkpoint_gc_backlog") <= 1 })
		disc.mu.Lock()
		t.Logf("released %v; held back %d time(s)", disc.released, n)
		disc.mu.Unlock()
	})
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
