package controltopic

// The control-topic transport (DESIGN.md section 4): creating a job's
// trigger, ack and commit topics, the coordinator's transactional writer,
// the tasks' idempotent ack writer, and readers of the topics' history and
// tail. Messages are control.Message values; this file only moves them.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/txnwatch"
)

// ErrFenced reports that a newer coordinator took over the transactional ID:
// the writer can never write again and its owner must stop.
var ErrFenced = errors.New("controltopic: fenced by a newer coordinator")

// Topics names a job's three control topics.
type Topics struct {
	Trigger, Ack, Commit string
}

// NewTopics returns the control topic names under prefix (by default
// "_weir.<job>.", DESIGN.md section 4).
func NewTopics(prefix string) Topics {
	return Topics{
		Trigger: prefix + string(control.TopicTrigger),
		Ack:     prefix + string(control.TopicAck),
		Commit:  prefix + string(control.TopicCommit),
	}
}

// Name returns the Kafka topic of control topic t.
func (ts Topics) Name(t control.Topic) string {
	switch t {
	case control.TopicTrigger:
		return ts.Trigger
	case control.TopicAck:
		return ts.Ack
	case control.TopicCommit:
		return ts.Commit
	}
	return ""
}

// topicOf is the inverse of Name.
func (ts Topics) topicOf(name string) control.Topic {
	switch name {
	case ts.Trigger:
		return control.TopicTrigger
	case ts.Ack:
		return control.TopicAck
	case ts.Commit:
		return control.TopicCommit
	}
	return ""
}

// controlTopicConfigs are the settings of each control topic; see
// docs/control-topics.md for why.
func controlTopicConfigs(t control.Topic) map[string]*string {
	s := func(v string) *string { return &v }
	switch t {
	case control.TopicCommit:
		// The job's durable history: the newest complete names the restore
		// point however long the job was stopped. Never delete it.
		return map[string]*string{"cleanup.policy": s("delete"), "retention.ms": s("-1"), "retention.bytes": s("-1")}
	case control.TopicTrigger:
		// Records are keyed by message type, and compaction keeps the newest
		// trigger and the newest abort forever: a new coordinator reads the
		// highest checkpoint ID ever triggered from them.
		return map[string]*string{"cleanup.policy": s("compact"), "min.compaction.lag.ms": s("3600000")}
	case control.TopicAck:
		// A new coordinator reads acks from the end (a new generation aborts
		// everything pending): a day is plenty for people to look back.
		return map[string]*string{"cleanup.policy": s("delete"), "retention.ms": s("86400000")}
	}
	return nil
}

// EnsureTopics creates whichever of the control topics is missing,
// each with one partition and the given replication factor (-1: the broker's
// default). An existing topic with more than one partition is an error:
// control messages must be totally ordered.
func EnsureTopics(ctx context.Context, adm *kadm.Client, ts Topics, replication int16) error {
	names := []string{ts.Trigger, ts.Ack, ts.Commit}
	details, err := adm.ListTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("list control topics: %w", err)
	}
	for _, name := range names {
		if d, ok := details[name]; ok && d.Err == nil {
			if n := len(d.Partitions); n != 1 {
				return fmt.Errorf("controltopic: control topic %s has %d partitions, want 1", name, n)
			}
			continue
		}
		resp, err := adm.CreateTopic(ctx, 1, replication, controlTopicConfigs(ts.topicOf(name)), name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create control topic %s: %w", name, err)
		}
	}
	return nil
}

// Record is one decoded record of a control topic.
type Record struct {
	Topic  control.Topic
	Offset int64
	Msg    control.Message
}

// Writer appends the coordinator's records to the trigger and commit
// topics in Kafka transactions under the job's coordinator transactional ID.
// Creating one fences every older writer of that ID. It is safe for use by
// one goroutine at a time.
type Writer struct {
	cl     *kgo.Client
	topics Topics
	watch  *txnwatch.Watch // commits the client did not make (internal/txnwatch)
}

// NewWriter connects with the given client options (seed brokers and
// the like), takes over transactionalID and so fences any older coordinator.
func NewWriter(ctx context.Context, opts []kgo.Opt, ts Topics, transactionalID string) (*Writer, error) {
	watch := txnwatch.New()
	opts = append(append([]kgo.Opt{}, opts...),
		watch.Opt(),
		kgo.TransactionalID(transactionalID),
		kgo.TransactionTimeout(60*time.Second),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("control writer: %w", err)
	}
	// ProducerID initialises the producer ID now rather than at the first
	// write: InitProducerID is what fences the previous coordinator.
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		return nil, fmt.Errorf("control writer: init producer id for %s: %w", transactionalID, err)
	}
	return &Writer{cl: cl, topics: ts, watch: watch}, nil
}

// Append writes msgs, in order, in one transaction: all or none become
// visible to read_committed readers. Each record is keyed by its message
// type. An error wrapping ErrFenced means a newer coordinator exists.
func (w *Writer) Append(ctx context.Context, msgs ...control.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, 0, len(msgs))
	var written []string // the topics of recs, for the wait before the commit
	for _, m := range msgs {
		t, ok := control.TopicOf(m)
		if !ok || t == control.TopicAck {
			return fmt.Errorf("controltopic: control writer cannot append a %s record", m.Type())
		}
		b, err := control.Encode(m)
		if err != nil {
			return err
		}
		topic := w.topics.Name(t)
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(m.Type()), Value: b})
		if !slices.Contains(written, topic) {
			written = append(written, topic)
		}
	}
	before := w.watch.Snapshot()
	if err := w.cl.BeginTransaction(); err != nil {
		return fenced(fmt.Errorf("begin control transaction: %w", err))
	}
	if err := w.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		abortErr := w.cl.EndTransaction(context.WithoutCancel(ctx), kgo.TryAbort)
		return fenced(errors.Join(fmt.Errorf("append control records: %w", err), abortErr))
	}
	txnwatch.AwaitPartitionsPublished(ctx, w.cl, written...)
	if err := w.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fenced(w.unconfirmed(ctx, fmt.Errorf("commit control transaction: %w", err)))
	}
	if !w.watch.Committed(before) {
		return ErrNotCommitted
	}
	return nil
}

// unconfirmed follows a commit that failed. Its outcome can be unknown to
// the client (UNKNOWN_SERVER_ERROR, a lost answer; Apache Kafka 4.4 answered
// a fenced writer's EndTxn with UNKNOWN_SERVER_ERROR once in CI
// rehearsals): the client's documented retry is an abort, which
// re-initialises the producer ID at the writer's epoch. A newer writer
// fences that, and ProducerID then says so, so that the error wraps
// ErrFenced when the writer was fenced.
func (w *Writer) unconfirmed(ctx context.Context, err error) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	abortErr := w.cl.EndTransaction(actx, kgo.TryAbort)
	_, _, idErr := w.cl.ProducerID(actx)
	return errors.Join(err, abortErr, idErr)
}

// ErrNotCommitted is returned by Append when the Kafka client did
// not commit the transaction although it reported no error (internal/txnwatch).
// The records are not written, or not yet aborted; the writer must be
// closed, and a new one's InitProducerID aborts what is left open.
var ErrNotCommitted = errors.New("controltopic: the Kafka client did not commit the control transaction although it reported success")

// Close closes the writer's client.
func (w *Writer) Close() { w.cl.Close() }

// fenced marks err with ErrFenced when Kafka says a newer producer owns the
// transactional ID.
func fenced(err error) error {
	if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return err
}

// AckWriter appends tasks' acks and declines to the ack topic with an
// idempotent producer. It is safe for concurrent use.
type AckWriter struct {
	cl    *kgo.Client
	topic string
}

// NewAckWriter connects with the given client options.
func NewAckWriter(opts []kgo.Opt, ts Topics) (*AckWriter, error) {
	opts = append(append([]kgo.Opt{}, opts...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.ProducerLinger(0))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("ack writer: %w", err)
	}
	return &AckWriter{cl: cl, topic: ts.Ack}, nil
}

// Send appends one ack or decline and waits until Kafka has it.
func (w *AckWriter) Send(ctx context.Context, m control.Message) error {
	return w.SendAll(ctx, m)
}

// SendAll sends ms in one round: every record is produced before any is
// waited for. It returns when all are durable, or the first error.
func (w *AckWriter) SendAll(ctx context.Context, ms ...control.Message) error {
	if len(ms) == 0 {
		return nil
	}
	recs := make([]*kgo.Record, 0, len(ms))
	for _, m := range ms {
		if t, ok := control.TopicOf(m); !ok || t != control.TopicAck {
			return fmt.Errorf("controltopic: ack writer cannot send a %s record", m.Type())
		}
		b, err := control.Encode(m)
		if err != nil {
			return err
		}
		recs = append(recs, &kgo.Record{Topic: w.topic, Key: []byte(m.Type()), Value: b})
	}
	if err := w.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("send %d %s record(s): %w", len(ms), ms[0].Type(), err)
	}
	return nil
}

// Close closes the writer's client.
func (w *AckWriter) Close() { w.cl.Close() }

// History is what a control topic held when it was read.
type History struct {
	Records []Record
	// End is the offset after the last committed record: a tail started at
	// End misses nothing and repeats nothing.
	End int64
}

// StableEnd returns control topic t's last stable offset: a read_committed
// tail started there sees every record committed from now on, including
// those of a transaction open right now. Start a tail at an explicit
// StableEnd rather than at AtEnd, which is resolved whenever the tail's
// client first fetches, so that a record written in between is not lost.
func StableEnd(ctx context.Context, opts []kgo.Opt, ts Topics, t control.Topic) (int64, error) {
	name := ts.Name(t)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	lsos, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("last stable offset of %s: %w", name, err)
	}
	lso, ok := lsos.Lookup(name, 0)
	if !ok {
		return 0, fmt.Errorf("last stable offset of %s: partition 0 not in the answer", name)
	}
	if lso.Err != nil {
		return 0, fmt.Errorf("last stable offset of %s: %w", name, lso.Err)
	}
	return lso.Offset, nil
}

// ReadHistory reads control topic t from its start to its last stable
// offset, read_committed, and decodes every record. A record that does not
// decode is an error naming its offset: history is never skipped.
//
// Transaction markers and aborted records occupy offsets, so "the offset
// before the end" need not be a record. The reader keeps control records
// (markers) and reads until it has passed offset LSO-1: every offset below
// the last stable offset is a committed record, an aborted one (always
// followed by its abort marker) or a marker, so the last one it delivers is
// a record or a marker, and the read ends exactly there.
func ReadHistory(ctx context.Context, opts []kgo.Opt, ts Topics, t control.Topic) (History, error) {
	return readHistory(ctx, opts, ts, t, 0)
}

// ReadRecent is ReadHistory of the newest n offsets of control topic t
// only (records, aborted records and transaction markers alike): for a
// reader that needs the recent past of a topic whose whole history may be
// long (the ack topic keeps a day of every task's acks).
func ReadRecent(ctx context.Context, opts []kgo.Opt, ts Topics, t control.Topic, n int64) (History, error) {
	if n <= 0 {
		return History{}, fmt.Errorf("controltopic: read the newest %d offsets of %s", n, ts.Name(t))
	}
	return readHistory(ctx, opts, ts, t, n)
}

func readHistory(ctx context.Context, opts []kgo.Opt, ts Topics, t control.Topic, recent int64) (History, error) {
	name := ts.Name(t)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return History{}, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	lsos, err := adm.ListCommittedOffsets(ctx, name)
	if err != nil {
		return History{}, fmt.Errorf("last stable offset of %s: %w", name, err)
	}
	if topicErr := lsos[name][-1].Err; topicErr != nil { // kadm's slot for a topic-level error
		return History{}, fmt.Errorf("last stable offset of %s: %w", name, topicErr)
	}
	lso, ok := lsos.Lookup(name, 0)
	if !ok {
		return History{}, fmt.Errorf("last stable offset of %s: partition 0 not in the answer", name)
	}
	if lso.Err != nil {
		return History{}, fmt.Errorf("last stable offset of %s: %w", name, lso.Err)
	}
	starts, err := adm.ListStartOffsets(ctx, name)
	if err != nil {
		return History{}, fmt.Errorf("start offset of %s: %w", name, err)
	}
	start, _ := starts.Lookup(name, 0)
	if recent > 0 {
		start.Offset = max(start.Offset, lso.Offset-recent)
	}
	h := History{End: lso.Offset}
	if lso.Offset <= start.Offset {
		return h, nil
	}
	rd, err := kgo.NewClient(append(append([]kgo.Opt{}, opts...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{name: {0: kgo.NewOffset().At(start.Offset)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return History{}, err
	}
	defer rd.Close()
	for {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return h, fmt.Errorf("read %s: %w", name, err)
		}
		var fetchErr error
		fs.EachError(func(_ string, _ int32, err error) { fetchErr = errors.Join(fetchErr, err) })
		if fetchErr != nil {
			return h, fmt.Errorf("read %s: %w", name, fetchErr)
		}
		var decodeErr error
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset >= lso.Offset {
				done = true
				return
			}
			if r.Offset == lso.Offset-1 {
				done = true
			}
			if r.Attrs.IsControl() {
				return
			}
			m, err := control.Decode(r.Value)
			if err != nil {
				decodeErr = errors.Join(decodeErr, fmt.Errorf("%s offset %d: %w", name, r.Offset, err))
				return
			}
			h.Records = append(h.Records, Record{Topic: t, Offset: r.Offset, Msg: m})
		})
		if decodeErr != nil {
			return h, decodeErr
		}
		if done {
			return h, nil
		}
	}
}

// Tail follows control topics from given offsets and hands out their
// decoded records in offset order per topic. It is used by one goroutine.
type Tail struct {
	cl     *kgo.Client
	topics Topics
	log    *slog.Logger
	buf    []Record
}

// NewTail follows the given control topics, each from its offset
// (kgo.NewOffset().AtEnd() for "from now on"), read_committed.
func NewTail(opts []kgo.Opt, ts Topics, from map[control.Topic]kgo.Offset, log *slog.Logger) (*Tail, error) {
	parts := make(map[string]map[int32]kgo.Offset, len(from))
	for t, o := range from {
		parts[ts.Name(t)] = map[int32]kgo.Offset{0: o}
	}
	opts = append(append([]kgo.Opt{}, opts...),
		kgo.ConsumePartitions(parts),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("control tail: %w", err)
	}
	return &Tail{cl: cl, topics: ts, log: log}, nil
}

// Next returns the next control record, waiting for one until ctx ends. A
// record that does not decode is logged and skipped here: a replica must
// not stop on a stray record in a topic it only follows; history readers
// (ReadHistory) are strict instead.
func (t *Tail) Next(ctx context.Context) (Record, error) {
	for len(t.buf) == 0 {
		fs := t.cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return Record{}, err
		}
		var fetchErr error
		fs.EachError(func(topic string, p int32, err error) {
			fetchErr = errors.Join(fetchErr, fmt.Errorf("%s[%d]: %w", topic, p, err))
		})
		if fetchErr != nil {
			return Record{}, fmt.Errorf("control tail: %w", fetchErr)
		}
		fs.EachRecord(func(r *kgo.Record) {
			m, err := control.Decode(r.Value)
			if err != nil {
				t.log.Warn("undecodable control record skipped", "topic", r.Topic, "offset", r.Offset, "err", err)
				return
			}
			t.buf = append(t.buf, Record{Topic: t.topics.topicOf(r.Topic), Offset: r.Offset, Msg: m})
		})
	}
	r := t.buf[0]
	t.buf = t.buf[1:]
	return r, nil
}

// Close closes the tail's client.
func (t *Tail) Close() { t.cl.Close() }

// CoordinatorTransactionalID is the transactional ID every coordinator of a
// job writes with, so that a new one fences the old (DESIGN.md section 4).
func CoordinatorTransactionalID(prefix string) string { return prefix + "coordinator" }
