package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
)

// TestStateAndTimersSurviveRestore checks that keyed state and timers are
// in the snapshot: a task restored from checkpoint 1 continues the sums and
// fires the timers set before the checkpoint, once.
func TestStateAndTimersSurviveRestore(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.Open(ctx, "mem://", "sessions", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	cfg := state.Config{Dir: t.TempDir(), Task: "task-0", Store: store}
	b, err := state.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	clk := &clock{now: t0}
	task := newTask(t, sessionJob(&closed), b, clk)
	var c collector
	if err := task.ProcessBatch(recs("in", "a=1", "b=2", "a=3"), &c); err != nil {
		t.Fatal(err)
	}
	snap, err := b.Snapshot(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := snap.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// After the checkpoint, the original fires its timers; the restored
	// task must not have seen that.
	clk.now = clk.now.Add(time.Minute)
	if err := task.FireTimers(clk.now, &c); err != nil {
		t.Fatal(err)
	}
	equal(t, "original", c.take(), []string{"0:a=4@12:00:10", "0:b=2@12:00:10"})
	_ = task.Close()
	if err := b.NotifyComplete(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}

	cfg.Dir = t.TempDir()
	cfg.DisableLocalRecovery = true
	rb, err := state.Restore(ctx, cfg, res.Handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rb.Close(ctx) })
	clk.now = t0
	restored := newTask(t, sessionJob(&closed), rb, clk)
	if err := restored.ProcessBatch(recs("in", "b=5"), &c); err != nil {
		t.Fatal(err)
	}
	clk.now = t0.Add(10 * time.Second)
	if err := restored.FireTimers(clk.now, &c); err != nil {
		t.Fatal(err)
	}
	// a's timer from before the checkpoint fires with a's restored sum; b's
	// was moved by b=5 and fires with the continued sum.
	equal(t, "restored", c.take(), []string{"0:a=4@12:00:10", "0:b=7@12:00:10"})
	if err := restored.FireTimers(clk.now.Add(time.Hour), &c); err != nil {
		t.Fatal(err)
	}
	equal(t, "fired once", c.take(), nil)
}
