package kafkatest_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/internal/txnwatch"
)

// These smoke tests prove that both brokers do what Weir relies on. Each runs
// once on kfake and once on the real Apache Kafka broker.

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSmokeProduceConsume(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		t.Logf("broker: %s", c.Name)
		ctx := ctxFor(t)
		topic := kafkatest.Name(t, "smoke")
		c.CreateTopic(t, topic, 3, nil)

		prod := c.Client(t, kgo.DefaultProduceTopic(topic))
		var want []string
		for i := range 30 {
			v := strconv.Itoa(i)
			want = append(want, v)
			r := &kgo.Record{Key: []byte("k" + v), Value: []byte(v), Partition: int32(i % 3)}
			if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
		got := consumeValues(ctx, t, c, topic, len(want), kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("consumed %v, want %v", got, want)
		}
	})
}

func TestSmokeTransactionsCommitAndAbort(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := ctxFor(t)
		topic := kafkatest.Name(t, "txn")
		c.CreateTopic(t, topic, 1, nil)

		prod := c.Client(t,
			kgo.DefaultProduceTopic(topic),
			kgo.TransactionalID(kafkatest.Name(t, "txid")),
			kgo.TransactionTimeout(60*time.Second),
		)
		produceTxn := func(prefix string, n int, commit kgo.TransactionEndTry) {
			t.Helper()
			if err := prod.BeginTransaction(); err != nil {
				t.Fatalf("begin: %v", err)
			}
			for i := range n {
				prod.Produce(ctx, &kgo.Record{Value: fmt.Appendf(nil, "%s-%d", prefix, i)}, nil)
			}
			if err := prod.Flush(ctx); err != nil {
				t.Fatalf("flush: %v", err)
			}
			// franz-go can abort the first commit to a topic and say
			// nothing (internal/txnwatch).
			txnwatch.AwaitPartitionsPublished(ctx, prod, topic)
			if err := prod.EndTransaction(ctx, commit); err != nil {
				t.Fatalf("end transaction (%v): %v", commit, err)
			}
		}
		produceTxn("committed-a", 5, kgo.TryCommit)
		produceTxn("aborted", 7, kgo.TryAbort)
		produceTxn("committed-b", 3, kgo.TryCommit)

		// A read_committed consumer sees the committed records only, in
		// order. The last one is the end marker of the reading: reading
		// until the fetch position reaches the high watermark would also
		// work, but the count is exact here.
		got := consumeValues(ctx, t, c, topic, 8, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		want := []string{
			"committed-a-0", "committed-a-1", "committed-a-2", "committed-a-3", "committed-a-4",
			"committed-b-0", "committed-b-1", "committed-b-2",
		}
		if !slices.Equal(got, want) {
			t.Fatalf("read_committed saw %v, want %v", got, want)
		}
		// Nothing more: the aborted records stay invisible, once every
		// transaction has ended.
		c.WaitStable(t, topic)
		var again []string
		for _, r := range c.ReadCommitted(ctx, t, topic) {
			again = append(again, string(r.Value))
		}
		if !slices.Equal(again, want) {
			t.Fatalf("read_committed saw %v on a second read to the last stable offset, want %v", again, want)
		}
		// read_uncommitted sees the aborted records too: they were written.
		if all := consumeValues(ctx, t, c, topic, 15, kgo.FetchIsolationLevel(kgo.ReadUncommitted())); len(all) != 15 {
			t.Fatalf("read_uncommitted saw %d records, want 15", len(all))
		}
	})
}

// TestSmokeCommitByAnotherClient is the mechanism the two-phase-commit sink
// relies on after a crash: a transaction flushed by one client (the crashed
// task) is committed by a different client that knows only the transactional
// ID, producer ID and epoch recorded in the snapshot, with a raw EndTxn and no
// InitProducerID (which would abort it).
func TestSmokeCommitByAnotherClient(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := ctxFor(t)
		topic := kafkatest.Name(t, "precommit")
		txnID := kafkatest.Name(t, "txid")
		c.CreateTopic(t, topic, 2, nil)

		first := c.Client(t,
			kgo.DefaultProduceTopic(topic),
			kgo.TransactionalID(txnID),
			kgo.TransactionTimeout(60*time.Second),
		)
		if err := first.BeginTransaction(); err != nil {
			t.Fatalf("begin: %v", err)
		}
		for i := range 10 {
			first.Produce(ctx, &kgo.Record{Value: []byte(strconv.Itoa(i)), Partition: int32(i % 2)}, nil)
		}
		if err := first.Flush(ctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
		pid, epoch, err := first.ProducerID(ctx)
		if err != nil {
			t.Fatalf("producer id: %v", err)
		}
		t.Logf("pre-committed %s as producer id %d epoch %d", txnID, pid, epoch)

		// Pre-committed, not committed: read_committed sees nothing yet.
		if got := pollFor(t, c, topic, kgo.FetchIsolationLevel(kgo.ReadCommitted()), time.Second); len(got) != 0 {
			t.Fatalf("read_committed saw %d records of an open transaction", len(got))
		}

		// Another client, which has never called InitProducerID, commits it.
		other := c.Client(t)
		req := kmsg.NewPtrEndTxnRequest()
		req.TransactionalID = txnID
		req.ProducerID = pid
		req.ProducerEpoch = epoch
		req.Commit = true
		resp, err := req.RequestWith(ctx, other)
		if err != nil {
			t.Fatalf("EndTxn request: %v", err)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			t.Fatalf("EndTxn(commit) by another client: %v", err)
		}

		got := consumeValues(ctx, t, c, topic, 10, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		slices.SortFunc(got, func(a, b string) int {
			x, _ := strconv.Atoi(a)
			y, _ := strconv.Atoi(b)
			return x - y
		})
		want := []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}
		if !slices.Equal(got, want) {
			t.Fatalf("read_committed saw %v after the commit, want %v", got, want)
		}
	})
}

// consumeValues reads topic from the start until it has n records or the
// context ends, and returns their values in the order read.
func consumeValues(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string, n int, iso kgo.Opt) []string {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), iso)
	var got []string
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline: %v", len(got), n, got)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s[%d]: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	return got
}

// pollFor reads topic from the start for d and returns every value it saw.
func pollFor(t *testing.T, c *kafkatest.Cluster, topic string, iso kgo.Opt, d time.Duration) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), iso)
	var got []string
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	return got
}
