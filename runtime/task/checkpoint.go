package task

import (
	"context"
	"fmt"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

// Trigger is the coordinator's trigger of barrier b: a source task injects
// it; a downstream task learns of it from its input's barrier records
// instead.
func (t *Task) Trigger(b ckpt.Barrier) error { return t.in.trigger(b) }

// Complete is notifyCheckpointComplete: the sinks commit every transaction
// pre-committed at or before n, the state backend lets go of older
// snapshots (the checkpointer), and the source commits n's offsets to the
// job's consumer group.
func (t *Task) Complete(ctx context.Context, n ckpt.ID) error {
	if err := t.ckpt.complete(ctx, n); err != nil {
		return fmt.Errorf("task %s: %w", t.cfg.ID, err)
	}
	if err := t.in.complete(ctx, n); err != nil {
		// Offsets for people: not correctness.
		t.log.Warn("checkpoint completion bookkeeping failed", "checkpoint_id", n,
			"err", fmt.Errorf("commit source offsets of checkpoint %d: %w", n, err))
	}
	return nil
}

// Abort is the abort of checkpoint n: the input forgets its barrier, and
// the checkpointer cancels its snapshot.
func (t *Task) Abort(ctx context.Context, n ckpt.ID) {
	t.in.abort(n)
	t.ckpt.abort(ctx, n)
}
