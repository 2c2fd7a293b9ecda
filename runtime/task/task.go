// Package task runs one task of a job (DESIGN.md sections 3, 5 and 6): its
// Kafka source, its operator chain with keyed state on Pebble, and its
// two-phase-commit sink, with a snapshot at every barrier and restore from a
// completed checkpoint.
//
// Goroutines: the task goroutine (started by Start) is the only one that
// reads the source, runs the chain, writes to the sink and takes the
// synchronous part of snapshots. Each snapshot's asynchronous part (waiting
// for the sink's flush, uploading files, writing the manifest, appending the
// ack) runs on a goroutine of its own. Trigger, Complete and Abort are called
// by the replica's control-topic dispatcher; they use only the parts of the
// source, sink and state backend documented as safe for that.
package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio"
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
	RestoreFrom uint64
	// Skip lists input records the source drops unread (the generation's
	// control.Generation.Skip).
	Skip []control.Position
	// Kafka are the base client options (seed brokers, TLS, SASL).
	Kafka []kgo.Opt
	// Prefix is the job's prefix of transactional IDs and groups
	// (kafka.topic_prefix).
	Prefix string
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
	Acks *kafkaio.AckWriter
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
	SinkMetrics *kafkaio.SinkMetrics
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

// operatorState is what a task keeps in its manifest besides Pebble files:
// its source offsets and, per sink (by index in Job.Sinks), the handles of
// the transactions pre-committed at the barrier.
type operatorState struct {
	Offsets kafkaio.SourceOffsets     `json:"offsets"`
	Sinks   [][]kafkaio.SinkTxnHandle `json:"sinks,omitempty"`
}

// RecordedTxns returns the sink transactions a task's manifest records as
// pre-committed: what the recovery from that checkpoint commits. Tools use
// it to tell whether a lingering transaction belongs to a completed
// checkpoint (processor transactions).
func RecordedTxns(m *state.Manifest) ([]kafkaio.SinkTxnHandle, error) {
	if len(m.OperatorState) == 0 {
		return nil, nil
	}
	var op operatorState
	if err := json.Unmarshal(m.OperatorState, &op); err != nil {
		return nil, fmt.Errorf("operator state: %w", err)
	}
	var hs []kafkaio.SinkTxnHandle
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
	source  *kafkaio.Source
	sinks   []*kafkaio.Sink // by index in Job.Sinks
	chain   stream.Task

	ctx     context.Context // the task's life; cancelled by Stop
	cancel  context.CancelFunc
	done    chan struct{}
	err     error     // set before done is closed
	started sync.Once // Run, or Stop of a task that never ran

	async sync.WaitGroup // snapshots' asynchronous parts
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
	return t, nil
}

// Run starts the task's goroutine. It does nothing after the first call, or
// after Stop.
func (t *Task) Run() { t.started.Do(func() { go t.run() }) }

func (t *Task) open(ctx context.Context, name string) error {
	cfg := t.cfg
	scfg := state.Config{
		Dir: cfg.StateDir, Task: name, Store: cfg.Store, Cache: cfg.Cache,
		Logger: t.log, Registerer: cfg.Registerer, Now: cfg.Now,
		RecordCacheBytes: cfg.RecordCacheBytes,
	}
	var opState operatorState
	if cfg.RestoreFrom > 0 {
		handle, err := t.manifestHandle(ctx, name)
		if err != nil {
			return err
		}
		start := time.Now()
		b, err := state.Restore(ctx, scfg, handle)
		if err != nil {
			return fmt.Errorf("restore state from checkpoint %d: %w", cfg.RestoreFrom, err)
		}
		t.backend = b
		if m := b.Restored(); m != nil && len(m.OperatorState) > 0 {
			if err := json.Unmarshal(m.OperatorState, &opState); err != nil {
				return fmt.Errorf("checkpoint %d: operator state of %s: %w", cfg.RestoreFrom, cfg.ID, err)
			}
		}
		t.log.Info("state restored", "checkpoint_id", cfg.RestoreFrom, "duration", time.Since(start))
	} else {
		b, err := state.Open(ctx, scfg)
		if err != nil {
			return fmt.Errorf("open state: %w", err)
		}
		t.backend = b
	}

	chain, err := cfg.Job.NewTask(stream.TaskContext{
		Backend: t.backend, Task: cfg.ID.String(), Index: cfg.ID.Index, Now: cfg.Now, Logger: t.log,
	})
	if err != nil {
		return fmt.Errorf("operator chain: %w", err)
	}
	t.chain = chain

	if len(cfg.Sinks) != len(cfg.Job.Sinks()) {
		return fmt.Errorf("task config has %d sinks; the job has %d", len(cfg.Sinks), len(cfg.Job.Sinks()))
	}
	if n := len(opState.Sinks); n > 0 && n != len(cfg.Sinks) {
		return fmt.Errorf("checkpoint %d has transactions of %d sinks; the job has %d", cfg.RestoreFrom, n, len(cfg.Sinks))
	}
	sources := cfg.Job.Sources()
	if len(sources) != 1 {
		return fmt.Errorf("job %s has %d sources; this runtime runs exactly one", cfg.Job.Name(), len(sources))
	}
	srcCfg, err := sourceConfig(sources[0])
	if err != nil {
		return err
	}
	if srcCfg.DecodeErrors == kafkaio.DecodeDeadLetter {
		// The records the source's format check rejects go to the job's
		// exactly-once sink of the dead-letter topic, as those its codec
		// rejects do (stream.KafkaSource.DeadLetterTopic): they commit with
		// the checkpoint of their epoch, so a restore never writes one twice.
		idx := slices.IndexFunc(cfg.Sinks, func(k stream.KafkaSink) bool { return k.Topic == srcCfg.DeadLetterTopic })
		if idx < 0 {
			return fmt.Errorf("source: the job has no sink for the dead-letter topic %s", srcCfg.DeadLetterTopic)
		}
		srcCfg.DeadLetter = sinkDeadLetters{t: t, sink: idx}
	}
	srcCfg.ClientOpts = cfg.Kafka
	srcCfg.Partition = int32(cfg.ID.Index)
	srcCfg.Restored = opState.Offsets
	srcCfg.Skip = cfg.Skip
	srcCfg.Group = cfg.Prefix + "source"
	srcCfg.Name = cfg.ID.String()
	srcCfg.Logger = t.log
	srcCfg.Registerer = cfg.Registerer

	// The sinks' recovery (commit what the checkpoint pre-committed, fence
	// the rest of each pool) and the source's start are independent round
	// trips to the broker: they run in parallel. No record is read before
	// open returns, so nothing is written before every sink has recovered
	// (DESIGN.md section 6).
	specs := cfg.Sinks
	t.sinks = make([]*kafkaio.Sink, len(specs))
	errs := make([]error, len(specs)+1)
	var wg sync.WaitGroup
	for i, spec := range specs {
		var handles []kafkaio.SinkTxnHandle
		if i < len(opState.Sinks) {
			handles = opState.Sinks[i]
		}
		wg.Go(func() { t.sinks[i], errs[i] = t.openSink(ctx, i, spec, handles) })
	}
	wg.Go(func() {
		src, err := kafkaio.NewSource(ctx, srcCfg)
		if err != nil {
			errs[len(specs)] = fmt.Errorf("source: %w", err)
			return
		}
		t.source = src
	})
	wg.Wait()
	return errors.Join(errs...)
}

// openSink creates sink i and recovers it from the checkpoint's handles.
func (t *Task) openSink(ctx context.Context, i int, spec stream.KafkaSink, handles []kafkaio.SinkTxnHandle) (*kafkaio.Sink, error) {
	cfg := t.cfg
	mode := kafkaio.SinkExactlyOnce
	if spec.Delivery == stream.DeliveryAtLeastOnce {
		mode = kafkaio.SinkAtLeastOnce
	}
	opts := append(append([]kgo.Opt{}, cfg.Kafka...), kgo.DefaultProduceTopic(spec.Topic))
	if spec.MaxRecordBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(spec.MaxRecordBytes))
	}
	sink, err := kafkaio.NewSink(kafkaio.SinkConfig{
		ClientOpts:               opts,
		TransactionalIDPrefix:    cfg.Prefix,
		Stage:                    sinkStage(cfg.ID.Stage, i),
		Partition:                int32(cfg.ID.Index),
		Mode:                     mode,
		MaxConcurrentCheckpoints: cfg.MaxConcurrentCheckpoints,
		TransactionTimeout:       spec.TransactionTimeout,
		Logger:                   t.log.With("sink", spec.Topic),
		Metrics:                  cfg.SinkMetrics,
	})
	if err != nil {
		return nil, fmt.Errorf("sink %s: %w", spec.Topic, err)
	}
	if err := sink.Recover(ctx, handles); err != nil {
		// Returned, so that closeParts closes it with the others.
		return sink, fmt.Errorf("recover sink %s from checkpoint %d: %w", spec.Topic, cfg.RestoreFrom, err)
	}
	return sink, nil
}

// manifestHandle reads checkpoint RestoreFrom's _metadata and returns this
// task's manifest handle in it.
func (t *Task) manifestHandle(ctx context.Context, name string) (string, error) {
	key := objstore.MetadataKey(int64(t.cfg.RestoreFrom))
	b, err := t.cfg.Store.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", key, err)
	}
	md, err := control.DecodeMetadata(b)
	if err != nil {
		return "", fmt.Errorf("decode %s: %w", key, err)
	}
	for _, ts := range md.Tasks {
		if ts.Task == t.cfg.ID {
			return ts.Handle, nil
		}
	}
	return "", fmt.Errorf("checkpoint %d has no state for task %s (task %s)", t.cfg.RestoreFrom, t.cfg.ID, name)
}

// sinkStage names sink i of a stage in transactional IDs: the first sink
// keeps the stage's name, others get ".s<i>".
func sinkStage(stage string, i int) string {
	if i == 0 {
		return stage
	}
	return fmt.Sprintf("%s.s%d", stage, i)
}

// sourceConfig translates the job's source into the source's settings.
func sourceConfig(s stream.KafkaSource) (kafkaio.SourceConfig, error) {
	var start kafkaio.SourceStart
	switch s.Start.Kind {
	case stream.StartEarliest:
		start.Kind = kafkaio.SourceStartEarliest
	case stream.StartLatest:
		start.Kind = kafkaio.SourceStartLatest
	case stream.StartTimestamp:
		start = kafkaio.SourceStart{Kind: kafkaio.SourceStartTimestamp, Time: s.Start.Time}
	default:
		return kafkaio.SourceConfig{}, fmt.Errorf("source start %v: unknown kind", s.Start)
	}
	policy, err := kafkaio.ParseDecodePolicy(string(s.OnError))
	if err != nil {
		return kafkaio.SourceConfig{}, err
	}
	dec, err := kafkaio.DecoderForFormat(s.Format)
	if err != nil {
		return kafkaio.SourceConfig{}, err
	}
	return kafkaio.SourceConfig{
		Topics: s.Topics, Start: start, Decoder: dec,
		DecodeErrors: policy, DeadLetterTopic: s.DeadLetterTopic,
	}, nil
}

// PermanentError is a task failure that no retry or restart can fix: a
// record that does not decode under on_error: fail, an object store that
// refuses the job. The replica reports it to the coordinator (a
// control.Failure), which stops the job (DESIGN.md section 11).
type PermanentError struct {
	Cause control.FailureCause
	// Record is the input record that caused it, if one did.
	Record control.Position
	Err    error
}

func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Failure is the report of e for the coordinator.
func (e *PermanentError) Failure(gen uint64, id control.TaskID) control.Failure {
	reason := e.Err.Error()
	if len(reason) > 2048 {
		reason = strings.ToValidUTF8(reason[:2048], "") + "…"
	}
	return control.Failure{Gen: gen, Task: id, Cause: e.Cause, Reason: reason, Record: e.Record}
}

// Permanent returns err as a *PermanentError if no retry or restart can fix
// it, and nil otherwise.
func Permanent(err error) *PermanentError {
	var pe *PermanentError
	var dec *kafkaio.SourceDecodeError
	var rec *stream.RecordError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe):
		return pe
	case errors.As(err, &dec):
		return &PermanentError{Cause: control.CauseRecord, Err: err,
			Record: control.Position{Topic: dec.Topic, Partition: dec.Partition, Offset: dec.Offset}}
	case errors.As(err, &rec) && errors.Is(err, stream.ErrDecode):
		return &PermanentError{Cause: control.CauseRecord, Err: err,
			Record: control.Position{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}}
	case errors.Is(err, objstore.ErrPermanent):
		return &PermanentError{Cause: control.CauseStorage, Err: err}
	}
	return nil
}

// sinkDeadLetters is the source's DeadLetterWriter of a task: it adds each
// dead letter to the task's sink of the dead-letter topic, on the task
// goroutine (the source calls it from Next), so that the record belongs to
// the open epoch's transaction. It needs no flush of its own: the barrier
// that follows pre-commits every sink, and the checkpoint commits it.
type sinkDeadLetters struct {
	t    *Task
	sink int // index in t.sinks
}

func (d sinkDeadLetters) WriteDeadLetter(ctx context.Context, r *kgo.Record) error {
	return d.t.sinks[d.sink].Write(ctx, r)
}

func (sinkDeadLetters) FlushDeadLetters(context.Context) error { return nil }

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
	for {
		if err := t.backend.Failed(); err != nil {
			return err // the local disk failed: restore elsewhere or later
		}
		pollCtx, cancel := context.WithDeadline(ctx, nextTimers)
		el, err := t.source.Next(pollCtx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
		}
		if el.Barrier != nil {
			if err := t.barrier(el.Barrier); err != nil {
				return err
			}
		} else if len(el.Records) > 0 {
			batch, headers = batch[:0], headers[:0]
			for _, r := range el.Records {
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
		if now := t.cfg.Now(); !now.Before(nextTimers) {
			if err := t.chain.FireTimers(now, out); err != nil {
				return fmt.Errorf("timers: %w", err)
			}
			if out.err != nil {
				return out.err
			}
			nextTimers = now.Add(t.cfg.TimerInterval)
		}
	}
}

// emitter writes the chain's output to the sinks. A record handed to Emit
// is valid only during the call (the chain reuses its buffers), and the
// producer keeps what it is given until the broker acknowledges it, so the
// emitter copies keys, values and headers into arenas, and records into a
// slab: a chunk is allocated per many records, never per record, and is
// never reused (the producer may still hold parts of it).
type emitter struct {
	t     *Task
	err   error
	arena []byte
	recs  []kgo.Record
}

const (
	emitArenaSize = 256 << 10
	emitSlabSize  = 1024
)

func (e *emitter) bytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	n := len(b)
	if cap(e.arena)-len(e.arena) < n {
		e.arena = make([]byte, 0, max(emitArenaSize, n))
	}
	start := len(e.arena)
	e.arena = append(e.arena, b...)
	return e.arena[start : start+n : start+n]
}

func (e *emitter) record() *kgo.Record {
	if len(e.recs) == cap(e.recs) {
		e.recs = make([]kgo.Record, 0, emitSlabSize)
	}
	e.recs = e.recs[:len(e.recs)+1]
	return &e.recs[len(e.recs)-1]
}

func (e *emitter) Emit(sink int, r stream.Record) error {
	if e.err != nil {
		return e.err
	}
	if sink < 0 || sink >= len(e.t.sinks) {
		e.err = fmt.Errorf("emit to sink %d: the job has %d sinks", sink, len(e.t.sinks))
		return e.err
	}
	rec := e.record()
	rec.Key, rec.Value, rec.Timestamp = e.bytes(r.Key), e.bytes(r.Value), r.Timestamp
	if len(r.Headers) > 0 {
		rec.Headers = make([]kgo.RecordHeader, len(r.Headers))
		for i, h := range r.Headers {
			rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: e.bytes(h.Value)}
		}
	}
	if err := e.t.sinks[sink].Write(e.t.ctx, rec); err != nil {
		e.err = fmt.Errorf("sink %d: %w", sink, err)
	}
	return e.err
}

// barrier takes the synchronous part of snapshot n at the barrier and
// starts its asynchronous part.
func (t *Task) barrier(b *kafkaio.SourceBarrier) error {
	n := b.Checkpoint
	start := time.Now()
	pres := make([]*kafkaio.SinkPreCommit, len(t.sinks))
	for i, sink := range t.sinks {
		pre, err := sink.PreCommit(t.ctx, n)
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
	syncDur := time.Since(start)
	offsets := b.Offsets
	t.async.Go(func() { t.finishSnapshot(n, pres, snap, offsets, syncDur) })
	return nil
}

// finishSnapshot is the asynchronous part of snapshot n.
func (t *Task) finishSnapshot(n int64, pres []*kafkaio.SinkPreCommit, snap *state.Snapshot, offsets kafkaio.SourceOffsets, syncDur time.Duration) {
	ctx := t.ctx
	op := operatorState{Offsets: offsets, Sinks: make([][]kafkaio.SinkTxnHandle, len(pres))}
	for i, pre := range pres {
		handles, err := pre.Wait(ctx)
		if err != nil {
			t.dropSnapshot(n)
			t.decline(n, fmt.Sprintf("sink %d flush: %v", i, err))
			return
		}
		op.Sinks[i] = handles
	}
	b, err := json.Marshal(op)
	if err != nil {
		t.dropSnapshot(n)
		t.decline(n, fmt.Sprintf("encode operator state: %v", err))
		return
	}
	snap.SetOperatorState(b)
	res, err := snap.Run(ctx)
	if err != nil {
		if ctx.Err() == nil {
			t.decline(n, fmt.Sprintf("upload: %v", err))
		}
		return
	}
	ack := control.Ack{ID: uint64(n), Gen: t.cfg.Gen, Task: t.cfg.ID, Handle: res.Handle, Metrics: control.AckMetrics{
		SyncMS: syncDur.Milliseconds(), AsyncMS: res.AsyncDuration.Milliseconds(),
		StateBytes: res.StateBytes, UploadedBytes: res.UploadedBytes,
	}}
	if err := t.cfg.Acks.Send(ctx, ack); err != nil && ctx.Err() == nil {
		t.log.Warn("ack not sent; the checkpoint will expire", "checkpoint_id", n, "err", err)
	}
}

// dropSnapshot discards snapshot n's local copy and anything it uploaded.
func (t *Task) dropSnapshot(n int64) {
	if err := t.backend.NotifyAborted(context.WithoutCancel(t.ctx), n); err != nil {
		t.log.Warn("discarding a failed snapshot failed", "checkpoint_id", n, "err", err)
	}
}

func (t *Task) decline(n int64, reason string) {
	t.log.Warn("checkpoint declined", "checkpoint_id", n, "reason", reason)
	d := control.Decline{ID: uint64(n), Gen: t.cfg.Gen, Task: t.cfg.ID, Reason: reason}
	if err := t.cfg.Acks.Send(context.WithoutCancel(t.ctx), d); err != nil {
		t.log.Warn("decline not sent", "checkpoint_id", n, "err", err)
	}
}

// Trigger asks the source to inject barrier n.
func (t *Task) Trigger(n uint64) error { return t.source.InjectBarrier(int64(n)) }

// Complete is notifyCheckpointComplete: the sink commits every transaction
// pre-committed at or before n, the source commits n's offsets to the job's
// consumer group, and the state backend lets go of older snapshots.
func (t *Task) Complete(ctx context.Context, n uint64) error {
	for i, sink := range t.sinks {
		if err := sink.NotifyComplete(ctx, int64(n)); err != nil {
			return fmt.Errorf("task %s: commit sink %d's transactions of checkpoint %d: %w", t.cfg.ID, i, n, err)
		}
	}
	var errs []error
	if err := t.source.Complete(ctx, int64(n)); err != nil {
		errs = append(errs, fmt.Errorf("commit source offsets of checkpoint %d: %w", n, err))
	}
	if err := t.backend.NotifyComplete(ctx, int64(n)); err != nil {
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
func (t *Task) Abort(ctx context.Context, n uint64) {
	t.source.Abort(int64(n))
	for _, sink := range t.sinks {
		sink.Abort(int64(n))
	}
	if err := t.backend.NotifyAborted(ctx, int64(n)); err != nil {
		t.log.Warn("discarding an aborted snapshot failed", "checkpoint_id", n, "err", err)
	}
}

// Done is closed when the task's goroutine has ended; Err then says why.
func (t *Task) Done() <-chan struct{} { return t.done }

// Err returns the error the task failed with, once Done is closed; nil if it
// was stopped.
func (t *Task) Err() error { return t.err }

// CaughtUp reports whether the source has read everything committed so far.
func (t *Task) CaughtUp() bool { return t.source.CaughtUp() }

// Stop stops the task: its goroutine ends, pending snapshots are abandoned,
// the sink aborts its open transaction (pre-committed ones stay for the
// next owner to commit), and the state is closed.
func (t *Task) Stop(ctx context.Context) error {
	t.cancel()
	t.started.Do(func() { close(t.done) }) // never ran
	<-t.done
	t.async.Wait()
	return t.closeParts(ctx)
}

func (t *Task) closeParts(ctx context.Context) error {
	var errs []error
	if t.source != nil {
		t.source.Close()
	}
	for _, sink := range t.sinks {
		if sink != nil { // nil: its creation failed
			errs = append(errs, sink.Close(ctx))
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
