package sink

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/txnwatch"
	"github.com/weir-stream/weir/kafkaio"
)

// DefaultTransactionTimeout is the transaction timeout when the
// configuration sets none: the brokers' default transaction.max.timeout.ms,
// the longest outage a pre-committed transaction survives without raising it.
const DefaultTransactionTimeout = 15 * time.Minute

// TxnLinger is how long an exactly-once sink's producer lets a partition's
// batch wait for more records (franz-go's default is 10ms). Nothing of a
// transaction is visible before its commit, at the checkpoint's completion,
// and the pre-commit flushes what waits, so a longer linger costs no
// latency; it makes fewer, fuller produce requests when records arrive
// slowly, and so less work for the broker. On the two-stage benchmark at
// 2 000 records/s on a shared 2-core machine (make bench
// ARGS="-two-stage -short", docs/benchmarks.md) the end-to-end latency went
// from p50 1.54 s / p99 2.48 s to p50 1.36 s / p99 2.00 s with 50ms. Client
// options given to the sink override it.
const TxnLinger = 50 * time.Millisecond

// DefaultPoolSize is the number of transactional producers of a sink
// task for a checkpoint max_concurrent: one transaction per pending
// checkpoint, one for the open epoch, and one committed slot that waits for
// the next checkpoint to complete before it is reused (see quarantinedSlot;
// DESIGN.md section 8 sizes it for a barrier n+1 arriving before complete
// n, which this slot covers too).
func DefaultPoolSize(maxConcurrent int) int { return max(maxConcurrent, 1) + 2 }

// TxnID returns the transactional ID of one pool slot of a sink task:
// <prefix><pool>-<partition>-<slot>, pool being the sink's PoolName.
func TxnID(prefix, pool string, partition int32, slot int) string {
	return prefix + pool + "-" + strconv.Itoa(int(partition)) + "-" + strconv.Itoa(slot)
}

// PoolName is the name of the pool of the sink of stage that writes topic,
// in its transactional IDs (TxnID): "<stage>@<topic>". A stage writes a
// topic through one sink, so the pair names the sink, and the name does not
// change when other sinks are added to the job or removed from it. Topic
// names cannot contain '@', nor can stage and job names: a job's IDs are
// never another job's. An empty topic leaves the stage alone, the name that
// sinks of builds before the name had a topic gave their stage's first sink
// (the others were "<stage>.s<i>", by their index in the job).
func PoolName(stage, topic string) string {
	if topic == "" {
		return stage
	}
	return stage + "@" + topic
}

// TxnIDPrefix returns a function that gives what the transactional IDs of
// a job's sinks start with (TxnID: then "-<partition>-<slot>"), under the
// job's prefix: the state schema records it (package compat).
func TxnIDPrefix(prefix string) func(stage, topic string) string {
	return func(stage, topic string) string { return prefix + PoolName(stage, topic) }
}

// sinkTxnIDRest matches what follows the prefix in a sink's transactional
// ID: a stage name without dots, then "@<topic>" (or, as named by builds
// before PoolName had a topic, nothing or a ".s<i>" sink suffix), the
// partition and the slot. Job names may contain dots, so the prefix alone
// ("_weir.clicks.") would also match another job's IDs
// ("_weir.clicks.v2.main@out-0-0"); the rest cannot, since a stage name
// has no dot and only the topic, after the '@', may have one.
var sinkTxnIDRest = regexp.MustCompile(`^[A-Za-z0-9_-]+?(\.s[0-9]+|@[A-Za-z0-9._-]+)?-[0-9]+-[0-9]+$`)

// IsTxnID reports whether id is the transactional ID of one of the
// sinks of the job whose prefix is prefix (not its coordinator's, not
// another job's).
func IsTxnID(prefix, id string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	return ok && sinkTxnIDRest.MatchString(rest)
}

// Config configures the sink of one task (stage, partition).
type Config struct {
	// ClientOpts are the kgo options every client of the sink starts from:
	// seed brokers, TLS, SASL, and the producer settings the job wants
	// (DefaultProduceTopic, a partitioner, linger, compression). The sink
	// adds the transactional ID and timeout of each pool slot itself, and
	// its own logger (it checks what the client does at each commit,
	// internal/txnwatch), which replaces a kgo.WithLogger given here.
	ClientOpts []kgo.Opt
	// TransactionalIDPrefix is the job's prefix (DESIGN.md section 4,
	// default "_weir.<job>."). Required in exactly-once mode.
	TransactionalIDPrefix string
	// Stage and Partition name the task, Topic the sink among the stage's
	// sinks (a stage writes each topic through one sink): the metrics and
	// logs carry them.
	Stage     string
	Topic     string
	Partition int32
	// Pool names the pool's transactional IDs (TxnID); empty means
	// PoolName(Stage, Topic). A sink that recovers what an earlier version
	// of the job recorded under another name (Retire) sets it.
	Pool string
	// FenceIDs are transactional IDs that Recover fences too, after it
	// committed the handles: the slots of a pool the sink ran under another
	// name before (PoolName changed), which may hold a transaction open
	// that would block read_committed readers until its timeout.
	FenceIDs []string
	// Delivery is the sink's guarantee: kafkaio.DeliveryExactlyOnce (the
	// default, also when empty) is the two-phase-commit sink over Kafka
	// transactions (DESIGN.md sections 5, 6 and 8);
	// kafkaio.DeliveryAtLeastOnce writes with an idempotent producer and
	// flushes at each barrier: nothing is lost, and the records after the
	// last completed checkpoint are written again after a restore.
	Delivery kafkaio.Delivery
	// PoolSize is the number of transactional producers; 0 means
	// DefaultPoolSize(MaxConcurrentCheckpoints).
	PoolSize int
	// MaxConcurrentCheckpoints is checkpoint.max_concurrent; it sizes the
	// default pool. 0 means 1.
	MaxConcurrentCheckpoints int
	// TransactionTimeout is sink.transaction_timeout; 0 means
	// DefaultTransactionTimeout. CheckTimeouts checks it at start.
	TransactionTimeout time.Duration
	// Logger receives the sink's logs; nil discards them.
	Logger *slog.Logger
	// Metrics are shared by the replica's sinks; nil keeps them
	// unregistered.
	Metrics *Metrics
}

func (c *Config) setDefaults() {
	if c.PoolSize == 0 {
		c.PoolSize = DefaultPoolSize(c.MaxConcurrentCheckpoints)
	}
	if c.Pool == "" {
		c.Pool = PoolName(c.Stage, c.Topic)
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = DefaultTransactionTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.Stage == "" {
		errs = append(errs, errors.New("stage is empty"))
	}
	if c.Partition < 0 {
		errs = append(errs, fmt.Errorf("partition %d is negative", c.Partition))
	}
	switch c.Delivery {
	case "", kafkaio.DeliveryExactlyOnce:
		if c.TransactionalIDPrefix == "" {
			errs = append(errs, errors.New("transactional ID prefix is empty"))
		}
	case kafkaio.DeliveryAtLeastOnce:
	default:
		errs = append(errs, fmt.Errorf("unknown delivery %q", c.Delivery))
	}
	if c.PoolSize < 1 {
		errs = append(errs, fmt.Errorf("pool size %d must be at least 1", c.PoolSize))
	}
	if c.TransactionTimeout < time.Second {
		errs = append(errs, fmt.Errorf("%s %v must be at least 1s", TransactionTimeoutKey, c.TransactionTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sink: config: %w", err)
	}
	return nil
}

// Sink is the Kafka sink of one task. In exactly-once mode it is the
// two-phase-commit sink of DESIGN.md sections 5, 6 and 8: the records of
// epoch n (between barriers n-1 and n) go into one transaction of a pool of
// transactional producers; PreCommit(n) flushes it and hands its
// TxnHandle to the task's snapshot while the next epoch opens in another
// slot; NotifyComplete(n) commits every pre-committed transaction of epoch
// <= n; Recover commits the transactions a restored snapshot names and
// fences every other slot.
//
// A task drives it so:
//
//	s, _ := New(cfg)
//	s.Recover(ctx, handlesFromSnapshot) // nil on a fresh start; always first
//	s.Write(ctx, r)                     // per record, task goroutine
//	pc, _ := s.PreCommit(ctx, n)        // at barrier n, synchronous part: cheap
//	hs, err := pc.Wait(ctx)             // asynchronous part: store hs in the snapshot, then ack
//	s.NotifyComplete(ctx, n)            // on complete n, any goroutine
//	s.Abort(n)                          // on abort n: the data stays pre-committed
//	s.Close(ctx)
//
// Concurrency: Write, WriteBatch, PreCommit and Close belong to one goroutine
// (the task's). NotifyComplete, Abort and Err may be called from any
// goroutine, concurrently with the task goroutine; they must be, for a Write
// that waits for a free producer to make progress: only a commit frees one.
// The pool state (free slots, pre-committed transactions, the failure) sits
// under mu; the open transaction (cur) is the task goroutine's alone, so a
// record is produced without a lock.
//
// Slot life: free → open (cur, the epoch's records go there) → pre-committed
// (flushing, then flushed; in pending) → committed → quarantined (until a
// checkpoint whose snapshot cannot name it completed) → free. A
// pre-committed slot is never reused, fenced or aborted by the sink until it
// is committed, which is what lets recovery tell a committed transaction
// from a lost one; the quarantine keeps a recorded slot from running a new
// transaction at the recorded producer ID and epoch (transactions v1).
//
// Any failure that could lose or duplicate output (a record the broker
// refused, a flush or commit that failed, a fence) fails the sink for good:
// every later call returns an error wrapping ErrFailed, and the task must
// be restored from its last completed checkpoint, whose recovery commits
// what that checkpoint recorded.
type Sink struct {
	cfg  Config
	log  *slog.Logger
	met  sinkTaskMetrics
	ctx  context.Context // lives until Close: flushes run under it
	stop context.CancelFunc
	wg   sync.WaitGroup // flush goroutines

	// Owned by the task goroutine.
	cur         *sinkSlot // the open transaction of the current epoch; nil if the epoch is empty so far
	curOpened   time.Time
	lastBarrier ckpt.ID
	alo         *kgo.Client // the idempotent producer of at-least-once mode
	aloErr      atomic.Pointer[error]
	aloPromise  func(*kgo.Record, error)

	// admin is a plain client: raw EndTxn, DescribeTransactions. Set by
	// Recover before anything reads it.
	admin *kgo.Client

	commitMu sync.Mutex // serialises NotifyComplete

	mu          sync.Mutex
	recovered   bool
	closed      bool
	failed      error
	slots       []*sinkSlot
	free        []*sinkSlot // FIFO
	pending     []*sinkTxn  // pre-committed, by checkpoint
	quarantined []quarantinedSlot
	barrierSeen ckpt.ID // the newest PreCommit's checkpoint (lastBarrier, under mu)
	freed       chan struct{}
}

// quarantinedSlot is a slot whose transaction was committed while a
// checkpoint up to `until` may still record it: it is reused only once a
// later checkpoint completed, whose snapshot cannot name it.
//
// Why: recovery commits a recorded transaction with a raw EndTxn at its
// producer ID and epoch. On brokers with transactions v1 a commit does not
// bump the epoch, so the slot's next transaction runs at the same producer
// ID and epoch, and that EndTxn would commit it: output of an epoch that no
// completed checkpoint covers, which the restored job writes again. While
// the newest completed checkpoint may name the slot, the slot holds nothing
// else.
type quarantinedSlot struct {
	slot  *sinkSlot
	until ckpt.ID
}

// sinkSlot is one transactional producer of the pool.
type sinkSlot struct {
	txnID string
	cl    *kgo.Client
	watch *txnwatch.Watch       // commits cl did not make (internal/txnwatch)
	err   atomic.Pointer[error] // first record error of the open transaction
	// marker is a record of the open transaction that the broker
	// acknowledged: its offset goes into the handle (TxnHandle.Marker).
	// The record is the sink's until the flush, which copies it.
	marker  atomic.Pointer[kgo.Record]
	promise func(*kgo.Record, error)
	met     *sinkTaskMetrics
	// topics are the topics the open transaction writes to, and
	// defTopic cl's default produce topic (defAlways: for every record,
	// kgo.DefaultProduceTopicAlways): the commit waits until cl has
	// published their partitions (internal/txnwatch). Written by Write, read
	// by the commit after the pre-commit handed the slot over (s.mu).
	topics    []string
	defTopic  string
	defAlways bool
}

// done is the produce promise of the slot: built once, so producing does
// not allocate a closure per record.
func (sl *sinkSlot) done(r *kgo.Record, err error) {
	if err != nil {
		firstErr(&sl.err, err)
		return
	}
	if sl.marker.Load() == nil {
		sl.marker.CompareAndSwap(nil, r)
	}
	sl.met.records.Inc()
	sl.met.bytes.Add(float64(recordBytes(r)))
}

// firstErr keeps the first error in p. It is a function of its own so that
// the promises' err parameter does not escape: taking its address there
// would allocate on every record.
func firstErr(p *atomic.Pointer[error], err error) {
	p.CompareAndSwap(nil, &err)
}

func recordBytes(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// sinkTxn is a pre-committed transaction.
type sinkTxn struct {
	slot       *sinkSlot
	checkpoint ckpt.ID
	opened     time.Time
	done       chan struct{} // closed when the flush ended; then handle or err is set
	handle     TxnHandle
	err        error
}

// New validates cfg and builds a sink. It does no I/O: Recover, which
// must come next, talks to the brokers.
func New(cfg Config) (*Sink, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	met := cfg.Metrics
	if met == nil {
		met, _ = NewMetrics(nil)
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Sink{
		cfg:   cfg,
		log:   cfg.Logger.With("stage", cfg.Stage, "partition", cfg.Partition),
		met:   met.forTask(cfg.Stage, cfg.Topic, cfg.Partition),
		ctx:   ctx,
		stop:  stop,
		freed: make(chan struct{}, 1),
	}
	s.aloPromise = s.aloDone
	return s, nil
}

// Recover prepares the sink from the task's restored snapshot and must be
// called once, before anything else; handles is nil on a fresh start.
//
// It first commits every handle with a raw EndTxn carrying the stored
// producer ID and epoch, before any client of the pool exists (a
// transactional client's InitProducerID would abort the transaction). A
// transaction that is already committed is fine; one the broker aborted
// stops recovery with a *TxnAbortedError naming the checkpoint and
// TransactionTimeoutKey. Then, in exactly-once mode, it fences every
// slot of the pool and every transactional ID of the handles
// (InitProducerID), which aborts what an earlier instance left open and
// makes any zombie instance's later write or commit fail. The commit alone
// would not fence a zombie: the broker answers an EndTxn at the old epoch as
// a successful retry and hands out the new one.
//
// If Recover fails it may be called again.
func (s *Sink) Recover(ctx context.Context, handles []TxnHandle) error {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrClosed
	case s.recovered:
		s.mu.Unlock()
		return errors.New("sink: recovered twice")
	}
	s.mu.Unlock()

	if s.admin == nil {
		admin, err := kgo.NewClient(s.cfg.ClientOpts...)
		if err != nil {
			return fmt.Errorf("sink: client: %w", err)
		}
		s.admin = admin
	}
	handles = slices.Clone(handles)
	slices.SortStableFunc(handles, func(a, b TxnHandle) int { return cmp.Compare(a.Checkpoint, b.Checkpoint) })
	for _, h := range handles {
		outcome, err := commitTxnHandle(ctx, s.admin, h, s.cfg.TransactionTimeout, s.log)
		if err != nil {
			if errors.Is(err, ErrTxnAborted) {
				s.met.aborted.Inc()
			}
			return fmt.Errorf("sink: recover sink %s-%d: %w", s.cfg.Pool, s.cfg.Partition, err)
		}
		if outcome == txnCommitted {
			s.met.committed.Inc()
		}
		s.log.Info("recovered pre-committed transaction", "transactional_id", h.TransactionalID,
			"producer_id", h.ProducerID, "producer_epoch", h.ProducerEpoch, "checkpoint", h.Checkpoint, "outcome", outcome.String())
	}

	if s.cfg.Delivery == kafkaio.DeliveryAtLeastOnce {
		cl, err := kgo.NewClient(s.cfg.ClientOpts...)
		if err != nil {
			return fmt.Errorf("sink: producer: %w", err)
		}
		s.alo = cl
		s.mu.Lock()
		s.recovered = true
		s.mu.Unlock()
		return nil
	}

	slots, err := s.fence(ctx, handles)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		for _, sl := range slots {
			sl.cl.Close()
		}
		return ErrClosed
	}
	s.slots = slots
	s.free = slices.Clone(slots)
	s.recovered = true
	return nil
}

// Retire recovers a sink that is no longer in the job, then closes it: it
// commits the transactions handles names (pre-committed by the sink as the
// checkpoint recorded them) and fences the pool cfg names, as Recover
// does, so that invariant 5 holds when a sink is removed from a job. cfg
// names the pool as the checkpoint's job ran it (Stage, Topic or Pool,
// PoolSize); in at-least-once mode only the handles are committed.
func Retire(ctx context.Context, cfg Config, handles []TxnHandle) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	err = s.Recover(ctx, handles)
	return errors.Join(err, s.Close(ctx))
}

// fence creates the pool's clients and initialises every one of them, and
// of the handles' transactional IDs outside the pool, with InitProducerID:
// whatever transaction those IDs hold open is aborted, and older producers of
// them are fenced.
func (s *Sink) fence(ctx context.Context, handles []TxnHandle) ([]*sinkSlot, error) {
	ids := make([]string, 0, s.cfg.PoolSize+len(handles)+len(s.cfg.FenceIDs))
	for i := range s.cfg.PoolSize {
		ids = append(ids, TxnID(s.cfg.TransactionalIDPrefix, s.cfg.Pool, s.cfg.Partition, i))
	}
	extra := 0
	for _, h := range handles {
		if !slices.Contains(ids, h.TransactionalID) {
			ids = append(ids, h.TransactionalID)
			extra++
		}
	}
	for _, id := range s.cfg.FenceIDs {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
			extra++
		}
	}

	// For the logs and the aborted counter: which of them hold an open
	// transaction that the fence will abort.
	if ds, err := kadm.NewClient(s.admin).DescribeTransactions(ctx, ids...); err != nil {
		s.log.Warn("could not describe the pool's transactions before fencing", "err", err)
	} else {
		for _, d := range ds.Sorted() {
			// Ongoing only: a handle just committed may still be
			// PrepareCommit, which the fence waits for and keeps.
			if d.Err == nil && d.State == "Ongoing" {
				s.met.aborted.Inc()
				s.log.Info("fencing aborts an open transaction left by an earlier instance", "transactional_id", d.TxnID,
					"state", d.State, "producer_id", d.ProducerID, "producer_epoch", d.ProducerEpoch,
					"started", time.UnixMilli(d.StartTimestamp).UTC(), "partitions", d.Topics.Sorted())
			}
		}
	}

	clients := make([]*kgo.Client, len(ids))
	watches := make([]*txnwatch.Watch, len(ids))
	closeAll := func() {
		for _, cl := range clients {
			if cl != nil {
				cl.Close()
			}
		}
	}
	for i, id := range ids {
		cl, watch, err := s.slotClient(id)
		if err != nil {
			closeAll()
			return nil, err
		}
		clients[i], watches[i] = cl, watch
	}
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, cl := range clients {
		wg.Go(func() {
			pid, epoch, err := cl.ProducerID(ctx)
			if err != nil {
				err = fmt.Errorf("sink: fence transactional ID %s: %w", ids[i], err)
				if errors.Is(err, kerr.InvalidTransactionTimeout) {
					err = fmt.Errorf("%w: %s %v exceeds the brokers' %s; lower it or raise the broker setting",
						err, TransactionTimeoutKey, s.cfg.TransactionTimeout, BrokerTransactionMaxTimeoutKey)
				}
				errs[i] = err
				return
			}
			s.log.Debug("fenced transactional ID", "transactional_id", ids[i], "producer_id", pid, "producer_epoch", epoch)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll()
		return nil, err
	}
	for _, cl := range clients[len(clients)-extra:] {
		cl.Close()
	}
	slots := make([]*sinkSlot, s.cfg.PoolSize)
	for i := range slots {
		sl := &sinkSlot{txnID: ids[i], cl: clients[i], watch: watches[i], met: &s.met}
		sl.defTopic, _ = clients[i].OptValue(kgo.DefaultProduceTopic).(string)
		sl.defAlways, _ = clients[i].OptValue(kgo.DefaultProduceTopicAlways).(bool)
		sl.promise = sl.done
		slots[i] = sl
	}
	s.log.Info("sink recovered", "pool_size", s.cfg.PoolSize, "fenced", len(ids), "recovered_transactions", len(handles))
	return slots, nil
}

// Write adds r to the current epoch. The sink owns r until the epoch's
// transaction is flushed; do not reuse it before. In exactly-once mode, the
// first record of an epoch takes a producer from the pool and waits, as long
// as ctx allows, if none is free (the wait is the weir_sink_pool_wait_seconds
// metric). ctx bounds that wait only: the record itself lives until it is
// flushed or the sink is closed (kgo fails a buffered record whose produce
// context ends, which would fail the whole epoch). Write blocks while kgo's
// buffer is full. Errors of individual records surface at PreCommit. Write
// takes no lock and allocates nothing beyond what kgo's Produce does.
func (s *Sink) Write(ctx context.Context, r *kgo.Record) error {
	if s.cfg.Delivery == kafkaio.DeliveryAtLeastOnce {
		if s.alo == nil {
			return s.unusable()
		}
		s.alo.Produce(s.ctx, r, s.aloPromise)
		return nil
	}
	if s.cur == nil {
		if err := s.begin(ctx); err != nil {
			return err
		}
	}
	t := r.Topic
	if t == "" || s.cur.defAlways {
		t = s.cur.defTopic
	}
	if len(s.cur.topics) == 0 || t != s.cur.topics[len(s.cur.topics)-1] {
		s.cur.noteTopic(t)
	}
	s.cur.cl.Produce(s.ctx, r, s.cur.promise)
	return nil
}

// noteTopic adds t to the topics of the open transaction.
func (sl *sinkSlot) noteTopic(t string) {
	if i := slices.Index(sl.topics, t); i >= 0 {
		// Keep the last one written at the end: the check in Write is
		// one comparison for a run of records to one topic.
		sl.topics = append(slices.Delete(sl.topics, i, i+1), t)
		return
	}
	sl.topics = append(sl.topics, t)
}

// WriteBatch writes every record of rs, as Write.
func (s *Sink) WriteBatch(ctx context.Context, rs []*kgo.Record) error {
	for _, r := range rs {
		if err := s.Write(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// unusable returns why the sink cannot be used now, or nil.
func (s *Sink) unusable() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.unusableLocked()
}

func (s *Sink) unusableLocked() error {
	switch {
	case s.failed != nil:
		return s.failed
	case s.closed:
		return ErrClosed
	case !s.recovered:
		return ErrNotRecovered
	}
	return nil
}

// fail records the sink's first failure and wakes a waiting Write.
func (s *Sink) fail(err error) error {
	s.mu.Lock()
	if s.failed == nil {
		s.failed = fmt.Errorf("%w: %w", ErrFailed, err)
		if errors.Is(err, context.Canceled) {
			// Stop interrupted it: the task is being stopped anyway.
			s.log.Debug("sink stopped while it worked", "err", err)
		} else {
			s.log.Error("sink failed: the task must be restored from its last completed checkpoint", "err", err)
		}
	}
	err = s.failed
	s.mu.Unlock()
	s.signalFreed()
	return err
}

func (s *Sink) signalFreed() {
	select {
	case s.freed <- struct{}{}:
	default:
	}
}

// begin opens the current epoch's transaction in a free slot, waiting for
// one if the pool is exhausted.
func (s *Sink) begin(ctx context.Context) error {
	start := time.Now()
	var sl *sinkSlot
	for waited := false; ; waited = true {
		s.mu.Lock()
		if err := s.unusableLocked(); err != nil {
			s.mu.Unlock()
			return err
		}
		if len(s.free) > 0 {
			sl = s.free[0]
			s.free = s.free[1:]
			s.mu.Unlock()
			break
		}
		if len(s.quarantined) > 0 {
			// No completion can come while this goroutine waits here
			// (the next barrier is behind this record): renew the
			// oldest committed slot instead of waiting for one.
			q := s.quarantined[0]
			s.quarantined = slices.Delete(s.quarantined, 0, 1)
			s.mu.Unlock()
			if err := s.renew(ctx, q.slot); err != nil {
				return s.fail(err)
			}
			sl = q.slot
			break
		}
		pending := len(s.pending)
		s.mu.Unlock()
		if !waited {
			s.log.Debug("transactional producer pool exhausted; waiting for a commit", "pool_size", len(s.slots), "pre_committed", pending)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sink: %s-%d waiting for a free transactional producer: %w", s.cfg.Pool, s.cfg.Partition, ctx.Err())
		case <-s.ctx.Done():
			return ErrClosed
		case <-s.freed:
		}
	}
	waited := time.Since(start)
	s.met.poolWait.Observe(waited.Seconds())
	if waited > time.Second {
		s.log.Warn("waited for a free transactional producer", "wait", waited, "pool_size", len(s.slots))
	}
	if err := s.awaitPreviousFlush(ctx, sl); err != nil {
		return err
	}
	sl.err.Store(nil)
	sl.marker.Store(nil)
	sl.topics = sl.topics[:0]
	if err := sl.cl.BeginTransaction(); err != nil {
		return s.fail(fmt.Errorf("begin transaction %s: %w", sl.txnID, err))
	}
	s.cur = sl
	s.curOpened = time.Now()
	return nil
}

// renew replaces the client of a committed slot by one with a newer
// producer epoch, so that the recorded producer ID and epoch of its last
// transaction can no longer commit anything the slot does next, on any
// broker: the slot leaves quarantine at once. It moves the epoch on twice
// (two InitProducerIDs): recovery takes an abort at exactly the recorded
// epoch + 1 for the broker's timeout abort of the recorded transaction
// (transactions v1), and a transaction of the renewed slot that ends in an
// abort must not look like that.
func (s *Sink) renew(ctx context.Context, sl *sinkSlot) error {
	var cl *kgo.Client
	var watch *txnwatch.Watch
	var pid int64
	var epoch int16
	for range 2 {
		if cl != nil {
			cl.Close()
		}
		var err error
		if cl, watch, err = s.slotClient(sl.txnID); err != nil {
			return err
		}
		if pid, epoch, err = cl.ProducerID(ctx); err != nil {
			cl.Close()
			return fmt.Errorf("renew transactional producer %s: %w", sl.txnID, err)
		}
	}
	old := sl.cl
	sl.cl, sl.watch = cl, watch
	old.Close()
	s.log.Info("renewed a committed transactional producer instead of waiting for the next checkpoint to complete",
		"transactional_id", sl.txnID, "producer_id", pid, "producer_epoch", epoch)
	return nil
}

// slotClient builds the transactional client of pool slot id, and the
// watch of the commits it does not make (internal/txnwatch).
func (s *Sink) slotClient(id string) (*kgo.Client, *txnwatch.Watch, error) {
	watch := txnwatch.New()
	opts := append([]kgo.Opt{kgo.ProducerLinger(TxnLinger)}, s.cfg.ClientOpts...)
	cl, err := kgo.NewClient(append(opts, watch.Opt(), kgo.TransactionalID(id), kgo.TransactionTimeout(s.cfg.TransactionTimeout))...)
	if err != nil {
		return nil, nil, fmt.Errorf("sink: producer %s: %w", id, err)
	}
	return cl, watch, nil
}

// awaitPreviousFlush waits until the newest pre-committed transaction is
// flushed, before the first record of the next epoch is produced through
// another producer (slot sl, which it returns to the pool if it gives up).
// Two producers writing to one partition at once would interleave their
// records in the log, and read_committed readers would see the next epoch's
// records before the end of the previous one: per-key order would break at
// checkpoint boundaries. Waiting here keeps the barrier itself free of
// Kafka: the wait is paid only when the next epoch has records, and only
// for what is still in flight. By induction every older transaction is
// flushed too. The wait is the weir_sink_flush_wait_seconds metric.
func (s *Sink) awaitPreviousFlush(ctx context.Context, sl *sinkSlot) error {
	s.mu.Lock()
	var last *sinkTxn
	if n := len(s.pending); n > 0 {
		last = s.pending[n-1]
	}
	s.mu.Unlock()
	if last == nil {
		return nil
	}
	start := time.Now()
	select {
	case <-last.done:
	case <-ctx.Done():
		s.release(sl)
		return fmt.Errorf("sink: %s-%d waiting for the previous epoch's flush: %w", s.cfg.Pool, s.cfg.Partition, ctx.Err())
	case <-s.ctx.Done():
		s.release(sl)
		return ErrClosed
	}
	s.met.flushWait.Observe(time.Since(start).Seconds())
	if last.err != nil {
		s.release(sl)
		return s.fail(fmt.Errorf("flush of checkpoint %d's transaction: %w", last.checkpoint, last.err))
	}
	return nil
}

// release returns an unused slot to the front of the pool.
func (s *Sink) release(sl *sinkSlot) {
	s.mu.Lock()
	s.free = append([]*sinkSlot{sl}, s.free...)
	s.mu.Unlock()
	s.signalFreed()
}

// PreCommit is the result of PreCommit: the transactions the task's
// snapshot for the checkpoint must record, some still flushing.
type PreCommit struct {
	checkpoint ckpt.ID
	txns       []*sinkTxn
	err        error
}

// Checkpoint is the checkpoint the pre-commit belongs to.
func (p *PreCommit) Checkpoint() ckpt.ID { return p.checkpoint }

// Wait waits until every transaction of the pre-commit is flushed and returns
// their handles, for the task's snapshot: the transaction of the checkpoint's
// epoch (if the epoch had records) and every older one not committed yet when
// the barrier passed (of aborted checkpoints, or whose completion the sink
// has not been notified of). The task acknowledges the checkpoint only after
// Wait returned without error; an error means the checkpoint must be
// declined and the sink has failed.
func (p *PreCommit) Wait(ctx context.Context) ([]TxnHandle, error) {
	if p.err != nil {
		return nil, p.err
	}
	hs := make([]TxnHandle, 0, len(p.txns))
	for _, t := range p.txns {
		select {
		case <-t.done:
		case <-ctx.Done():
			return nil, fmt.Errorf("sink: wait for the pre-commit of checkpoint %d: %w", p.checkpoint, ctx.Err())
		}
		if t.err != nil {
			return nil, t.err
		}
		hs = append(hs, t.handle)
	}
	return hs, nil
}

// PreCommit is the sink's part of barrier checkpoint (DESIGN.md section 5
// step 6). In exactly-once mode it closes the epoch: the open transaction, if
// the epoch wrote anything, becomes pre-committed and its flush starts in the
// background, and the next record opens a new transaction in another slot.
// An empty epoch produces no transaction. PreCommit does not wait for Kafka;
// the returned PreCommit's Wait does.
//
// In at-least-once mode it flushes the producer synchronously: every record
// written before the barrier is acknowledged when it returns, and Wait
// returns no handles.
//
// Checkpoint IDs must increase from call to call.
func (s *Sink) PreCommit(ctx context.Context, checkpoint ckpt.ID) (*PreCommit, error) {
	if checkpoint <= s.lastBarrier {
		return nil, fmt.Errorf("sink: pre-commit of checkpoint %d after checkpoint %d", checkpoint, s.lastBarrier)
	}
	if err := s.unusable(); err != nil {
		return nil, err
	}
	s.lastBarrier = checkpoint
	if s.cfg.Delivery == kafkaio.DeliveryAtLeastOnce {
		err := s.alo.Flush(ctx)
		if err == nil {
			if p := s.aloErr.Load(); p != nil {
				err = s.fail(fmt.Errorf("write: %w", *p))
			}
		}
		if err != nil {
			return nil, fmt.Errorf("sink: flush sink at checkpoint %d: %w", checkpoint, err)
		}
		return &PreCommit{checkpoint: checkpoint}, nil
	}

	var txn *sinkTxn
	s.mu.Lock()
	s.barrierSeen = checkpoint
	if s.cur != nil {
		txn = &sinkTxn{slot: s.cur, checkpoint: checkpoint, opened: s.curOpened, done: make(chan struct{})}
		s.pending = append(s.pending, txn)
		s.cur = nil
	}
	txns := slices.Clone(s.pending)
	s.mu.Unlock()
	if txn != nil {
		s.wg.Go(func() { s.flush(txn) })
	}
	return &PreCommit{checkpoint: checkpoint, txns: txns}, nil
}

// flush waits until every record of txn is acknowledged and records its
// handle.
func (s *Sink) flush(txn *sinkTxn) {
	defer close(txn.done)
	sl := txn.slot
	err := sl.cl.Flush(s.ctx)
	if err == nil {
		if p := sl.err.Load(); p != nil {
			err = fmt.Errorf("write: %w", *p)
		}
	}
	var pid int64
	var epoch int16
	if err == nil {
		pid, epoch, err = sl.cl.ProducerID(s.ctx)
	}
	if err != nil {
		if s.ctx.Err() != nil {
			// Closed while flushing: not a failure of the sink. The
			// transaction stays as it is for the next Recover.
			txn.err = fmt.Errorf("sink: pre-commit of checkpoint %d: %w", txn.checkpoint, ErrClosed)
			return
		}
		if errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) {
			err = fmt.Errorf("%w: %w", ErrFenced, err)
		}
		txn.err = s.fail(fmt.Errorf("pre-commit transaction %s of checkpoint %d: %w", sl.txnID, txn.checkpoint, err))
		return
	}
	txn.handle = TxnHandle{
		Version: TxnHandleVersion, TransactionalID: sl.txnID, ProducerID: pid, ProducerEpoch: epoch,
		Checkpoint: txn.checkpoint, BeganMillis: txn.opened.UnixMilli(),
	}
	if r := sl.marker.Load(); r != nil {
		txn.handle.Marker = TxnMarker{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
	}
	s.log.Debug("pre-committed transaction", "transactional_id", sl.txnID, "producer_id", pid, "producer_epoch", epoch,
		"checkpoint", txn.checkpoint, "open_for", time.Since(txn.opened))
}

// NotifyComplete is the sink's part of complete checkpoint (DESIGN.md
// section 5 step 8): it commits every pre-committed transaction of a
// checkpoint <= checkpoint, in order, and returns their producers to the
// pool. It waits for a transaction whose flush has not finished. A commit the
// broker refuses fails the sink: with a *TxnAbortedError if the broker
// aborted the transaction (its timeout expired), with ErrFenced if a
// newer instance of the task took over. It may run concurrently with the
// task goroutine; calls are serialised.
func (s *Sink) NotifyComplete(ctx context.Context, checkpoint ckpt.ID) error {
	if s.cfg.Delivery == kafkaio.DeliveryAtLeastOnce {
		return nil
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	s.releaseQuarantined(checkpoint)
	for {
		s.mu.Lock()
		if err := s.unusableLocked(); err != nil {
			s.mu.Unlock()
			return err
		}
		if len(s.pending) == 0 || s.pending[0].checkpoint > checkpoint {
			s.mu.Unlock()
			return nil
		}
		txn := s.pending[0]
		s.mu.Unlock()

		select {
		case <-txn.done:
		case <-ctx.Done():
			return fmt.Errorf("sink: commit of checkpoint %d waits for a flush: %w", checkpoint, ctx.Err())
		}
		if txn.err != nil {
			return txn.err
		}
		if err := s.commit(ctx, txn); err != nil {
			return err
		}
		// Every snapshot taken from now on lacks the transaction; those
		// up to barrierSeen may have it.
		s.mu.Lock()
		s.pending = s.pending[1:]
		s.quarantined = append(s.quarantined, quarantinedSlot{slot: txn.slot, until: s.barrierSeen})
		s.mu.Unlock()
		s.signalFreed() // a Write waiting for a slot can renew this one
	}
}

// releaseQuarantined returns to the pool the slots that no checkpoint from
// completed on can name: completed is now the newest completed checkpoint.
func (s *Sink) releaseQuarantined(completed ckpt.ID) {
	s.mu.Lock()
	n := 0
	keep := s.quarantined[:0]
	for _, q := range s.quarantined {
		if q.until < completed {
			s.free = append(s.free, q.slot)
			n++
		} else {
			keep = append(keep, q)
		}
	}
	clear(s.quarantined[len(keep):])
	s.quarantined = keep
	s.mu.Unlock()
	if n > 0 {
		s.signalFreed()
	}
}

// errClientDidNotCommit: EndTransaction(TryCommit) returned nil, but the
// client aborted the transaction or sent nothing (internal/txnwatch).
var errClientDidNotCommit = errors.New("franz-go found no partition of it published yet, and sent an abort or nothing")

// commit commits one flushed transaction with its own producer.
func (s *Sink) commit(ctx context.Context, txn *sinkTxn) error {
	sl := txn.slot
	start := time.Now()
	txnwatch.AwaitPartitionsPublished(ctx, sl.cl, sl.topics...)
	before := sl.watch.Snapshot()
	err := sl.cl.EndTransaction(ctx, kgo.TryCommit)
	if err == nil && !sl.watch.Committed(before) {
		err = errClientDidNotCommit
	}
	if err == nil {
		d := time.Since(start)
		s.met.commitLatency.Observe(d.Seconds())
		s.met.committed.Inc()
		s.log.Debug("committed transaction", "transactional_id", sl.txnID, "checkpoint", txn.checkpoint,
			"producer_id", txn.handle.ProducerID, "producer_epoch", txn.handle.ProducerEpoch, "latency", d)
		return nil
	}
	switch {
	case errors.Is(err, errClientDidNotCommit):
		// The checkpoint that recorded it has completed: its output is
		// lost, and the task must stop rather than go on silently.
		s.met.aborted.Inc()
		e := txnAborted(ctx, s.admin, txn.handle, s.cfg.TransactionTimeout, err)
		e.Cause = LossByClient
		err = e
	case (errors.Is(err, kerr.InvalidTxnState) || errors.Is(err, kerr.InvalidProducerIDMapping) ||
		errors.Is(err, kerr.TransactionalIDNotFound)) && txn.handle.Marker.Topic != "":
		// The log decides, as in recovery: committed output is never
		// reported lost. A committed one still fails the sink: its
		// client is out of step with the broker, and the restore's
		// recovery finds the transaction committed.
		if _, serr := settleByMarker(ctx, s.admin, txn.handle, s.cfg.TransactionTimeout, err, s.log); serr != nil {
			if errors.Is(serr, ErrTxnAborted) {
				s.met.aborted.Inc()
			}
			err = serr
		}
	case errors.Is(err, kerr.InvalidTxnState), errors.Is(err, kerr.InvalidProducerIDMapping), errors.Is(err, kerr.TransactionalIDNotFound):
		s.met.aborted.Inc()
		err = txnAborted(ctx, s.admin, txn.handle, s.cfg.TransactionTimeout, err)
	case errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.InvalidProducerEpoch):
		err = fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return s.fail(fmt.Errorf("commit transaction %s of checkpoint %d: %w", sl.txnID, txn.checkpoint, err))
}

// Abort is the sink's part of abort checkpoint (DESIGN.md section 5 step 9).
// The sink keeps the data: a transaction pre-committed for the aborted
// checkpoint stays pre-committed, belongs to the next checkpoint that
// completes, and is committed by its NotifyComplete. Its producer stays out
// of the pool until then, so a run of aborted checkpoints can exhaust the
// pool, and a transaction kept open longer than the transaction timeout is
// lost (reported when it is committed). Abort logs a warning when the oldest
// pre-committed transaction has used half of the timeout.
func (s *Sink) Abort(checkpoint ckpt.ID) {
	s.mu.Lock()
	pending := len(s.pending)
	var oldest time.Time
	if pending > 0 {
		oldest = s.pending[0].opened
	}
	s.mu.Unlock()
	s.log.Info("checkpoint aborted; its data stays pre-committed for the next completed checkpoint", "checkpoint", checkpoint, "pre_committed", pending)
	if age := time.Since(oldest); pending > 0 && age > s.cfg.TransactionTimeout/2 {
		s.log.Warn("a pre-committed transaction is close to its transaction timeout; it is lost if no checkpoint completes in time",
			"age", age, "transaction_timeout", s.cfg.TransactionTimeout, "setting", TransactionTimeoutKey)
	}
}

// Err returns the sink's failure, if it failed.
func (s *Sink) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// Close stops the sink. It aborts the open transaction of the current epoch
// (its records will be written again after the restore), and leaves every
// pre-committed transaction as it is: a checkpoint that recorded it may
// complete, and the next Recover commits or fences it. It waits for running
// flushes and commits, and closes every client. Close belongs to the task
// goroutine.
func (s *Sink) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()

	var err error
	if sl := s.cur; sl != nil {
		s.cur = nil
		if err = sl.cl.AbortBufferedRecords(ctx); err == nil {
			err = sl.cl.EndTransaction(ctx, kgo.TryAbort)
		}
		if err != nil {
			err = fmt.Errorf("sink: abort the open transaction %s: %w", sl.txnID, err)
		} else {
			s.met.aborted.Inc()
		}
	}
	s.stop()
	// Wait for a running NotifyComplete: taking the lock is the point.
	s.commitMu.Lock()
	//lint:ignore SA2001 the empty section waits for a running NotifyComplete
	s.commitMu.Unlock()
	s.wg.Wait()
	for _, sl := range s.slots {
		sl.cl.Close()
	}
	if s.alo != nil {
		s.alo.Close()
	}
	if s.admin != nil {
		s.admin.Close()
	}
	return err
}

// aloDone is the produce promise of at-least-once mode.
func (s *Sink) aloDone(r *kgo.Record, err error) {
	if err != nil {
		firstErr(&s.aloErr, err)
		return
	}
	s.met.records.Inc()
	s.met.bytes.Add(float64(recordBytes(r)))
}
