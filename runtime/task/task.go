// Package task runs one task of a job (DESIGN.md sections 3, 5 and 6): its
// Kafka source, its operator chain with keyed state on Pebble, and its
// two-phase-commit sink, with a snapshot at every barrier and restore from a
// completed checkpoint.
//
// Goroutines: the task goroutine (started by Start) is the only one that
// reads the source, runs the chain, writes to the sink and takes the
// synchronous part of snapshots. Each snapshot's asynchronous part (waiting
// for the sink's flush, uploading files, writing the manifest, appending the
// ack) runs on a goroutine of its own, tracked by checkpoint ID by the
// task's checkpointer (checkpointer.go). Trigger, Complete and Abort are
// called by the replica's control-topic dispatcher; they use only the parts
// of the source, sink and state backend documented as safe for that.
package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/eventtime"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/kafkaio/shuffle"
	"github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/kafkaio/source"
	"github.com/weir-stream/weir/plan"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

// Config configures one task.
type Config struct {
	Job *stream.Job
	ID  control.TaskID
	// Gen is the generation the task runs in; its acks carry it.
	Gen uint64
	// RestoreFrom is the checkpoint to restore from; 0 starts from the
	// sources' configured start positions with empty state.
	RestoreFrom ckpt.ID
	// StateNames are the job's operators whose state RestoreFrom holds
	// under another name, by operator ID (compat.Result.StateNames of the
	// job compared with that checkpoint): the task stores their state and
	// timers under those names (stream.TaskContext.StateNames).
	StateNames map[string]string
	// RestoreMetadata is where RestoreFrom's _metadata is when it is not at
	// chk-<n>/_metadata (a savepoint's; control.Generation.RestoreMetadata).
	RestoreMetadata string
	// RestoreStore, if set, is where RestoreFrom is: a restore point the
	// job does not own (control.Generation.RestoreLocation, opened
	// read-only by the replica), RestoreMetadata its _metadata's key in
	// it. The task's state restores from it (state.Config.RestoreStore),
	// and its sinks recover only the recorded transactions whose IDs are
	// the job's own (leaveForeignTransactions).
	RestoreStore *objstore.Store
	// Skip lists input records the source drops unread (the generation's
	// control.Generation.Skip).
	Skip []control.Position
	// Kafka are the base client options (seed brokers, TLS, SASL).
	Kafka []kgo.Opt
	// Shuffle is the producer the task's shuffle writers share with the
	// replica's other tasks (shuffle.NewClient), closed by its owner once
	// every task writing to it stopped; nil: each writer makes its own.
	Shuffle *kgo.Client
	// Prefix is the job's prefix of transactional IDs and groups
	// (kafka.topic_prefix).
	Prefix string
	// BusyTime accounts the task's busy, backpressured and idle time
	// (http.busy_time; busyTime).
	BusyTime bool
	// Store is the job's object store.
	Store *objstore.Store
	// StateDir is the task's local directory, state.dir/<job>/<task>.
	StateDir string
	// Cache is the replica's shared Pebble block cache.
	Cache *pebble.Cache
	// RecordCacheBytes bounds the task's record cache, as in state.Config:
	// 0 means the default, negative turns it off.
	RecordCacheBytes int64
	// Acks appends the task's acks and declines.
	Acks *controltopic.AckWriter
	// Plan is the job's plan: the task runs stage ID.Stage of it.
	Plan *plan.Plan
	// Metrics are shared by the replica's tasks; nil leaves them out.
	Metrics *Metrics
	// Sinks are the job's sinks (Job.Sinks, same order) with the runtime's
	// defaults filled in (a transaction timeout for each exactly-once sink):
	// the replica's sinkSpecs.
	Sinks []stream.KafkaSink
	// MaxConcurrentCheckpoints sizes the sink's transaction pool.
	MaxConcurrentCheckpoints int
	// TimerInterval is how often processing-time timers are checked while
	// the input is idle; default 100ms.
	TimerInterval time.Duration
	// SinkMetrics are shared by the replica's sinks; nil leaves them out.
	SinkMetrics *sink.Metrics
	// Logger is required; Registerer receives the source's and state's
	// metrics (shared by the replica's tasks).
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// StateName is the name of a task's state in the object store and on disk:
// "<stage>-<index>" (a TaskID's "/" is not allowed in object names).
func StateName(id control.TaskID) string { return fmt.Sprintf("%s-%d", id.Stage, id.Index) }

// ParseStateName is the inverse of StateName. It cuts at the last '-', so
// that stage names may contain '-' ("by-page-3" is task by-page/3).
func ParseStateName(name string) (control.TaskID, bool) {
	i := strings.LastIndexByte(name, '-')
	if i <= 0 {
		return control.TaskID{}, false
	}
	id, err := control.ParseTaskID(name[:i] + "/" + name[i+1:])
	if err != nil {
		return control.TaskID{}, false
	}
	return id, true
}

// operatorState is what a task keeps in its manifest besides Pebble files:
// its source offsets and its sinks' transactions pre-committed at the
// barrier.
type operatorState struct {
	Offsets source.Offsets `json:"offsets,omitempty"`
	// Shuffle are a downstream task's restart positions in the shuffle
	// partitions it reads.
	Shuffle []control.Position `json:"shuffle,omitempty"`
	// SinkPools are the stage's sinks, in the job's order, each with its
	// pool and transactions, under its identity (sinkstate.go).
	SinkPools []sinkPool `json:"sink_pools,omitempty"`
	// Sinks are the same transactions by index in Job.Sinks (null for a
	// sink of another stage), as builds before SinkPools wrote and read
	// them: still written, so that such a build restoring the checkpoint
	// of an unchanged job commits them. Read only from a checkpoint
	// without SinkPools.
	Sinks [][]sink.TxnHandle `json:"sinks,omitempty"`
	// Watermark is the task's event time, if the job uses it.
	Watermark *watermarkState `json:"watermark,omitempty"`
}

// RecordedTxns returns the sink transactions a task's manifest records as
// pre-committed: what the recovery from that checkpoint commits. Tools use
// it to tell whether a lingering transaction belongs to a completed
// checkpoint (processor transactions).
func RecordedTxns(m *state.Manifest) ([]sink.TxnHandle, error) {
	if len(m.OperatorState) == 0 {
		return nil, nil
	}
	var op operatorState
	if err := json.Unmarshal(m.OperatorState, &op); err != nil {
		return nil, fmt.Errorf("operator state: %w", err)
	}
	var hs []sink.TxnHandle
	if op.SinkPools != nil {
		for _, p := range op.SinkPools {
			hs = append(hs, p.Txns...)
		}
		return hs, nil
	}
	for _, sink := range op.Sinks {
		hs = append(hs, sink...)
	}
	return hs, nil
}

// Task is one running task.
type Task struct {
	cfg     Config
	log     *slog.Logger
	backend *state.Backend
	in      taskInput
	outs    *outputs
	// ckpt is the task's part in checkpoints, from the barrier to the ack.
	ckpt  *checkpointer
	chain stream.Task
	// wm is the task's event time; nil if the job does not use it.
	wm  *watermarks
	met *taskMetrics
	// busy accounts the task goroutine's time (idle, backpressured, busy);
	// the task goroutine only.
	busy busyTime

	ctx     context.Context // the task's life; cancelled by Stop
	cancel  context.CancelFunc
	done    chan struct{}
	err     error     // set before done is closed
	started sync.Once // Run, or Stop of a task that never ran
}

// Open restores the task from cfg.RestoreFrom (or opens it empty), recovers
// its sinks' pre-committed transactions and creates its source; Run starts
// processing. A replica opens all its tasks of a generation before it runs
// any, so that the last ones to open do not compete for CPU with the first
// ones processing, and it reports them running at once.
func Open(ctx context.Context, cfg Config) (*Task, error) {
	if cfg.TimerInterval <= 0 {
		cfg.TimerInterval = 100 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	name := StateName(cfg.ID)
	log := cfg.Logger.With("task", cfg.ID.String(), "generation", cfg.Gen)
	t := &Task{cfg: cfg, log: log, done: make(chan struct{})}
	if err := t.open(ctx, name); err != nil {
		t.closeParts(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("start task %s: %w", cfg.ID, err)
	}
	t.ctx, t.cancel = context.WithCancel(context.WithoutCancel(ctx))
	ccfg := checkpointerConfig{
		Task: cfg.ID, Gen: cfg.Gen, Outputs: t.outs.all, Sinks: len(cfg.Sinks),
		State: backendSnapshotter{t.backend}, Acks: cfg.Acks, Logger: log, Now: cfg.Now,
		OnStartDelay: t.met.observeStartDelay,
	}
	if t.wm != nil {
		ccfg.Watermarks = t.wm.snapshot
	}
	t.ckpt = newCheckpointer(t.ctx, ccfg)
	return t, nil
}

// Run starts the task's goroutine. It does nothing after the first call, or
// after Stop.
func (t *Task) Run() { t.started.Do(func() { go t.run() }) }

func (t *Task) open(ctx context.Context, name string) error {
	cfg := t.cfg
	scfg := state.Config{
		Dir: cfg.StateDir, Task: name, Store: cfg.Store, RestoreStore: cfg.RestoreStore, Cache: cfg.Cache,
		Logger: t.log, Registerer: cfg.Registerer, Now: cfg.Now,
		RecordCacheBytes: cfg.RecordCacheBytes,
	}
	if st := cfg.Plan.Stage(cfg.ID.Stage); st != nil && !st.Kafka {
		// A downstream stage's keyed state carries its key groups, so that
		// a later change of the stage's parallelism only moves ranges.
		// Stage main keeps the layout of the checkpoints it always wrote.
		lo, hi := cfg.Plan.KeyGroups(cfg.ID)
		scfg.MaxParallelism, scfg.KeyGroups = cfg.Plan.MaxParallelism, [2]int{lo, hi}
	}
	st := cfg.Plan.Stage(cfg.ID.Stage)
	if st == nil {
		return fmt.Errorf("the job's plan has no stage %s", cfg.ID.Stage)
	}
	var opState operatorState
	var rf restoreFrom
	if cfg.RestoreFrom > 0 {
		var err error
		if rf, err = t.restoreSources(ctx, name); err != nil {
			return err
		}
	}
	var olds []oldTask // a downstream task's: the old tasks it restores from
	switch {
	case rf.rescaled:
		start := time.Now()
		b, err := state.RestoreKeyGroups(ctx, scfg, rf.keyed)
		if err != nil {
			err = fmt.Errorf("restore state from checkpoint %d (stage %s rescaled from %d to %d tasks): %w", cfg.RestoreFrom, cfg.ID.Stage, rf.from, st.Parallelism, err)
			if errors.Is(err, state.ErrKeyGroups) {
				// The checkpoint's state cannot be divided among this
				// many tasks: no retry changes that.
				return &PermanentError{Cause: control.CauseJob, Err: err}
			}
			return err
		}
		t.backend = b
		read := func(ctx context.Context, h string) (*state.Manifest, error) {
			return state.ReadManifest(ctx, t.restoreStore(), h)
		}
		if olds, err = oldTasks(ctx, b, rf, read); err != nil {
			return fmt.Errorf("checkpoint %d: %w", cfg.RestoreFrom, err)
		}
		t.log.Info("state restored: stage rescaled, key groups moved", "checkpoint_id", cfg.RestoreFrom,
			"from_tasks", rf.from, "tasks", st.Parallelism, "key_groups", fmt.Sprintf("[%d,%d)", scfg.KeyGroups[0], scfg.KeyGroups[1]),
			"duration", time.Since(start))
	case rf.handle != "":
		start := time.Now()
		b, err := state.Restore(ctx, scfg, rf.handle)
		if err != nil {
			return fmt.Errorf("restore state from checkpoint %d: %w", cfg.RestoreFrom, err)
		}
		t.backend = b
		if m := b.Restored(); m != nil && len(m.OperatorState) > 0 {
			if err := json.Unmarshal(m.OperatorState, &opState); err != nil {
				return fmt.Errorf("checkpoint %d: operator state of %s: %w", cfg.RestoreFrom, cfg.ID, err)
			}
		}
		if m := b.Restored(); m != nil && !st.Kafka && m.KeyGroups != [2]int{} {
			olds = []oldTask{{index: cfg.ID.Index, keyGroups: m.KeyGroups, op: opState, keyed: true, sinks: true}}
		}
		t.log.Info("state restored", "checkpoint_id", cfg.RestoreFrom, "duration", time.Since(start))
	default:
		b, err := state.Open(ctx, scfg)
		if err != nil {
			return fmt.Errorf("open state: %w", err)
		}
		t.backend = b
	}
	var moved []movedSinks
	if olds != nil {
		// A downstream task's positions, watermarks and sinks, from the
		// old tasks of its key groups (one, unless rescaled): its input
		// pairs follow the current upstream parallelism too.
		lo, hi := cfg.Plan.KeyGroups(cfg.ID)
		var err error
		opState, moved, err = mergeOperatorState(olds, cfg.ID.Stage, cfg.ID.Index, lo, hi, st.Input.Writers, cfg.Sinks, st.Sinks, cfg.MaxConcurrentCheckpoints)
		if err != nil {
			return &PermanentError{Cause: control.CauseJob, Err: fmt.Errorf("checkpoint %d: %w", cfg.RestoreFrom, err)}
		}
	}
	t.met = cfg.Metrics.forTask(cfg.ID.Stage, cfg.ID.String(), cfg.Gen)
	if cfg.BusyTime {
		t.busy = t.met.busyTime()
	}
	tc := stream.TaskContext{
		Backend: t.backend, Stage: st.JobName(), Task: cfg.ID.String(), Index: cfg.ID.Index, Now: cfg.Now, Logger: t.log,
		StateNames: cfg.StateNames,
	}
	if t.met != nil {
		tc.OnLate = t.met.onLate
		tc.OnRecordError = t.met.onRecordError
	}
	chain, err := cfg.Job.NewTask(tc)
	if err != nil {
		return fmt.Errorf("operator chain: %w", err)
	}
	t.chain = chain

	if len(cfg.Sinks) != len(cfg.Job.Sinks()) {
		return fmt.Errorf("task config has %d sinks; the job has %d", len(cfg.Sinks), len(cfg.Job.Sinks()))
	}
	// What to do with each sink the checkpoint recorded or the stage has,
	// decided before anything is written.
	var sinkPlan []sinkRecovery
	recorded, err := recordedSinkPools(&opState, cfg.ID.Stage, cfg.Sinks, st.Sinks, cfg.MaxConcurrentCheckpoints)
	if err == nil && cfg.RestoreStore != nil {
		recorded = t.leaveForeignTransactions(recorded)
		for i := range moved {
			moved[i].pools = t.leaveForeignTransactions(moved[i].pools)
		}
	}
	if err == nil {
		sinkPlan, err = planSinkRecovery(cfg.Prefix, cfg.ID.Stage, int32(cfg.ID.Index), cfg.Sinks, st.Sinks, cfg.MaxConcurrentCheckpoints, recorded)
	}
	if err == nil && len(moved) > 0 {
		sinkPlan, err = planMovedSinks(cfg.Prefix, sinkPlan, moved)
	}
	if err != nil {
		return &PermanentError{Cause: control.CauseJob, Err: fmt.Errorf("checkpoint %d: sinks of %s: %w", cfg.RestoreFrom, cfg.ID, err)}
	}

	if cfg.Job.EventTime() {
		if err := t.openWatermarks(st, opState.Watermark); err != nil {
			return err
		}
	}

	// The sinks' recovery (commit what the checkpoint pre-committed, fence
	// the rest of each pool), the retirement of sinks the job no longer has
	// (the same, without a pool left running), the shuffle writers' and the
	// input's start are independent round trips to the broker: they run in
	// parallel (no two sinks touch one transactional ID: planSinkRecovery
	// checked). No record is read before open returns, so nothing is
	// written before every sink has recovered (DESIGN.md section 6). A task
	// opens only its stage's sinks and shuffles.
	t.outs = newOutputs(len(cfg.Sinks), len(cfg.Plan.Shuffles))
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	fail := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	for _, r := range sinkPlan {
		if r.index < 0 {
			// A sink the job no longer has: its recorded transactions
			// are committed and its pool fenced, then it is gone.
			wg.Go(func() { fail(t.retireSink(ctx, r)) })
			continue
		}
		spec := cfg.Sinks[r.index]
		wg.Go(func() {
			sink, err := t.openSink(ctx, spec, r)
			if sink != nil {
				// Each goroutine sets its own element.
				t.outs.sinks[r.index] = &sinkOutput{s: sink, topic: spec.Topic, index: r.index, pool: r.pool}
			}
			fail(err)
		})
	}
	for _, sh := range st.Outputs {
		w, err := shuffle.NewWriter(shuffle.WriterConfig{
			Client: cfg.Shuffle, ClientOpts: cfg.Kafka, Topic: sh.Topic, Partitions: sh.Partitions,
			Task: cfg.ID, Gen: cfg.Gen, Logger: t.log, Metrics: cfg.Metrics.shuffleMetrics(),
		})
		if err != nil {
			fail(fmt.Errorf("shuffle %s: %w", sh.Topic, err))
			continue
		}
		t.outs.shuffles[sh.Edge] = &shuffleOutput{w: w, topic: sh.Topic}
	}
	wg.Go(func() {
		var in taskInput
		var err error
		if st.Kafka {
			// A task of a partition added since the checkpoint starts at
			// its earliest offset, whatever the configured start: every
			// record written to it is processed.
			added := cfg.RestoreFrom > 0 && rf.handle == ""
			in, err = t.openSource(ctx, opState.Offsets, added)
		} else {
			in, err = t.openShuffleInput(ctx, opState.Shuffle)
		}
		t.in = in
		fail(err)
	})
	wg.Wait()
	t.outs.seal()
	return errors.Join(errs...)
}

// openWatermarks sets up the task's event time, restored from the
// checkpoint's state (nil: none).
func (t *Task) openWatermarks(st *plan.Stage, restored *watermarkState) error {
	cfg := t.cfg
	sources := cfg.Job.Sources()
	if len(sources) != 1 {
		return fmt.Errorf("job %s has %d sources; this runtime runs exactly one", cfg.Job.Name(), len(sources))
	}
	spec := sources[0].Watermark
	if st.Kafka {
		w, err := newSourceWatermarks(spec, sources[0].Topics, int32(cfg.ID.Index), cfg.Now())
		if err != nil {
			return err
		}
		t.wm = w
	} else {
		lo, hi := cfg.Plan.KeyGroups(cfg.ID)
		t.wm = newShuffleWatermarks(spec, int32(lo), int32(hi), st.Input.Writers)
	}
	if restored != nil {
		if err := t.wm.restore(restored); err != nil {
			return fmt.Errorf("checkpoint %d: watermarks of %s: %w", cfg.RestoreFrom, cfg.ID, err)
		}
	}
	return nil
}

// restoreStore is where the task's restore point is: RestoreStore, a
// store another job owns, or else the job's own.
func (t *Task) restoreStore() *objstore.Store {
	if t.cfg.RestoreStore != nil {
		return t.cfg.RestoreStore
	}
	return t.cfg.Store
}

// restoreSources reads checkpoint RestoreFrom's _metadata and returns what
// the task restores from it: its own manifest; nothing, for a task of the
// source stage that the checkpoint has no state for because the input
// topics gained partitions since (docs/operations.md, "Input partitions
// added"): it starts empty, its source at the partition's earliest offset;
// or, for a task of a downstream stage whose parallelism differs from the
// checkpoint's, the manifests of the old tasks whose key groups and sinks
// it takes over (rescale.go, docs/state.md "Rescaling").
//
// A checkpoint with state for more tasks of the source stage than the
// input now has partitions (a topic deleted and created again with fewer),
// or with no state for the task's downstream stage, is a permanent failure
// of cause job: no restart fixes it, and nothing is written.
func (t *Task) restoreSources(ctx context.Context, name string) (restoreFrom, error) {
	md, err := checkpoint.ReadRestore(ctx, t.restoreStore(), t.cfg.RestoreFrom, t.cfg.RestoreMetadata)
	if err != nil {
		return restoreFrom{}, err
	}
	var handle string
	var found, inStage int
	stageHandles := map[int]string{}
	for _, ts := range md.Tasks {
		if ts.Task.Stage == t.cfg.ID.Stage {
			inStage++
			stageHandles[ts.Task.Index] = ts.Handle
		}
		if ts.Task == t.cfg.ID {
			handle = ts.Handle
			found++
		}
	}
	st := t.cfg.Plan.Stage(t.cfg.ID.Stage)
	grown := st != nil && st.Kafka && inStage < st.Parallelism // partitions added
	switch {
	case grown && found == 1:
		return restoreFrom{handle: handle}, nil
	case grown && found == 0 && t.cfg.ID.Index >= inStage:
		// Partitions added: every task of the checkpoint's restores its
		// state, this one starts empty.
		t.log.Info("input partition added since the checkpoint: the task starts empty at the partition's earliest offset",
			"checkpoint_id", t.cfg.RestoreFrom, "checkpoint_partitions", inStage, "partitions", st.Parallelism)
		return restoreFrom{}, nil
	case st != nil && st.Kafka && inStage > st.Parallelism:
		return restoreFrom{}, &PermanentError{Cause: control.CauseJob, Err: fmt.Errorf(
			"%w: checkpoint %d has state for %d partitions of the job's input topics, which now have %d (task %s): "+
				"an input topic was deleted and created again with fewer partitions, or the job reads other topics; "+
				"restore the topic's partitions, or start the job under a new job.name (its state starts empty)",
			ErrFewerPartitions, t.cfg.RestoreFrom, inStage, st.Parallelism, name)}
	case st != nil && !st.Kafka && inStage > 0 && inStage != st.Parallelism:
		// Rescaled: its key groups come from the tasks that held them.
		handles := make([]string, inStage)
		for j := range handles {
			h, ok := stageHandles[j]
			if !ok {
				return restoreFrom{}, &PermanentError{Cause: control.CauseJob, Err: fmt.Errorf(
					"checkpoint %d has state for %d tasks of stage %s but none for task %s/%d", t.cfg.RestoreFrom, inStage, st.Name, st.Name, j)}
			}
			handles[j] = h
		}
		return rescaleSources(handles, t.cfg.ID.Index, st.Parallelism, t.cfg.Plan.MaxParallelism), nil
	case found == 0 || st == nil || inStage != st.Parallelism:
		// The stage is not in the checkpoint (a new or renamed stage: the
		// compatibility check refuses a renamed one before this), or the
		// source stage's count does not match: no restart fixes it.
		want := 0
		if st != nil {
			want = st.Parallelism
		}
		return restoreFrom{}, &PermanentError{Cause: control.CauseJob, Err: fmt.Errorf(
			"checkpoint %d has state for %d tasks of stage %s, the job's plan has %d (task %s): the stage's name changed since the checkpoint; restore the settings it was taken with",
			t.cfg.RestoreFrom, inStage, t.cfg.ID.Stage, want, name)}
	}
	return restoreFrom{handle: handle}, nil
}

// run is the task goroutine.
func (t *Task) run() {
	defer close(t.done)
	// Guard turns a failed local disk, which Pebble cannot go on after,
	// into the task's error instead of a panic of the process.
	err := t.backend.Guard(t.loop)
	if err == nil || t.ctx.Err() != nil {
		return
	}
	if p := Permanent(err); p != nil {
		// The replica reports it; the job's failure is logged as an error
		// once per replica, when the coordinator has recorded it.
		t.log.Warn("task stopped by a permanent failure", "cause", p.Cause, "err", err)
		t.err = p
		return
	}
	t.log.Error("task failed", "err", err)
	t.err = err
}

func (t *Task) loop() error {
	ctx := t.ctx
	out := &emitter{t: t}
	var batch []stream.Record
	var headers []stream.Header // one slab per batch for the records' headers
	nextTimers := t.cfg.Now().Add(t.cfg.TimerInterval)
	var nextWatermark time.Time
	if t.wm != nil {
		// The restored watermark, at once: the chain's and the next
		// stage's, before any record.
		if err := t.advanceWatermark(out); err != nil {
			return err
		}
		nextWatermark = t.cfg.Now().Add(t.wm.interval)
	}
	for {
		if err := t.backend.Failed(); err != nil {
			return err // the local disk failed: restore elsewhere or later
		}
		deadline := nextTimers
		if t.wm != nil && nextWatermark.Before(deadline) {
			deadline = nextWatermark
		}
		pollCtx, cancel := context.WithDeadline(ctx, deadline)
		var polled time.Time
		if t.busy.on {
			polled = t.cfg.Now()
		}
		el, err := t.in.next(pollCtx)
		if t.busy.on {
			t.busy.polledFor(t.cfg.Now().Sub(polled))
		}
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
		}
		if el.barrier != nil {
			if err := t.ckpt.onBarrier(el.barrier); err != nil {
				return err
			}
		} else if len(el.records) > 0 {
			if cap(batch) < len(el.records) {
				// Grown once to the size it needs, not by doubling: an
				// element can hold a whole poll of tens of thousands.
				batch = make([]stream.Record, 0, len(el.records))
			}
			batch, headers = batch[:0], headers[:0]
			for _, r := range el.records {
				var hs []stream.Header
				if len(r.Headers) > 0 {
					start := len(headers)
					for _, h := range r.Headers {
						headers = append(headers, stream.Header{Key: h.Key, Value: h.Value})
					}
					hs = headers[start:len(headers):len(headers)]
				}
				batch = append(batch, stream.Record{
					Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Headers: hs,
					Topic: r.Topic, Partition: r.Partition, Offset: r.Offset,
				})
			}
			if err := t.chain.ProcessBatch(batch, out); err != nil {
				return fmt.Errorf("operator chain: %w", err)
			}
			if out.err != nil {
				return out.err
			}
		}
		t.met.count(len(el.records), &out.n) // and what timers emitted since
		now := t.cfg.Now()
		if t.busy.on {
			t.busy.publish(now)
		}
		if !now.Before(nextTimers) {
			if err := t.chain.FireTimers(now, out); err != nil {
				return fmt.Errorf("timers: %w", err)
			}
			if out.err != nil {
				return out.err
			}
			nextTimers = now.Add(t.cfg.TimerInterval)
		}
		if now := t.cfg.Now(); t.wm != nil && (t.wm.moved || !now.Before(nextWatermark)) {
			if err := t.advanceWatermark(out); err != nil {
				return err
			}
			nextWatermark = now.Add(t.wm.interval)
		}
	}
}

// advanceWatermark computes the task's watermark from its inputs'. If it
// advanced, the chain fires its event-time timers up to it, and then (so
// that what they emitted precedes it) the task writes it to every shuffle
// output; when the inputs have all become idle it writes that once, and
// when one is active again the watermark once more.
func (t *Task) advanceWatermark(out *emitter) error {
	w := t.wm
	now := t.cfg.Now()
	w.moved = false
	wm, idle := w.output(now)
	if wm > w.current || (wm == w.current && !w.started && wm > eventtime.MinWatermark) {
		if err := t.chain.AdvanceWatermark(time.UnixMilli(wm), out); err != nil {
			return fmt.Errorf("event-time timers: %w", err)
		}
		if out.err != nil {
			return out.err
		}
		w.current = wm
	}
	w.started = true
	t.met.publish(w.current, w.idleInputs(), now)
	if w.current == w.sent && idle == w.sentIdle {
		return nil
	}
	// An idle mark carries no watermark: a watermark that advanced as the
	// inputs went idle (the valve's flush) goes first, so that downstream
	// valves flush to it in turn.
	first := idle && w.current != w.sent && w.current > eventtime.MinWatermark
	for _, sh := range t.outs.shuffles {
		if sh == nil {
			continue
		}
		if first {
			if err := sh.w.Watermark(t.ctx, w.current, false); err != nil {
				return fmt.Errorf("%s watermark: %w", sh, err)
			}
		}
		if err := sh.w.Watermark(t.ctx, w.current, idle); err != nil {
			return fmt.Errorf("%s watermark: %w", sh, err)
		}
	}
	w.sent, w.sentIdle = w.current, idle
	return nil
}

// Done is closed when the task's goroutine has ended; Err then says why.
func (t *Task) Done() <-chan struct{} { return t.done }

// Err returns the error the task failed with, once Done is closed; nil if it
// was stopped.
func (t *Task) Err() error { return t.err }

// CaughtUp reports whether the source has read everything committed so far.
func (t *Task) CaughtUp() bool { return t.in.caughtUp() }

// Stop stops the task: its goroutine ends, pending snapshots are abandoned,
// the sink aborts its open transaction (pre-committed ones stay for the
// next owner to commit), and the state is closed.
func (t *Task) Stop(ctx context.Context) error {
	t.cancel()
	t.started.Do(func() { close(t.done) }) // never ran
	<-t.done
	if t.ckpt != nil {
		t.ckpt.stop()
	}
	t.met.remove()
	return t.closeParts(ctx)
}

func (t *Task) closeParts(ctx context.Context) error {
	var errs []error
	if t.in != nil {
		t.in.close()
	}
	if t.outs != nil {
		t.outs.seal() // what was created, if open failed half-way
		for _, o := range t.outs.all {
			errs = append(errs, o.close(ctx))
		}
	}
	if t.chain != nil {
		errs = append(errs, t.chain.Close())
	}
	if t.backend != nil {
		errs = append(errs, t.backend.Close(ctx))
	}
	return errors.Join(errs...)
}
