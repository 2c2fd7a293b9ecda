package sink_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// initProducerID sends one raw InitProducerID for id (pid -1 and epoch -1:
// no KIP-360 check), retrying while the broker says to, and returns the
// producer ID and epoch the broker handed out. Every call bumps the epoch;
// at epoch 32766 Apache Kafka and kfake move the ID to a new producer ID.
func initProducerID(ctx context.Context, cl *kgo.Client, id string) (int64, int16, error) {
	for {
		req := kmsg.NewPtrInitProducerIDRequest()
		req.TransactionalID = &id
		req.TransactionTimeoutMillis = 60_000
		req.ProducerID, req.ProducerEpoch = -1, -1
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return 0, 0, err
		}
		err = kerr.ErrorForCode(resp.ErrorCode)
		if err == nil {
			return resp.ProducerID, resp.ProducerEpoch, nil
		}
		if !kerr.IsRetriable(err) && !errors.Is(err, kerr.ConcurrentTransactions) {
			return 0, 0, err
		}
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
	}
}

// ageTxnIDs bumps every ID's producer epoch with raw InitProducerIDs until it
// is epoch, the IDs in parallel (on Apache Kafka a bump takes a few
// milliseconds, and an ID's bumps are sequential). It returns each ID's
// producer ID.
func ageTxnIDs(t *testing.T, ctx context.Context, cl *kgo.Client, epoch int16, ids ...string) []int64 {
	t.Helper()
	pids := make([]int64, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			for {
				pid, e, err := initProducerID(ctx, cl, id)
				if err != nil {
					errs[i] = err
					return
				}
				if e >= epoch {
					pids[i] = pid
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("age transactional IDs: %v", err)
	}
	return pids
}

func itoa64(i int64) string { return strconv.FormatInt(i, 10) }
