// Package txnwatch checks that franz-go really committed a transaction:
// Watch, the client's logger, confirms each commit, and
// AwaitPartitionsPublished closes the gap in which the client ends a
// transaction without committing it. The sink and the control writer use
// both.
package txnwatch

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
// EndTransaction reads), which closes the gap. Watch, the client's
// logger, checks what the client did: a commit it really attempts logs
// "ending transaction" with commit true exactly once, at Info, before it
// sends EndTxn; neither silent case does (the v2 case logs it with commit
// false, after its own Info line; the v1 case only a Debug line). So a
// commit is confirmed when that line came exactly once during the call,
// and a commit the client did not make is an error, never silence.
// TestFranzGoSilentAbortMessages fails when the library no longer logs
// these lines this way, so that an upgrade is reviewed.
const (
	franzEndingTxn     = "ending transaction"
	franzAbortedCommit = "no produce succeeded in this transaction but produces were attempted"
)

// Watch is a kgo.Logger, at Info, that counts the commits the client
// attempts and the aborts it makes in their place. It logs nothing. Info
// costs no line per produce request; the client logs at Info per
// transaction and on errors.
type Watch struct {
	commits atomic.Int64 // "ending transaction" with commit true
	aborted atomic.Int64 // v2: EndTxn(abort) sent in place of a commit
}

func New() *Watch { return &Watch{} }

// Level implements kgo.Logger.
func (w *Watch) Level() kgo.LogLevel { return kgo.LogLevelInfo }

// Log implements kgo.Logger.
func (w *Watch) Log(_ kgo.LogLevel, msg string, keyvals ...any) {
	switch {
	case msg == franzEndingTxn:
		for i := 0; i+1 < len(keyvals); i += 2 {
			if keyvals[i] == "commit" {
				if c, ok := keyvals[i+1].(kgo.TransactionEndTry); ok && c == kgo.TryCommit {
					w.commits.Add(1)
				}
				break
			}
		}
	case strings.HasPrefix(msg, franzAbortedCommit):
		w.aborted.Add(1)
	}
}

// opt returns the client option that installs the watch. It replaces any
// logger the caller's options set: the client has one.
func (w *Watch) Opt() kgo.Opt { return kgo.WithLogger(w) }

// Count is a snapshot of a watch's counts.
type Count struct{ commits, aborted int64 }

func (w *Watch) Snapshot() Count {
	return Count{commits: w.commits.Load(), aborted: w.aborted.Load()}
}

// committed reports whether the client attempted exactly one commit, and
// aborted nothing in place of one, between snapshot before and now: what
// an EndTransaction(TryCommit) that returned nil must show.
func (w *Watch) Committed(before Count) bool {
	now := w.Snapshot()
	return now.commits == before.commits+1 && now.aborted == before.aborted
}

// AwaitPartitionsPublished waits, for at most a second, until cl has
// published its partitions of every topic in topics: the producer's view
// that EndTransaction reads to find the transaction's partitions, and
// PartitionLeader reads too. Call it after the transaction's produces
// succeeded and before EndTransaction(TryCommit). Every transactional
// franz-go client that may commit right after its first write to a topic
// needs it, tests and tools included. The wait is a few microseconds when
// the first produce to a topic raced the client's metadata update, and
// nothing otherwise. If the second runs out (a partition without a
// leader), the commit goes ahead, and the watch reports what the client
// did.
func AwaitPartitionsPublished(ctx context.Context, cl *kgo.Client, topics ...string) {
	var deadline time.Time
	for spins := 0; ; spins++ {
		published := true
		for _, t := range topics {
			// -1 while the topic is not published, or for a
			// partition Kafka reports without a leader (then
			// the second runs out); a partition that failed to
			// load reads another negative value, published.
			if leader, _, _ := cl.PartitionLeader(t, 0); leader == -1 {
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
