package stream_test

import (
	"context"
	"testing"
	"time"

	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

// TestStateNamesRestoreARenamedOperator: an operator restored under
// another name (TaskContext.StateNames, what compat.Compare gives a
// derived operator whose name an edit changed) continues the state and
// fires the timers the checkpoint holds under its old name; without the
// mapping it starts empty.
func TestStateNamesRestoreARenamedOperator(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.Open(ctx, "mem://", "renamed", objstore.Options{})
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
	_ = task.Close()
	if err := b.NotifyComplete(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The edited job: a new operator took the name "session", the old
	// one is "session-2".
	edited := func() *stream.Job {
		j := stream.NewJob("sessions")
		s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.JSONCodec[int64]{})
		s = stream.Filter(s, func(int64) (bool, error) { return true, nil })
		sums := stream.Process(s, "session-2", func() stream.KeyedProcessFunction[int64, string] { return &session{closed: &closed} })
		stream.To(sums, stream.KafkaSink{Topic: "sums"}, stream.StringCodec{})
		return j
	}
	run := func(names map[string]string) []string {
		t.Helper()
		rcfg := cfg
		rcfg.Dir, rcfg.DisableLocalRecovery = t.TempDir(), true
		rb, err := state.Restore(ctx, rcfg, res.Handle)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = rb.Close(ctx) }()
		clk.now = t0
		restored, err := edited().NewTask(stream.TaskContext{Backend: rb, Task: "task-0", Now: clk.Now, StateNames: names})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = restored.Close() }()
		var c collector
		if err := restored.ProcessBatch(recs("in", "b=5"), &c); err != nil {
			t.Fatal(err)
		}
		clk.now = t0.Add(10 * time.Second)
		if err := restored.FireTimers(clk.now, &c); err != nil {
			t.Fatal(err)
		}
		return c.take()
	}
	// a's timer from before the checkpoint fires with a's restored sum;
	// b's continues.
	equal(t, "restored under the old name", run(map[string]string{"session-2": "session"}), []string{"0:a=4@12:00:10", "0:b=7@12:00:10"})
	// Under its own name, the operator has no state: b starts at 5, a's
	// timer is another operator's.
	equal(t, "restored under its own name", run(nil), []string{"0:b=5@12:00:10"})
}
