package kafkaio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-stream/weir/internal/retry"
)

// SinkTransactionTimeoutKey is the configuration key of the sink's
// transaction timeout. Errors name it, so that an operator knows what to
// change.
const SinkTransactionTimeoutKey = "sink.transaction_timeout"

// BrokerTransactionMaxTimeoutKey is the broker setting that caps every
// producer's transaction timeout.
const BrokerTransactionMaxTimeoutKey = "transaction.max.timeout.ms"

// SinkTxnHandle identifies one pre-committed (flushed, not yet committed)
// transaction of a two-phase-commit sink. The task stores the handles in its
// snapshot at barrier n (DESIGN.md section 5 step 6); on restore, Recover
// commits each of them with a raw EndTxn (section 6). It is JSON-serialisable
// and carries nothing but plain values.
type SinkTxnHandle struct {
	// TransactionalID is the stable ID of the pool slot that holds the
	// transaction: <prefix><stage>-<partition>-<slot>.
	TransactionalID string `json:"transactional_id"`
	// ProducerID and ProducerEpoch are what the transaction runs under,
	// as the producer reported them after the flush. An EndTxn with
	// exactly these commits it.
	ProducerID    int64 `json:"producer_id"`
	ProducerEpoch int16 `json:"epoch"`
	// Checkpoint is the barrier at which the transaction was pre-committed.
	// It holds the records of every epoch after the previous pre-commit of
	// the sink up to and including this checkpoint's.
	Checkpoint int64 `json:"checkpoint"`
}

// String formats the handle for logs and errors.
func (h SinkTxnHandle) String() string {
	return fmt.Sprintf("%s (producer id %d, epoch %d, checkpoint %d)", h.TransactionalID, h.ProducerID, h.ProducerEpoch, h.Checkpoint)
}

// Sentinel errors of the sink, for errors.Is.
var (
	// ErrSinkTxnAborted is matched by *SinkTxnAbortedError: a transaction
	// that a checkpoint recorded as pre-committed can no longer be
	// committed, and its output is lost.
	ErrSinkTxnAborted = errors.New("kafkaio: pre-committed transaction was aborted")
	// ErrSinkFenced reports that another instance of the same sink task
	// (a newer generation) took over its transactional IDs: this instance
	// is a zombie and must stop.
	ErrSinkFenced = errors.New("kafkaio: sink fenced by a newer instance of its task")
	// ErrSinkClosed is returned by a sink used after Close.
	ErrSinkClosed = errors.New("kafkaio: sink closed")
	// ErrSinkNotRecovered is returned by a sink written to before Recover.
	ErrSinkNotRecovered = errors.New("kafkaio: sink used before Recover")
	// ErrSinkFailed wraps the first failure of a sink; every later call
	// returns it. The task must fail and be restored from its last
	// completed checkpoint.
	ErrSinkFailed = errors.New("kafkaio: sink failed")
)

// SinkTxnAbortedError reports a pre-committed transaction that the broker no
// longer lets anyone commit, most often because its transaction timeout
// expired before the checkpoint that holds it was committed (an outage, or
// checkpoints that failed for longer than the timeout). The output of the
// epochs the transaction held is lost; the job must stop loudly instead of
// continuing (DESIGN.md section 6, invariant 5).
type SinkTxnAbortedError struct {
	// Checkpoint is the checkpoint whose output is lost (the barrier at
	// which the transaction was pre-committed; 0 if not known).
	Checkpoint int64
	// TransactionalID, ProducerID and ProducerEpoch identify the
	// transaction.
	TransactionalID string
	ProducerID      int64
	ProducerEpoch   int16
	// Setting is the configuration key to raise (SinkTransactionTimeoutKey)
	// and TransactionTimeout its value when the transaction ran (0 if not
	// known).
	Setting            string
	TransactionTimeout time.Duration
	// BrokerState is the state DescribeTransactions reported for the
	// transactional ID afterwards ("" if it could not be described).
	BrokerState string
	// Err is the broker's answer to the commit.
	Err error
	// ByClient is set when the Kafka client, not the broker, aborted the
	// transaction it was asked to commit (txnwatch.go): no setting helps.
	ByClient bool
}

// Error says what was lost and what to change.
func (e *SinkTxnAbortedError) Error() string {
	what := "the output of checkpoint " + strconv.FormatInt(e.Checkpoint, 10)
	if e.Checkpoint == 0 {
		what = "its output"
	}
	state := ""
	if e.BrokerState != "" {
		state = ", broker state " + e.BrokerState
	}
	if e.ByClient {
		return fmt.Sprintf("kafkaio: transaction %s (producer id %d, epoch %d) was not committed, %s is lost: "+
			"the Kafka client aborted it when asked to commit it (%v%s); this is a defect of the client, not a setting",
			e.TransactionalID, e.ProducerID, e.ProducerEpoch, what, e.Err, state)
	}
	timeout := ""
	if e.TransactionTimeout > 0 {
		timeout = " (" + e.TransactionTimeout.String() + ")"
	}
	return fmt.Sprintf("kafkaio: transaction %s (producer id %d, epoch %d) cannot be committed, %s is lost: the broker aborted it (%v%s), "+
		"most likely because its transaction timeout%s expired before the checkpoint was committed (or someone aborted it by hand); "+
		"raise %s (within the brokers' %s) so that it outlasts an outage, or keep checkpoints from failing for that long",
		e.TransactionalID, e.ProducerID, e.ProducerEpoch, what, e.Err, state, timeout, e.Setting, BrokerTransactionMaxTimeoutKey)
}

// Unwrap returns the broker's error.
func (e *SinkTxnAbortedError) Unwrap() error { return e.Err }

// Is matches ErrSinkTxnAborted.
func (e *SinkTxnAbortedError) Is(target error) bool { return target == ErrSinkTxnAborted }

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
// How the broker's answer is read (verified on kfake and Apache Kafka 4.x,
// transactions v2, whose EndTxn bumps the epoch):
//
//   - success: committed now, or the retry of a commit at this epoch;
//   - CONCURRENT_TRANSACTIONS and other retriable codes: the previous
//     commit or abort is still writing markers; retried;
//   - INVALID_TXN_STATE: the transaction ended with an abort (the broker's
//     timeout abort bumps the epoch by one, so our EndTxn is taken as a retry
//     of the wrong kind): lost, *SinkTxnAbortedError;
//   - PRODUCER_FENCED / INVALID_PRODUCER_EPOCH: the ID is past this epoch
//     (more than one bump). The sink never fences or reuses a slot while
//     its transaction is pre-committed, so it was committed and then reused,
//     unless DescribeTransactions shows an abort at exactly epoch+1 (the
//     timeout fence of transactions v1 brokers): then lost;
//   - INVALID_PRODUCER_ID_MAPPING / TRANSACTIONAL_ID_NOT_FOUND: the broker
//     forgot the ID (transactional.id.expiration.ms); the outcome cannot be
//     proven, so it is reported as lost, loudly.
func commitTxnHandle(ctx context.Context, cl *kgo.Client, h SinkTxnHandle, timeout time.Duration, log *slog.Logger) (txnCommitOutcome, error) {
	err := endTxn(ctx, cl, h, true)
	if _, ok := errors.AsType[*kerr.Error](err); err != nil && !ok {
		return 0, fmt.Errorf("kafkaio: EndTxn(commit) of %s: %w", h, err)
	}
	switch {
	case err == nil:
		return txnCommitted, nil
	case errors.Is(err, kerr.InvalidTxnState),
		errors.Is(err, kerr.InvalidProducerIDMapping),
		errors.Is(err, kerr.TransactionalIDNotFound):
		return 0, txnAborted(ctx, cl, h, timeout, err)
	case errors.Is(err, kerr.ProducerFenced), errors.Is(err, kerr.InvalidProducerEpoch):
		d, derr := describeTxn(ctx, cl, h.TransactionalID)
		if derr == nil && d.ProducerID == h.ProducerID && d.ProducerEpoch == h.ProducerEpoch+1 &&
			(d.State == "CompleteAbort" || d.State == "PrepareAbort") {
			return 0, &SinkTxnAbortedError{
				Checkpoint: h.Checkpoint, TransactionalID: h.TransactionalID,
				ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
				Setting: SinkTransactionTimeoutKey, TransactionTimeout: timeout,
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
	default:
		return 0, fmt.Errorf("kafkaio: EndTxn(commit) of %s: %w", h, err)
	}
}

// endTxn sends a raw EndTxn for the transaction h names, retrying while the
// broker answers CONCURRENT_TRANSACTIONS (markers of the previous end still
// being written) or a retriable error. It returns the broker's error as a
// *kerr.Error, or a request error.
func endTxn(ctx context.Context, cl *kgo.Client, h SinkTxnHandle, commit bool) error {
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
func txnAborted(ctx context.Context, cl *kgo.Client, h SinkTxnHandle, timeout time.Duration, cause error) *SinkTxnAbortedError {
	e := &SinkTxnAbortedError{
		Checkpoint: h.Checkpoint, TransactionalID: h.TransactionalID,
		ProducerID: h.ProducerID, ProducerEpoch: h.ProducerEpoch,
		Setting: SinkTransactionTimeoutKey, TransactionTimeout: timeout, Err: cause,
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
		return kadm.DescribedTransaction{}, fmt.Errorf("kafkaio: describe transaction %s: %w", id, err)
	}
	d, ok := ds[id]
	if !ok {
		return kadm.DescribedTransaction{}, fmt.Errorf("kafkaio: describe transaction %s: not in the answer", id)
	}
	if d.Err != nil {
		return d, fmt.Errorf("kafkaio: describe transaction %s: %w", id, d.Err)
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
