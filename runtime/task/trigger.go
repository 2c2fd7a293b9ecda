package task

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/kafkaio/source"
)

// triggers is a source task's queue of the checkpoints whose barriers it
// has yet to place: the coordinator's `trigger n` adds n, and the task
// goroutine places barrier n between two batches (sourceInput.next).
//
// Goroutines: add, drop and close are called by the replica's control
// dispatcher; poll and placed by the task goroutine. Nothing blocks while
// holding mu. A trigger wakes a poll that waits on idle partitions by
// cancelling the poll's context, so that a barrier never waits for records.
type triggers struct {
	mu struct {
		sync.Mutex
		closed  bool
		pending []ckpt.Barrier // ascending IDs
		last    ckpt.ID        // the highest checkpoint accepted by add
		// wake cancels the context of the task goroutine's latest poll. It
		// may belong to a poll that has returned: cancelling it then is a
		// no-op, and poll looks at pending before it polls again.
		wake context.CancelFunc
	}
}

// add queues barrier b and wakes a waiting poll. Checkpoint IDs must
// increase: a repeated or older ID returns source.ErrBarrierOrder and is
// ignored. After close it returns source.ErrClosed.
func (q *triggers) add(b ckpt.Barrier) error {
	n := b.ID
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.mu.closed {
		return source.ErrClosed
	}
	if n <= q.mu.last {
		return fmt.Errorf("%w: checkpoint %d after %d", source.ErrBarrierOrder, n, q.mu.last)
	}
	q.mu.last = n
	q.mu.pending = append(q.mu.pending, b)
	if q.mu.wake != nil {
		q.mu.wake()
	}
	return nil
}

// drop forgets checkpoint n (on `abort n`) if its barrier is still pending.
func (q *triggers) drop(n ckpt.ID) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.mu.pending = slices.DeleteFunc(q.mu.pending, func(b ckpt.Barrier) bool { return b.ID == n })
}

// poll returns the first pending barrier, if there is one, or else (an ID
// of 0) a child of ctx to poll the source with, which add cancels, and its
// cancel function, to call when the poll has returned.
func (q *triggers) poll(ctx context.Context) (b ckpt.Barrier, pollCtx context.Context, cancel context.CancelFunc) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.mu.pending) > 0 {
		return q.mu.pending[0], nil, nil
	}
	pollCtx, cancel = context.WithCancel(ctx)
	q.mu.wake = cancel
	return ckpt.Barrier{}, pollCtx, cancel
}

// placed removes checkpoint n, whose barrier the task goroutine has just
// placed, from the queue. It returns false if n was no longer pending: it
// was dropped (aborted) while the barrier was being placed.
func (q *triggers) placed(n ckpt.ID) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	i := slices.IndexFunc(q.mu.pending, func(b ckpt.Barrier) bool { return b.ID == n })
	if i < 0 {
		return false
	}
	q.mu.pending = slices.Delete(q.mu.pending, i, i+1)
	return true
}

// close refuses every later add.
func (q *triggers) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.mu.closed = true
	q.mu.pending = nil
}
