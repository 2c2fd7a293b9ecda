package shuffle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/keygroup"
)

// ErrWriterClosed is what a Writer returns once Close was called.
var ErrWriterClosed = errors.New("shuffle: writer closed")

// Linger is how long the writer lets a partition's batch wait for more
// records, and so how long a barrier may wait before it leaves. A produce
// request carries every partition that has a batch, so M = 128 partitions
// cost many small batches per request, not many requests; measured on the
// real broker with 128 partitions (BenchmarkWriteLinger, 200 000 records of
// 100 bytes on a shared 2-core machine), lingers from 0 to 50ms and a plain
// franz-go producer with its defaults all gave 19 000 to 39 000 records/s,
// within the machine's noise. Half of franz-go's 10ms default halves what a
// barrier adds to a checkpoint per stage without a measurable cost. The
// buffer is franz-go's default (50 000 records), past which Write blocks.
const Linger = 5 * time.Millisecond

// MetadataMinAge is how soon a shuffle client may ask the brokers for
// metadata again: franz-go refreshes it when a partition errs (a leader
// moved, or a new topic's partition is not yet ready on its leader), and
// its default of 5s held the writes of whole partitions, and with them
// every downstream task's alignment, for seconds after a job first
// created its shuffle topic. Kafka's Java client retries after 100ms.
const MetadataMinAge = 250 * time.Millisecond

// NewClient returns a producer for shuffle writers to share (WriterConfig's
// Client): the writer's tuning, then opts (brokers, TLS, SASL), then the
// manual partitioner the writers rely on. One idempotent producer keeps
// each partition's records in the order they were produced, whichever
// writer produced them, which is all a Writer's barrier needs.
//
// Sharing is what keeps the broker's cost per record low: with M = 128 key
// groups, T upstream tasks that each had their own producer sent T
// requests of M batches of a few records each; a producer shared by k tasks
// sends the same records in k times fewer, fuller batches (Kafka Streams'
// EOS v2 has one producer per thread, not per task, for the same reason).
// But the broker handles one connection's requests one at a time, so a
// replica shares a few producers among its tasks, not one (the replica
// decides how many).
func NewClient(opts []kgo.Opt) (*kgo.Client, error) {
	all := []kgo.Opt{kgo.ProducerLinger(Linger), kgo.MetadataMinAge(MetadataMinAge)}
	all = append(all, opts...)
	all = append(all, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("shuffle: producer: %w", err)
	}
	return cl, nil
}

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Client is a producer shared with other writers, made by NewClient;
	// the writer does not close it. Nil: the writer makes its own from
	// ClientOpts and closes it with Close.
	Client     *kgo.Client
	ClientOpts []kgo.Opt      // base options: brokers, TLS, SASL
	Topic      string         // the shuffle topic
	Partitions int            // M: the topic's partition count, one per key group
	Task       control.TaskID // the writing task
	Gen        uint64         // the writing task's generation
	Logger     *slog.Logger   // nil: no logs
	Metrics    *Metrics       // nil: no metrics
}

// Writer produces one upstream task's records to a shuffle topic with an
// idempotent (not transactional) producer: each record to the partition of
// its key's key group, each barrier to every partition. Safe for concurrent
// use.
type Writer struct {
	cl      *kgo.Client
	own     bool // cl is the writer's: Close closes it
	topic   string
	m       int
	task    kgo.RecordHeader // weir-task, shared read-only by every record
	gen     kgo.RecordHeader // weir-gen, likewise
	log     *slog.Logger
	err     atomic.Pointer[error] // sticky: the first failure, or ErrWriterClosed
	onAck   func(*kgo.Record, error)
	written prometheus.Counter
	barrier prometheus.Counter
	// watermark counts Watermark calls (each one record per partition).
	watermark prometheus.Counter
}

// NewWriter returns a writer for cfg, with its own Kafka client unless
// cfg.Client is set. It does not check the topic, which EnsureTopics made.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	switch {
	case cfg.Topic == "":
		return nil, errors.New("shuffle: writer: no topic")
	case cfg.Partitions <= 0 || cfg.Partitions > keygroup.Limit:
		return nil, fmt.Errorf("shuffle: writer %s: %d partitions, want 1 to %d", cfg.Topic, cfg.Partitions, keygroup.Limit)
	case !cfg.Task.Valid():
		return nil, fmt.Errorf("shuffle: writer %s: invalid task %q", cfg.Topic, cfg.Task.String())
	}
	cl, own := cfg.Client, false
	if cl == nil {
		var err error
		if cl, err = NewClient(cfg.ClientOpts); err != nil {
			return nil, fmt.Errorf("shuffle: writer %s: %w", cfg.Topic, err)
		}
		own = true
	}
	w := &Writer{
		cl:        cl,
		own:       own,
		topic:     cfg.Topic,
		m:         cfg.Partitions,
		task:      kgo.RecordHeader{Key: HeaderTask, Value: []byte(cfg.Task.String())},
		gen:       kgo.RecordHeader{Key: HeaderGen, Value: strconv.AppendUint(nil, cfg.Gen, 10)},
		log:       cfg.Logger,
		written:   cfg.Metrics.counter(written, cfg.Topic),
		barrier:   cfg.Metrics.counter(barriers, cfg.Topic),
		watermark: cfg.Metrics.counter(watermarks, cfg.Topic),
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	w.log = w.log.With("topic", cfg.Topic, "task", cfg.Task.String(), "gen", cfg.Gen)
	w.onAck = func(r *kgo.Record, err error) {
		if err != nil {
			w.fail(r, err)
		}
	}
	return w, nil
}

// Err returns the writer's sticky error: nil while every produce so far
// succeeded or is still in flight.
func (w *Writer) Err() error {
	if e := w.err.Load(); e != nil {
		return *e
	}
	return nil
}

// fail records the first failed produce; every later call returns it.
func (w *Writer) fail(r *kgo.Record, err error) {
	err = fmt.Errorf("shuffle: produce to %s[%d]: %w", r.Topic, r.Partition, err)
	if w.err.CompareAndSwap(nil, &err) {
		if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
			// The task is stopping: records in flight are abandoned, as
			// the restored upstream writes them again.
			w.log.Debug("shuffle write abandoned", "partition", r.Partition, "error", err)
			return
		}
		w.log.Error("shuffle write failed", "partition", r.Partition, "error", err)
	}
}

// Write produces r asynchronously to the partition of its key's key group,
// appending the weir-task and weir-gen headers to r.Headers (give it room
// for two more to avoid that append's allocation). The caller must not touch
// r until it is acknowledged, as with kgo.Produce. The first failed produce
// makes the writer's error sticky: every later Write, Barrier and Wait
// returns it. Write blocks while the client's buffer is full (50 000
// unacknowledged records), or until ctx ends.
func (w *Writer) Write(ctx context.Context, r *kgo.Record) error {
	if e := w.err.Load(); e != nil {
		return *e
	}
	r.Topic = w.topic
	r.Partition = int32(keygroup.Of(r.Key, w.m))
	r.Headers = append(r.Headers, w.task, w.gen)
	w.cl.Produce(ctx, r, w.onAck)
	w.written.Inc()
	return nil
}

// Pending is a barrier on its way: Wait says when every record written up to
// it is acknowledged.
type Pending struct {
	w    *Writer
	left atomic.Int64 // barrier records not yet acknowledged
	done chan struct{}
}

// Barrier produces barrier b, one record to every partition, after every
// record written before it (one producer, in order per partition), and
// returns its Pending. The barrier records of a partition are acknowledged
// only after every earlier record of that partition, so once all of them
// are, every record written before the barrier is. A barrier record's
// timestamp is b's (the trigger's time); its headers are barrierHeaders'.
func (w *Writer) Barrier(ctx context.Context, b ckpt.Barrier) (*Pending, error) {
	if e := w.err.Load(); e != nil {
		return nil, *e
	}
	p := &Pending{w: w, done: make(chan struct{})}
	p.left.Store(int64(w.m))
	// One slice of headers and one value for all M records: never mutated.
	hs := append([]kgo.RecordHeader{w.task, w.gen}, barrierHeaders(b)...)
	value := []byte{}
	var ts time.Time
	if b.Timestamp > 0 {
		ts = time.UnixMilli(b.Timestamp)
	}
	recs := make([]kgo.Record, w.m)
	ack := func(r *kgo.Record, err error) {
		if err != nil {
			w.fail(r, err)
		}
		if p.left.Add(-1) == 0 {
			close(p.done)
		}
	}
	for i := range recs {
		r := &recs[i]
		r.Topic, r.Partition, r.Value, r.Headers, r.Timestamp = w.topic, int32(i), value, hs, ts
		w.cl.Produce(ctx, r, ack)
	}
	w.barrier.Inc()
	return p, nil
}

// Wait blocks until every record written up to and including the barrier is
// acknowledged, and returns the writer's sticky error (nil if none failed),
// or until ctx ends.
func (p *Pending) Wait(ctx context.Context) error {
	select {
	case <-p.done:
		return p.w.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Watermark produces a watermark record to every partition, asynchronously
// like Write and after every record written before it: watermark wm (Unix
// ms), or, if idle, the mark that every input of the writing task is idle
// (wm is then not written). It does not wait for the acknowledgements; a
// failed produce makes the writer's error sticky, as with Write.
func (w *Writer) Watermark(ctx context.Context, wm int64, idle bool) error {
	if e := w.err.Load(); e != nil {
		return *e
	}
	v := []byte(WatermarkIdle)
	if !idle {
		v = strconv.AppendInt(nil, wm, 10)
	}
	// One slice of headers and one value for all M records: never mutated.
	hs := []kgo.RecordHeader{w.task, w.gen, {Key: HeaderWatermark, Value: v}}
	value := []byte{}
	recs := make([]kgo.Record, w.m)
	for i := range recs {
		r := &recs[i]
		r.Topic, r.Partition, r.Value, r.Headers = w.topic, int32(i), value, hs
		w.cl.Produce(ctx, r, w.onAck)
	}
	w.watermark.Inc()
	return nil
}

// Close makes every later call fail with ErrWriterClosed and, if the client
// is the writer's own, closes it, failing what is not yet acknowledged. A
// shared client goes on producing what the writer handed it until its owner
// closes it. Either way records are durable only once a barrier's Wait
// returned nil.
func (w *Writer) Close() {
	closed := ErrWriterClosed
	w.err.CompareAndSwap(nil, &closed)
	if w.own {
		w.cl.Close()
	}
}
