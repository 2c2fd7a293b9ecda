package sink_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/internal/promtest"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/kafkaio/sink"
)

// These tests drive the sink as a task would and check, with read_committed
// consumers, what becomes visible when. Each runs on kfake and on the real
// broker.

func sinkCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// sinkEnv is one test's topic, transactional-ID prefix and metrics.
type sinkEnv struct {
	c      *kafkatest.Cluster
	topic  string
	prefix string
	reg    *prometheus.Registry
	met    *sink.Metrics
}

func newSinkEnv(t *testing.T, c *kafkatest.Cluster, partitions int32) *sinkEnv {
	t.Helper()
	e := &sinkEnv{c: c, topic: kafkatest.Name(t, "sink"), prefix: kafkatest.Name(t, "weir") + ".", reg: prometheus.NewRegistry()}
	c.CreateTopic(t, e.topic, partitions, nil)
	met, err := sink.NewMetrics(e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.met = met
	return e
}

func (e *sinkEnv) opts() []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(e.c.Brokers...), kgo.DefaultProduceTopic(e.topic)}
}

func (e *sinkEnv) config(mod func(*sink.Config)) sink.Config {
	cfg := sink.Config{
		ClientOpts:            e.opts(),
		TransactionalIDPrefix: e.prefix,
		Stage:                 "out",
		Partition:             0,
		TransactionTimeout:    time.Minute,
		Logger:                sinkLog(),
		Metrics:               e.met,
	}
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

// sink builds and recovers a sink; it is closed when the test ends.
func (e *sinkEnv) sink(t *testing.T, ctx context.Context, handles []sink.TxnHandle, mod func(*sink.Config)) *sink.Sink {
	t.Helper()
	s, err := sink.New(e.config(mod))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	if err := s.Recover(ctx, handles); err != nil {
		t.Fatalf("recover: %v", err)
	}
	return s
}

func sinkLog() *slog.Logger {
	if testing.Verbose() && os.Getenv("WEIR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// sinkWrite writes n records "<tag>-<i>" over the topic's partitions.
func sinkWrite(t *testing.T, ctx context.Context, s *sink.Sink, tag string, n, partitions int) []string {
	t.Helper()
	var vs []string
	for i := range n {
		v := tag + "-" + strconv.Itoa(i)
		vs = append(vs, v)
		if err := s.Write(ctx, &kgo.Record{Value: []byte(v), Partition: int32(i % partitions)}); err != nil {
			t.Fatalf("write %s: %v", v, err)
		}
	}
	return vs
}

// sinkPreCommit runs barrier n and waits for its handles.
func sinkPreCommit(t *testing.T, ctx context.Context, s *sink.Sink, n ckpt.ID) []sink.TxnHandle {
	t.Helper()
	pc, err := s.PreCommit(ctx, n)
	if err != nil {
		t.Fatalf("pre-commit %d: %v", n, err)
	}
	hs, err := pc.Wait(ctx)
	if err != nil {
		t.Fatalf("pre-commit %d: wait: %v", n, err)
	}
	return hs
}

// sinkCommitted reads the topic with read_committed until it holds want
// records, then for settle more, and returns every value read, sorted.
func sinkCommitted(t *testing.T, ctx context.Context, c *kafkatest.Cluster, topic string, want int, settle time.Duration) []string {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	var got []string
	poll := func(ctx context.Context) {
		fs := cl.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.Fatalf("fetch %s[%d]: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	for len(got) < want {
		if ctx.Err() != nil {
			t.Fatalf("read_committed saw %d of %d records before the deadline", len(got), want)
		}
		poll(ctx)
	}
	sctx, cancel := context.WithTimeout(ctx, settle)
	defer cancel()
	for sctx.Err() == nil {
		poll(sctx)
	}
	slices.Sort(got)
	return got
}

// sinkAwaitUncommitted reads the topic with read_uncommitted until it has
// seen every value of want, written in a transaction still open: the
// records are on the broker, so what a test does next (abandon the sink,
// kill its process) cannot lose them in the client's buffer.
func sinkAwaitUncommitted(t *testing.T, ctx context.Context, c *kafkatest.Cluster, topic string, want []string) {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.FetchMaxWait(100*time.Millisecond))
	missing := make(map[string]bool, len(want))
	for _, v := range want {
		missing[v] = true
	}
	for len(missing) > 0 {
		if ctx.Err() != nil {
			t.Fatalf("read_uncommitted saw %d of %d records before the deadline", len(want)-len(missing), len(want))
		}
		fs := cl.PollFetches(ctx)
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				t.Fatalf("fetch %s[%d]: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) { delete(missing, string(r.Value)) })
	}
}

func sinkWantValues(t *testing.T, what string, got, want []string) {
	t.Helper()
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: read_committed saw %d records, want %d exactly once\n got: %v\nwant: %v", what, len(got), len(want), got, want)
	}
}

func sinkHistogramSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return sum
}

func sinkOpenTxns(t *testing.T, ctx context.Context, e *sinkEnv) []sink.TxnInfo {
	t.Helper()
	a, err := sink.NewAdmin(e.opts(), e.prefix, sinkLog())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	infos, err := a.ListTxns(ctx, true)
	if err != nil {
		t.Fatalf("list transactions: %v", err)
	}
	return infos
}

// sinkEventuallyOpen waits until the open transactions of the sink's job
// are exactly those on the IDs want. A transaction just ended is still
// listed (PrepareCommit, PrepareAbort) until the broker has written its
// markers, which Apache Kafka does after answering EndTxn.
func sinkEventuallyOpen(t *testing.T, ctx context.Context, e *sinkEnv, when string, want ...string) {
	t.Helper()
	slices.Sort(want)
	deadline := time.Now().Add(15 * time.Second)
	for {
		open := sinkOpenTxns(t, ctx, e)
		ids := make([]string, len(open))
		for i, o := range open {
			ids[i] = o.TransactionalID
		}
		slices.Sort(ids)
		if slices.Equal(ids, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: open transactions %+v, want those on %v", when, open, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSinkCommitPath runs epochs 1..5 (epoch 3 empty) with barriers and
// completions: a read_committed consumer sees nothing of an epoch before its
// checkpoint completes, then every record exactly once.
func TestSinkCommitPath(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 3)
		s := e.sink(t, ctx, nil, nil)

		var committed []string
		sizes := []int{40, 25, 0, 60, 10}
		for i, n := range sizes {
			epoch := ckpt.ID(i + 1)
			vs := sinkWrite(t, ctx, s, "e"+strconv.Itoa(i+1), n, 3)
			hs := sinkPreCommit(t, ctx, s, epoch)
			if n == 0 {
				if len(hs) != 0 {
					t.Fatalf("empty epoch %d: handles %v, want none", epoch, hs)
				}
			} else {
				if len(hs) != 1 || hs[0].Checkpoint != epoch || !strings.HasPrefix(hs[0].TransactionalID, e.prefix+"out-0-") || hs[0].ProducerID < 0 {
					t.Fatalf("epoch %d: handles %+v, want one of checkpoint %d", epoch, hs, epoch)
				}
				// Pre-committed, not complete: invisible.
				sinkWantValues(t, fmt.Sprintf("after pre-commit %d", epoch), sinkCommitted(t, ctx, c, e.topic, len(committed), 300*time.Millisecond), committed)
			}
			if err := s.NotifyComplete(ctx, epoch); err != nil {
				t.Fatalf("complete %d: %v", epoch, err)
			}
			committed = append(committed, vs...)
			sinkWantValues(t, fmt.Sprintf("after complete %d", epoch), sinkCommitted(t, ctx, c, e.topic, len(committed), 200*time.Millisecond), committed)
		}
		if got := promtest.Sum(t, e.reg, "weir_sink_transactions_committed_total"); got != 4 {
			t.Errorf("transactions committed %v, want 4 (the empty epoch has none)", got)
		}
		if got := promtest.Sum(t, e.reg, "weir_sink_records_written_total"); got != 135 {
			t.Errorf("records written %v, want 135", got)
		}
		if got := promtest.Sum(t, e.reg, "weir_sink_commit_latency_seconds"); got != 4 {
			t.Errorf("commit latency observations %v, want 4", got)
		}
		sinkEventuallyOpen(t, ctx, e, "after the last completion")
		if err := s.Close(ctx); err != nil {
			t.Fatalf("close: %v", err)
		}
	})
}

// TestSinkAbortKeepsData: a checkpoint that is aborted keeps its
// pre-committed transaction, which the next completed checkpoint commits; a
// completion of n commits every epoch <= n at once.
func TestSinkAbortKeepsData(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 2)
		s := e.sink(t, ctx, nil, nil)

		v1 := sinkWrite(t, ctx, s, "e1", 20, 2)
		if hs := sinkPreCommit(t, ctx, s, 1); len(hs) != 1 {
			t.Fatalf("handles of 1: %+v", hs)
		}
		s.Abort(1)
		v2 := sinkWrite(t, ctx, s, "e2", 20, 2)
		hs := sinkPreCommit(t, ctx, s, 2)
		if len(hs) != 2 || hs[0].Checkpoint != 1 || hs[1].Checkpoint != 2 || hs[0].TransactionalID == hs[1].TransactionalID {
			t.Fatalf("handles of 2: %+v, want the aborted checkpoint's and its own", hs)
		}
		v3 := sinkWrite(t, ctx, s, "e3", 20, 2) // open while 1 and 2 commit
		sinkWantValues(t, "before completion", sinkCommitted(t, ctx, c, e.topic, 0, 300*time.Millisecond), nil)
		if err := s.NotifyComplete(ctx, 2); err != nil {
			t.Fatal(err)
		}
		want := append(slices.Clone(v1), v2...)
		sinkWantValues(t, "after complete 2", sinkCommitted(t, ctx, c, e.topic, len(want), 300*time.Millisecond), want)
		sinkPreCommit(t, ctx, s, 3)
		if err := s.NotifyComplete(ctx, 3); err != nil {
			t.Fatal(err)
		}
		want = append(want, v3...)
		sinkWantValues(t, "after complete 3", sinkCommitted(t, ctx, c, e.topic, len(want), 200*time.Millisecond), want)
	})
}

// TestSinkCompletionLagsBarrier: barrier 2 reaches the sink before it has
// read complete 1; each completion commits its own epochs only.
func TestSinkCompletionLagsBarrier(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 1)
		s := e.sink(t, ctx, nil, nil)
		v1 := sinkWrite(t, ctx, s, "e1", 10, 1)
		sinkPreCommit(t, ctx, s, 1)
		v2 := sinkWrite(t, ctx, s, "e2", 10, 1)
		if hs := sinkPreCommit(t, ctx, s, 2); len(hs) != 2 {
			t.Fatalf("handles of 2 before complete 1: %+v, want 1's and 2's", hs)
		}
		if err := s.NotifyComplete(ctx, 1); err != nil {
			t.Fatal(err)
		}
		sinkWantValues(t, "after complete 1", sinkCommitted(t, ctx, c, e.topic, len(v1), 300*time.Millisecond), v1)
		if hs := sinkPreCommit(t, ctx, s, 3); len(hs) != 1 || hs[0].Checkpoint != 2 {
			t.Fatalf("handles of 3 (empty epoch): %+v, want 2's only", hs)
		}
		if err := s.NotifyComplete(ctx, 2); err != nil {
			t.Fatal(err)
		}
		want := append(slices.Clone(v1), v2...)
		sinkWantValues(t, "after complete 2", sinkCommitted(t, ctx, c, e.topic, len(want), 200*time.Millisecond), want)
	})
}

func TestSinkTxnHandleJSON(t *testing.T) {
	h := sink.TxnHandle{TransactionalID: "_weir.j.out-3-1", ProducerID: 4711, ProducerEpoch: 12, Checkpoint: 42}
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"transactional_id":"_weir.j.out-3-1","producer_id":4711,"epoch":12,"checkpoint":42}`
	if string(b) != want {
		t.Fatalf("handle JSON %s, want %s", b, want)
	}
	var back sink.TxnHandle
	if err := json.Unmarshal(b, &back); err != nil || back != h {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

// TestSinkCrashRecovery: a sink pre-commits epoch 1, writes part of epoch 2,
// and dies without committing (its clients are simply abandoned). A new sink
// recovers from the snapshot's handles: epoch 1 is committed exactly once,
// epoch 2's open transaction is aborted. Recovering again from the same
// handles is fine. The old sink is a fenced zombie: its commit and its writes
// fail and change nothing.
func TestSinkCrashRecovery(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 2)
		old := e.sink(t, ctx, nil, nil)
		v1 := sinkWrite(t, ctx, old, "e1", 30, 2)
		handles := sinkPreCommit(t, ctx, old, 1)
		sinkWrite(t, ctx, old, "e2", 30, 2)
		// Let epoch 2's records reach the broker, inside their open
		// transaction: what a crash leaves behind.
		time.Sleep(200 * time.Millisecond)

		fresh := e.sink(t, ctx, handles, nil)
		sinkWantValues(t, "after recovery", sinkCommitted(t, ctx, c, e.topic, len(v1), 500*time.Millisecond), v1)
		sinkEventuallyOpen(t, ctx, e, "after recovery")

		// Recovering twice: already committed, and still exactly once.
		again := e.sink(t, ctx, handles, nil)
		sinkWantValues(t, "after a second recovery", sinkCommitted(t, ctx, c, e.topic, len(v1), 300*time.Millisecond), v1)

		// The zombie: its completion of checkpoint 1 and its pre-commit
		// of epoch 2 are refused.
		if err := old.NotifyComplete(ctx, 1); !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("zombie commit: %v, want ErrFenced", err)
		}
		if _, err := old.PreCommit(ctx, 2); !errors.Is(err, sink.ErrFailed) {
			t.Fatalf("zombie pre-commit after the failure: %v, want ErrFailed", err)
		}

		// The recovered sink carries on.
		v2 := sinkWrite(t, ctx, again, "n2", 10, 2)
		sinkPreCommit(t, ctx, again, 2)
		if err := again.NotifyComplete(ctx, 2); err != nil {
			t.Fatal(err)
		}
		want := append(slices.Clone(v1), v2...)
		sinkWantValues(t, "after the next checkpoint", sinkCommitted(t, ctx, c, e.topic, len(want), 300*time.Millisecond), want)
		_ = fresh
	})
}

// TestSinkClosedWithoutCommit: a sink closed between pre-commit and commit
// aborts its open epoch and leaves the pre-committed transaction to the next
// instance, whose recovery commits it exactly once.
func TestSinkClosedWithoutCommit(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 2)
		old := e.sink(t, ctx, nil, nil)
		v1 := sinkWrite(t, ctx, old, "e1", 30, 2)
		handles := sinkPreCommit(t, ctx, old, 1)
		sinkWrite(t, ctx, old, "e2", 30, 2)
		if err := old.Close(ctx); err != nil {
			t.Fatalf("close: %v", err)
		}
		sinkEventuallyOpen(t, ctx, e, "after close (the pre-committed transaction only)", handles[0].TransactionalID)
		if err := old.Write(ctx, &kgo.Record{Value: []byte("late")}); !errors.Is(err, sink.ErrClosed) {
			t.Fatalf("write after close: %v", err)
		}
		e.sink(t, ctx, handles, nil)
		sinkWantValues(t, "after recovery", sinkCommitted(t, ctx, c, e.topic, len(v1), 500*time.Millisecond), v1)
		if got := promtest.Sum(t, e.reg, "weir_sink_transactions_aborted_total"); got != 1 {
			t.Errorf("transactions aborted %v, want 1 (the open epoch at close)", got)
		}
	})
}

// TestSinkZombieWritesFenced: after a new instance recovered, the old one's
// writes into a new epoch fail at its pre-commit and never become visible.
func TestSinkZombieWritesFenced(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 1)
		old := e.sink(t, ctx, nil, nil)
		v1 := sinkWrite(t, ctx, old, "e1", 10, 1)
		handles := sinkPreCommit(t, ctx, old, 1)

		e.sink(t, ctx, handles, nil)

		// The zombie writes epoch 2 into its next slot, fenced by the
		// recovery: its pre-commit fails.
		sinkWrite(t, ctx, old, "zombie", 10, 1)
		pc, err := old.PreCommit(ctx, 2)
		if err == nil {
			_, err = pc.Wait(ctx)
		}
		if err == nil {
			t.Fatal("the zombie's pre-commit succeeded")
		}
		t.Logf("zombie pre-commit: %v", err)
		sinkWantValues(t, "after the zombie wrote", sinkCommitted(t, ctx, c, e.topic, len(v1), 500*time.Millisecond), v1)
	})
}

// TestSinkTxnTimeoutReported: a pre-committed transaction that the broker
// aborts because its transaction timeout expired is reported, typed, both by
// the sink's own commit and by a recovery from its handle.
func TestSinkTxnTimeoutReported(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 1)
		const timeout = 2 * time.Second
		s := e.sink(t, ctx, nil, func(cfg *sink.Config) { cfg.TransactionTimeout = timeout })
		sinkWrite(t, ctx, s, "e1", 10, 1)
		handles := sinkPreCommit(t, ctx, s, 7)

		// Wait for the broker to abort it.
		adm := c.Admin(t)
		deadline := time.Now().Add(20 * time.Second)
		for {
			ds, err := adm.DescribeTransactions(ctx, handles[0].TransactionalID)
			if err != nil {
				t.Fatal(err)
			}
			d := ds[handles[0].TransactionalID]
			if d.State != "Ongoing" && d.State != "PrepareAbort" {
				t.Logf("broker aborted the transaction: state %s, producer id %d epoch %d", d.State, d.ProducerID, d.ProducerEpoch)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the broker did not abort the transaction after its %v timeout: %+v", timeout, d)
			}
			time.Sleep(250 * time.Millisecond)
		}

		checkErr := func(what string, err error) {
			t.Helper()
			var aborted *sink.TxnAbortedError
			if !errors.As(err, &aborted) || !errors.Is(err, sink.ErrTxnAborted) {
				t.Fatalf("%s: %v, want a *TxnAbortedError", what, err)
			}
			if aborted.Checkpoint != 7 || aborted.TransactionalID != handles[0].TransactionalID || aborted.Setting != "sink.transaction_timeout" {
				t.Fatalf("%s: %+v", what, aborted)
			}
			for _, s := range []string{"checkpoint 7", handles[0].TransactionalID, "sink.transaction_timeout"} {
				if !strings.Contains(err.Error(), s) {
					t.Fatalf("%s: %q does not name %q", what, err, s)
				}
			}
			t.Logf("%s: %v", what, err)
		}
		checkErr("commit on completion", s.NotifyComplete(ctx, 7))

		fresh, err := sink.New(e.config(nil))
		if err != nil {
			t.Fatal(err)
		}
		defer fresh.Close(ctx)
		checkErr("recovery", fresh.Recover(ctx, handles))
		sinkWantValues(t, "lost output", sinkCommitted(t, ctx, c, e.topic, 0, 300*time.Millisecond), nil)
	})
}

// TestSinkPoolExhaustion: with every producer of the pool pre-committed, the
// first record of the next epoch waits until a completion frees one, and the
// wait is measured.
func TestSinkPoolExhaustion(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 1)
		s := e.sink(t, ctx, nil, func(cfg *sink.Config) { cfg.PoolSize = 2 })
		v1 := sinkWrite(t, ctx, s, "e1", 5, 1)
		sinkPreCommit(t, ctx, s, 1)
		v2 := sinkWrite(t, ctx, s, "e2", 5, 1)
		sinkPreCommit(t, ctx, s, 2)

		// A bounded wait gives up.
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := s.Write(short, &kgo.Record{Value: []byte("x")})
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("write with the pool exhausted: %v, want a deadline error", err)
		}

		// The hold is timed from the writer goroutine's start, not from
		// the go statement: on a loaded machine the goroutine may start
		// late, and would then have waited less than the hold.
		wrote := make(chan error, 1)
		began := make(chan struct{})
		go func() { close(began); wrote <- s.Write(ctx, &kgo.Record{Value: []byte("e3-0")}) }()
		<-began
		const hold = 600 * time.Millisecond
		select {
		case err := <-wrote:
			t.Fatalf("write returned (%v) while the pool was exhausted", err)
		case <-time.After(hold):
		}
		if err := s.NotifyComplete(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if err := <-wrote; err != nil {
			t.Fatalf("write after a slot was freed: %v", err)
		}
		if waited := sinkHistogramSum(t, e.reg, "weir_sink_pool_wait_seconds"); waited < hold.Seconds()/2 {
			t.Errorf("measured pool wait %.3fs, want about %v", waited, hold)
		}
		sinkPreCommit(t, ctx, s, 3)
		if err := s.NotifyComplete(ctx, 3); err != nil {
			t.Fatal(err)
		}
		want := append(append(slices.Clone(v1), v2...), "e3-0")
		sinkWantValues(t, "after complete 3", sinkCommitted(t, ctx, c, e.topic, len(want), 200*time.Millisecond), want)
	})
}

// TestSinkAtLeastOnce: the idempotent producer is flushed at the barrier:
// every record written before it is in Kafka when PreCommit returns.
func TestSinkAtLeastOnce(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 2)
		s := e.sink(t, ctx, nil, func(cfg *sink.Config) {
			cfg.Delivery = kafkaio.DeliveryAtLeastOnce
			// A long linger: without the barrier's flush the
			// records would sit in the client.
			cfg.ClientOpts = append(cfg.ClientOpts, kgo.ProducerLinger(time.Minute))
		})
		vs := sinkWrite(t, ctx, s, "a", 50, 2)
		pc, err := s.PreCommit(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if got := promtest.Sum(t, e.reg, "weir_sink_records_written_total"); got != 50 {
			t.Fatalf("records acknowledged when PreCommit returned: %v, want 50", got)
		}
		if hs, err := pc.Wait(ctx); err != nil || len(hs) != 0 {
			t.Fatalf("at-least-once handles %v, %v; want none", hs, err)
		}
		if err := s.NotifyComplete(ctx, 1); err != nil {
			t.Fatal(err)
		}
		sinkWantValues(t, "after the barrier", sinkCommitted(t, ctx, c, e.topic, len(vs), 200*time.Millisecond), vs)
	})
}

// TestSinkCheckTimeouts: the start-time check refuses a transaction timeout
// above the brokers' transaction.max.timeout.ms or too short for the
// checkpoint settings, saying what to change.
func TestSinkCheckTimeouts(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		adm := c.Admin(t)
		check := func(tt sink.Timeouts) error { return sink.CheckTimeouts(ctx, adm, tt) }

		if err := check(sink.Timeouts{TransactionTimeout: 15 * time.Minute, CheckpointInterval: 10 * time.Second, CheckpointTimeout: 10 * time.Minute}); err != nil {
			t.Fatalf("defaults refused: %v", err)
		}
		err := check(sink.Timeouts{TransactionTimeout: 20 * time.Minute, CheckpointInterval: 10 * time.Second, CheckpointTimeout: 10 * time.Minute})
		sinkWantErr(t, "above the broker maximum", err, "sink.transaction_timeout 20m0s exceeds", "transaction.max.timeout.ms 900000", "at most 15m0s")

		err = check(sink.Timeouts{TransactionTimeout: time.Minute, CheckpointInterval: 30 * time.Second, CheckpointTimeout: 10 * time.Minute})
		sinkWantErr(t, "too short", err, "sink.transaction_timeout 1m0s is too short", "checkpoint.interval 30s", "at least 12m0s")

		err = check(sink.Timeouts{TransactionTimeout: 14 * time.Minute, CheckpointInterval: 5 * time.Minute, CheckpointTimeout: 10 * time.Minute})
		sinkWantErr(t, "checkpoints too long for the broker", err, "at least 21m0s", "raise transaction.max.timeout.ms on every broker to at least 1260000")
	})
}

func sinkWantErr(t *testing.T, what string, err error, contains ...string) {
	t.Helper()
	if !errors.Is(err, sink.ErrTimeoutConfig) {
		t.Fatalf("%s: %v, want ErrTimeoutConfig", what, err)
	}
	for _, s := range contains {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("%s: %q does not say %q", what, err, s)
		}
	}
	t.Logf("%s: %v", what, err)
}

func TestSinkConfigInvalid(t *testing.T) {
	for _, cfg := range []sink.Config{
		{Stage: "", TransactionalIDPrefix: "p."},
		{Stage: "s", Partition: -1, TransactionalIDPrefix: "p."},
		{Stage: "s"}, // exactly-once without a prefix
		{Stage: "s", TransactionalIDPrefix: "p.", PoolSize: -1},
		{Stage: "s", TransactionalIDPrefix: "p.", TransactionTimeout: time.Millisecond},
	} {
		if _, err := sink.New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	s, err := sink.New(sink.Config{Stage: "s", TransactionalIDPrefix: "p."})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(context.Background(), &kgo.Record{}); !errors.Is(err, sink.ErrNotRecovered) {
		t.Fatalf("write before recover: %v", err)
	}
	if got := sink.TxnID("_weir.job.", "out", 3, 1); got != "_weir.job.out-3-1" {
		t.Fatalf("TxnID = %q", got)
	}
	if sink.DefaultPoolSize(1) != 3 || sink.DefaultPoolSize(0) != 3 || sink.DefaultPoolSize(4) != 6 {
		t.Fatal("DefaultPoolSize is not max_concurrent + 2")
	}
}

// A sink's first transaction on a topic its producers never wrote to must
// commit, as the coordinator's (TestControlWriterFirstWriteToEachTopicCommits):
// franz-go can abort it and return nil (internal/txnwatch). Each round is a new
// sink on a new topic, committed as soon as the barrier has flushed.
// kfake only: the gap is in the client.
func TestSinkFirstTransactionOnATopicCommits(t *testing.T) {
	c := kafkatest.NewKfake(t)
	ctx := sinkCtx(t)
	for round := range 40 {
		e := newSinkEnv(t, c, 1)
		e.topic = fmt.Sprintf("%s-%d", e.topic, round)
		c.CreateTopic(t, e.topic, 1, nil)
		s := e.sink(t, ctx, nil, func(cfg *sink.Config) { cfg.PoolSize = 1 })
		if err := s.Write(ctx, &kgo.Record{Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
		sinkPreCommit(t, ctx, s, 1)
		if err := s.NotifyComplete(ctx, 1); err != nil {
			t.Fatalf("round %d: commit: %v", round, err)
		}
		if got := c.ReadCommitted(ctx, t, e.topic); len(got) != 1 {
			t.Fatalf("round %d: read_committed saw %d records, want 1", round, len(got))
		}
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSinkRenamedPool: a sink that ran its pool under another name before
// (a checkpoint of an earlier build, whose IDs had no topic) commits what
// the checkpoint recorded under the old IDs and fences the old pool too
// (FenceIDs), whose open transaction would otherwise block read_committed
// readers until its timeout; then it runs its own pool. On kfake and the
// real broker.
func TestSinkRenamedPool(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 2)
		old := e.sink(t, ctx, nil, nil) // pool "out"
		v1 := sinkWrite(t, ctx, old, "e1", 30, 2)
		handles := sinkPreCommit(t, ctx, old, 1)
		sinkWrite(t, ctx, old, "e2", 30, 2)
		// The epoch left open by the crash is on a slot of the old pool.
		sinkEventuallyOpen(t, ctx, e, "before recovery", handles[0].TransactionalID, sink.TxnID(e.prefix, "out", 0, 1))

		var former []string
		for slot := range sink.DefaultPoolSize(1) {
			former = append(former, sink.TxnID(e.prefix, "out", 0, slot))
		}
		renamed := e.sink(t, ctx, handles, func(c *sink.Config) { c.Topic, c.FenceIDs = e.topic, former })
		sinkWantValues(t, "after recovery", sinkCommitted(t, ctx, c, e.topic, len(v1), 300*time.Millisecond), v1)
		sinkEventuallyOpen(t, ctx, e, "after recovery")

		v2 := sinkWrite(t, ctx, renamed, "n2", 10, 2)
		hs := sinkPreCommit(t, ctx, renamed, 2)
		if want := sink.PoolName("out", e.topic); !strings.HasPrefix(hs[0].TransactionalID, e.prefix+want+"-0-") {
			t.Fatalf("the renamed sink's transaction runs on %s, want a slot of pool %s", hs[0].TransactionalID, want)
		}
		if err := renamed.NotifyComplete(ctx, 2); err != nil {
			t.Fatal(err)
		}
		want := append(slices.Clone(v1), v2...)
		sinkWantValues(t, "after the next checkpoint", sinkCommitted(t, ctx, c, e.topic, len(want), 300*time.Millisecond), want)
	})
}

// TestSinkRetire: Retire commits what a checkpoint recorded for a sink the
// job no longer has, fences its pool (the open epoch is aborted, the old
// instance is fenced) and leaves nothing running. On kfake and the real
// broker.
func TestSinkRetire(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 2)
		topicPool := func(c *sink.Config) { c.Topic = e.topic }
		old := e.sink(t, ctx, nil, topicPool)
		v1 := sinkWrite(t, ctx, old, "e1", 30, 2)
		handles := sinkPreCommit(t, ctx, old, 1)
		sinkWrite(t, ctx, old, "e2", 30, 2)
		sinkEventuallyOpen(t, ctx, e, "before", handles[0].TransactionalID, sink.TxnID(e.prefix, sink.PoolName("out", e.topic), 0, 1))

		if err := sink.Retire(ctx, e.config(topicPool), handles); err != nil {
			t.Fatalf("retire: %v", err)
		}
		sinkWantValues(t, "after retiring", sinkCommitted(t, ctx, c, e.topic, len(v1), 300*time.Millisecond), v1)
		sinkEventuallyOpen(t, ctx, e, "after retiring")
		if err := old.NotifyComplete(ctx, 1); !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("the old instance's commit after retiring: %v, want ErrFenced", err)
		}
		// Twice is harmless: the transactions are found committed.
		if err := sink.Retire(ctx, e.config(topicPool), handles); err != nil {
			t.Fatalf("retire again: %v", err)
		}
		sinkWantValues(t, "after retiring twice", sinkCommitted(t, ctx, c, e.topic, len(v1), 300*time.Millisecond), v1)
	})
}
