package task

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/state"
)

// checkpointer is a task's part in checkpoints (DESIGN.md section 5, steps
// 4 to 9), kept apart from its processing as Flink keeps the
// SubtaskCheckpointCoordinator apart from the StreamTask. At a barrier
// (onBarrier, on the task goroutine) it has every output pre-commit, takes
// the synchronous snapshot of the state and starts the asynchronous part,
// which it tracks by checkpoint ID: the outputs' flushes, the upload, the
// manifest, then the ack (or the decline). complete and abort come by ID
// from the replica's control dispatcher; abort cancels that checkpoint's
// asynchronous part, or, if its barrier has not reached the task yet, its
// snapshot when it does. It knows nothing of Kafka: its outputs, its state
// and its acks are interfaces (scripted in checkpointer_test.go).
type checkpointer struct {
	cfg checkpointerConfig
	log *slog.Logger
	// ctx is the task's life: every asynchronous part runs under a child of
	// it, and a decline after it ended (the task stopping) is not sent.
	ctx context.Context

	mu struct {
		sync.Mutex
		// running cancels each asynchronous part in flight, by checkpoint.
		running map[ckpt.ID]context.CancelFunc
		// aborted are checkpoints aborted before their barrier reached the
		// task (IDs above lastBarrier).
		aborted     map[ckpt.ID]bool
		lastBarrier ckpt.ID
	}
	wg sync.WaitGroup
}

// checkpointerConfig is what a checkpointer works with.
type checkpointerConfig struct {
	Task control.TaskID
	Gen  uint64
	// Outputs are the task's outputs in the order their parts go into the
	// snapshot: sinks in the job's order, then shuffles.
	Outputs []output
	// Sinks is the number of the job's sinks: the length of the snapshot's
	// legacy per-index transaction list (operatorState.Sinks).
	Sinks int
	State snapshotter
	Acks  acker
	// Watermarks returns the task's event time at the barrier; nil if the
	// job has none.
	Watermarks func() *watermarkState
	// OnStartDelay observes the time from a checkpoint's trigger to its
	// barrier reaching the task; nil: not observed.
	OnStartDelay func(time.Duration)
	Logger       *slog.Logger
	Now          func() time.Time
	// spawn runs an asynchronous part; nil: on a goroutine of its own. The
	// scripted tests run them when the script says.
	spawn func(f func())
}

// snapshotter is the state backend as the checkpointer uses it.
type snapshotter interface {
	// Snapshot takes the synchronous part of barrier b's snapshot: a
	// savepoint's with a target is self-contained, under
	// savepoints/<target>/ (state.Backend.Savepoint).
	Snapshot(b ckpt.Barrier) (stateSnapshot, error)
	NotifyComplete(ctx context.Context, id ckpt.ID) error
	NotifyAborted(ctx context.Context, id ckpt.ID) error
}

// stateSnapshot is the asynchronous part of a state snapshot (state.Snapshot).
type stateSnapshot interface {
	// SetOperatorStateFunc gives the function that returns the task's
	// operator state, asked for once the files are uploaded.
	SetOperatorStateFunc(func(ctx context.Context) ([]byte, error))
	Run(ctx context.Context) (*state.SnapshotResult, error)
}

// acker appends a task's acks and declines (controltopic.AckWriter).
type acker interface {
	Send(ctx context.Context, m control.Message) error
}

// backendSnapshotter is a state.Backend as a snapshotter.
type backendSnapshotter struct{ b *state.Backend }

func (s backendSnapshotter) Snapshot(b ckpt.Barrier) (stateSnapshot, error) {
	var snap *state.Snapshot
	var err error
	if b.Kind.IsSavepoint() && b.Target != "" {
		snap, err = s.b.Savepoint(b.ID, b.Target, nil)
	} else {
		snap, err = s.b.Snapshot(b.ID, nil)
	}
	if err != nil {
		return nil, err
	}
	return snap, nil
}

func (s backendSnapshotter) NotifyComplete(ctx context.Context, id ckpt.ID) error {
	return s.b.NotifyComplete(ctx, id)
}

func (s backendSnapshotter) NotifyAborted(ctx context.Context, id ckpt.ID) error {
	return s.b.NotifyAborted(ctx, id)
}

func newCheckpointer(ctx context.Context, cfg checkpointerConfig) *checkpointer {
	c := &checkpointer{cfg: cfg, log: cfg.Logger, ctx: ctx}
	if c.cfg.Now == nil {
		c.cfg.Now = time.Now
	}
	if c.cfg.spawn == nil {
		c.cfg.spawn = c.wg.Go
	}
	c.mu.running = map[ckpt.ID]context.CancelFunc{}
	c.mu.aborted = map[ckpt.ID]bool{}
	return c
}

// onBarrier is the task's part of checkpoint m.barrier at the barrier, on
// the task goroutine: every output pre-commits (a sink ends its epoch's
// transaction, a shuffle writes its barrier records), the state takes its
// synchronous snapshot, and the asynchronous part starts. An error fails
// the task; the checkpoint is declined first.
func (c *checkpointer) onBarrier(m *mark) error {
	b := m.barrier
	start := c.cfg.Now()
	if c.cfg.OnStartDelay != nil && b.Timestamp > 0 {
		c.cfg.OnStartDelay(start.Sub(time.UnixMilli(b.Timestamp)))
	}
	pres := make([]pending, len(c.cfg.Outputs))
	for i, o := range c.cfg.Outputs {
		pre, err := o.preCommit(c.ctx, b)
		if err != nil {
			c.decline(b.ID, fmt.Sprintf("%s pre-commit: %v", o, err))
			return fmt.Errorf("%s: pre-commit of %s: %w", o, b, err)
		}
		pres[i] = pre
	}
	if c.barrierReached(b.ID) {
		// Aborted before its barrier arrived: the outputs ended their epoch
		// (a sink's transaction belongs to the next checkpoint that
		// completes; the shuffle barrier keeps the next stage aligned), but
		// nothing is snapshotted or acknowledged.
		c.log.Debug("barrier of an aborted checkpoint: no snapshot", "checkpoint_id", b.ID)
		return nil
	}
	snap, err := c.cfg.State.Snapshot(b)
	if err != nil {
		c.decline(b.ID, fmt.Sprintf("snapshot: %v", err))
		return fmt.Errorf("snapshot %d: %w", b.ID, err)
	}
	var wms *watermarkState
	if c.cfg.Watermarks != nil {
		wms = c.cfg.Watermarks()
	}
	syncDur := c.cfg.Now().Sub(start)
	ctx, cancel := context.WithCancel(c.ctx)
	c.mu.Lock()
	c.mu.running[b.ID] = cancel
	c.mu.Unlock()
	c.cfg.spawn(func() {
		defer func() {
			c.mu.Lock()
			delete(c.mu.running, b.ID)
			c.mu.Unlock()
			cancel()
		}()
		c.finish(ctx, m, pres, snap, wms, syncDur)
	})
	return nil
}

// barrierReached records that barrier id reached the task, forgets the
// aborts of it and of older checkpoints, and reports whether id itself was
// aborted before.
func (c *checkpointer) barrierReached(id ckpt.ID) (aborted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.lastBarrier = max(c.mu.lastBarrier, id)
	aborted = c.mu.aborted[id]
	for a := range c.mu.aborted {
		if a <= id {
			delete(c.mu.aborted, a)
		}
	}
	return aborted
}

// finish is the asynchronous part of checkpoint m.barrier. The state files
// upload while the outputs flush what they wrote before the barrier: the
// operator state, asked for last, holds the sinks' transaction handles,
// known only once their flush is done. Then the ack goes out, or, on a
// failure, the decline; not if ctx ended (the checkpoint was aborted or
// the task stops).
func (c *checkpointer) finish(ctx context.Context, m *mark, pres []pending, snap stateSnapshot, wms *watermarkState, syncDur time.Duration) {
	id := m.barrier.ID
	var flushErr error // the reason to decline, if an output's flush failed
	snap.SetOperatorStateFunc(func(ctx context.Context) ([]byte, error) {
		op := operatorState{Offsets: m.offsets, Shuffle: m.shuffle, Sinks: make([][]sink.TxnHandle, c.cfg.Sinks), Watermark: wms}
		for i, pre := range pres {
			if err := pre.wait(ctx, &op); err != nil {
				flushErr = fmt.Errorf("%s flush: %w", c.cfg.Outputs[i], err)
				return nil, flushErr
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
		case ctx.Err() != nil:
			c.log.Debug("snapshot cancelled", "checkpoint_id", id, "err", err)
		case flushErr != nil:
			c.decline(id, flushErr.Error())
		default:
			c.decline(id, fmt.Sprintf("upload: %v", err))
		}
		return
	}
	ack := control.Ack{ID: id, Gen: c.cfg.Gen, Task: c.cfg.Task, Handle: res.Handle, Shuffle: m.shuffle, Metrics: control.AckMetrics{
		SyncMS: syncDur.Milliseconds(), AsyncMS: res.AsyncDuration.Milliseconds(), AlignMS: m.align.Milliseconds(),
		StateBytes: res.StateBytes, UploadedBytes: res.UploadedBytes,
	}}
	if err := c.cfg.Acks.Send(ctx, ack); err != nil && ctx.Err() == nil {
		c.log.Warn("ack not sent; the checkpoint will expire", "checkpoint_id", id, "err", err)
	}
}

// decline tells the coordinator the task cannot take checkpoint id. Once
// the task stops, it says nothing: a stopping task's checkpoints are
// abandoned, not failed.
func (c *checkpointer) decline(id ckpt.ID, reason string) {
	if c.ctx.Err() != nil {
		c.log.Debug("checkpoint abandoned: the task stops", "checkpoint_id", id, "reason", reason)
		return
	}
	c.log.Warn("checkpoint declined", "checkpoint_id", id, "reason", reason)
	d := control.Decline{ID: id, Gen: c.cfg.Gen, Task: c.cfg.Task, Reason: reason}
	if err := c.cfg.Acks.Send(context.WithoutCancel(c.ctx), d); err != nil {
		c.log.Warn("decline not sent", "checkpoint_id", id, "err", err)
	}
}

// complete is notifyCheckpointComplete(n) for the outputs and the state:
// every sink commits the transactions pre-committed at or before n (an
// error: a transaction that cannot be committed, the task must fail), and
// the state backend lets go of older snapshots (its failure is only
// logged: it is clean-up).
func (c *checkpointer) complete(ctx context.Context, n ckpt.ID) error {
	for _, o := range c.cfg.Outputs {
		if err := o.complete(ctx, n); err != nil {
			return fmt.Errorf("%s: commit the transactions of checkpoint %d: %w", o, n, err)
		}
	}
	if err := c.cfg.State.NotifyComplete(ctx, n); err != nil {
		c.log.Warn("checkpoint completion bookkeeping failed", "checkpoint_id", n, "err", fmt.Errorf("state: %w", err))
	}
	return nil
}

// abort is the abort of checkpoint n: its asynchronous part, if running, is
// cancelled (no ack, no decline), or, if its barrier has not reached the
// task yet, it will take no snapshot; the outputs forget it (a sink keeps
// its data for the next checkpoint) and the state discards its partial
// uploads.
func (c *checkpointer) abort(ctx context.Context, n ckpt.ID) {
	c.mu.Lock()
	if cancel := c.mu.running[n]; cancel != nil {
		cancel()
	} else if n > c.mu.lastBarrier {
		c.mu.aborted[n] = true
	}
	c.mu.Unlock()
	for _, o := range c.cfg.Outputs {
		o.abort(n)
	}
	if err := c.cfg.State.NotifyAborted(ctx, n); err != nil {
		c.log.Warn("discarding an aborted snapshot failed", "checkpoint_id", n, "err", err)
	}
}

// stop waits for every asynchronous part to end. The task's context has
// ended before: they are cancelled, and decline nothing.
func (c *checkpointer) stop() {
	c.mu.Lock()
	for _, cancel := range c.mu.running {
		cancel()
	}
	c.mu.Unlock()
	c.wg.Wait()
}
