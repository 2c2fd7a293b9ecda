package kafkaio

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// franz-go v1.22.3 can end a transaction without committing it although
// EndTransaction(TryCommit) returns nil. A produce to a topic the client
// has never produced to waits for the topic's metadata; when it arrives,
// the client hands the buffered records to its partitions before it
// publishes those partitions (a deferred store). If the produce is answered
// and EndTransaction runs in that gap, EndTransaction finds no partition of
// the transaction and
//
//   - under transactions v2 (KIP-890, Kafka 4) sends EndTxn(abort) and
//     returns nil: the records are aborted;
//   - under transactions v1 sends no EndTxn and returns nil: the
//     transaction stays open until the broker's timeout aborts it.
//
// The client only logs it. The coordinator's first trigger is its writer's
// first produce to the trigger topic, so it fell into the gap: the trigger
// was aborted and checkpoint 1 never reached a source.
//
// Two defences. AwaitPartitionsPublished, before each commit, waits until
// the client has published the partitions of the topics written (what
// EndTransaction reads), which closes the gap. txnWatch, the client's
// logger, counts the two messages, so that a commit the client did not make
// all the same is an error, never silence. TestFranzGoSilentAbortMessages
// fails when the library no longer logs them, so that an upgrade is
// reviewed.
const (
	franzAbortedCommit = "no produce succeeded in this transaction but produces were attempted"
	franzSkippedCommit = "no records were produced during the commit"
)

// txnWatch is a kgo.Logger that counts the ends of transactions the client
// did not commit although it was asked to. It logs nothing.
type txnWatch struct {
	level   kgo.LogLevel
	aborted atomic.Int64 // v2: the client sent EndTxn(abort)
	skipped atomic.Int64 // v1: the client sent no EndTxn; the transaction is open
}

// newTxnWatch returns a watch at level: kgo.LogLevelDebug sees both
// messages, kgo.LogLevelInfo only the v2 abort. Debug makes the client
// format a line per produce request, too much for a sink's hot path.
func newTxnWatch(level kgo.LogLevel) *txnWatch { return &txnWatch{level: level} }

// Level implements kgo.Logger.
func (w *txnWatch) Level() kgo.LogLevel { return w.level }

// Log implements kgo.Logger.
func (w *txnWatch) Log(_ kgo.LogLevel, msg string, _ ...any) {
	switch {
	case strings.HasPrefix(msg, franzAbortedCommit):
		w.aborted.Add(1)
	case strings.HasPrefix(msg, franzSkippedCommit):
		w.skipped.Add(1)
	}
}

// opt returns the client option that installs the watch.
func (w *txnWatch) opt() kgo.Opt { return kgo.WithLogger(w) }

// txnMisses is a snapshot of a watch's counts; compare one taken before an
// EndTransaction with one taken after.
type txnMisses struct{ aborted, skipped int64 }

func (w *txnWatch) snapshot() txnMisses {
	return txnMisses{aborted: w.aborted.Load(), skipped: w.skipped.Load()}
}

// AwaitPartitionsPublished waits, for at most a second, until cl has
// published its partitions of every topic in topics: the producer's view
// that EndTransaction reads to find the transaction's partitions, and
// PartitionLeader reads too. Call it after the transaction's produces
// succeeded and before EndTransaction(TryCommit); every transactional
// franz-go client that may commit right after its first write to a topic
// needs it, tests and tools included. The wait is a few
// microseconds when the first produce to a topic raced the client's
// metadata update, and nothing otherwise. If the second runs out (a
// partition without a leader), the commit goes ahead and the watch reports
// what the client did.
func AwaitPartitionsPublished(ctx context.Context, cl *kgo.Client, topics ...string) {
	var deadline time.Time
	for spins := 0; ; spins++ {
		published := true
		for _, t := range topics {
			if leader, _, _ := cl.PartitionLeader(t, 0); leader < 0 {
				published = false
				break
			}
		}
		if published || ctx.Err() != nil {
			return
		}
		switch {
		case spins < 100:
			runtime.Gosched() // the store is a few instructions away
		case deadline.IsZero():
			deadline = time.Now().Add(time.Second)
		case time.Now().After(deadline):
			return
		default:
			time.Sleep(time.Millisecond)
		}
	}
}
