package sink

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrTxnNotInJob is returned by Admin for a transactional ID outside the
// job's prefix: the tools act on the job's own transactions only.
var ErrTxnNotInJob = errors.New("sink: transactional ID does not belong to the job")

// Admin lists, aborts and commits a job's Kafka transactions: the
// operator's tools for a lingering transaction, which blocks every
// read_committed consumer of the partitions it wrote to (they cannot read
// past its first record until it ends). docs/sinks.md says when each action
// is safe.
type Admin struct {
	opts   []kgo.Opt
	prefix string
	cl     *kgo.Client
	adm    *kadm.Client
	log    *slog.Logger
}

// TxnInfo describes one transactional ID of the job.
type TxnInfo struct {
	TransactionalID string `json:"transactional_id"`
	// State is the broker's: Empty, Ongoing, PrepareCommit, PrepareAbort,
	// CompleteCommit, CompleteAbort, Dead, PrepareEpochFence.
	State         string `json:"state"`
	ProducerID    int64  `json:"producer_id"`
	ProducerEpoch int16  `json:"epoch"`
	// Timeout is the transaction timeout the producer asked for.
	Timeout time.Duration `json:"timeout"`
	// Start is when the open transaction began (zero when none is open);
	// Age is how long it had been open when it was listed.
	Start time.Time     `json:"start,omitzero"`
	Age   time.Duration `json:"age,omitempty"`
	// Partitions are the partitions the open transaction wrote to.
	Partitions []TxnPartitions `json:"partitions,omitempty"`
	// Coordinator is the broker that coordinates the transaction.
	Coordinator int32 `json:"coordinator"`
}

// TxnPartitions are the partitions of one topic in a transaction.
type TxnPartitions struct {
	Topic      string  `json:"topic"`
	Partitions []int32 `json:"partitions"`
}

// Open reports whether the transaction holds records back from
// read_committed consumers.
func (i TxnInfo) Open() bool { return txnOpen(i.State) }

// Handle returns the handle that commits the transaction as it is now
// (checkpoint unknown: 0).
func (i TxnInfo) Handle() TxnHandle {
	return TxnHandle{TransactionalID: i.TransactionalID, ProducerID: i.ProducerID, ProducerEpoch: i.ProducerEpoch}
}

// NewAdmin returns the tools for the transactions whose IDs start with
// prefix (the job's transactional-ID prefix). opts are the client options
// (seed brokers, TLS, SASL).
func NewAdmin(opts []kgo.Opt, prefix string, log *slog.Logger) (*Admin, error) {
	if prefix == "" {
		return nil, errors.New("sink: transaction admin needs the job's transactional-ID prefix")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("sink: transaction admin client: %w", err)
	}
	return &Admin{opts: opts, prefix: prefix, cl: cl, adm: kadm.NewClient(cl), log: log}, nil
}

// Close closes the admin's client.
func (a *Admin) Close() { a.cl.Close() }

// ListTxns lists the job's transactional IDs, with the state and partitions
// of their transactions, sorted by ID. With openOnly, only those holding an
// open transaction (Ongoing or ending) are listed. Every broker is asked;
// on brokers before Kafka 4.1 the prefix is filtered here.
func (a *Admin) ListTxns(ctx context.Context, openOnly bool) ([]TxnInfo, error) {
	// The broker matches the whole ID (Java's Pattern.matches): hence ".*".
	listed, err := a.adm.ListTransactionsByTxPattern(ctx, nil, nil, "^"+regexp.QuoteMeta(a.prefix)+".*")
	if err != nil {
		return nil, fmt.Errorf("sink: list transactions: %w", err)
	}
	var ids []string
	for _, id := range listed.TransactionalIDs() {
		if IsTxnID(a.prefix, id) && (!openOnly || txnOpen(listed[id].State)) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	described, err := a.adm.DescribeTransactions(ctx, ids...)
	if err != nil {
		return nil, fmt.Errorf("sink: describe transactions: %w", err)
	}
	now := time.Now()
	infos := make([]TxnInfo, 0, len(described))
	for _, d := range described.Sorted() {
		if d.Err != nil {
			return nil, fmt.Errorf("sink: describe transaction %s: %w", d.TxnID, d.Err)
		}
		if openOnly && !txnOpen(d.State) {
			continue // ended between the listing and the description
		}
		infos = append(infos, txnInfo(d, now))
	}
	return infos, nil
}

// AbortTxn aborts the transaction open on the transactional ID now, with a
// raw EndTxn(abort) at the producer ID and epoch DescribeTransactions
// reports: exactly that transaction, and nothing if the ID has moved on in
// between (an error then). The abort bumps the epoch, so its producer's next
// write fails and its commit is refused. A later recovery from a checkpoint
// that recorded the transaction reports it as lost (*TxnAbortedError),
// on kfake and on Apache Kafka alike; see docs/sinks.md for when aborting is
// right. It returns the transaction as it was described.
func (a *Admin) AbortTxn(ctx context.Context, txnID string) (TxnInfo, error) {
	return a.AbortTxnIf(ctx, txnID, nil)
}

// AbortTxnIf is AbortTxn that first passes the open transaction, as the
// broker describes it, to check (if not nil), and aborts only if check
// returns nil: the abort carries the producer ID and epoch checked (on
// transactions v1 brokers, where a commit keeps the epoch, that pair names
// the slot's current transaction).
func (a *Admin) AbortTxnIf(ctx context.Context, txnID string, check func(TxnInfo) error) (TxnInfo, error) {
	if !IsTxnID(a.prefix, txnID) {
		return TxnInfo{}, fmt.Errorf("%w: %s (prefix %s)", ErrTxnNotInJob, txnID, a.prefix)
	}
	d, err := describeTxn(ctx, a.cl, txnID)
	if err != nil {
		return TxnInfo{}, err
	}
	info := txnInfo(d, time.Now())
	if d.State != "Ongoing" {
		return info, fmt.Errorf("sink: abort transaction %s: no transaction is open (state %s)", txnID, d.State)
	}
	if check != nil {
		if err := check(info); err != nil {
			return info, err
		}
	}
	if err := endTxn(ctx, a.cl, info.Handle(), false); err != nil {
		return info, fmt.Errorf("sink: abort transaction %s at producer id %d epoch %d: %w", txnID, d.ProducerID, d.ProducerEpoch, err)
	}
	a.log.Warn("aborted transaction by hand", "transactional_id", txnID, "producer_id", d.ProducerID,
		"producer_epoch", d.ProducerEpoch, "started", info.Start, "partitions", info.Partitions)
	return info, nil
}

// FenceTxn fences the transactional ID with InitProducerID, as a new
// producer of it would: whatever transaction it holds open is aborted and
// every older producer of it is fenced, without knowing its producer ID or
// epoch. The fencing producer asks for timeout (at most the brokers'
// transaction.max.timeout.ms; 0 means one minute). Unlike AbortTxn, on
// Apache Kafka the fence moves an open transaction's epoch on by two, which
// a later recovery cannot tell from a committed, reused slot: aborting a
// transaction that the newest completed checkpoint recorded this way loses
// its output silently. Prefer AbortTxn.
func (a *Admin) FenceTxn(ctx context.Context, txnID string, timeout time.Duration) error {
	return a.FenceTxnIf(ctx, txnID, timeout, nil)
}

// FenceTxnIf is FenceTxn that first passes the transaction open on the ID,
// if any, as the broker describes it, to check (if not nil), and fences only
// if check returns nil. Unlike AbortTxnIf it cannot pin what it ends to the
// transaction checked: InitProducerID ends whatever is open when it arrives.
func (a *Admin) FenceTxnIf(ctx context.Context, txnID string, timeout time.Duration, check func(TxnInfo) error) error {
	if !IsTxnID(a.prefix, txnID) {
		return fmt.Errorf("%w: %s (prefix %s)", ErrTxnNotInJob, txnID, a.prefix)
	}
	if check != nil {
		d, err := describeTxn(ctx, a.cl, txnID)
		if err != nil {
			return err
		}
		if info := txnInfo(d, time.Now()); info.Open() {
			if err := check(info); err != nil {
				return err
			}
		}
	}
	if timeout <= 0 {
		timeout = time.Minute
	}
	opts := append(slices.Clip(a.opts), kgo.TransactionalID(txnID), kgo.TransactionTimeout(timeout))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("sink: fence transactional ID %s: %w", txnID, err)
	}
	defer cl.Close()
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		return fmt.Errorf("sink: fence transactional ID %s: %w", txnID, err)
	}
	a.log.Warn("fenced transactional ID; its open transaction, if any, is aborted", "transactional_id", txnID,
		"producer_id", pid, "producer_epoch", epoch)
	return nil
}

// txnInfo converts a description, ages counted at now.
func txnInfo(d kadm.DescribedTransaction, now time.Time) TxnInfo {
	info := TxnInfo{
		TransactionalID: d.TxnID, State: d.State, ProducerID: d.ProducerID, ProducerEpoch: d.ProducerEpoch,
		Timeout: time.Duration(d.TimeoutMillis) * time.Millisecond, Coordinator: d.Coordinator,
	}
	if d.StartTimestamp > 0 && txnOpen(d.State) {
		info.Start = time.UnixMilli(d.StartTimestamp).UTC()
		info.Age = now.Sub(info.Start)
	}
	for _, tp := range d.Topics.Sorted() {
		ps := slices.Clone(tp.Partitions)
		slices.Sort(ps)
		info.Partitions = append(info.Partitions, TxnPartitions{Topic: tp.Topic, Partitions: ps})
	}
	return info
}

// CommitTxn commits the transaction h names with a raw EndTxn carrying its
// producer ID and epoch (from the checkpoint's task manifest, or from
// ListTxns for the transaction open now), as the sink's recovery does. A
// transaction already committed is not an error (before is true then: the
// ID has moved on, and whatever it holds now was not touched); one the
// broker aborted is a *TxnAbortedError. Committing a transaction that no
// completed checkpoint recorded duplicates output; see docs/sinks.md.
func (a *Admin) CommitTxn(ctx context.Context, h TxnHandle) (before bool, err error) {
	if !IsTxnID(a.prefix, h.TransactionalID) {
		return false, fmt.Errorf("%w: %s (prefix %s)", ErrTxnNotInJob, h.TransactionalID, a.prefix)
	}
	outcome, err := commitTxnHandle(ctx, a.cl, h, 0, a.log)
	if err != nil {
		return false, err
	}
	a.log.Warn("committed transaction by hand", "transactional_id", h.TransactionalID, "producer_id", h.ProducerID,
		"producer_epoch", h.ProducerEpoch, "outcome", outcome.String())
	return outcome == txnCommittedBefore, nil
}
