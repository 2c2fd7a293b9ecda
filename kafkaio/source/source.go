package source

// The source of a task (DESIGN.md sections 3, 5 and 6): it reads partition
// i of each of the task's input topics, read_committed, and turns them into
// a stream of record batches. The source reads; the task decides where its
// barriers go (runtime/task's sourceInput queues the coordinator's triggers)
// and calls Barrier between two batches. docs/sources.md is the user's view
// of the same thing.
//
// Goroutines and ownership:
//
//   - The task goroutine is the one goroutine that calls Next and Barrier.
//     It owns the kgo poll loop, every partition's next offset
//     (sourcePartition.next), the batch buffer, the decoder, the dead-letter
//     writer, the last barrier's ID and the sticky error. Because the next
//     offsets change only there, the offsets Barrier returns agree exactly
//     with the records Next returned before it.
//   - Any goroutine (the replica's control-topic dispatcher, usually) may
//     call Abort, Complete, Lag, CaughtUp, Positions and Close. Abort only
//     touches Source.mu's fields; Close also wakes a blocked Next by
//     cancelling its poll context. Complete serialises on Source.commitMu
//     and sends one OffsetCommit; Lag and CaughtUp read the atomics the task
//     goroutine publishes after each batch.
//   - franz-go's own goroutines fetch ahead into kgo's buffer, and run the
//     default dead-letter writer's promises (which touch only its mutex).
//
// Lock order: commitMu before mu. Nothing blocks while holding mu.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/retry"
	"github.com/weir-stream/weir/kafkaio"
)

// Offsets are a source's read positions: topic → partition → the next
// offset to read, that is the offset after the last record (data or
// transaction marker) the source delivered downstream. This is what a task
// snapshot stores and what a restored source starts from.
type Offsets map[string]map[int32]int64

// Lookup returns the offset of topic and partition, if present.
func (o Offsets) Lookup(topic string, partition int32) (int64, bool) {
	off, ok := o[topic][partition]
	return off, ok
}

// Set records off for topic and partition.
func (o Offsets) Set(topic string, partition int32, off int64) {
	ps := o[topic]
	if ps == nil {
		ps = make(map[int32]int64, 1)
		o[topic] = ps
	}
	ps[partition] = off
}

// Clone returns a deep copy.
func (o Offsets) Clone() Offsets {
	c := make(Offsets, len(o))
	for t, ps := range o {
		c[t] = make(map[int32]int64, len(ps))
		for p, off := range ps {
			c[t][p] = off
		}
	}
	return c
}

// DefaultMaxBatchRecords is the default of Config.MaxBatchRecords.
const DefaultMaxBatchRecords = 4096

// Config configures a Source.
type Config struct {
	// ClientOpts are the base franz-go options: seed brokers, TLS, SASL,
	// fetch sizes... The source adds its own consume options (direct
	// partitions, read_committed, control records kept, no offset reset),
	// which win. They must not name a consumer group.
	ClientOpts []kgo.Opt

	// Topics are the task's input topics; the source reads Partition of
	// each (DESIGN.md section 1: task i reads partition i).
	Topics    []string
	Partition int32

	// Restored are the offsets of the checkpoint the task restores from.
	// A topic without an entry for Partition starts from Start.
	Restored Offsets
	// Start is where partitions without a restored offset start, that is
	// when the job has no completed checkpoint (DESIGN.md section 6).
	Start kafkaio.Start
	// Skip lists records the source drops unread (neither decoded nor
	// delivered): those an operator skipped with `processor resume --skip`
	// (the generation's control.Generation.Skip). Records of other
	// partitions are ignored.
	Skip []control.Position

	// Group is the consumer group the offsets of completed checkpoints are
	// committed to, for lag tools (DESIGN.md section 5 step 8), for
	// example "<prefix>source". Empty: Complete commits nothing.
	Group string

	// Decoder checks each record; nil means DecodeRaw.
	Decoder Decoder
	// OnError is the policy for records the decoder rejects; empty means
	// kafkaio.OnErrorFail: the source stops with a *DecodeError naming the
	// record. Under kafkaio.OnErrorSkip the record is dropped (counted,
	// logged at debug level); under kafkaio.OnErrorDeadLetter it is written
	// to DeadLetterTopic (see DeadLetterWriter), then dropped.
	OnError kafkaio.OnError
	// DeadLetterTopic receives rejected records under
	// kafkaio.OnErrorDeadLetter. It
	// must exist and must not be an input topic.
	DeadLetterTopic string
	// DeadLetter writes dead letters; nil means the source's own idempotent
	// producer (at-least-once, see DeadLetterWriter).
	DeadLetter DeadLetterWriter

	// MaxBatchRecords caps the records of one batch Next returns; 0 means
	// DefaultMaxBatchRecords. A barrier waits for at most one batch
	// to be processed (it goes between two batches), so this bounds barrier
	// latency too.
	MaxBatchRecords int

	// Name names the source in logs (for example the task ID).
	Name string
	// Logger receives the source's logs; nil discards them. It should
	// already name the task (runtime/task adds "task"); the source adds
	// "component" and "partition".
	Logger *slog.Logger
	// Registerer receives the source's metrics; nil means a private
	// registry. Any number of sources may share one.
	Registerer prometheus.Registerer
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...))
	}
	if len(c.Topics) == 0 {
		bad("topics: none")
	}
	seen := make(map[string]bool, len(c.Topics))
	for i, t := range c.Topics {
		switch {
		case t == "":
			bad("topics[%d]: empty", i)
		case seen[t]:
			bad("topics[%d]: %s listed twice", i, t)
		}
		seen[t] = true
	}
	if c.Partition < 0 {
		bad("partition: %d is negative", c.Partition)
	}
	if !c.Start.Valid() {
		bad("start: unknown kind %d", int(c.Start.Kind))
	}
	for t, ps := range c.Restored {
		for p, off := range ps {
			if off < 0 {
				bad("restored: topic %s partition %d: offset %d is negative", t, p, off)
			}
		}
	}
	if c.MaxBatchRecords < 0 {
		bad("max_batch_records: %d is negative", c.MaxBatchRecords)
	}
	if _, err := kafkaio.ParseOnError(string(c.OnError)); err != nil {
		errs = append(errs, fmt.Errorf("%w: %w", ErrConfig, err))
	}
	if c.OnError == kafkaio.OnErrorDeadLetter {
		switch {
		case c.DeadLetterTopic == "":
			bad("dead_letter_topic: required by the dead-letter policy")
		case seen[c.DeadLetterTopic]:
			bad("dead_letter_topic: %s is an input topic", c.DeadLetterTopic)
		}
	}
	return errors.Join(errs...)
}

// PartitionLag is one partition's read position and lag.
type PartitionLag struct {
	Topic     string
	Partition int32
	// Position is the source's next offset (delivered records).
	Position int64
	// LastStableOffset and HighWatermark are the latest the broker
	// reported (in a fetch or at start), or -1.
	LastStableOffset, HighWatermark int64
	// Lag is LastStableOffset − Position, at least 0: the records a
	// read_committed consumer can read but the source has not delivered.
	// Transaction markers count as read once the source fetched past them,
	// so a partition that ends with markers has lag 0. -1 if unknown.
	Lag int64
}

// Source reads one partition of each of a task's input topics and emits a
// stream of record batches, between which its caller places barriers. See the comment at the top of
// source.go for which goroutine may call what.
type Source struct {
	cl       *kgo.Client
	adm      *kadm.Client
	log      *slog.Logger
	group    string
	decoder  Decoder
	policy   kafkaio.OnError
	dlqTopic string
	dlq      DeadLetterWriter
	maxBatch int
	metrics  *sourceMetrics
	parts    map[string]*sourcePartition // by topic; fixed after New
	order    []*sourcePartition          // in Config.Topics order

	// lifeCtx lives until Close; dead-letter produces use it, so that a
	// short context passed to Next does not fail them later.
	lifeCtx    context.Context
	lifeCancel context.CancelFunc

	// Owned by the goroutine that calls Next and Barrier.
	buf []*kgo.Record
	// polled is what the last poll fetched and Next has not yet returned,
	// per partition in fetch order: Next takes all of a poll at once, so
	// that the client starts its next fetch while the task works through
	// this one (it fetches again only once its buffered fetch is taken),
	// and returns it MaxBatchRecords at a time.
	polled      []polledPartition
	err         error   // sticky: once Next or Barrier failed, both fail the same way
	dlqPending  int     // dead letters handed over since the last flush
	lastBarrier ckpt.ID // checkpoint of the last barrier placed

	mu         sync.Mutex
	closed     bool
	pollCancel context.CancelFunc // cancels the poll Next is in, if any
	emitted    []sourceEmitted    // barriers placed, neither completed nor aborted, ascending

	commitMu sync.Mutex // serialises Complete, held across its commit request
}

// polledPartition is the part of a partition's fetch that Next has not
// returned yet, with the offsets the fetch reported.
type polledPartition struct {
	p        *sourcePartition
	recs     []*kgo.Record
	lso, hwm int64
}

// sourceEmitted remembers a barrier's offsets until its checkpoint completes.
type sourceEmitted struct {
	checkpoint ckpt.ID
	offsets    Offsets
}

// sourcePartition is the state of one input partition.
type sourcePartition struct {
	topic     string
	partition int32

	next int64 // the task goroutine's position
	// skip holds the offsets of this partition to drop, ascending; the task
	// goroutine pops them as it passes them.
	skip []int64

	// Published by the task goroutine for Lag, CaughtUp and Positions.
	pos, lso, hwm atomic.Int64

	records, bytes, decodeErrs, deadLetters prometheus.Counter
	lag                                     prometheus.Gauge
	// uncounted is the offset from which this partition's rejected records
	// are not counted yet, shared by every source of the process on the
	// same registry (decodeErrorCounter).
	uncounted *atomic.Int64
}

// New validates cfg, resolves each partition's start offset (restored,
// or Start), and returns a source ready for Next. It fails if a topic is
// missing or lacks the partition, or if the dead-letter topic is missing.
func New(ctx context.Context, cfg Config) (*Source, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.OnError == "" {
		cfg.OnError = kafkaio.OnErrorFail
	}
	if cfg.Decoder == nil {
		cfg.Decoder = DecodeRaw{}
	}
	if cfg.MaxBatchRecords == 0 {
		cfg.MaxBatchRecords = DefaultMaxBatchRecords
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	metrics, err := newSourceMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}

	opts := append(slices.Clip(cfg.ClientOpts),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Transaction markers occupy offsets: seeing them lets the source
		// advance its position past them, so that snapshot offsets and the
		// caught-up check follow the fetch position. They are filtered out
		// before records reach the stream.
		kgo.KeepControlRecords(),
		// Never reset silently on OffsetOutOfRange: surface it.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("source: client: %w", err)
	}
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g != "" {
		cl.Close()
		return nil, fmt.Errorf("%w: client options name consumer group %q; sources read partitions directly", ErrConfig, g)
	}

	s := &Source{
		cl:       cl,
		adm:      kadm.NewClient(cl),
		log:      cfg.Logger.With("component", "source", "partition", cfg.Partition),
		group:    cfg.Group,
		decoder:  cfg.Decoder,
		policy:   cfg.OnError,
		dlqTopic: cfg.DeadLetterTopic,
		dlq:      cfg.DeadLetter,
		maxBatch: cfg.MaxBatchRecords,
		metrics:  metrics,
		parts:    make(map[string]*sourcePartition, len(cfg.Topics)),
	}
	s.lifeCtx, s.lifeCancel = context.WithCancel(context.Background())
	if s.policy == kafkaio.OnErrorDeadLetter && s.dlq == nil {
		s.dlq = newDeadLetterProducer(cl)
	}
	for _, t := range cfg.Topics {
		p := &sourcePartition{
			topic:       t,
			partition:   cfg.Partition,
			records:     metrics.records.WithLabelValues(t),
			bytes:       metrics.bytes.WithLabelValues(t),
			decodeErrs:  metrics.decodeErrs.WithLabelValues(t, string(s.policy)),
			deadLetters: metrics.deadLetters.WithLabelValues(t),
			uncounted:   metrics.decodeErrs.uncounted(t, cfg.Partition),
			lag:         metrics.lag.WithLabelValues(t, sourcePartitionLabel(cfg.Partition)),
		}
		for _, sk := range cfg.Skip {
			if sk.Topic == t && sk.Partition == cfg.Partition {
				p.skip = append(p.skip, sk.Offset)
			}
		}
		slices.Sort(p.skip)
		p.lso.Store(-1)
		p.hwm.Store(-1)
		s.parts[t] = p
		s.order = append(s.order, p)
	}

	start, err := s.resolveStart(ctx, &cfg)
	if err != nil {
		s.Close()
		return nil, err
	}
	for _, p := range s.order {
		p.next = start[p.topic][p.partition].EpochOffset().Offset
		p.pos.Store(p.next)
		s.publishLag(p)
	}
	cl.AddConsumePartitions(start)
	s.log.Info("source started", "topics", cfg.Topics, "start", cfg.Start.String(),
		"restored", len(cfg.Restored) > 0, "offsets", s.Positions(), "decode_errors", string(s.policy))
	return s, nil
}

// resolveStart checks the topics and returns the exact offset each
// partition starts at. It also seeds each partition's last stable offset,
// so that Lag is known before the first fetch.
func (s *Source) resolveStart(ctx context.Context, cfg *Config) (map[string]map[int32]kgo.Offset, error) {
	check := slices.Clone(cfg.Topics)
	if s.policy == kafkaio.OnErrorDeadLetter { // whichever writer writes to it
		check = append(check, cfg.DeadLetterTopic)
	}
	details, err := s.adm.ListTopics(ctx, check...)
	if err != nil {
		return nil, fmt.Errorf("source: list topics: %w", err)
	}
	var errs []error
	for _, t := range check {
		td, ok := details[t]
		switch {
		case !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition):
			errs = append(errs, fmt.Errorf("source: topic %s does not exist", t))
		case td.Err != nil:
			errs = append(errs, fmt.Errorf("source: topic %s: %w", t, td.Err))
		case t != cfg.DeadLetterTopic && !sourceHasPartition(td, cfg.Partition):
			errs = append(errs, fmt.Errorf("source: topic %s has %d partitions, no partition %d", t, len(td.Partitions), cfg.Partition))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	stable, err := s.adm.ListCommittedOffsets(ctx, cfg.Topics...)
	if err != nil {
		return nil, fmt.Errorf("source: list last stable offsets: %w", err)
	}
	var fromStart []string
	start := make(map[string]map[int32]kgo.Offset, len(cfg.Topics))
	for _, t := range cfg.Topics {
		p := s.parts[t]
		if lo, ok := stable.Lookup(t, cfg.Partition); ok && lo.Err == nil {
			p.lso.Store(lo.Offset)
		}
		if off, ok := cfg.Restored.Lookup(t, cfg.Partition); ok {
			start[t] = map[int32]kgo.Offset{cfg.Partition: kgo.NewOffset().At(off)}
			continue
		}
		fromStart = append(fromStart, t)
	}
	if len(fromStart) == 0 {
		return start, nil
	}
	if len(cfg.Restored) > 0 {
		s.log.Info("source partitions without restored offsets start from the configured start",
			"topics", fromStart, "start", cfg.Start.String())
	}
	listed := stable
	switch cfg.Start.Kind {
	case kafkaio.StartEarliest:
		listed, err = s.adm.ListStartOffsets(ctx, fromStart...)
	case kafkaio.StartTimestamp:
		listed, err = s.adm.ListOffsetsAfterMilli(ctx, cfg.Start.Time.UnixMilli(), fromStart...)
	}
	if err != nil {
		return nil, fmt.Errorf("source: list %s offsets: %w", cfg.Start, err)
	}
	for _, t := range fromStart {
		lo, ok := listed.Lookup(t, cfg.Partition)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("source: topic %s partition %d: no %s offset listed", t, cfg.Partition, cfg.Start))
		case lo.Err != nil:
			errs = append(errs, fmt.Errorf("source: topic %s partition %d: list %s offset: %w", t, cfg.Partition, cfg.Start, lo.Err))
		case lo.Offset < 0:
			errs = append(errs, fmt.Errorf("source: topic %s partition %d: broker listed offset %d for %s", t, cfg.Partition, lo.Offset, cfg.Start))
		default:
			start[t] = map[int32]kgo.Offset{cfg.Partition: kgo.NewOffset().At(lo.Offset)}
		}
	}
	return start, errors.Join(errs...)
}

func sourceHasPartition(td kadm.TopicDetail, p int32) bool {
	_, ok := td.Partitions[p]
	return ok
}

// Next returns the next batch of records, in offset order per partition.
// It blocks until there are some, ctx ends, or the source is closed. Only
// one goroutine may call Next (and Barrier). The slice is reused: it is
// valid until the next call of Next (the records it points to stay valid).
//
// When ctx ends Next returns its error, and the source goes on at the next
// call: cancelling ctx is how a caller wakes a Next that waits on idle
// partitions. Any other error is final: every later call returns it.
func (s *Source) Next(ctx context.Context) ([]*kgo.Record, error) {
	if s.err != nil {
		return nil, s.err
	}
	for {
		recs, err := s.takePolled()
		if err == nil && len(recs) == 0 {
			err = s.poll(ctx)
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, ErrClosed) {
				s.err = err
				s.log.Error("source failed", "error", err)
			}
			return nil, err
		}
		if len(recs) > 0 {
			return recs, nil
		}
	}
}

// poll waits for the next fetches and keeps their records in s.polled.
func (s *Source) poll(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	pollCtx, cancel := context.WithCancel(ctx)
	s.pollCancel = cancel
	s.mu.Unlock()

	fetches := s.cl.PollFetches(pollCtx)

	s.mu.Lock()
	s.pollCancel = nil
	s.mu.Unlock()
	cancel()

	for i := range fetches {
		for j := range fetches[i].Topics {
			ft := &fetches[i].Topics[j]
			for k := range ft.Partitions {
				fp := &ft.Partitions[k]
				if fp.Err != nil {
					if err := s.fetchError(ctx, ft.Topic, fp); err != nil {
						return err
					}
				}
				p := s.parts[ft.Topic]
				if p == nil || fp.Partition != p.partition {
					continue // not ours (kgo's injected errors, for one)
				}
				s.polled = append(s.polled, polledPartition{p: p, recs: fp.Records, lso: fp.LastStableOffset, hwm: fp.HighWatermark})
			}
		}
	}
	if len(s.polled) == 0 {
		return ctx.Err() // woken with nothing: the caller's ctx ended, or a poll without records
	}
	return nil
}

// takePolled turns up to maxBatch polled records into the next batch: it
// drops transaction markers and rejected records, advances each
// partition's position past everything it took, and updates the metrics
// once per partition and batch.
func (s *Source) takePolled() ([]*kgo.Record, error) {
	clear(s.buf) // drop references to the previous batch's records
	s.buf = s.buf[:0]
	for budget := s.maxBatch; budget > 0 && len(s.polled) > 0; {
		pp := &s.polled[0]
		n := min(budget, len(pp.recs))
		if err := s.takePartition(pp.p, pp.recs[:n], pp.lso, pp.hwm); err != nil {
			return nil, err
		}
		budget -= n
		if pp.recs = pp.recs[n:]; len(pp.recs) == 0 {
			s.polled[0] = polledPartition{}
			s.polled = s.polled[1:]
		}
	}
	if len(s.polled) == 0 {
		s.polled = s.polled[:0:0] // let the emptied backing array go
	}
	return s.buf, nil
}

func (s *Source) takePartition(p *sourcePartition, recs []*kgo.Record, lso, hwm int64) error {
	next := p.next
	var n, size int
	for _, r := range recs {
		if r.Offset < next {
			continue // never deliver an offset twice
		}
		next = r.Offset + 1
		if r.Attrs.IsControl() {
			continue
		}
		n++
		size += len(r.Key) + len(r.Value)
		if len(p.skip) > 0 && r.Offset >= p.skip[0] && s.skipped(p, r) {
			continue
		}
		if err := s.decoder.Decode(r); err != nil {
			if err := s.rejected(p, r, err); err != nil {
				return err
			}
			continue
		}
		s.buf = append(s.buf, r)
	}
	p.next = next
	p.pos.Store(next)
	if n > 0 {
		p.records.Add(float64(n))
		p.bytes.Add(float64(size))
	}
	if lso >= 0 {
		p.lso.Store(lso)
	}
	if hwm >= 0 {
		p.hwm.Store(hwm)
	}
	s.publishLag(p)
	return nil
}

// skipped reports whether r is one of the records p skips, and forgets
// the skip offsets r has passed.
func (s *Source) skipped(p *sourcePartition, r *kgo.Record) bool {
	for len(p.skip) > 0 && p.skip[0] < r.Offset {
		p.skip = p.skip[1:]
	}
	if len(p.skip) == 0 || p.skip[0] != r.Offset {
		return false
	}
	p.skip = p.skip[1:]
	s.log.Info("source skipped a record, as processor resume --skip asked", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset)
	return true
}

// rejected applies the decode policy to r, which the decoder rejected.
//
// The counters count each rejected record once per process: a record read
// again after a restore (the records after the restored checkpoint's
// offsets were read before, if this process ran the task) is not counted
// again, one past every record counted so far is.
func (s *Source) rejected(p *sourcePartition, r *kgo.Record, cause error) error {
	first := advanceUncounted(p.uncounted, r.Offset)
	if first {
		p.decodeErrs.Inc()
	}
	switch s.policy {
	case kafkaio.OnErrorSkip:
		s.log.Debug("source skipped undecodable record", "topic", r.Topic, "offset", r.Offset, "error", cause)
		return nil
	case kafkaio.OnErrorDeadLetter:
		if err := s.dlq.WriteDeadLetter(s.lifeCtx, NewDeadLetterRecord(s.dlqTopic, r, cause)); err != nil {
			return fmt.Errorf("source: topic %s partition %d offset %d: dead letter: %w", r.Topic, r.Partition, r.Offset, err)
		}
		s.dlqPending++
		if first {
			p.deadLetters.Inc()
		}
		s.log.Debug("source dead-lettered undecodable record", "topic", r.Topic, "offset", r.Offset, "error", cause)
		return nil
	}
	return &DecodeError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: cause}
}

// fetchError classifies a partition error of a poll: nil to go on (retried
// by kgo, or Close interrupted the poll), or the error that stops the
// source (or, when ctx ended, ctx's error).
func (s *Source) fetchError(ctx context.Context, topic string, fp *kgo.FetchPartition) error {
	err := fp.Err
	if topic == "" && fp.Partition == -1 { // injected by kgo, not from a broker
		switch {
		case errors.Is(err, kgo.ErrClientClosed):
			return ErrClosed
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, context.Canceled):
			return nil // Close woke the poll; Next returns ErrClosed
		}
		return fmt.Errorf("source: poll: %w", err)
	}
	var offset int64 = -1
	if p := s.parts[topic]; p != nil {
		offset = p.next
	}
	var loss *kgo.ErrDataLoss
	switch {
	case errors.As(err, &loss):
		return &DataLossError{Topic: topic, Partition: fp.Partition, Offset: offset, Err: err}
	case errors.Is(err, kerr.OffsetOutOfRange):
		e := &OffsetOutOfRangeError{Topic: topic, Partition: fp.Partition, Offset: offset,
			LogStartOffset: fp.LogStartOffset, HighWatermark: fp.HighWatermark, Err: err}
		s.describeRange(ctx, e)
		return e
	case errors.Is(err, kerr.UnknownTopicID):
		// kgo passes this on only once it persists: the topic was
		// deleted and recreated, and its offsets mean nothing any more.
		return &FetchError{Topic: topic, Partition: fp.Partition, Offset: offset, Err: err}
	case kerr.IsRetriable(err):
		s.log.Warn("source fetch error, retrying", "topic", topic, "offset", offset, "error", err)
		return nil
	}
	return &FetchError{Topic: topic, Partition: fp.Partition, Offset: offset, Err: err}
}

// describeRange fills in the partition's bounds of e when the fetch did not
// report them (Kafka sends -1 with OffsetOutOfRange), so the error can say
// whether the records were deleted. Best effort: e stays valid without.
func (s *Source) describeRange(ctx context.Context, e *OffsetOutOfRangeError) {
	if e.LogStartOffset >= 0 && e.HighWatermark >= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if starts, err := s.adm.ListStartOffsets(ctx, e.Topic); err == nil {
		if lo, ok := starts.Lookup(e.Topic, e.Partition); ok && lo.Err == nil {
			e.LogStartOffset = lo.Offset
		}
	}
	if ends, err := s.adm.ListEndOffsets(ctx, e.Topic); err == nil {
		if lo, ok := ends.Lookup(e.Topic, e.Partition); ok && lo.Err == nil {
			e.HighWatermark = lo.Offset
		}
	}
}

// Barrier places barrier n (the task's checkpoint n) here, between the
// batch Next returned last and the next one, and returns the source's
// positions at it: every record returned before it is below them, every
// record after it at or above. The task stores them in snapshot n; a source
// restored from them continues with exactly the records after the barrier.
// The map is the caller's.
//
// It first flushes the dead letters of the records before the barrier, and
// remembers the positions for Complete. Only the goroutine that calls Next
// may call it. Checkpoint IDs must increase: a repeated or older n returns
// ErrBarrierOrder and is ignored. As with Next, an error of ctx's is
// not final (the same barrier may be placed again); any other is.
func (s *Source) Barrier(ctx context.Context, n ckpt.ID) (Offsets, error) {
	if s.err != nil {
		return nil, s.err
	}
	if n <= s.lastBarrier {
		return nil, fmt.Errorf("%w: checkpoint %d after %d", ErrBarrierOrder, n, s.lastBarrier)
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if s.dlqPending > 0 {
		if err := s.dlq.FlushDeadLetters(ctx); err != nil {
			err = fmt.Errorf("source: dead letters before barrier %d: %w", n, err)
			if ctx.Err() == nil {
				s.err = err
				s.log.Error("source failed", "error", err)
			}
			return nil, err
		}
		s.dlqPending = 0
	}
	offsets := make(Offsets, len(s.order))
	for _, p := range s.order {
		offsets.Set(p.topic, p.partition, p.next)
	}
	s.lastBarrier = n
	s.mu.Lock()
	s.emitted = append(s.emitted, sourceEmitted{checkpoint: n, offsets: offsets.Clone()})
	s.mu.Unlock()
	s.log.Debug("source placed barrier", "checkpoint", n, "offsets", offsets)
	return offsets, nil
}

// Abort forgets checkpoint n (on `abort n`): its offsets are never
// committed. Safe from any goroutine.
func (s *Source) Abort(n ckpt.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emitted = slices.DeleteFunc(s.emitted, func(e sourceEmitted) bool { return e.checkpoint == n })
}

// Complete handles `complete n`: it commits to the job's consumer group the
// offsets of the newest barrier placed in this source for a checkpoint <= n
// (normally n itself), and forgets every barrier <= n. These offsets are for
// people and lag tools only; the snapshot is the truth on restore. Without
// a Group, or without such a barrier (a checkpoint from before a restore),
// it does nothing. Safe from any goroutine; calls are serialised, so offsets
// never go backwards.
func (s *Source) Complete(ctx context.Context, n ckpt.ID) error {
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.mu.Lock()
	var offsets Offsets
	var checkpoint ckpt.ID
	i := 0
	for ; i < len(s.emitted) && s.emitted[i].checkpoint <= n; i++ {
		offsets, checkpoint = s.emitted[i].offsets, s.emitted[i].checkpoint
	}
	s.emitted = slices.Delete(s.emitted, 0, i)
	s.mu.Unlock()
	if offsets == nil || s.group == "" {
		return nil
	}
	commit := make(kadm.Offsets, len(offsets))
	meta := fmt.Sprintf("weir checkpoint %d", checkpoint)
	for t, ps := range offsets {
		for p, off := range ps {
			commit.Add(kadm.Offset{Topic: t, Partition: p, At: off, LeaderEpoch: -1, Metadata: meta})
		}
	}
	// The group coordinator may be loading or moving: retry while ctx
	// allows; kgo does not retry errors inside the response.
	policy := retry.Policy{Initial: 50 * time.Millisecond, Max: time.Second}
	var last error
	err := policy.Do(ctx, func() error {
		resp, err := s.adm.CommitOffsets(ctx, s.group, commit)
		if err == nil {
			err = resp.Error()
		}
		last = err
		if err != nil && !kerr.IsRetriable(err) {
			return retry.Permanent(err)
		}
		return err
	}, func(_ int, err error, _ time.Duration) {
		s.log.Debug("source offset commit failed, retrying", "checkpoint", checkpoint, "group", s.group, "error", err)
	})
	if err != nil && ctx.Err() != nil {
		err = errors.Join(last, ctx.Err())
	}
	if err != nil {
		return fmt.Errorf("source: commit offsets of checkpoint %d to group %s: %w", checkpoint, s.group, err)
	}
	s.log.Debug("source committed offsets", "checkpoint", checkpoint, "group", s.group, "offsets", offsets)
	return nil
}

// Positions returns each partition's next offset. On the goroutine that
// calls Next, between two calls, it agrees exactly with the records
// returned so far; elsewhere it is a recent view.
func (s *Source) Positions() Offsets {
	o := make(Offsets, len(s.order))
	for _, p := range s.order {
		o.Set(p.topic, p.partition, p.pos.Load())
	}
	return o
}

// Lag returns each partition's position and lag, in the order of
// Config.Topics. Safe from any goroutine.
func (s *Source) Lag() []PartitionLag {
	out := make([]PartitionLag, 0, len(s.order))
	for _, p := range s.order {
		pos, lso, hwm := p.pos.Load(), p.lso.Load(), p.hwm.Load()
		out = append(out, PartitionLag{
			Topic: p.topic, Partition: p.partition, Position: pos,
			LastStableOffset: lso, HighWatermark: hwm, Lag: sourceLag(pos, lso, hwm),
		})
	}
	return out
}

// CaughtUp reports whether every partition's lag is known and zero: the
// source has delivered everything a read_committed consumer could read as
// of the latest fetch. Safe from any goroutine.
func (s *Source) CaughtUp() bool {
	for _, p := range s.order {
		if sourceLag(p.pos.Load(), p.lso.Load(), p.hwm.Load()) != 0 {
			return false
		}
	}
	return true
}

// sourceLag is the lag from the fetch position to the last stable offset
// (the high watermark when the broker reported none), or -1 if unknown.
func sourceLag(pos, lso, hwm int64) int64 {
	end := lso
	if end < 0 {
		end = hwm
	}
	if end < 0 {
		return -1
	}
	return max(end-pos, 0)
}

// publishLag updates p's lag gauge; task goroutine (or New) only.
func (s *Source) publishLag(p *sourcePartition) {
	if lag := sourceLag(p.next, p.lso.Load(), p.hwm.Load()); lag >= 0 {
		p.lag.Set(float64(lag))
	}
}

// Close stops the source: a blocked Next returns ErrClosed, and so do
// later calls. Dead letters not yet flushed may be lost: they belong to
// records after the last barrier, which a restored source reads again.
// Safe from any goroutine, and more than once.
func (s *Source) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	if s.pollCancel != nil {
		s.pollCancel()
	}
	s.mu.Unlock()
	s.lifeCancel()
	s.cl.Close()
	for _, p := range s.order {
		s.metrics.lag.DeleteLabelValues(p.topic, sourcePartitionLabel(p.partition))
	}
	s.log.Debug("source closed")
}
