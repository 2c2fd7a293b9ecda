package task

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// TestSingleStageCheckpoints characterises one source task with keyed state
// and an exactly-once sink, driven as the coordinator drives it: a barrier
// after the records read, an ack naming a manifest with the source's
// offsets and the pre-committed transaction, nothing visible before
// Complete, the records' output exactly once after it; an aborted
// checkpoint's data committed by the next checkpoint, also when that one is
// restored from instead of completed; Stop aborting the open transaction;
// and a restore continuing exactly after the checkpoint. On kfake and on
// the real broker.
func TestSingleStageCheckpoints(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		r := newRig(t, ctx, c, rigConfig{inParts: 1, outParts: 1, build: oneStageJob})
		main0 := control.TaskID{Stage: "main", Index: 0}
		want := map[string]int{}

		// Generation 1 from empty state.
		g1 := r.newGen(1)
		tk := r.open(ctx, g1, main0, 0)
		tk.Run()
		r.produce(ctx, want, keys(10, 3)...)
		r.waitConsumed(ctx, tk)
		if err := tk.Trigger(barrierOf(1)); err != nil {
			t.Fatal(err)
		}
		if err := tk.Trigger(barrierOf(1)); err == nil {
			t.Fatal("a second trigger 1 was accepted")
		}
		acks := r.ackLog.wait(t, ctx, 1, 1, main0)
		m, err := state.ReadManifest(ctx, r.store, acks[main0].Handle)
		if err != nil {
			t.Fatalf("the ack's handle %q: %v", acks[main0].Handle, err)
		}
		var op operatorState
		if err := json.Unmarshal(m.OperatorState, &op); err != nil {
			t.Fatal(err)
		}
		if off, ok := op.Offsets.Lookup(r.in, 0); !ok || off != 10 {
			t.Fatalf("checkpoint 1 records source offsets %v, want %s/0 at 10", op.Offsets, r.in)
		}
		if len(op.Sinks) != 1 || len(op.Sinks[0]) != 1 {
			t.Fatalf("checkpoint 1 records sink transactions %+v, want one of sink 0", op.Sinks)
		}
		if recs := c.ReadCommitted(ctx, t, r.out); len(recs) != 0 {
			t.Fatalf("%d output records visible before checkpoint 1 completed", len(recs))
		}
		r.writeMetadata(ctx, 1, 1, acks)
		if err := tk.Complete(ctx, 1); err != nil {
			t.Fatal(err)
		}
		r.verifyCounts(ctx, want)

		// Checkpoint 2 is acknowledged, then aborted: its transaction stays
		// pre-committed and belongs to checkpoint 3, which is restored from
		// without being completed.
		r.produce(ctx, want, keys(10, 3)...)
		r.waitConsumed(ctx, tk)
		if err := tk.Trigger(barrierOf(2)); err != nil {
			t.Fatal(err)
		}
		r.ackLog.wait(t, ctx, 2, 1, main0)
		tk.Abort(ctx, 2)
		r.produce(ctx, want, keys(5, 4)...)
		r.waitConsumed(ctx, tk)
		if err := tk.Trigger(barrierOf(3)); err != nil {
			t.Fatal(err)
		}
		acks = r.ackLog.wait(t, ctx, 3, 1, main0)
		r.writeMetadata(ctx, 3, 1, acks)
		// Records after checkpoint 3 go to the open transaction; the crash
		// (Stop) before `complete 3` loses them.
		r.produce(ctx, nil, keys(5, 5)...)
		r.waitConsumed(ctx, tk)
		r.stop(tk)

		// Generation 2 restores checkpoint 3: opening commits what it
		// recorded (checkpoints 2 and 3) before anything runs.
		g2 := r.newGen(2)
		tk = r.open(ctx, g2, main0, 3)
		r.verifyCounts(ctx, want)
		for _, k := range keys(5, 5) {
			want[k]++ // read again after the restore
		}
		tk.Run()
		r.waitConsumed(ctx, tk)
		r.checkpoint(ctx, 4, 2, map[control.TaskID]*Task{main0: tk})
		r.verifyCounts(ctx, want)

		// Stop with records in the open transaction: it is aborted, so no
		// transaction stays open on the output (committed waits for the
		// last stable offset), and none of them is visible.
		later := keys(7, 2)
		r.produce(ctx, nil, later...)
		r.waitConsumed(ctx, tk)
		r.stop(tk)
		r.verifyCounts(ctx, want)

		// Generation 3 restores checkpoint 4 and continues exactly after it.
		for _, k := range later {
			want[k]++
		}
		g3 := r.newGen(3)
		tk = r.open(ctx, g3, main0, 4)
		tk.Run()
		r.waitConsumed(ctx, tk)
		r.checkpoint(ctx, 5, 3, map[control.TaskID]*Task{main0: tk})
		r.verifyCounts(ctx, want)
	})
}

// TestSourceDecodeFailureStopsTask: a record that does not decode under
// on_error: fail ends the task with a permanent failure of cause record
// naming it, at once: not only at the next trigger (whose barrier meets
// the source's final error), with the task goroutine polling the failed
// source in a busy loop meanwhile. On kfake and on the real broker.
func TestSourceDecodeFailureStopsTask(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r := newRig(t, ctx, c, rigConfig{inParts: 1, outParts: 1, build: func(name, in, out string) *stream.Job {
			j := stream.NewJob(name)
			s := stream.From(j, stream.KafkaSource{Topics: []string{in}, Format: stream.FormatJSON}, stream.RawCodec{})
			stream.To(s, stream.KafkaSink{Topic: out, TransactionTimeout: testTxnTimeout}, stream.RawCodec{})
			return j
		}})
		tk := r.open(ctx, r.newGen(1), control.TaskID{Stage: "main", Index: 0}, 0)
		tk.Run()
		r.produce(ctx, nil, `"ok"`, `{not json`)
		select {
		case <-tk.Done():
		case <-time.After(20 * time.Second):
			t.Fatal("the task still runs 20s after an undecodable record under on_error: fail")
		}
		p := Permanent(tk.Err())
		want := control.Position{Topic: r.in, Partition: 0, Offset: 1}
		if p == nil || p.Cause != control.CauseRecord || p.Record != want {
			t.Fatalf("task ended with %v (permanent: %+v), want a permanent failure of cause record at %v", tk.Err(), p, want)
		}
	})
}
