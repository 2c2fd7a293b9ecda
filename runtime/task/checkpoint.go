package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/state"
)

// barrier takes the synchronous part of snapshot n at the barrier and
// starts its asynchronous part.
func (t *Task) barrier(b *mark) error {
	n := b.id
	start := time.Now()
	pres := make([]pending, len(t.outs))
	for i, o := range t.outs {
		if o == nil {
			continue // a sink of another stage
		}
		pre, err := o.preCommit(t.ctx, n)
		if err != nil {
			t.decline(n, fmt.Sprintf("sink %d pre-commit: %v", i, err))
			return err
		}
		pres[i] = pre
	}
	snap, err := t.backend.Snapshot(n, nil)
	if err != nil {
		t.decline(n, fmt.Sprintf("snapshot: %v", err))
		return fmt.Errorf("snapshot %d: %w", n, err)
	}
	var wms *watermarkState
	if t.wm != nil {
		wms = t.wm.snapshot()
	}
	syncDur := time.Since(start)
	t.async.Go(func() { t.finishSnapshot(b, pres, snap, wms, syncDur) })
	return nil
}

// finishSnapshot is the asynchronous part of snapshot n. The state files
// upload while the outputs flush what they wrote before the barrier: the
// manifest, written last, holds the sinks' transaction handles, known only
// once their flush is done.
func (t *Task) finishSnapshot(b *mark, pres []pending, snap *state.Snapshot, wms *watermarkState, syncDur time.Duration) {
	ctx := t.ctx
	n := b.id
	var flushErr error // the reason to decline, if an output's flush failed
	snap.SetOperatorStateFunc(func(ctx context.Context) ([]byte, error) {
		op := operatorState{Offsets: b.offsets, Shuffle: b.shuffle, Sinks: make([][]sink.TxnHandle, len(t.cfg.Sinks)), Watermark: wms}
		for i, pre := range pres {
			if pre == nil {
				continue
			}
			handles, err := pre.wait(ctx)
			if err != nil {
				flushErr = fmt.Errorf("sink %d flush: %w", i, err)
				return nil, flushErr
			}
			if i < len(op.Sinks) { // a sink; a shuffle has no transactions
				if handles == nil {
					handles = []sink.TxnHandle{} // null would say: another stage's sink
				}
				p := t.pools[i]
				p.Txns = handles
				op.SinkPools = append(op.SinkPools, p)
				op.Sinks[i] = handles
			}
		}
		opb, err := json.Marshal(op)
		if err != nil {
			flushErr = fmt.Errorf("encode operator state: %w", err)
		}
		return opb, flushErr
	})
	res, err := snap.Run(ctx)
	if err != nil {
		switch {
		case flushErr != nil:
			t.decline(n, flushErr.Error())
		case ctx.Err() == nil:
			t.decline(n, fmt.Sprintf("upload: %v", err))
		}
		return
	}
	ack := control.Ack{ID: n, Gen: t.cfg.Gen, Task: t.cfg.ID, Handle: res.Handle, Shuffle: b.shuffle, Metrics: control.AckMetrics{
		SyncMS: syncDur.Milliseconds(), AsyncMS: res.AsyncDuration.Milliseconds(), AlignMS: b.align.Milliseconds(),
		StateBytes: res.StateBytes, UploadedBytes: res.UploadedBytes,
	}}
	if err := t.cfg.Acks.Send(ctx, ack); err != nil && ctx.Err() == nil {
		t.log.Warn("ack not sent; the checkpoint will expire", "checkpoint_id", n, "err", err)
	}
}

func (t *Task) decline(n ckpt.ID, reason string) {
	t.log.Warn("checkpoint declined", "checkpoint_id", n, "reason", reason)
	d := control.Decline{ID: n, Gen: t.cfg.Gen, Task: t.cfg.ID, Reason: reason}
	if err := t.cfg.Acks.Send(context.WithoutCancel(t.ctx), d); err != nil {
		t.log.Warn("decline not sent", "checkpoint_id", n, "err", err)
	}
}

// Trigger is `trigger n`: a source task injects barrier n; a downstream
// task learns of n from its input's barrier records instead.
func (t *Task) Trigger(n ckpt.ID) error { return t.in.trigger(n) }

// Complete is notifyCheckpointComplete: the sink commits every transaction
// pre-committed at or before n, the source commits n's offsets to the job's
// consumer group, and the state backend lets go of older snapshots.
func (t *Task) Complete(ctx context.Context, n ckpt.ID) error {
	for i, o := range t.outs {
		if o == nil {
			continue
		}
		if err := o.complete(ctx, n); err != nil {
			return fmt.Errorf("task %s: commit sink %d's transactions of checkpoint %d: %w", t.cfg.ID, i, n, err)
		}
	}
	var errs []error
	if err := t.in.complete(ctx, n); err != nil {
		errs = append(errs, fmt.Errorf("commit source offsets of checkpoint %d: %w", n, err))
	}
	if err := t.backend.NotifyComplete(ctx, n); err != nil {
		errs = append(errs, fmt.Errorf("state: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		// Offsets for people and local snapshot clean-up: not correctness.
		t.log.Warn("checkpoint completion bookkeeping failed", "checkpoint_id", n, "err", err)
	}
	return nil
}

// Abort is the abort of checkpoint n: the state backend discards its
// partial uploads; the sink keeps its data for the next checkpoint.
func (t *Task) Abort(ctx context.Context, n ckpt.ID) {
	t.in.abort(n)
	for _, o := range t.outs {
		if o != nil {
			o.abort(n)
		}
	}
	if err := t.backend.NotifyAborted(ctx, n); err != nil {
		t.log.Warn("discarding an aborted snapshot failed", "checkpoint_id", n, "err", err)
	}
}
