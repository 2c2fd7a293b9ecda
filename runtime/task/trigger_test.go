package task

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/internal/testlog"
	"github.com/weir-stream/weir/kafkaio/source"
)

// openTestSourceInput returns a source input on partition 0 of topic, from
// its start, closed when the test ends.
func openTestSourceInput(t *testing.T, ctx context.Context, c *kafkatest.Cluster, topic string) *sourceInput {
	t.Helper()
	src, err := source.New(ctx, source.Config{
		ClientOpts: append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, c.Opts...),
		Topics:     []string{topic},
		Logger:     slog.New(slog.NewTextHandler(testlog.New(t, ""), nil)),
	})
	if err != nil {
		t.Fatalf("NewSource: %v", err)
	}
	in := newSourceInput(src, nil, time.Now)
	t.Cleanup(in.close)
	return in
}

// nextElement calls next with a context of its own, and returns what it
// returned and how long it took.
func nextElement(t *testing.T, ctx context.Context, in *sourceInput) (element, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	t0 := time.Now()
	el, err := in.next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return el, time.Since(t0)
}

// wantBarrier checks that el is barrier n at offset off of topic's
// partition 0.
func wantBarrier(t *testing.T, el element, n ckpt.ID, topic string, off int64) {
	t.Helper()
	if el.barrier == nil {
		t.Fatalf("next returned %d records, want barrier %d", len(el.records), n)
	}
	want := source.Offsets{topic: {0: off}}
	if el.barrier.barrier != barrierOf(n) || fmt.Sprint(el.barrier.offsets) != fmt.Sprint(want) {
		t.Fatalf("barrier %d at %v, want %d at %v", el.barrier.barrier.ID, el.barrier.offsets, n, want)
	}
}

// triggerAfter calls in.trigger(barrierOf(n)) after d, on a timer's goroutine, which
// reports a failure with t.Errorf: when the test ends first (it failed
// early), the timer is stopped, or waited for before in closes.
func triggerAfter(t *testing.T, in *sourceInput, n ckpt.ID, d time.Duration) {
	done := make(chan struct{})
	tm := time.AfterFunc(d, func() {
		defer close(done)
		if err := in.trigger(barrierOf(n)); err != nil {
			t.Errorf("trigger %d: %v", n, err)
		}
	})
	t.Cleanup(func() {
		if !tm.Stop() {
			<-done
		}
	})
}

// TestSourceInputTriggerWakesIdleNext: a trigger that arrives while next
// waits on an idle partition is placed at once, and the input reads on.
func TestSourceInputTriggerWakesIdleNext(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		topic := kafkatest.Name(t, "trig")
		c.CreateTopic(t, topic, 1, nil)
		in := openTestSourceInput(t, ctx, c, topic)

		triggerAfter(t, in, 7, 200*time.Millisecond)
		el, waited := nextElement(t, ctx, in)
		wantBarrier(t, el, 7, topic, 0)
		if waited > 5*time.Second {
			t.Fatalf("barrier 7 after %v, want it soon after the trigger", waited)
		}

		// The woken poll was no failure: records produced now are read.
		prod := c.Client(t)
		if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte("v0")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		for got := 0; got < 1; {
			el, _ := nextElement(t, ctx, in)
			if el.barrier != nil {
				t.Fatalf("barrier %d, want record v0", el.barrier.barrier.ID)
			}
			got += len(el.records)
		}
		triggerAfter(t, in, 8, 200*time.Millisecond)
		el, waited = nextElement(t, ctx, in)
		wantBarrier(t, el, 8, topic, 1)
		if waited > 5*time.Second {
			t.Fatalf("barrier 8 after %v, want it soon after the trigger", waited)
		}
	})
}

// TestSourceInputTriggers: pending barriers are placed in trigger order,
// before the records that follow them in the log; a repeated or older ID
// is refused; an aborted pending trigger is dropped; a poll that ends on
// its deadline loses nothing; after close, triggers are refused.
func TestSourceInputTriggers(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		topic := kafkatest.Name(t, "trig")
		c.CreateTopic(t, topic, 1, nil)
		prod := c.Client(t)
		produce := func(vs ...string) {
			t.Helper()
			for _, v := range vs {
				if err := prod.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
			}
		}
		in := openTestSourceInput(t, ctx, c, topic)
		readN := func(n int) {
			t.Helper()
			for got := 0; got < n; {
				el, _ := nextElement(t, ctx, in)
				if el.barrier != nil {
					t.Fatalf("barrier %d after %d of %d records", el.barrier.barrier.ID, got, n)
				}
				if got += len(el.records); got > n {
					t.Fatalf("read %d records, want %d", got, n)
				}
			}
		}

		// A poll that ends on its deadline (the task's timer tick) is not
		// a failure and loses no record.
		short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
		if el, err := in.next(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("next on an idle partition = %d records, barrier %v, %v; want DeadlineExceeded", len(el.records), el.barrier, err)
		}
		cancelShort()
		produce("a", "b", "c")
		readN(3)

		// Barriers go where the triggers arrive: 1 and 2 before the records
		// produced after them, in order.
		for _, n := range []ckpt.ID{1, 2} {
			if err := in.trigger(barrierOf(n)); err != nil {
				t.Fatalf("trigger %d: %v", n, err)
			}
		}
		for _, n := range []ckpt.ID{2, 1} {
			if err := in.trigger(barrierOf(n)); !errors.Is(err, source.ErrBarrierOrder) {
				t.Fatalf("trigger %d after 2 = %v, want ErrSourceBarrierOrder", n, err)
			}
		}
		produce("d")
		el, _ := nextElement(t, ctx, in)
		wantBarrier(t, el, 1, topic, 3)
		el, _ = nextElement(t, ctx, in)
		wantBarrier(t, el, 2, topic, 3)
		readN(1)

		// An aborted pending trigger is dropped; the next one is placed.
		for _, n := range []ckpt.ID{3, 4} {
			if err := in.trigger(barrierOf(n)); err != nil {
				t.Fatalf("trigger %d: %v", n, err)
			}
		}
		in.abort(3)
		el, _ = nextElement(t, ctx, in)
		wantBarrier(t, el, 4, topic, 4)
		// Aborting never lowers the accepted IDs.
		if err := in.trigger(barrierOf(3)); !errors.Is(err, source.ErrBarrierOrder) {
			t.Fatalf("trigger 3 after its abort = %v, want ErrSourceBarrierOrder", err)
		}

		in.close()
		if err := in.trigger(barrierOf(5)); !errors.Is(err, source.ErrClosed) {
			t.Fatalf("trigger after close = %v, want ErrSourceClosed", err)
		}
		if _, err := in.next(ctx); !errors.Is(err, source.ErrClosed) {
			t.Fatalf("next after close = %v, want ErrSourceClosed", err)
		}
	})
}

// TestTriggersAbortWhilePlacing: a checkpoint aborted after the task
// goroutine took it from the queue, while it placed the barrier, is known
// not to be pending any more, so that next drops the barrier.
func TestTriggersAbortWhilePlacing(t *testing.T) {
	var q triggers
	if err := q.add(barrierOf(1)); err != nil {
		t.Fatal(err)
	}
	b, _, _ := q.poll(context.Background())
	if b != barrierOf(1) {
		t.Fatalf("poll = %+v, want %+v", b, barrierOf(1))
	}
	q.drop(1)
	if q.placed(1) {
		t.Fatal("placed(1) after drop(1) = true, want false")
	}
	if err := q.add(barrierOf(2)); err != nil {
		t.Fatal(err)
	}
	if b, _, _ := q.poll(context.Background()); b != barrierOf(2) || !q.placed(2) {
		t.Fatalf("poll = %+v, want %+v and placed", b, barrierOf(2))
	}
	b, pollCtx, cancel := q.poll(context.Background())
	defer cancel()
	if b.ID != 0 || pollCtx.Err() != nil {
		t.Fatalf("poll of an empty queue = %+v, %v; want none and a live context", b, pollCtx.Err())
	}
	if err := q.add(barrierOf(3)); err != nil || pollCtx.Err() == nil {
		t.Fatalf("add(3) = %v, poll context %v; want the poll woken", err, pollCtx.Err())
	}
}

// barrierOf is the barrier the tests trigger for checkpoint n: it travels
// whole, so every third one is a savepoint with a target.
func barrierOf(n ckpt.ID) ckpt.Barrier {
	b := ckpt.Barrier{ID: n, Kind: ckpt.KindCheckpoint, Timestamp: 1764612345000 + int64(n)}
	if n%3 == 0 {
		b.Kind, b.Target = ckpt.KindSavepoint, fmt.Sprintf("sp-%d", n)
	}
	return b
}
