package sink_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/kafkaio/sink"
)

// adminLinger leaves a transaction open on txnID: records written and
// flushed, never ended, as a crashed producer leaves it.
func adminLinger(t *testing.T, ctx context.Context, e *sinkEnv, txnID string, values ...string) *kgo.Client {
	t.Helper()
	cl := e.c.Client(t, kgo.SeedBrokers(e.c.Brokers...), kgo.DefaultProduceTopic(e.topic),
		kgo.TransactionalID(txnID), kgo.TransactionTimeout(time.Minute))
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
	}
	return cl
}

// TestTxnAdminLingering: a lingering transaction blocks read_committed
// consumers of its partition; the admin lists it, commits one and aborts
// another, and each unblocks the partition.
func TestTxnAdminLingering(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 1)
		admin, err := sink.NewAdmin(e.opts(), e.prefix, sinkLog())
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()

		idA := sink.TxnID(e.prefix, "out", 0, 0)
		idB := sink.TxnID(e.prefix, "out", 0, 1)
		lingerA := adminLinger(t, ctx, e, idA, "a1", "a2")
		other := adminLinger(t, ctx, e, kafkatest.Name(t, "other"), "x1") // another job's: not listed
		plain := c.Client(t, kgo.DefaultProduceTopic(e.topic))
		if err := plain.ProduceSync(ctx, &kgo.Record{Value: []byte("after-a")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		// Blocked: the plain record sits behind the open transaction.
		sinkWantValues(t, "behind a lingering transaction", sinkCommitted(t, ctx, c, e.topic, 0, 300*time.Millisecond), nil)

		open, err := admin.ListTxns(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		if len(open) != 1 {
			t.Fatalf("open transactions %+v, want %s only", open, idA)
		}
		a := open[0]
		pid, epoch, _ := lingerA.ProducerID(ctx)
		if a.TransactionalID != idA || a.State != "Ongoing" || !a.Open() || a.ProducerID != pid || a.ProducerEpoch != epoch ||
			a.Start.IsZero() || a.Age < 0 || a.Timeout != time.Minute ||
			len(a.Partitions) != 1 || a.Partitions[0].Topic != e.topic || !slices.Equal(a.Partitions[0].Partitions, []int32{0}) {
			t.Fatalf("listed %+v, want %s Ongoing at producer id %d epoch %d on %s[0]", a, idA, pid, epoch, e.topic)
		}
		t.Logf("lingering: %+v", a)
		if err := other.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Fatal(err)
		}

		if before, err := admin.CommitTxn(ctx, a.Handle()); err != nil || before {
			t.Fatalf("commit %s: committed before %v, %v", idA, before, err)
		}
		// Committing again is harmless (brokers answer a repeated EndTxn
		// as a retry, with success, or with the epoch fenced: "before").
		if _, err := admin.CommitTxn(ctx, a.Handle()); err != nil {
			t.Fatalf("commit %s again: %v", idA, err)
		}
		want := []string{"a1", "a2", "after-a"}
		sinkWantValues(t, "after the commit", sinkCommitted(t, ctx, c, e.topic, len(want), 300*time.Millisecond), want)
		eventuallyTxns(t, ctx, admin, "after the commit", func(all []sink.TxnInfo) bool {
			return len(all) == 1 && all[0].TransactionalID == idA && !all[0].Open()
		})

		// Abort: ends exactly the open transaction.
		lingerB := adminLinger(t, ctx, e, idB, "b1")
		if info, err := admin.AbortTxn(ctx, idB); err != nil || info.State != "Ongoing" {
			t.Fatalf("abort %s: %+v, %v", idB, info, err)
		}
		if _, err := admin.AbortTxn(ctx, idB); err == nil {
			t.Fatalf("aborting %s twice succeeded", idB)
		}
		eventuallyTxns(t, ctx, admin, "after the abort", noneOpen)
		if err := lingerB.EndTransaction(ctx, kgo.TryCommit); err == nil {
			t.Fatal("the fenced producer committed its aborted transaction")
		}
		sinkWantValues(t, "after the abort", sinkCommitted(t, ctx, c, e.topic, len(want), 300*time.Millisecond), want)

		// Fence: without knowing the producer.
		idC := sink.TxnID(e.prefix, "out", 0, 2)
		lingerC := adminLinger(t, ctx, e, idC, "c1")
		if err := admin.FenceTxn(ctx, idC, 0); err != nil {
			t.Fatalf("fence %s: %v", idC, err)
		}
		eventuallyTxns(t, ctx, admin, "after the fence", noneOpen)
		if err := lingerC.EndTransaction(ctx, kgo.TryCommit); err == nil {
			t.Fatal("the fenced producer committed")
		}
		sinkWantValues(t, "after the fence", sinkCommitted(t, ctx, c, e.topic, len(want), 300*time.Millisecond), want)

		if _, err := admin.AbortTxn(ctx, "someone-else-0"); !errors.Is(err, sink.ErrTxnNotInJob) {
			t.Fatalf("abort outside the job: %v", err)
		}
		if _, err := admin.CommitTxn(ctx, sink.TxnHandle{TransactionalID: "someone-else-0"}); !errors.Is(err, sink.ErrTxnNotInJob) {
			t.Fatalf("commit outside the job: %v", err)
		}
	})
}

// TestTxnAdminAbortRecorded: aborting by hand a transaction that a
// checkpoint recorded is not mistaken for a commit by the next recovery: it
// reports the output as lost.
func TestTxnAdminAbortRecorded(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 1)
		s := e.sink(t, ctx, nil, nil)
		sinkWrite(t, ctx, s, "e1", 5, 1)
		handles := sinkPreCommit(t, ctx, s, 3)

		admin, err := sink.NewAdmin(e.opts(), e.prefix, sinkLog())
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		if _, err := admin.AbortTxn(ctx, handles[0].TransactionalID); err != nil {
			t.Fatal(err)
		}
		fresh, err := sink.New(e.config(nil))
		if err != nil {
			t.Fatal(err)
		}
		defer fresh.Close(ctx)
		var aborted *sink.TxnAbortedError
		if err := fresh.Recover(ctx, handles); !errors.As(err, &aborted) || aborted.Checkpoint != 3 {
			t.Fatalf("recovery after a manual abort: %v, want a *TxnAbortedError of checkpoint 3", err)
		}
		if _, err := admin.CommitTxn(ctx, handles[0]); !errors.Is(err, sink.ErrTxnAborted) {
			t.Fatalf("commit after the abort: %v, want ErrTxnAborted", err)
		}
	})
}

func noneOpen(all []sink.TxnInfo) bool {
	for _, i := range all {
		if i.Open() {
			return false
		}
	}
	return true
}

// eventuallyTxns polls the job's transactions until ok holds, for up to 10s:
// a broker answers EndTxn, or the InitProducerID that fences, before it has
// written the transaction's markers, so the transaction may still be
// PrepareCommit or PrepareAbort for a moment.
func eventuallyTxns(t *testing.T, ctx context.Context, admin *sink.Admin, when string, ok func([]sink.TxnInfo) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		all, err := admin.ListTxns(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		if ok(all) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: transactions of the job %+v", when, all)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The job's prefix alone would match other jobs' IDs when job names contain
// dots; IsTxnID does not, nor the coordinator's ID.
func TestIsSinkTxnID(t *testing.T) {
	prefix := "_weir.clicks."
	for id, want := range map[string]bool{
		sink.TxnID(prefix, "main", 3, 0):                                 true,
		sink.TxnID(prefix, "main.s1", 0, 2):                              true,
		sink.TxnID(prefix, sink.PoolName("main", "counts"), 3, 0):        true,
		sink.TxnID(prefix, sink.PoolName("by-key", "out.v2-x_y"), 11, 4): true,
		"_weir.clicks.v2.main@counts-0-0":                                false, // job "clicks.v2"
		"_weir.clicks.main@-0-0":                                         false,
		"_weir.clicks.main@a@b-0-0":                                      false,
		"_weir.clicks.main@counts-0":                                     false,
		"_weir.clicks.v2.main-0-0":                                       false, // job "clicks.v2"
		"_weir.clicks.s1.main-0-0":                                       false, // job "clicks.s1"
		controltopic.CoordinatorTransactionalID(prefix):                  false,
		"_weir.clicks.main-0":                                            false,
		"_weir.other.main-0-0":                                           false,
	} {
		if got := sink.IsTxnID(prefix, id); got != want {
			t.Errorf("IsTxnID(%q, %q) = %v, want %v", prefix, id, got, want)
		}
	}
}
