package source_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/internal/testlog"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/kafkaio/source"
)

// Helpers of the source tests are prefixed src: the package's other tests
// live in the same namespace.

func srcCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// srcOpen starts a source on c with cfg, closed when the test ends.
func srcOpen(t *testing.T, ctx context.Context, c *kafkatest.Cluster, cfg source.Config) *source.Source {
	t.Helper()
	cfg.ClientOpts = append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, cfg.ClientOpts...)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(testlog.New(t, ""), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	src, err := source.New(ctx, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(src.Close)
	return src
}

// srcProduce produces recs synchronously with a plain (idempotent) producer.
func srcProduce(t *testing.T, ctx context.Context, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

// srcProducer returns a producer that writes to each record's partition.
func srcProducer(t *testing.T, c *kafkatest.Cluster) *kgo.Client {
	t.Helper()
	return c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
}

// srcTxnClient returns a transactional producer that writes to each
// record's partition.
func srcTxnClient(t *testing.T, c *kafkatest.Cluster) *kgo.Client {
	t.Helper()
	return c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.TransactionalID(kafkatest.Name(t, "txn")), kgo.TransactionTimeout(30*time.Second))
}

// srcTxn produces recs in one transaction and commits or aborts it.
func srcTxn(t *testing.T, ctx context.Context, cl *kgo.Client, commit bool, recs ...*kgo.Record) {
	t.Helper()
	if err := srcTxnErr(ctx, cl, commit, recs...); err != nil {
		t.Fatal(err)
	}
}

// srcTxnErr is srcTxn for goroutines other than the test's.
func srcTxnErr(ctx context.Context, cl *kgo.Client, commit bool, recs ...*kgo.Record) error {
	if err := cl.BeginTransaction(); err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("transactional produce: %w", err)
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		return fmt.Errorf("end transaction (commit=%v): %w", commit, err)
	}
	return nil
}

// srcQuietLog discards logs.
func srcQuietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// srcRec returns a record for topic and partition with value v.
func srcRec(topic string, partition int32, v string) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: partition, Key: []byte("k-" + v), Value: []byte(v)}
}

// srcRead calls Next until it has n records, and returns them.
func srcRead(t *testing.T, ctx context.Context, src *source.Source, n int) []*kgo.Record {
	t.Helper()
	var recs []*kgo.Record
	for len(recs) < n {
		batch, err := src.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %d of %d records: %v", len(recs), n, err)
		}
		recs = append(recs, batch...)
	}
	if len(recs) > n {
		t.Fatalf("read %d records, want %d: %v", len(recs), n, srcValues(recs))
	}
	return recs
}

// srcBarrier places barrier n and returns its offsets.
func srcBarrier(t *testing.T, ctx context.Context, src *source.Source, n ckpt.ID) source.Offsets {
	t.Helper()
	offsets, err := src.Barrier(ctx, n)
	if err != nil {
		t.Fatalf("Barrier(%d): %v", n, err)
	}
	return offsets
}

// srcWaitCaughtUp polls the source (expecting no records) until it reports
// being caught up.
func srcWaitCaughtUp(t *testing.T, ctx context.Context, src *source.Source) {
	t.Helper()
	for !src.CaughtUp() {
		if ctx.Err() != nil {
			t.Fatalf("not caught up: %+v", src.Lag())
		}
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		recs, err := src.Next(pctx)
		cancel()
		switch {
		case err != nil && !errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("Next: %v", err)
		case err == nil:
			t.Fatalf("Next returned records %v while catching up, want nothing", srcValues(recs))
		}
	}
}

// srcWaitPositions polls the source (expecting no records) until its
// positions are want: past the trailing transaction markers of a log whose
// transactions are all resolved (see srcWaitStable).
func srcWaitPositions(t *testing.T, ctx context.Context, src *source.Source, want source.Offsets) {
	t.Helper()
	for fmt.Sprint(src.Positions()) != fmt.Sprint(want) {
		if ctx.Err() != nil {
			t.Fatalf("positions %v, want %v", src.Positions(), want)
		}
		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		recs, err := src.Next(pctx)
		cancel()
		switch {
		case err != nil && !errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("Next: %v", err)
		case err == nil:
			t.Fatalf("Next returned records %v at %v, want nothing before %v", srcValues(recs), src.Positions(), want)
		}
	}
	if !src.CaughtUp() {
		t.Fatalf("at the log end %v but not caught up: %+v", want, src.Lag())
	}
}

func srcValues(recs []*kgo.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

func srcSeq(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, prefix+strconv.Itoa(i))
	}
	return out
}

func srcWantValues(t *testing.T, what string, recs []*kgo.Record, want []string) {
	t.Helper()
	if got := srcValues(recs); !slices.Equal(got, want) {
		t.Fatalf("%s: read %v, want %v", what, got, want)
	}
}

// srcMetric returns the value of the metric name with labels in reg, or -1
// if there is none.
func srcMetric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func TestSourceStartPositions(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := srcCtx(t)
		topic := kafkatest.Name(t, "src")
		c.CreateTopic(t, topic, 2, nil)
		prod := srcProducer(t, c)
		base := time.Now().Add(-time.Hour).Truncate(time.Second)
		for i := range 10 {
			r := srcRec(topic, 1, "v"+strconv.Itoa(i))
			r.Timestamp = base.Add(time.Duration(i) * time.Second)
			srcProduce(t, ctx, prod, r, srcRec(topic, 0, "other"))
		}
		end := func(src *source.Source) int64 { off, _ := src.Positions().Lookup(topic, 1); return off }

		// The task reads partition 1 only.
		t.Run("earliest", func(t *testing.T) {
			src := srcOpen(t, ctx, c, source.Config{Topics: []string{topic}, Partition: 1})
			recs := srcRead(t, ctx, src, 10)
			srcWantValues(t, "earliest", recs, srcSeq("v", 0, 10))
			for _, r := range recs {
				if r.Topic != topic || r.Partition != 1 {
					t.Fatalf("record from %s/%d, want %s/1", r.Topic, r.Partition, topic)
				}
			}
			if end(src) != 10 {
				t.Fatalf("position %d after 10 records, want 10", end(src))
			}
			srcWaitCaughtUp(t, ctx, src)
		})
		t.Run("timestamp", func(t *testing.T) {
			start, err := kafkaio.ParseStart(base.Add(5 * time.Second).Format(time.RFC3339))
			if err != nil {
				t.Fatal(err)
			}
			src := srcOpen(t, ctx, c, source.Config{Topics: []string{topic}, Partition: 1, Start: start})
			recs := srcRead(t, ctx, src, 5)
			srcWantValues(t, "timestamp", recs, srcSeq("v", 5, 10))
		})
		t.Run("restored", func(t *testing.T) {
			src := srcOpen(t, ctx, c, source.Config{Topics: []string{topic}, Partition: 1,
				Restored: source.Offsets{topic: {1: 7}},
				// The restored offset wins over the start.
				Start: kafkaio.Start{Kind: kafkaio.StartLatest}})
			recs := srcRead(t, ctx, src, 3)
			srcWantValues(t, "restored", recs, srcSeq("v", 7, 10))
			if end(src) != 10 {
				t.Fatalf("position %d, want 10", end(src))
			}
		})
		t.Run("latest", func(t *testing.T) {
			src := srcOpen(t, ctx, c, source.Config{Topics: []string{topic}, Partition: 1,
				Start: kafkaio.Start{Kind: kafkaio.StartLatest}})
			if end(src) != 10 || !src.CaughtUp() {
				t.Fatalf("latest: position %d, caught up %v; want 10, true", end(src), src.CaughtUp())
			}
			srcProduce(t, ctx, prod, srcRec(topic, 1, "v10"), srcRec(topic, 1, "v11"))
			recs := srcRead(t, ctx, src, 2)
			srcWantValues(t, "latest", recs, []string{"v10", "v11"})
		})
	})
}

func TestSourceReadCommitted(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := srcCtx(t)
		topic := kafkatest.Name(t, "src")
		c.CreateTopic(t, topic, 1, nil)
		prod, txn := srcProducer(t, c), srcTxnClient(t, c)
		rec := func(v string) *kgo.Record { return srcRec(topic, 0, v) }
		srcProduce(t, ctx, prod, rec("a0"))
		srcTxn(t, ctx, txn, true, rec("b0"), rec("b1"), rec("b2"))
		srcTxn(t, ctx, txn, false, rec("x0"), rec("x1"))
		srcProduce(t, ctx, prod, rec("a1"))
		srcTxn(t, ctx, txn, true, rec("c0"))
		srcProduce(t, ctx, prod, rec("a2"))

		// The log's layout, markers included, from a read_uncommitted
		// reader: Kafka writes transaction markers asynchronously, so the
		// plain records may land before or after a marker.
		log := srcDump(t, ctx, c, topic, 0)
		var want []string
		var wantOffsets []int64
		for _, e := range log {
			if !e.control && e.value[0] != 'x' {
				want = append(want, e.value)
				wantOffsets = append(wantOffsets, e.offset)
			}
		}

		src := srcOpen(t, ctx, c, source.Config{Topics: []string{topic}})
		recs := srcRead(t, ctx, src, len(want))
		srcWantValues(t, "read_committed", recs, want)
		for i, r := range recs {
			if r.Offset != wantOffsets[i] {
				t.Fatalf("record %s at offset %d, want %d (log %v)", r.Value, r.Offset, wantOffsets[i], log)
			}
		}
		srcWaitCaughtUp(t, ctx, src)
		if pos, _ := src.Positions().Lookup(topic, 0); pos != log[len(log)-1].offset+1 {
			t.Fatalf("caught up at position %d, want the log end %d (log %v)", pos, log[len(log)-1].offset+1, log)
		}
	})
}

// srcEntry is one entry of a partition's log: a record or a marker.
type srcEntry struct {
	offset  int64
	value   string
	control bool
}

// srcDump waits until every transaction on the partition is resolved and
// returns the whole log, read_uncommitted, markers included.
func srcDump(t *testing.T, ctx context.Context, c *kafkatest.Cluster, topic string, partition int32) []srcEntry {
	t.Helper()
	end := srcWaitStable(t, ctx, c, topic, partition)
	cl := c.Client(t, kgo.KeepControlRecords(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}))
	defer cl.Close()
	var out []srcEntry
	for len(out) == 0 || out[len(out)-1].offset+1 < end {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("dump %s: %v", topic, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, srcEntry{offset: r.Offset, value: string(r.Value), control: r.Attrs.IsControl()})
		})
	}
	return out
}

// srcWaitStable waits until the partition's last stable offset reaches its
// high watermark (Kafka writes transaction markers after EndTxn answers)
// and returns it.
func srcWaitStable(t *testing.T, ctx context.Context, c *kafkatest.Cluster, topic string, partition int32) int64 {
	t.Helper()
	adm := c.Admin(t)
	for {
		ends, err1 := adm.ListEndOffsets(ctx, topic)
		stable, err2 := adm.ListCommittedOffsets(ctx, topic)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatalf("list offsets: %v", err)
		}
		hwm, _ := ends.Lookup(topic, partition)
		lso, _ := stable.Lookup(topic, partition)
		if hwm.Err == nil && lso.Err == nil && hwm.Offset == lso.Offset {
			return hwm.Offset
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s/%d: last stable offset %d never reached the high watermark %d", topic, partition, lso.Offset, hwm.Offset)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestSourceCaughtUpAtTrailingMarkers: the partition's last entries are
// transaction markers, so the high watermark is past the last record. A
// caught-up check built on "high watermark − 1 is the last record" would
// report lag forever; the source's uses the fetch position.
func TestSourceCaughtUpAtTrailingMarkers(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := srcCtx(t)
		topic := kafkatest.Name(t, "src")
		c.CreateTopic(t, topic, 1, nil)
		txn := srcTxnClient(t, c)
		rec := func(v string) *kgo.Record { return srcRec(topic, 0, v) }
		srcTxn(t, ctx, txn, true, rec("a"), rec("b"))  // offsets 0, 1; marker 2
		srcTxn(t, ctx, txn, false, rec("x"), rec("y")) // 3, 4 aborted; marker 5
		srcTxn(t, ctx, txn, true, rec("c"))            // 6; marker 7
		srcTxn(t, ctx, txn, false, rec("z"))           // 8 aborted; marker 9
		if end := srcWaitStable(t, ctx, c, topic, 0); end != 10 {
			t.Fatalf("log end %d, want 10", end)
		}
		src := srcOpen(t, ctx, c, source.Config{Topics: []string{topic}})
		if src.CaughtUp() {
			t.Fatalf("caught up before reading: %+v", src.Lag())
		}
		if lag := src.Lag()[0]; lag.Lag != 10 {
			t.Fatalf("lag before reading %+v, want 10", lag)
		}
		recs := srcRead(t, ctx, src, 3)
		srcWantValues(t, "committed", recs, []string{"a", "b", "c"})
		if last := recs[2].Offset; last+1 == 10 {
			t.Fatalf("test setup: the last record is at the high watermark − 1 (%d); want markers after it", last)
		}
		srcWaitCaughtUp(t, ctx, src)
		lag := src.Lag()[0]
		if lag.Lag != 0 || lag.Position != 10 {
			t.Fatalf("caught up with %+v, want lag 0 at position 10", lag)
		}
	})
}

func TestSourceCompleteCommitsOffsets(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := srcCtx(t)
		a, b := kafkatest.Name(t, "srca"), kafkatest.Name(t, "srcb")
		c.CreateTopic(t, a, 2, nil)
		c.CreateTopic(t, b, 2, nil)
		group := kafkatest.Name(t, "_weir.job.source")
		prod := srcProducer(t, c)
		adm := c.Admin(t)
		committed := func() source.Offsets {
			t.Helper()
			resp, err := adm.FetchOffsets(ctx, group)
			if err == nil {
				err = resp.Error()
			}
			for tries := 0; kerr.IsRetriable(err) && tries < 50; tries++ {
				time.Sleep(100 * time.Millisecond) // the group coordinator is starting
				if resp, err = adm.FetchOffsets(ctx, group); err == nil {
					err = resp.Error()
				}
			}
			if errors.Is(err, kerr.GroupIDNotFound) {
				return source.Offsets{}
			}
			if err != nil {
				t.Fatalf("fetch offsets: %v", err)
			}
			out := source.Offsets{}
			resp.Each(func(o kadm.OffsetResponse) { out.Set(o.Topic, o.Partition, o.At) })
			return out
		}
		srcProduce(t, ctx, prod, srcRec(a, 1, "a0"), srcRec(a, 1, "a1"), srcRec(b, 1, "b0"))
		src := srcOpen(t, ctx, c, source.Config{Topics: []string{a, b}, Partition: 1, Group: group})

		srcRead(t, ctx, src, 3)
		b1 := srcBarrier(t, ctx, src, 1)
		want1 := source.Offsets{a: {1: 2}, b: {1: 1}}
		if fmt.Sprint(b1) != fmt.Sprint(want1) {
			t.Fatalf("barrier 1 offsets %v, want %v", b1, want1)
		}
		srcProduce(t, ctx, prod, srcRec(a, 1, "a2"))
		srcRead(t, ctx, src, 1)
		b2 := srcBarrier(t, ctx, src, 2)
		for _, n := range []ckpt.ID{2, 1} {
			if _, err := src.Barrier(ctx, n); !errors.Is(err, source.ErrBarrierOrder) {
				t.Fatalf("barrier %d after barrier 2: %v, want ErrBarrierOrder", n, err)
			}
		}

		// Nothing is committed before a checkpoint completes.
		if got := committed(); len(got) != 0 {
			t.Fatalf("committed %v before any complete", got)
		}
		if err := src.Complete(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if got := committed(); fmt.Sprint(got) != fmt.Sprint(want1) {
			t.Fatalf("after complete 1: committed %v, want %v", got, want1)
		}
		// Checkpoint 2 is aborted: its offsets are never committed.
		src.Abort(2)
		if err := src.Complete(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if got := committed(); fmt.Sprint(got) != fmt.Sprint(want1) {
			t.Fatalf("after abort 2: committed %v, want still %v (barrier 2 had %v)", got, want1, b2)
		}
		// Checkpoint 3 completes and commits.
		srcProduce(t, ctx, prod, srcRec(b, 1, "b1"))
		srcRead(t, ctx, src, 1)
		b3 := srcBarrier(t, ctx, src, 3)
		if err := src.Complete(ctx, 3); err != nil {
			t.Fatal(err)
		}
		want3 := source.Offsets{a: {1: 3}, b: {1: 2}}
		if got := committed(); fmt.Sprint(got) != fmt.Sprint(want3) || fmt.Sprint(b3) != fmt.Sprint(want3) {
			t.Fatalf("after complete 3: committed %v, barrier %v, want %v", got, b3, want3)
		}
	})
}

func TestSourceOffsetOutOfRangeOnRestore(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := srcCtx(t)
		topic := kafkatest.Name(t, "src")
		c.CreateTopic(t, topic, 1, nil)
		prod := srcProducer(t, c)
		for i := range 10 {
			srcProduce(t, ctx, prod, srcRec(topic, 0, "v"+strconv.Itoa(i)))
		}
		// Retention (here DeleteRecords) removed offsets below 6 after the
		// checkpoint that stored offset 2 was taken.
		del := kadm.Offsets{}
		del.Add(kadm.Offset{Topic: topic, Partition: 0, At: 6, LeaderEpoch: -1})
		resp, err := c.Admin(t).DeleteRecords(ctx, del)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatalf("delete records: %v", err)
		}

		src := srcOpen(t, ctx, c, source.Config{Topics: []string{topic}, Restored: source.Offsets{topic: {0: 2}}})
		recs, err := src.Next(ctx)
		var oor *source.OffsetOutOfRangeError
		if !errors.As(err, &oor) {
			t.Fatalf("Next = records %v, %v; want a *OffsetOutOfRangeError", srcValues(recs), err)
		}
		if oor.Topic != topic || oor.Partition != 0 || oor.Offset != 2 || oor.LogStartOffset != 6 || !errors.Is(err, source.ErrOffsetLost) {
			t.Fatalf("error %+v, want topic %s partition 0 offset 2 log start 6, matching ErrOffsetLost", oor, topic)
		}
		t.Logf("error: %v", err)
		// The error is final: no silent reset on a second call.
		if _, err2 := src.Next(ctx); !errors.Is(err2, err) {
			t.Fatalf("second Next = %v, want the same error", err2)
		}
	})
}

func TestSourceConfigInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  source.Config
	}{
		{"no topics", source.Config{}},
		{"duplicate topic", source.Config{Topics: []string{"a", "a"}}},
		{"negative partition", source.Config{Topics: []string{"a"}, Partition: -1}},
		{"negative restored offset", source.Config{Topics: []string{"a"}, Restored: source.Offsets{"a": {0: -1}}}},
		{"unknown policy", source.Config{Topics: []string{"a"}, OnError: "drop"}},
		{"dead letter without topic", source.Config{Topics: []string{"a"}, OnError: kafkaio.OnErrorDeadLetter}},
		{"dead letter to input", source.Config{Topics: []string{"a"}, OnError: kafkaio.OnErrorDeadLetter, DeadLetterTopic: "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := source.New(context.Background(), tc.cfg)
			if !errors.Is(err, source.ErrConfig) {
				t.Fatalf("New = %v, want ErrConfig", err)
			}
		})
	}
}

// TestSourceNextWakes: a Next that waits on an idle partition returns when
// its context is cancelled (how the task places a barrier that arrives
// meanwhile) and the source goes on; a barrier there has the idle
// positions; Close unblocks a waiting Next and refuses later barriers.
func TestSourceNextWakes(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := srcCtx(t)
		topic := kafkatest.Name(t, "src")
		c.CreateTopic(t, topic, 1, nil)
		src := srcOpen(t, ctx, c, source.Config{Topics: []string{topic}})
		pollCtx, cancel := context.WithCancel(ctx)
		time.AfterFunc(100*time.Millisecond, cancel)
		t0 := time.Now()
		recs, err := src.Next(pollCtx)
		if waited := time.Since(t0); !errors.Is(err, context.Canceled) || waited > 5*time.Second {
			t.Fatalf("Next across a cancel = records %v, %v after %v; want context.Canceled soon", srcValues(recs), err, waited)
		}
		bar := srcBarrier(t, ctx, src, 7)
		if want := (source.Offsets{topic: {0: 0}}); fmt.Sprint(bar) != fmt.Sprint(want) {
			t.Fatalf("barrier offsets %v, want %v", bar, want)
		}
		// A cancelled poll is not a failure: the source reads on.
		srcProduce(t, ctx, srcProducer(t, c), srcRec(topic, 0, "v0"))
		srcWantValues(t, "after the cancelled poll", srcRead(t, ctx, src, 1), []string{"v0"})

		time.AfterFunc(100*time.Millisecond, src.Close)
		if recs, err := src.Next(ctx); !errors.Is(err, source.ErrClosed) {
			t.Fatalf("Next across Close = records %v, %v; want ErrClosed", srcValues(recs), err)
		}
		if _, err := src.Barrier(ctx, 8); !errors.Is(err, source.ErrClosed) {
			t.Fatalf("Barrier after Close = %v, want ErrClosed", err)
		}
	})
}

// TestSourceBatches: Next takes a whole poll from the client but returns it
// at most MaxBatchRecords at a time, from every topic of the task, each
// record once and in order; between two calls the positions are exactly
// past what was returned, and the source is caught up only once it
// returned everything.
func TestSourceBatches(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := srcCtx(t)
		a, b := kafkatest.Name(t, "a"), kafkatest.Name(t, "b")
		c.CreateTopic(t, a, 1, nil)
		c.CreateTopic(t, b, 1, nil)
		prod := srcProducer(t, c)
		const n = 500
		var recs []*kgo.Record
		for i := range n {
			recs = append(recs, srcRec(a, 0, "a"+strconv.Itoa(i)), srcRec(b, 0, "b"+strconv.Itoa(i)))
		}
		srcProduce(t, ctx, prod, recs...)
		const max = 7
		src := srcOpen(t, ctx, c, source.Config{Topics: []string{a, b}, MaxBatchRecords: max})
		got := map[string][]string{}
		pos := map[string]int64{a: 0, b: 0}
		for len(got[a])+len(got[b]) < 2*n {
			batch, err := src.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(batch) == 0 || len(batch) > max {
				t.Fatalf("a batch of %d records, want 1 to %d", len(batch), max)
			}
			for _, r := range batch {
				if r.Offset != pos[r.Topic] {
					t.Fatalf("%s offset %d, want %d", r.Topic, r.Offset, pos[r.Topic])
				}
				pos[r.Topic]++
				got[r.Topic] = append(got[r.Topic], string(r.Value))
			}
			for _, topic := range []string{a, b} {
				if off, _ := src.Positions().Lookup(topic, 0); off != pos[topic] {
					t.Fatalf("position of %s %d after returning up to %d", topic, off, pos[topic])
				}
			}
			if rest := 2*n - len(got[a]) - len(got[b]); rest > 0 && src.CaughtUp() {
				t.Fatalf("caught up with %d records not returned", rest)
			}
		}
		srcWantValues(t, a, srcRecsOf(got[a]), srcSeq("a", 0, n))
		srcWantValues(t, b, srcRecsOf(got[b]), srcSeq("b", 0, n))
		srcWaitCaughtUp(t, ctx, src)
	})
}

func srcRecsOf(values []string) []*kgo.Record {
	out := make([]*kgo.Record, len(values))
	for i, v := range values {
		out[i] = &kgo.Record{Value: []byte(v)}
	}
	return out
}
