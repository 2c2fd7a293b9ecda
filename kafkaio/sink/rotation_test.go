package sink_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/sink"
)

// Producer-ID rotation (KIP-890, transactions v2): every end of a
// transaction bumps the producer epoch, and the end of one that ran at epoch
// 32766 moves the transactional ID to a new producer ID at epoch 0. The
// coordinator then answers an EndTxn at the old producer ID with
// INVALID_PRODUCER_ID_MAPPING (kfake at once, Apache Kafka 4.4 after the
// ID's next InitProducerID), whether the transaction was committed or
// aborted. These tests age a sink's transactional ID to just below the
// limit, so that its first transaction runs at epoch 32766, and crash and
// recover around the rotation; recovery must decide from the log.

// rotationEpoch is the epoch the tests age a sink's slot to: the sink's
// own InitProducerID in Recover moves it to 32766, the last epoch of its
// producer ID.
const rotationEpoch = 32765

// rotationEnv is a sink environment with a pool of one slot whose
// transactional ID is aged to rotationEpoch.
func rotationEnv(t *testing.T, ctx context.Context, c *kafkatest.Cluster) *sinkEnv {
	t.Helper()
	e := newSinkEnv(t, c, 2)
	start := time.Now()
	ageTxnIDs(t, ctx, c.Client(t), rotationEpoch, sink.TxnID(e.prefix, "out", 0, 0))
	t.Logf("aged a transactional ID to epoch %d in %v", rotationEpoch, time.Since(start).Round(time.Millisecond))
	return e
}

func poolOfOne(cfg *sink.Config) { cfg.PoolSize = 1 }

// rotationPreCommit writes epoch 1 through a fresh sink on the aged slot and
// pre-commits it: the handle's transaction runs at the producer ID's last
// epoch.
func rotationPreCommit(t *testing.T, ctx context.Context, e *sinkEnv) (*sink.Sink, []string, sink.TxnHandle) {
	t.Helper()
	s := e.sink(t, ctx, nil, poolOfOne)
	vs := sinkWrite(t, ctx, s, "e1", 20, 2)
	hs := sinkPreCommit(t, ctx, s, 1)
	if len(hs) != 1 || hs[0].ProducerEpoch != 32766 || hs[0].Marker.Topic != e.topic || hs[0].Version != sink.TxnHandleVersion {
		t.Fatalf("handles %+v, want one version-%d handle at epoch 32766 with a marker in %s", hs, sink.TxnHandleVersion, e.topic)
	}
	return s, vs, hs[0]
}

// recoverOK recovers a new sink from hs (the previous one is abandoned, as
// by a crash) and checks that the ID's producer ID is no longer the
// handle's.
func recoverOK(t *testing.T, ctx context.Context, e *sinkEnv, what string, h sink.TxnHandle) *sink.Sink {
	t.Helper()
	s, err := sink.New(e.config(poolOfOne))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	if err := s.Recover(ctx, []sink.TxnHandle{h}); err != nil {
		t.Fatalf("%s: recover: %v", what, err)
	}
	return s
}

// describeID returns the producer ID and epoch the coordinator holds for id.
func describeID(t *testing.T, ctx context.Context, c *kafkatest.Cluster, id string) (int64, int16, string) {
	t.Helper()
	ds, err := c.Admin(t).DescribeTransactions(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	d := ds[id]
	return d.ProducerID, d.ProducerEpoch, d.State
}

// TestSinkRecoverAfterRotationCommitted is the reported case: the sink
// commits its transaction at the old producer ID's last epoch, the replica
// dies, recovery re-commits with the recorded (old ID, epoch) and fences
// (the new ID moves past epoch 0), the replica dies again, and every later
// recovery must find the transaction committed, not lost; also after the ID
// rotates a second time.
func TestSinkRecoverAfterRotationCommitted(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := rotationEnv(t, ctx, c)
		s1, v1, h := rotationPreCommit(t, ctx, e)
		if err := s1.NotifyComplete(ctx, 1); err != nil {
			t.Fatalf("commit at the last epoch: %v", err)
		}
		if pid, epoch, state := describeID(t, ctx, c, h.TransactionalID); pid == h.ProducerID {
			t.Fatalf("after the commit at epoch 32766 the ID is at producer id %d epoch %d (%s), want a new producer id", pid, epoch, state)
		}
		// Crash, recover, crash, recover, ...: each recovery fences, so
		// the new producer ID moves on each time.
		var s *sink.Sink
		for i := range 3 {
			s = recoverOK(t, ctx, e, "recovery "+string(rune('1'+i)), h)
		}
		pid, epoch, _ := describeID(t, ctx, c, h.TransactionalID)
		t.Logf("after 3 recoveries: producer id %d epoch %d (recorded %d/%d)", pid, epoch, h.ProducerID, h.ProducerEpoch)
		// The last one runs on under the new producer ID.
		v2 := sinkWrite(t, ctx, s, "e2", 20, 2)
		h2 := sinkPreCommit(t, ctx, s, 2)
		if err := s.NotifyComplete(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if h2[0].ProducerID == h.ProducerID {
			t.Fatalf("second transaction ran under the old producer id: %+v", h2[0])
		}
		c.WaitStable(t, e.topic)
		sinkWantValues(t, "after the rotation", sinkCommitted(t, ctx, c, e.topic, 40, 300*time.Millisecond), append(slices.Clone(v1), v2...))

		// A second rotation: the ID moves to a third producer ID; the
		// handles of both earlier ones are still decided committed.
		ageTxnIDs(t, ctx, c.Client(t), 32766, h.TransactionalID)
		if _, _, err := initProducerID(ctx, c.Client(t), h.TransactionalID); err != nil {
			t.Fatal(err)
		}
		if pid, _, _ := describeID(t, ctx, c, h.TransactionalID); pid == h2[0].ProducerID {
			t.Fatalf("the ID did not rotate a second time")
		}
		for i := range 2 {
			s, err := sink.New(e.config(poolOfOne))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close(context.Background()) })
			if err := s.Recover(ctx, []sink.TxnHandle{h, h2[0]}); err != nil {
				t.Fatalf("recovery %d after the second rotation: %v", i+1, err)
			}
		}
		c.WaitStable(t, e.topic)
		sinkWantValues(t, "after the second rotation", sinkCommitted(t, ctx, c, e.topic, 40, 300*time.Millisecond), append(slices.Clone(v1), v2...))
	})
}

// TestSinkRecoverAfterRotationPreCommitted: the replica dies with the
// transaction pre-committed at the last epoch; the first recovery's raw
// commit rotates the ID, the fence moves the new one on, the replica dies
// again, and the next recoveries find the transaction committed.
func TestSinkRecoverAfterRotationPreCommitted(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := rotationEnv(t, ctx, c)
		_, v1, h := rotationPreCommit(t, ctx, e) // dies before complete 1 reaches it
		for i := range 3 {
			recoverOK(t, ctx, e, "recovery "+string(rune('1'+i)), h)
		}
		if pid, _, _ := describeID(t, ctx, c, h.TransactionalID); pid == h.ProducerID {
			t.Fatalf("the recovery's commit at epoch 32766 did not rotate the ID")
		}
		c.WaitStable(t, e.topic)
		sinkWantValues(t, "after the rotation", sinkCommitted(t, ctx, c, e.topic, 20, 300*time.Millisecond), v1)
	})
}

// TestSinkRecoverAfterRotationAborted: a transaction pre-committed at the
// last epoch that something else aborted (another producer initialising the
// ID, which also rotates it) is really lost: recovery stops, says it was not
// the timeout, and the output is not there.
func TestSinkRecoverAfterRotationAborted(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := rotationEnv(t, ctx, c)
		_, _, h := rotationPreCommit(t, ctx, e)
		if _, _, err := initProducerID(ctx, c.Client(t), h.TransactionalID); err != nil {
			t.Fatal(err)
		}
		for i := range 2 { // stable: the same answer every time
			err := recoverErr(t, ctx, e, h)
			wantLoss(t, err, sink.LossAbortedOther, "checkpoint 1", "not by the timeout", h.Marker.String())
			t.Logf("recovery %d: %v", i+1, err)
		}
		c.WaitStable(t, e.topic)
		sinkWantValues(t, "aborted output", sinkCommitted(t, ctx, c, e.topic, 0, 300*time.Millisecond), nil)
	})
}

// TestSinkRecoverAfterRotationTimedOut: the broker's timeout aborts a
// transaction pre-committed at the last epoch (the abort rotates the ID);
// recovery names the timeout and the setting. Real broker only: kfake's
// timeout abort at epoch 32766 rotates the ID but leaves the old
// transaction open (pids.updateTimer ends the new producer ID's
// transaction instead), which Apache Kafka does not.
func TestSinkRecoverAfterRotationTimedOut(t *testing.T) {
	func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 2)
		ageTxnIDs(t, ctx, c.Client(t), rotationEpoch, sink.TxnID(e.prefix, "out", 0, 0))
		const timeout = 2 * time.Second
		short := func(cfg *sink.Config) { cfg.PoolSize, cfg.TransactionTimeout = 1, timeout }
		s := e.sink(t, ctx, nil, short)
		sinkWrite(t, ctx, s, "e1", 20, 2)
		h := sinkPreCommit(t, ctx, s, 1)[0]
		deadline := time.Now().Add(30 * time.Second)
		for {
			pid, epoch, state := describeID(t, ctx, c, h.TransactionalID)
			if pid != h.ProducerID && state != "Ongoing" && state != "PrepareAbort" {
				t.Logf("broker aborted it and rotated the ID: producer id %d epoch %d %s", pid, epoch, state)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the broker did not abort the transaction after its %v timeout: %d/%d %s", timeout, pid, epoch, state)
			}
			time.Sleep(250 * time.Millisecond)
		}
		fresh, err := sink.New(e.config(short))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = fresh.Close(context.Background()) })
		err = fresh.Recover(ctx, []sink.TxnHandle{h})
		wantLoss(t, err, sink.LossTimeout, "checkpoint 1", "transaction timeout (2s) expired", "sink.transaction_timeout")
		t.Logf("recovery: %v", err)
	}(t, kafkatest.NewReal(t))
}

// TestSinkRecoverVersion1HandleAfterRotation: a handle written before
// markers existed (version 1) cannot be decided once the ID has rotated and
// been fenced; recovery stops, saying that the outcome cannot be proven,
// not that the broker aborted it.
func TestSinkRecoverVersion1HandleAfterRotation(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := rotationEnv(t, ctx, c)
		s1, _, h := rotationPreCommit(t, ctx, e)
		if err := s1.NotifyComplete(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if _, _, err := initProducerID(ctx, c.Client(t), h.TransactionalID); err != nil {
			t.Fatal(err)
		}
		var old sink.TxnHandle
		b := []byte(`{"transactional_id":"` + h.TransactionalID + `","producer_id":` + itoa64(h.ProducerID) + `,"epoch":32766,"checkpoint":1}`)
		if err := json.Unmarshal(b, &old); err != nil {
			t.Fatal(err)
		}
		err := recoverErr(t, ctx, e, old)
		wantLoss(t, err, sink.LossUnprovable, "cannot be proven", "INVALID_PRODUCER_ID_MAPPING", "rotated")
		if strings.Contains(err.Error(), "is lost") {
			t.Fatalf("a transaction that may be committed is reported lost: %v", err)
		}
		t.Logf("recovery: %v", err)
	})
}

func recoverErr(t *testing.T, ctx context.Context, e *sinkEnv, h sink.TxnHandle) error {
	t.Helper()
	s, err := sink.New(e.config(poolOfOne))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	return s.Recover(ctx, []sink.TxnHandle{h})
}

func wantLoss(t *testing.T, err error, cause sink.TxnLossCause, says ...string) {
	t.Helper()
	var lost *sink.TxnAbortedError
	if !errors.As(err, &lost) || !errors.Is(err, sink.ErrTxnAborted) {
		t.Fatalf("recovery: %v, want a *TxnAbortedError", err)
	}
	if lost.Cause != cause {
		t.Fatalf("cause %d, want %d: %v", lost.Cause, cause, err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%q does not say %q", err, s)
		}
	}
}

// TestSinkTxnHandleVersions: a version-1 handle (no "v") still decodes, a
// version-2 one round-trips with its marker, and a newer one is refused.
func TestSinkTxnHandleVersions(t *testing.T) {
	var v1 sink.TxnHandle
	if err := json.Unmarshal([]byte(`{"transactional_id":"_weir.j.out-3-1","producer_id":4711,"epoch":12,"checkpoint":42}`), &v1); err != nil {
		t.Fatal(err)
	}
	if want := (sink.TxnHandle{TransactionalID: "_weir.j.out-3-1", ProducerID: 4711, ProducerEpoch: 12, Checkpoint: 42}); v1 != want {
		t.Fatalf("version 1: %+v, want %+v", v1, want)
	}
	v2 := sink.TxnHandle{Version: 2, TransactionalID: "_weir.j.out-3-1", ProducerID: 4711, ProducerEpoch: 12, Checkpoint: 42,
		Marker: sink.TxnMarker{Topic: "out", Partition: 3, Offset: 977}, BeganMillis: 1_700_000_000_000}
	b, err := json.Marshal(v2)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"v":2,"transactional_id":"_weir.j.out-3-1","producer_id":4711,"epoch":12,"checkpoint":42,"marker":{"topic":"out","partition":3,"offset":977},"began_ms":1700000000000}`
	if string(b) != want {
		t.Fatalf("version 2 JSON %s, want %s", b, want)
	}
	var back sink.TxnHandle
	if err := json.Unmarshal(b, &back); err != nil || back != v2 {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
	err = json.Unmarshal([]byte(`{"v":3,"transactional_id":"x"}`), &back)
	if err == nil || !strings.Contains(err.Error(), "version 3") {
		t.Fatalf("version 3: %v, want a refusal", err)
	}
}

// TestSinkMarkerDecidesWithoutRotation: the log, not the epoch arithmetic,
// decides a moved-on ID also without a rotation: a committed transaction
// whose slot was fenced many times since is committed; the check reads the
// describe-producers view too, for the record in docs/sinks.md.
func TestSinkMarkerDecidesWithoutRotation(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 1)
		s := e.sink(t, ctx, nil, poolOfOne)
		v1 := sinkWrite(t, ctx, s, "e1", 5, 1)
		h := sinkPreCommit(t, ctx, s, 1)[0]
		if err := s.NotifyComplete(ctx, 1); err != nil {
			t.Fatal(err)
		}
		ageTxnIDs(t, ctx, c.Client(t), h.ProducerEpoch+5, h.TransactionalID)
		recoverOK(t, ctx, e, "recovery", h)
		ps, err := c.Admin(t).DescribeProducers(ctx, kadm.TopicsSet{e.topic: {0: {}}})
		if err != nil {
			t.Fatal(err)
		}
		ps.EachProducer(func(p kadm.DescribedProducer) {
			t.Logf("producer %d epoch %d, open transaction from %d", p.ProducerID, p.ProducerEpoch, p.CurrentTxnStartOffset)
		})
		c.WaitStable(t, e.topic)
		sinkWantValues(t, "committed", sinkCommitted(t, ctx, c, e.topic, 5, 300*time.Millisecond), v1)
	})
}
