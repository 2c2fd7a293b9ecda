package sink

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/retry"
)

// TransactionTimeoutKey is the configuration key of the sink's
// transaction timeout. Errors name it, so that an operator knows what to
// change.
const TransactionTimeoutKey = "sink.transaction_timeout"

// BrokerTransactionMaxTimeoutKey is the broker setting that caps every
// producer's transaction timeout.
const BrokerTransactionMaxTimeoutKey = "transaction.max.timeout.ms"

// TxnHandle identifies one pre-committed (flushed, not yet committed)
// transaction of a two-phase-commit sink. The task stores the handles in its
// snapshot at barrier n (DESIGN.md section 5 step 6); on restore, Recover
// commits each of them with a raw EndTxn (section 6). It is JSON-serialisable
// and carries nothing but plain values.
//
// Encoding versions: 1 (no "v" key, written before version 2) records the
// producer ID and epoch only; 2 adds Marker and BeganMillis. A
// version-1 handle still decodes and recovers as before; a handle of a
// version this build does not know is refused when decoded.
type TxnHandle struct {
	// Version is the encoding version (TxnHandleVersion when written
	// by this build; 0 for a version-1 handle).
	Version int `json:"v,omitempty"`
	// TransactionalID is the stable ID of the pool slot that holds the
	// transaction: <prefix><pool>-<partition>-<slot> (TxnID, PoolName).
	TransactionalID string `json:"transactional_id"`
	// ProducerID and ProducerEpoch are what the transaction runs under,
	// as the producer reported them after the flush. An EndTxn with
	// exactly these commits it.
	ProducerID    int64 `json:"producer_id"`
	ProducerEpoch int16 `json:"epoch"`
	// Checkpoint is the barrier at which the transaction was pre-committed.
	// It holds the records of every epoch after the previous pre-commit of
	// the sink up to and including this checkpoint's.
	Checkpoint ckpt.ID `json:"checkpoint"`
	// Marker is one record of the transaction where the broker stored it
	// (version 2). A transaction commits or aborts as a whole, so whether
	// this record is visible to read_committed readers is whether the
	// transaction was committed: recovery reads it when the transaction
	// coordinator can no longer tell (the ID rotated to a new producer ID,
	// or was forgotten).
	Marker TxnMarker `json:"marker,omitzero"`
	// BeganMillis is when the transaction began, in Unix milliseconds
	// (version 2): a transaction found aborted more than its timeout later
	// was most likely aborted by the timeout.
	BeganMillis int64 `json:"began_ms,omitempty"`
}

// TxnMarker is where one record of a transaction landed.
type TxnMarker struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// TxnHandleVersion is the handle encoding this build writes.
const TxnHandleVersion = 2

// UnmarshalJSON decodes a handle of any known version and refuses a newer
// one, which an older build would recover wrongly.
func (h *TxnHandle) UnmarshalJSON(b []byte) error {
	type plain TxnHandle
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	if p.Version < 0 || p.Version > TxnHandleVersion {
		return fmt.Errorf("sink: transaction handle of version %d, this build reads versions up to %d: recover with a newer build", p.Version, TxnHandleVersion)
	}
	*h = TxnHandle(p)
	return nil
}

// String formats the handle for logs and errors.
func (h TxnHandle) String() string {
	return fmt.Sprintf("%s (producer id %d, epoch %d, checkpoint %d)", h.TransactionalID, h.ProducerID, h.ProducerEpoch, h.Checkpoint)
}

// Sentinel errors of the sink, for errors.Is.
var (
	// ErrTxnAborted is matched by *TxnAbortedError: a transaction
	// that a checkpoint recorded as pre-committed can no longer be
	// committed, and its output is lost.
	ErrTxnAborted = errors.New("sink: pre-committed transaction was aborted")
	// ErrFenced reports that another instance of the same sink task
	// (a newer generation) took over its transactional IDs: this instance
	// is a zombie and must stop.
	ErrFenced = errors.New("sink: fenced by a newer instance of its task")
	// ErrClosed is returned by a sink used after Close.
	ErrClosed = errors.New("sink: closed")
	// ErrNotRecovered is returned by a sink written to before Recover.
	ErrNotRecovered = errors.New("sink: used before Recover")
	// ErrFailed wraps the first failure of a sink; every later call
	// returns it. The task must fail and be restored from its last
	// completed checkpoint.
	ErrFailed = errors.New("sink: failed")
)

// TxnLossCause says why a pre-committed transaction is lost, as far as
// recovery could find out.
type TxnLossCause int

const (
	// LossBrokerAborted: the broker ended the transaction with an abort;
	// the handle (version 1) carries nothing to tell why.
	LossBrokerAborted TxnLossCause = iota
	// LossTimeout: the log shows the transaction aborted, and its
	// transaction timeout had expired by the time recovery looked.
	LossTimeout
	// LossAbortedOther: the log shows the transaction aborted before its
	// timeout could expire: someone else ended it (an operator's
	// "processor transactions abort", or another producer initialising
	// the same transactional ID).
	LossAbortedOther
	// LossByClient: the Kafka client aborted the transaction it was asked
	// to commit (internal/txnwatch).
	LossByClient
	// LossUnprovable: neither the transaction coordinator nor the log can
	// tell whether the transaction was committed (the coordinator forgot
	// the producer ID, and the handle has no marker or its record is gone).
	LossUnprovable
)

// TxnAbortedError reports a pre-committed transaction that the broker no
// longer lets anyone commit and that recovery could not find committed: most
// often its transaction timeout expired before the checkpoint that holds it
// was committed (an outage, or checkpoints that failed for longer than the
// timeout). The output of the epochs the transaction held is lost (or, with
// LossUnprovable, cannot be proven to be there); the job must stop loudly
// instead of continuing (DESIGN.md section 6, invariant 5).
type TxnAbortedError struct {
	// Checkpoint is the checkpoint whose output is lost (the barrier at
	// which the transaction was pre-committed; 0 if not known).
	Checkpoint ckpt.ID
	// TransactionalID, ProducerID and ProducerEpoch identify the
	// transaction.
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	// Setting is the configuration key to raise (TransactionTimeoutKey)
	// and TransactionTimeout its value when the transaction ran (0 if not
	// known).
	Setting            string
	TransactionTimeout time.Duration
	// BrokerState is the state DescribeTransactions reported for the
	// transactional ID afterwards ("" if it could not be described).
	BrokerState string
	// Cause is why the output is lost; Detail says what the log showed
	// ("" if it was not read).
	Cause  TxnLossCause
	Detail string
	// Age is how long before recovery looked the transaction began (0 if
	// the handle does not record it).
	Age time.Duration
	// Err is the broker's answer to the commit.
	Err error
}

// Error says what was lost, why, and what to change.
func (e *TxnAbortedError) Error() string {
	what := "the output of checkpoint " + e.Checkpoint.String()
	if e.Checkpoint == 0 {
		what = "its output"
	}
	state := ""
	if e.BrokerState != "" {
		state = ", broker state " + e.BrokerState
	}
	detail := ""
	if e.Detail != "" {
		detail = "; " + e.Detail
	}
	timeout := ""
	if e.TransactionTimeout > 0 {
		timeout = " (" + e.TransactionTimeout.String() + ")"
	}
	id := fmt.Sprintf("sink: transaction %s (producer id %d, epoch %d)", e.TransactionalID, e.ProducerID, e.ProducerEpoch)
	switch e.Cause {
	case LossByClient:
		return fmt.Sprintf("%s was not committed, %s is lost: "+
			"the Kafka client aborted it when asked to commit it (%v%s); this is a defect of the client, not a setting",
			id, what, e.Err, state)
	case LossTimeout:
		return fmt.Sprintf("%s cannot be committed, %s is lost: the broker aborted it because its transaction timeout%s expired "+
			"(it began %v before it was found aborted; %v%s%s); raise %s (within the brokers' %s) so that it outlasts an outage, "+
			"or keep checkpoints from failing for that long",
			id, what, timeout, e.Age.Round(time.Second), e.Err, state, detail, e.Setting, BrokerTransactionMaxTimeoutKey)
	case LossAbortedOther:
		return fmt.Sprintf("%s cannot be committed, %s is lost: it was aborted %v after it began, before its transaction timeout%s "+
			"could expire, so not by the timeout: someone ended it (an operator's \"processor transactions abort\", or another "+
			"producer initialising the same transactional ID: two jobs sharing a transactional ID prefix?) (%v%s%s); no setting helps",
			id, what, e.Age.Round(time.Second), timeout, e.Err, state, detail)
	case LossUnprovable:
		return fmt.Sprintf("%s cannot be committed, and whether %s was committed cannot be proven (%v%s%s); "+
			"the job stops rather than risk losing or duplicating output: check the output topic, then resume from a "+
			"savepoint or reset the job (docs/sinks.md, Recovery)",
			id, what, e.Err, state, detail)
	}
	return fmt.Sprintf("%s cannot be committed, %s is lost: the broker aborted it (%v%s%s), "+
		"most likely because its transaction timeout%s expired before the checkpoint was committed (or someone aborted it by hand); "+
		"raise %s (within the brokers' %s) so that it outlasts an outage, or keep checkpoints from failing for that long",
		id, what, e.Err, state, detail, timeout, e.Setting, BrokerTransactionMaxTimeoutKey)
}

// Unwrap returns the broker's error.
func (e *TxnAbortedError) Unwrap() error { return e.Err }

// Is matches ErrTxnAborted.
func (e *TxnAbortedError) Is(target error) bool { return target == ErrTxnAborted }

// txnCommitOutcome says how a raw commit of a handle ended.
type txnCommitOutcome int

const (
	// txnCommitted: EndTxn(commit) answered success: the transaction is
	// committed now, or was committed by an earlier EndTxn at the same
	// epoch (the broker recognises the retry).
	txnCommitted txnCommitOutcome = iota
	// txnCommittedBefore: the transactional ID has moved past the
	// transaction's epoch since it was committed (the slot was reused or
	// fenced after the commit); see commitTxnHandle.
	txnCommittedBefore
)

func (o txnCommitOutcome) String() string {
	if o == txnCommitted {
		return "committed"
	}
	return "committed before"
}

// commitTxnHandle commits the transaction h names with a raw EndTxn(commit)
// carrying its stored producer ID and epoch, as another client than the one
// that wrote it: no InitProducerID is sent, since that would abort it.
//
// How the broker's answer is read (verified on kfake and Apache Kafka 4.4,
// transactions v2, whose EndTxn bumps the epoch and, at epoch 32766, moves
// the ID to a new producer ID at epoch 0; docs/sinks.md, Recovery):
//
//   - success: committed now, or the retry of a commit at this epoch (also
//     right after a rotation: the coordinator still knows the previous
//     producer ID until the ID's next InitProducerID);
//   - CONCURRENT_TRANSACTIONS and other retriable codes: the previous
//     commit or abort is still writing markers; retried;
//   - INVALID_TXN_STATE, PRODUCER_FENCED, INVALID_PRODUCER_EPOCH,
//     INVALID_PRODUCER_ID_MAPPING, TRANSACTIONAL_ID_NOT_FOUND: the ID has
//     moved on (committed and reused, aborted, rotated to a new producer
//     ID, or forgotten), and the coordinator cannot say how the
//     transaction ended. A version-2 handle names one record of the
//     transaction (its marker); the log decides (settleByMarker):
//     visible to read_committed readers is committed, aborted is lost. A
//     version-1 handle is judged from the coordinator alone
//     (settleByCoordinator).
func commitTxnHandle(ctx context.Context, cl *kgo.Client, h TxnHandle, timeout time.Duration, log *slog.Logger) (txnCommitOutcome, error) {
	err := endTxn(ctx, cl, h, true)
	if _, ok := errors.AsType[*kerr.Error](err); err != nil && !ok {
		return 0, fmt.Errorf("sink: EndTxn(commit) of %s: %w", h, err)
	}
	switch {
	case err == nil:
		return txnCommitted, nil
	case !txnMovedOn(err):
		return 0, fmt.Errorf("sink: EndTxn(commit) of %s: %w", h, err)
	case h.Marker.Topic != "":
		return settleByMarker(ctx, cl, h, timeout, err, log)
	default:
		return settleByCoordinator(ctx, cl, h, timeout, err, log)
	}
}

// txnMovedOn reports whether err is an answer to EndTxn that says the
// transactional ID is no longer at the handle's transaction.
func txnMovedOn(err error) bool {
	return errors.Is(err, kerr.InvalidTxnState) || errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerEpoch) || errors.Is(err, kerr.InvalidProducerIDMapping) ||
		errors.Is(err, kerr.TransactionalIDNotFound)
}

// settleByCoordinator decides a version-1 handle (no marker) from the
// broker's answer and DescribeTransactions:
//
//   - INVALID_TXN_STATE: the transaction ended with an abort (the broker's
//     timeout abort bumps the epoch by one, so our EndTxn is taken as a
//     retry of the wrong kind): lost;
//   - PRODUCER_FENCED / INVALID_PRODUCER_EPOCH: the ID is past this epoch
//     (more than one bump). The sink never fences or reuses a slot while
//     its transaction is pre-committed, so it was committed and then reused,
//     unless DescribeTransactions shows an abort at exactly epoch+1 (the
//     timeout fence of transactions v1 brokers): then lost;
//   - INVALID_PRODUCER_ID_MAPPING / TRANSACTIONAL_ID_NOT_FOUND: the ID
//     rotated to a new producer ID, or the broker forgot it
//     (transactional.id.expiration.ms); the outcome cannot be proven, so
//     the job stops loudly, saying so (LossUnprovable).
func settleByCoordinator(ctx context.Context, cl *kgo.Client, h TxnHandle, timeout time.Duration, err error, log *slog.Logger) (txnCommitOutcome, error) {
	switch {
	case errors.Is(err, kerr.InvalidTxnState):
		return 0, txnAborted(ctx, cl, h, timeout, err)
	case errors.Is(err, kerr.InvalidProducerIDMapping), errors.Is(err, kerr.TransactionalIDNotFound):
		e := txnAborted(ctx, cl, h, timeout, err)
		e.Cause = LossUnprovable
		e.Detail = "the transaction coordinator no longer maps the transactional ID to this producer ID (it rotated to a new " +
			"producer ID after epoch 32766, or expired after transactional.id.expiration.ms), and the handle, written by " +
			"an older build, names no record of the transaction to look up in the log"
		return 0, e
	}
	d, derr := describeTxn(ctx, cl, h.TransactionalID)
	if derr == nil && d.ProducerID == h.ProducerID && d.ProducerEpoch == h.ProducerEpoch+1 &&
		(d.State == "CompleteAbort" || d.State == "PrepareAbort") {
		return 0, &TxnAbortedError{
			Checkpoint: h.Checkpoint, TransactionalID: h.TransactionalID,
			ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
			Setting: TransactionTimeoutKey, TransactionTimeout: timeout,
			BrokerState: d.State, Err: err,
		}
	}
	state := "unknown"
	if derr == nil {
		state = fmt.Sprintf("%s at producer id %d epoch %d", d.State, d.ProducerID, d.ProducerEpoch)
	}
	log.Info("transaction was committed before; its transactional ID has moved on since",
		"transactional_id", h.TransactionalID, "producer_id", h.ProducerID, "producer_epoch", h.ProducerEpoch,
		"checkpoint", h.Checkpoint, "broker_state", state, "broker_answer", err)
	return txnCommittedBefore, nil
}

// settleByMarker decides a handle whose transactional ID has moved on from
// its marker record, err being the broker's answer to the commit. While the
// marker is above the partition's last stable offset the transaction (or an
// older one on the partition) is still being ended: it waits, and gives up
// with an error that is not a loss, to be retried by the caller.
func settleByMarker(ctx context.Context, cl *kgo.Client, h TxnHandle, timeout time.Duration, err error, log *slog.Logger) (txnCommitOutcome, error) {
	backoff := 50 * time.Millisecond
	deadline := time.Now().Add(markerOpenWait)
	for {
		st, detail, rerr := readMarker(ctx, cl, h)
		if rerr != nil {
			return 0, fmt.Errorf("sink: %s cannot be committed (%w); look up its record %s: %w", h, err, h.Marker, rerr)
		}
		switch st {
		case markerCommitted:
			log.Info("transaction was committed before: its record is visible to read_committed readers; its transactional ID has moved on since",
				"transactional_id", h.TransactionalID, "producer_id", h.ProducerID, "producer_epoch", h.ProducerEpoch,
				"checkpoint", h.Checkpoint, "marker", h.Marker.String(), "broker_answer", err)
			return txnCommittedBefore, nil
		case markerAborted:
			e := txnAborted(ctx, cl, h, timeout, err)
			e.Detail = detail
			if h.BeganMillis > 0 && e.TransactionTimeout > 0 {
				// The broker's timer starts with the transaction's first
				// partition, after BeganMillis: before BeganMillis+timeout
				// it cannot have fired.
				e.Age = time.Since(time.UnixMilli(h.BeganMillis))
				e.Cause = LossAbortedOther
				if e.Age >= e.TransactionTimeout {
					e.Cause = LossTimeout
				}
			}
			return 0, e
		case markerUnknown:
			e := txnAborted(ctx, cl, h, timeout, err)
			e.Cause = LossUnprovable
			e.Detail = detail
			return 0, e
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("sink: %s cannot be committed (%w), and its record %s is still above the last stable offset "+
				"(%s) after %v: a transaction on the partition is still open; will retry", h, err, h.Marker, detail, markerOpenWait)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("sink: %s: waiting for its record %s to become stable: %w", h, h.Marker, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// markerOpenWait bounds how long settleByMarker waits for a marker that is
// not stable yet before it returns an error for the caller to retry.
const markerOpenWait = 15 * time.Second

// String formats the marker for logs and errors.
func (m TxnMarker) String() string {
	return m.Topic + "/" + strconv.Itoa(int(m.Partition)) + "@" + strconv.FormatInt(m.Offset, 10)
}

// markerState is what the log says about a transaction's marker record.
type markerState int

const (
	markerCommitted markerState = iota // below the last stable offset, not aborted
	markerAborted                      // in an aborted transaction of the handle's producer ID
	markerOpen                         // at or above the last stable offset: not decided yet
	markerUnknown                      // the record is gone or is not the transaction's
)

// readMarker reads the batch holding h's marker record with a
// read_committed Fetch from the partition's leader, as a consumer would, and
// says whether the transaction is committed: a record below the last stable
// offset is committed unless the fetch lists an aborted transaction of its
// producer ID that starts at or before it (the broker lists every aborted
// transaction that ends at or after the fetch offset). The batch must be
// the handle's producer ID and epoch, and transactional; anything else
// (deleted by retention, compacted away, a recreated topic) is
// markerUnknown. detail says what was read, for errors.
func readMarker(ctx context.Context, cl *kgo.Client, h TxnHandle) (markerState, string, error) {
	m := h.Marker
	tds, err := kadm.NewClient(cl).ListTopics(ctx, m.Topic)
	if err != nil {
		return 0, "", err
	}
	td, ok := tds[m.Topic]
	if !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		return markerUnknown, fmt.Sprintf("topic %s of its record %s no longer exists", m.Topic, m), nil
	}
	if td.Err != nil {
		return 0, "", td.Err
	}
	pd, ok := td.Partitions[m.Partition]
	if !ok {
		return markerUnknown, fmt.Sprintf("partition of its record %s no longer exists", m), nil
	}
	if pd.Err != nil && !errors.Is(pd.Err, kerr.ReplicaNotAvailable) {
		return 0, "", pd.Err
	}
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID = -1
	req.MaxWaitMillis = 0
	req.MinBytes = 0
	req.MaxBytes = 1 << 20
	req.IsolationLevel = 1 // read_committed
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic, rt.TopicID = m.Topic, td.ID
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition = m.Partition
	rp.FetchOffset = m.Offset
	rp.CurrentLeaderEpoch = -1
	rp.LogStartOffset = -1
	rp.PartitionMaxBytes = 1 << 20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl.Broker(int(pd.Leader)))
	if err != nil {
		return 0, "", err
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return 0, "", err
	}
	if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
		return 0, "", fmt.Errorf("fetch of %s: answer for %d topics", m, len(resp.Topics))
	}
	sp := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(sp.ErrorCode); err != nil {
		if errors.Is(err, kerr.OffsetOutOfRange) {
			return markerUnknown, fmt.Sprintf("its record %s is outside the partition's log (start %d, end %d): deleted by retention, or the partition was truncated",
				m, sp.LogStartOffset, sp.HighWatermark), nil
		}
		return 0, "", err
	}
	if m.Offset >= sp.LastStableOffset {
		return markerOpen, fmt.Sprintf("last stable offset %d", sp.LastStableOffset), nil
	}
	for b := sp.RecordBatches; len(b) >= 12; {
		n := 12 + int(int32(binary.BigEndian.Uint32(b[8:12])))
		if n < 12 || n > len(b) {
			break
		}
		var rb kmsg.RecordBatch
		if err := rb.ReadFrom(b[:n]); err != nil || rb.Magic != 2 {
			break
		}
		b = b[n:]
		if m.Offset > rb.FirstOffset+int64(rb.LastOffsetDelta) {
			continue
		}
		if m.Offset < rb.FirstOffset {
			break
		}
		if rb.ProducerID != h.ProducerID || rb.ProducerEpoch != h.ProducerEpoch || rb.Attributes&0x10 == 0 {
			return markerUnknown, fmt.Sprintf("its record %s is in a batch of producer id %d epoch %d (transactional %t), not of the transaction",
				m, rb.ProducerID, rb.ProducerEpoch, rb.Attributes&0x10 != 0), nil
		}
		for _, a := range sp.AbortedTransactions {
			if a.ProducerID == h.ProducerID && a.FirstOffset <= m.Offset {
				return markerAborted, fmt.Sprintf("its record %s is in an aborted transaction (from offset %d) in the log", m, a.FirstOffset), nil
			}
		}
		return markerCommitted, "", nil
	}
	return markerUnknown, fmt.Sprintf("its record %s is no longer in the log (compacted away?)", m), nil
}

// endTxn sends a raw EndTxn for the transaction h names, retrying while the
// broker answers CONCURRENT_TRANSACTIONS (markers of the previous end still
// being written) or a retriable error. It returns the broker's error as a
// *kerr.Error, or a request error.
func endTxn(ctx context.Context, cl *kgo.Client, h TxnHandle, commit bool) error {
	policy := retry.Policy{Initial: 20 * time.Millisecond, Max: time.Second}
	var answer error // the broker's last answer
	err := policy.Do(ctx, func() error {
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID = h.TransactionalID
		req.ProducerID = h.ProducerID
		req.ProducerEpoch = h.ProducerEpoch
		req.Commit = commit
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			answer = nil
			return retry.Permanent(err)
		}
		answer = kerr.ErrorForCode(resp.ErrorCode)
		if answer == nil || !(kerr.IsRetriable(answer) || errors.Is(answer, kerr.ConcurrentTransactions)) {
			return retry.Permanent(answer)
		}
		return answer
	}, nil)
	if err != nil && answer != nil && ctx.Err() != nil && !errors.Is(err, answer) {
		return fmt.Errorf("%w (last broker answer: %w)", ctx.Err(), answer)
	}
	return err
}

// txnAborted builds the error for a transaction that the broker ended with an
// abort, with the state it describes now.
func txnAborted(ctx context.Context, cl *kgo.Client, h TxnHandle, timeout time.Duration, cause error) *TxnAbortedError {
	e := &TxnAbortedError{
		Checkpoint: h.Checkpoint, TransactionalID: h.TransactionalID,
		ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
		Setting: TransactionTimeoutKey, TransactionTimeout: timeout, Err: cause,
	}
	if d, err := describeTxn(ctx, cl, h.TransactionalID); err == nil {
		e.BrokerState = fmt.Sprintf("%s at producer id %d epoch %d", d.State, d.ProducerID, d.ProducerEpoch)
		if d.TimeoutMillis > 0 && d.ProducerID == h.ProducerID {
			// The timeout the producer of the transaction asked
			// for, as the broker recorded it.
			e.TransactionTimeout = time.Duration(d.TimeoutMillis) * time.Millisecond
		}
	}
	return e
}

// describeTxn describes one transactional ID.
func describeTxn(ctx context.Context, cl *kgo.Client, id string) (kadm.DescribedTransaction, error) {
	ds, err := kadm.NewClient(cl).DescribeTransactions(ctx, id)
	if err != nil {
		return kadm.DescribedTransaction{}, fmt.Errorf("sink: describe transaction %s: %w", id, err)
	}
	d, ok := ds[id]
	if !ok {
		return kadm.DescribedTransaction{}, fmt.Errorf("sink: describe transaction %s: not in the answer", id)
	}
	if d.Err != nil {
		return d, fmt.Errorf("sink: describe transaction %s: %w", id, d.Err)
	}
	return d, nil
}

// txnOpen reports whether a described transaction state holds records that a
// read_committed consumer cannot pass yet.
func txnOpen(state string) bool {
	switch state {
	case "Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence":
		return true
	}
	return false
}
