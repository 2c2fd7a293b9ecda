package task

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/kafkaio/shuffle"
	"github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/stream"
)

// An output is where a task's records go: a Kafka sink (sinkOutput, a
// two-phase commit per checkpoint), or a shuffle topic read by the next
// stage (shuffleOutput, which writes barrier records at pre-commit). The
// task goroutine writes and pre-commits; complete and abort come from the
// replica's control dispatcher.
type output interface {
	// write adds r to the open epoch. The output keeps r until the broker
	// acknowledges it.
	write(ctx context.Context, r *kgo.Record) error
	// preCommit ends the epoch at barrier b: what was written is flushed
	// by the returned pending's wait.
	preCommit(ctx context.Context, b ckpt.Barrier) (pending, error)
	// complete is notifyCheckpointComplete(n).
	complete(ctx context.Context, n ckpt.ID) error
	// abort forgets checkpoint n.
	abort(n ckpt.ID)
	close(ctx context.Context) error
	// String names the output in messages: "sink <topic>", "shuffle <topic>".
	String() string
}

// pending is a pre-commit in flight.
type pending interface {
	// wait returns once everything written before the barrier is
	// acknowledged, and adds the output's part to the snapshot's operator
	// state (a sink's pre-committed transactions; a shuffle has none).
	wait(ctx context.Context, op *operatorState) error
}

// outputs are a task's outputs, each found by what the operator chain
// names it by: a sink by its index in Job.Sinks, a shuffle by its edge.
type outputs struct {
	sinks    []*sinkOutput    // nil: a sink of another stage
	shuffles []*shuffleOutput // nil: an edge the stage does not write
	// all are the outputs the task has, sinks in the job's order, then
	// shuffles: the order of the snapshot's parts.
	all []output
}

func newOutputs(sinks, edges int) *outputs {
	return &outputs{sinks: make([]*sinkOutput, sinks), shuffles: make([]*shuffleOutput, edges)}
}

// seal fills all, once every output is created.
func (o *outputs) seal() {
	o.all = o.all[:0]
	for _, s := range o.sinks {
		if s != nil {
			o.all = append(o.all, s)
		}
	}
	for _, s := range o.shuffles {
		if s != nil {
			o.all = append(o.all, s)
		}
	}
}

// sink returns sink i of the job, or nil if the task's stage has no such sink.
func (o *outputs) sink(i int) *sinkOutput {
	if i < 0 || i >= len(o.sinks) {
		return nil
	}
	return o.sinks[i]
}

// shuffle returns the output of shuffle edge e, or nil if the task's stage
// writes no such shuffle.
func (o *outputs) shuffle(e int) *shuffleOutput {
	if e < 0 || e >= len(o.shuffles) {
		return nil
	}
	return o.shuffles[e]
}

// sinkOutput is a Kafka sink: sink index of the job, whose transactions the
// snapshot records under pool.
type sinkOutput struct {
	s     *sink.Sink
	topic string
	index int
	pool  sinkPool
}

func (o *sinkOutput) write(ctx context.Context, r *kgo.Record) error { return o.s.Write(ctx, r) }
func (o *sinkOutput) complete(ctx context.Context, n ckpt.ID) error {
	return o.s.NotifyComplete(ctx, n)
}
func (o *sinkOutput) abort(n ckpt.ID)                 { o.s.Abort(n) }
func (o *sinkOutput) close(ctx context.Context) error { return o.s.Close(ctx) }
func (o *sinkOutput) String() string                  { return "sink " + o.topic }

func (o *sinkOutput) preCommit(ctx context.Context, b ckpt.Barrier) (pending, error) {
	pre, err := o.s.PreCommit(ctx, b.ID)
	if err != nil {
		return nil, err
	}
	return sinkPending{pre, o}, nil
}

type sinkPending struct {
	p *sink.PreCommit
	o *sinkOutput
}

// wait records the sink's transactions twice: with its pool, by identity
// (SinkPools), and by index in Job.Sinks (Sinks), as older builds read them.
func (p sinkPending) wait(ctx context.Context, op *operatorState) error {
	handles, err := p.p.Wait(ctx)
	if err != nil {
		return err
	}
	if handles == nil {
		handles = []sink.TxnHandle{} // null would say: another stage's sink
	}
	pool := p.o.pool
	pool.Txns = handles
	op.SinkPools = append(op.SinkPools, pool)
	op.Sinks[p.o.index] = handles
	return nil
}

// openSink creates the stage's sink of spec and recovers it: it commits the
// transactions the checkpoint recorded for it (r.txns) and fences its pool,
// and the pool it ran under another name before (r.fence).
func (t *Task) openSink(ctx context.Context, spec stream.KafkaSink, r sinkRecovery) (*sink.Sink, error) {
	cfg := t.cfg
	opts := append(append([]kgo.Opt{}, cfg.Kafka...), kgo.DefaultProduceTopic(spec.Topic))
	if spec.MaxRecordBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(spec.MaxRecordBytes))
	}
	sink, err := sink.New(sink.Config{
		ClientOpts:            opts,
		TransactionalIDPrefix: cfg.Prefix,
		Stage:                 cfg.ID.Stage,
		Topic:                 spec.Topic,
		Partition:             int32(cfg.ID.Index),
		Pool:                  r.pool.Pool,
		PoolSize:              max(r.pool.Size, 1), // unused at-least-once
		FenceIDs:              r.fence,
		Delivery:              spec.Delivery,
		TransactionTimeout:    spec.TransactionTimeout,
		Logger:                t.log.With("sink", spec.Topic),
		Metrics:               cfg.SinkMetrics,
	})
	if err != nil {
		return nil, fmt.Errorf("sink %s: %w", spec.Topic, err)
	}
	if err := sink.Recover(ctx, r.txns); err != nil {
		// Returned, so that closeParts closes it with the others.
		return sink, fmt.Errorf("recover sink %s from checkpoint %d: %w", spec.Topic, cfg.RestoreFrom, err)
	}
	if len(r.fence) > 0 {
		t.log.Info("sink's transactional IDs renamed: the old pool was fenced", "sink", spec.Topic,
			"pool", r.pool.Pool, "fenced", len(r.fence), "recovered_transactions", len(r.txns), "checkpoint_id", cfg.RestoreFrom)
	}
	return sink, nil
}

// retireSink recovers a sink the checkpoint recorded that the job no longer
// has, or a sink of an old task of another index of a rescaled stage
// (r.partition): it commits the transactions recorded for it (DESIGN.md
// invariant 5 holds across a change of the job) and fences its pool.
func (t *Task) retireSink(ctx context.Context, r sinkRecovery) error {
	cfg := t.cfg
	delivery := kafkaio.DeliveryExactlyOnce
	if r.pool.Size == 0 {
		delivery = kafkaio.DeliveryAtLeastOnce // commits the handles, has no pool to fence
	}
	err := sink.Retire(ctx, sink.Config{
		ClientOpts:            cfg.Kafka,
		TransactionalIDPrefix: cfg.Prefix,
		Stage:                 cfg.ID.Stage,
		Topic:                 r.pool.Topic,
		Partition:             r.partition,
		Pool:                  r.pool.Pool,
		PoolSize:              max(r.pool.Size, 1),
		Delivery:              delivery,
		TransactionTimeout:    t.retiredTxnTimeout(),
		Logger:                t.log.With("sink", r.name()),
		Metrics:               cfg.SinkMetrics,
	}, r.txns)
	if moved := r.partition != int32(cfg.ID.Index); moved && err != nil {
		return fmt.Errorf("sink %s of old task %s/%d (the stage was rescaled): commit its transactions of checkpoint %d: %w", r.name(), cfg.ID.Stage, r.partition, cfg.RestoreFrom, err)
	} else if moved {
		t.log.Info(fmt.Sprintf("sink %s of old task %s/%d (the stage was rescaled): its %d pre-committed transactions of checkpoint %d were committed and its transactional IDs fenced", r.name(), cfg.ID.Stage, r.partition, len(r.txns), cfg.RestoreFrom),
			"sink", r.name(), "pool", r.pool.Pool, "fenced", r.pool.Size, "checkpoint_id", cfg.RestoreFrom)
		return nil
	}
	if err != nil {
		return fmt.Errorf("sink %s, no longer in the job: commit its transactions of checkpoint %d: %w", r.name(), cfg.RestoreFrom, err)
	}
	t.log.Info(fmt.Sprintf("sink %s is no longer in the job: its %d pre-committed transactions of checkpoint %d were committed", r.name(), len(r.txns), cfg.RestoreFrom),
		"sink", r.name(), "pool", r.pool.Pool, "fenced", r.pool.Size, "checkpoint_id", cfg.RestoreFrom)
	return nil
}

// retiredTxnTimeout is the transaction timeout under which a retired
// sink's recovery fences its pool and judges a transaction it finds
// aborted (the timeout it ran with is not recorded): the longest of the
// job's sinks, which the brokers accept.
func (t *Task) retiredTxnTimeout() time.Duration {
	var d time.Duration
	for _, s := range t.cfg.Sinks {
		d = max(d, s.TransactionTimeout)
	}
	return d // 0: the sink's default
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
	n     int // records emitted since the task last counted them (taskMetrics.count)
	arena []byte
	recs  []kgo.Record
	hdrs  []kgo.RecordHeader
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
	out := e.t.outs.sink(sink)
	if out == nil {
		e.err = fmt.Errorf("emit to sink %d: the task's stage has no such sink", sink)
		return e.err
	}
	e.n++
	rec := e.record()
	rec.Key, rec.Value, rec.Timestamp = e.bytes(r.Key), e.bytes(r.Value), r.Timestamp
	if len(r.Headers) > 0 {
		rec.Headers = make([]kgo.RecordHeader, len(r.Headers))
		for i, h := range r.Headers {
			rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: e.bytes(h.Value)}
		}
	}
	if err := e.write(out, rec); err != nil {
		e.err = fmt.Errorf("%s: %w", out, err)
	}
	return e.err
}

// Shuffle implements stream.Emitter: r goes to shuffle edge's topic.
func (e *emitter) Shuffle(edge int, r stream.Record) error {
	if e.err != nil {
		return e.err
	}
	out := e.t.outs.shuffle(edge)
	if out == nil {
		e.err = fmt.Errorf("emit to shuffle %d: the task's stage writes no such shuffle", edge)
		return e.err
	}
	e.n++
	rec := e.record()
	rec.Key, rec.Value, rec.Timestamp = e.bytes(r.Key), e.bytes(r.Value), r.Timestamp
	// Room for the writer's headers, so that its append does not allocate.
	rec.Headers = e.headers(len(r.Headers) + shuffle.MetaHeaders)
	for _, h := range r.Headers {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: h.Key, Value: e.bytes(h.Value)})
	}
	if err := e.write(out, rec); err != nil {
		e.err = fmt.Errorf("%s: %w", out, err)
	}
	return e.err
}

// write writes rec to out, timing one write in busySample: the time an
// output's full produce buffer blocks the task (busyTime).
func (e *emitter) write(out output, rec *kgo.Record) error {
	b := &e.t.busy
	if !b.timeWrite() {
		return out.write(e.t.ctx, rec)
	}
	start := e.t.cfg.Now()
	err := out.write(e.t.ctx, rec)
	b.wroteFor(e.t.cfg.Now().Sub(start))
	return err
}

// headers returns an empty header slice of capacity n, cut from a slab.
func (e *emitter) headers(n int) []kgo.RecordHeader {
	if cap(e.hdrs)-len(e.hdrs) < n {
		e.hdrs = make([]kgo.RecordHeader, 0, max(emitSlabSize, n))
	}
	start := len(e.hdrs)
	e.hdrs = e.hdrs[:start+n]
	return e.hdrs[start : start : start+n]
}
