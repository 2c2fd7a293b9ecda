package sink_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/sink"
)

// txnV1 makes the sink's clients speak Kafka 3.9's protocol: EndTxn v4,
// transactions v1, where a commit does not bump the producer epoch. Both
// kfake and Apache Kafka 4.x serve such clients with v1 semantics.
func txnV1(pool int) func(*sink.Config) {
	return func(cfg *sink.Config) {
		cfg.PoolSize = pool
		cfg.ClientOpts = append(cfg.ClientOpts, kgo.MaxVersions(kversion.V3_9_0()))
	}
}

// TestSinkV1NoReuseWhileRecorded: under transactions v1, a slot whose
// transaction the newest completed checkpoint recorded runs its next
// transaction at the same producer ID and epoch, and recovery's EndTxn
// with the recorded handle would commit that one instead: output of an
// epoch the restored job replays. The sink keeps such a slot out of use
// until a later checkpoint completes, or renews its producer first.
//
// Here checkpoint 1 completes (slot 0 committed), checkpoints 2 and 3 are
// pre-committed and never complete, and epoch 4 opens: with the pool of 3
// it needs slot 0 again. Then the task dies; recovery from checkpoint 1
// must leave epochs 2 to 4 invisible.
func TestSinkV1NoReuseWhileRecorded(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 1)
		s := e.sink(t, ctx, nil, txnV1(3))
		w1 := sinkWrite(t, ctx, s, "e1", 5, 1)
		h1 := sinkPreCommit(t, ctx, s, 1)
		sinkWrite(t, ctx, s, "e2", 5, 1)
		if err := s.NotifyComplete(ctx, 1); err != nil {
			t.Fatal(err)
		}
		sinkPreCommit(t, ctx, s, 2)
		sinkWrite(t, ctx, s, "e3", 5, 1)
		sinkPreCommit(t, ctx, s, 3)
		w4 := sinkWrite(t, ctx, s, "e4", 5, 1)
		sinkAwaitUncommitted(t, ctx, c, e.topic, w4) // epoch 4's records are on the broker, in their open transaction

		// The task dies (s is abandoned); its successor recovers from
		// checkpoint 1, the newest completed.
		e.sink(t, ctx, h1, txnV1(3))
		sinkWantValues(t, "after recovery from checkpoint 1", sinkCommitted(t, ctx, c, e.topic, len(w1), 500*time.Millisecond), w1)
		sinkEventuallyOpen(t, ctx, e, "after recovery")
	})
}

// TestSinkRandomCrashesV1 is TestSinkRandomCrashes with transactions v1
// clients: exactly once through random barriers, completions, aborts and
// crashes when commits do not move the producer epoch.
func TestSinkRandomCrashesV1(t *testing.T) {
	sinkModelSeeds(t, []uint64{11, 12, 13}, txnV1)
}
