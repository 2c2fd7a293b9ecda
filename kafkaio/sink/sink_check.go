package sink

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// ErrTimeoutConfig is wrapped by every problem CheckTimeouts finds.
var ErrTimeoutConfig = errors.New("sink: transaction timeout does not fit")

// RecoveryAllowance is the time Timeouts reserves for a replica to
// fail, be replaced and recover its sinks, on top of the checkpoint's own
// duration. It is a floor, not a promise: the longer the transaction timeout,
// the longer an outage the job survives without losing output.
const RecoveryAllowance = time.Minute

// Timeouts are the settings that decide how long a sink transaction must
// be able to stay open.
//
// A transaction opens with the first record of epoch n, at most one interval
// before barrier n; it is committed when checkpoint n completes, at most
// checkpoint.timeout after the barrier. If checkpoint n fails, the
// transaction stays pre-committed until the next checkpoint completes, one
// more interval later. If the replica dies just before the commit, its
// replacement commits it on recovery. Hence the least timeout:
//
//	2 × checkpoint.interval + checkpoint.timeout + RecoveryAllowance
type Timeouts struct {
	// TransactionTimeout is sink.transaction_timeout.
	TransactionTimeout time.Duration
	// CheckpointInterval is checkpoint.interval.
	CheckpointInterval time.Duration
	// CheckpointTimeout is checkpoint.timeout; 0 counts as one interval.
	CheckpointTimeout time.Duration
}

// MinTransactionTimeout returns the least transaction timeout the checkpoint
// settings allow.
func (t Timeouts) MinTransactionTimeout() time.Duration {
	ct := t.CheckpointTimeout
	if ct <= 0 {
		ct = t.CheckpointInterval
	}
	return 2*t.CheckpointInterval + ct + RecoveryAllowance
}

// Validate checks the transaction timeout against the checkpoint settings,
// without asking a broker.
func (t Timeouts) Validate() error {
	if t.TransactionTimeout <= 0 {
		return fmt.Errorf("%w: %s %v must be positive", ErrTimeoutConfig, TransactionTimeoutKey, t.TransactionTimeout)
	}
	if need := t.MinTransactionTimeout(); t.TransactionTimeout < need {
		return fmt.Errorf("%w: %s %v is too short for checkpoint.interval %v and checkpoint.timeout %v: "+
			"a pre-committed transaction must outlive 2 × checkpoint.interval + checkpoint.timeout + %v for recovery = %v; "+
			"raise %s to at least %v (within the brokers' %s), or lower checkpoint.interval or checkpoint.timeout",
			ErrTimeoutConfig, TransactionTimeoutKey, t.TransactionTimeout, t.CheckpointInterval, t.checkpointTimeout(),
			RecoveryAllowance, need, TransactionTimeoutKey, need, BrokerTransactionMaxTimeoutKey)
	}
	return nil
}

func (t Timeouts) checkpointTimeout() time.Duration {
	if t.CheckpointTimeout <= 0 {
		return t.CheckpointInterval
	}
	return t.CheckpointTimeout
}

// CheckTimeouts is the processor's start-time check of the sink
// transaction timeout (DESIGN.md section 8): it must fit under every
// broker's transaction.max.timeout.ms (a producer asking for more is refused
// by the broker) and exceed the checkpoint interval with margin
// (Timeouts). It reports every problem, each saying what to change.
// Call it once per processor, before the sinks recover.
func CheckTimeouts(ctx context.Context, adm *kadm.Client, t Timeouts) error {
	var errs []error
	if err := t.Validate(); err != nil {
		errs = append(errs, err)
	}
	brokerMax, err := brokerTransactionMaxTimeout(ctx, adm)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("sink: check %s against the brokers: %w", TransactionTimeoutKey, err))...)
	}
	if t.TransactionTimeout > brokerMax {
		errs = append(errs, fmt.Errorf("%w: %s %v exceeds the brokers' %s %d (%v): lower %s to at most %v, or raise %s on every broker",
			ErrTimeoutConfig, TransactionTimeoutKey, t.TransactionTimeout, BrokerTransactionMaxTimeoutKey,
			brokerMax.Milliseconds(), brokerMax, TransactionTimeoutKey, brokerMax, BrokerTransactionMaxTimeoutKey))
	}
	if need := t.MinTransactionTimeout(); need > brokerMax {
		errs = append(errs, fmt.Errorf("%w: the checkpoint settings need a transaction timeout of at least %v, more than the brokers' %s %d (%v) allows: "+
			"raise %s on every broker to at least %d, or lower checkpoint.interval or checkpoint.timeout",
			ErrTimeoutConfig, need, BrokerTransactionMaxTimeoutKey, brokerMax.Milliseconds(), brokerMax,
			BrokerTransactionMaxTimeoutKey, need.Milliseconds()))
	}
	return errors.Join(errs...)
}

// brokerTransactionMaxTimeout returns the least transaction.max.timeout.ms
// of the cluster's brokers: a transaction's coordinator can be any of them.
func brokerTransactionMaxTimeout(ctx context.Context, adm *kadm.Client) (time.Duration, error) {
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return 0, fmt.Errorf("broker metadata: %w", err)
	}
	rcs, err := adm.DescribeBrokerConfigs(ctx, md.Brokers.NodeIDs()...)
	if err != nil {
		return 0, fmt.Errorf("describe broker configs: %w", err)
	}
	least := time.Duration(-1)
	for _, rc := range rcs {
		if rc.Err != nil {
			return 0, fmt.Errorf("describe the configs of broker %s: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key != BrokerTransactionMaxTimeoutKey || c.Value == nil {
				continue
			}
			ms, err := strconv.ParseInt(*c.Value, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("broker %s reports %s %q: %w", rc.Name, c.Key, *c.Value, err)
			}
			if d := time.Duration(ms) * time.Millisecond; least < 0 || d < least {
				least = d
			}
		}
	}
	if least < 0 {
		return 0, fmt.Errorf("no broker reports %s", BrokerTransactionMaxTimeoutKey)
	}
	return least, nil
}
