package stream_test

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weir-stream/weir/keygroup"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

// ticker emits "<name>@<time>" from its timers; on an element it sets a
// timer at the time the element's value names (seconds after t0, or "zero"
// for the zero time), and a repeat timer re-arms itself every 10s until 30s.
type ticker struct{ name string }

func (k ticker) ProcessElement(ctx *stream.Context[string], v string) error {
	at := time.Time{}
	if v != "zero" {
		var s int
		if _, err := fmt.Sscan(v, &s); err != nil {
			return err
		}
		at = t0.Add(time.Duration(s) * time.Second)
	}
	return ctx.RegisterProcessingTimeTimer(at)
}

func (k ticker) OnTimer(ctx *stream.Context[string], at time.Time) error {
	if string(ctx.Key()) == "repeat" && at.Before(t0.Add(30*time.Second)) && !at.IsZero() {
		if err := ctx.RegisterProcessingTimeTimer(at.Add(10 * time.Second)); err != nil {
			return err
		}
	}
	stamp := "zero"
	if at.After(t0.Add(-time.Hour)) {
		stamp = at.Sub(t0).String()
	}
	return ctx.Emit(k.name + "@" + stamp)
}

func tickerJob() *stream.Job {
	j := stream.NewJob("tickers")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.StringCodec{})
	for _, name := range []string{"x", "y"} {
		p := stream.Process(s, name, func() stream.KeyedProcessFunction[string, string] { return ticker{name} })
		stream.To(p, stream.KafkaSink{Topic: "out"}, stream.StringCodec{})
	}
	return j
}

// TestTimersAcrossOperators checks that timers of several operators fire in
// one time order, that a timer re-armed in OnTimer for a time already due
// fires in the same call, and that the zero time is "long ago".
func TestTimersAcrossOperators(t *testing.T) {
	task := newTask(t, tickerJob(), openBackend(t, t.TempDir()), nil)
	var c collector
	if err := task.ProcessBatch(recs("in", "k=20", "repeat=5", "z=zero"), &c); err != nil {
		t.Fatal(err)
	}
	if err := task.FireTimers(t0, &c); err != nil {
		t.Fatal(err)
	}
	equal(t, "at 0s", c.take(), []string{"0:z=x@zero", "0:z=y@zero"})
	if err := task.FireTimers(t0.Add(time.Minute), &c); err != nil {
		t.Fatal(err)
	}
	equal(t, "at 60s", c.take(), []string{
		"0:repeat=x@5s", "0:repeat=y@5s",
		"0:repeat=x@15s", "0:repeat=y@15s",
		"0:k=x@20s", "0:k=y@20s",
		"0:repeat=x@25s", "0:repeat=y@25s",
		"0:repeat=x@35s", "0:repeat=y@35s",
	})
}

// TestConcurrentTasks runs several tasks of one job at once, as a replica
// does: the race detector checks that they share nothing mutable.
func TestConcurrentTasks(t *testing.T) {
	j := tickerJob()
	if err := j.Build(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		b := openBackend(t, t.TempDir())
		wg.Go(func() {
			task, err := j.NewTask(stream.TaskContext{Backend: b, Task: fmt.Sprint("task-", i), Index: i})
			if err != nil {
				errs[i] = err
				return
			}
			defer task.Close()
			var c collector
			for n := range 50 {
				if err := task.ProcessBatch(recs("in", fmt.Sprintf("k%d=%d", n%5, n)), &c); err != nil {
					errs[i] = err
					return
				}
				if err := task.FireTimers(t0.Add(time.Duration(n)*time.Second), &c); err != nil {
					errs[i] = err
					return
				}
			}
			if len(c.recs) == 0 {
				errs[i] = fmt.Errorf("task %d emitted nothing", i)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// openKeyGroupBackend opens an empty backend whose keyed state is filed
// under maxParallelism key groups, of which the task owns keyGroups (zero:
// all).
func openKeyGroupBackend(t *testing.T, cfg state.Config, maxParallelism int, keyGroups [2]int) *state.Backend {
	t.Helper()
	cfg.MaxParallelism, cfg.KeyGroups = maxParallelism, keyGroups
	b, err := state.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// rawKeys returns the hex of every Pebble key of the backend.
func rawKeys(t *testing.T, b *state.Backend) []string {
	t.Helper()
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	it, err := b.DB().NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, hex.EncodeToString(it.Key()))
	}
	return out
}

// Without key groups a timer is stored exactly as before key groups
// existed (stage main's checkpoints hold such timers); with them, the same
// map entry is filed under the key group of the timer's key.
func TestTimerLayoutGolden(t *testing.T) {
	at := uint64(t0.Add(20*time.Second).UnixNano()) ^ 1<<63
	entry := "0c" + hex.EncodeToString([]byte(stream.TimerStateName)) + "00" + // state, empty user key
		hex.EncodeToString(binary.BigEndian.AppendUint64(nil, at)) + "01" + hex.EncodeToString([]byte("x")) + hex.EncodeToString([]byte("k"))
	for _, tc := range []struct {
		maxParallelism int
		want           string
	}{
		{0, "01" + entry},
		{128, "020060" + entry}, // keygroup.Of("k", 128) = 96 = 0x60
	} {
		t.Run(fmt.Sprint("max_parallelism=", tc.maxParallelism), func(t *testing.T) {
			b := openKeyGroupBackend(t, state.Config{Dir: t.TempDir(), Task: "task-0"}, tc.maxParallelism, [2]int{})
			j := stream.NewJob("tickers")
			s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.StringCodec{})
			p := stream.Process(s, "x", func() stream.KeyedProcessFunction[string, string] { return ticker{"x"} })
			stream.To(p, stream.KafkaSink{Topic: "out"}, stream.StringCodec{})
			task := newTask(t, j, b, nil)
			if err := task.ProcessBatch(recs("in", "k=20"), discard{}); err != nil {
				t.Fatal(err)
			}
			equal(t, "keys", rawKeys(t, b), []string{tc.want})
		})
	}
	if g := keygroup.Of([]byte("k"), 128); g != 0x60 {
		t.Fatalf("keygroup.Of(k, 128) = %d; the golden key assumes 96", g)
	}
}

// Timers of keys in many key groups fire in one time order, the same as
// without key groups, also when groups hold more due timers than one scan
// collects, and with timers re-armed from OnTimer.
func TestTimersAcrossKeyGroups(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var in []string
	for i := range 1500 {
		in = append(in, fmt.Sprintf("key-%d=%d", i, rng.IntN(120)))
	}
	in = append(in, "repeat=5")
	var late []string
	for i := range 40 {
		late = append(late, fmt.Sprintf("late-%d=31", i))
	}
	run := func(t *testing.T, b *state.Backend) []string {
		task := newTask(t, tickerJob(), b, nil)
		var c collector
		if err := task.ProcessBatch(recs("in", in...), &c); err != nil {
			t.Fatal(err)
		}
		var fired []string
		for _, s := range []int{0, 30, 31, 90, 200} {
			if err := task.FireTimers(t0.Add(time.Duration(s)*time.Second), &c); err != nil {
				t.Fatal(err)
			}
			fired = append(fired, fmt.Sprintf("fire %ds", s))
			fired = append(fired, c.take()...)
			if s == 30 {
				// Timers set between calls, before the earliest timer each
				// group had left, fire at the next call.
				if err := task.ProcessBatch(recs("in", late...), &c); err != nil {
					t.Fatal(err)
				}
			}
		}
		return fired
	}
	legacy := run(t, openBackend(t, t.TempDir()))
	if n := len(legacy); n != 5+2*(1500+4+40) {
		t.Fatalf("%d lines fired without key groups", n)
	}
	// Within each FireTimers call, time order.
	last := time.Duration(-1)
	for _, line := range legacy {
		if strings.HasPrefix(line, "fire ") {
			last = -1
			continue
		}
		_, stamp, _ := strings.Cut(line, "@")
		d, err := time.ParseDuration(stamp)
		if err != nil {
			t.Fatal(err)
		}
		if d < last {
			t.Fatalf("%s fired after %s", line, last)
		}
		last = d
	}
	for _, m := range []int{1, 4, 128} {
		t.Run(fmt.Sprint("max_parallelism=", m), func(t *testing.T) {
			b := openKeyGroupBackend(t, state.Config{Dir: t.TempDir(), Task: "task-0"}, m, [2]int{})
			got := run(t, b)
			for i := range min(len(got), len(legacy)) {
				if got[i] != legacy[i] {
					t.Fatalf("line %d: %s, without key groups %s", i, got[i], legacy[i])
				}
			}
			if len(got) != len(legacy) {
				t.Fatalf("%d lines fired, %d without key groups", len(got), len(legacy))
			}
		})
	}
}

// A task owning some key groups keeps its timers there: they survive a
// snapshot and restore and fire once, in order, and a timer for a key of a
// group the task does not own is refused.
func TestKeyGroupTimersSurviveRestore(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.Open(ctx, "mem://", "tickers", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	lo, hi := keygroup.Range(1, 2, 128)
	cfg := state.Config{Dir: t.TempDir(), Task: "task-1", Store: store}
	b := openKeyGroupBackend(t, cfg, 128, [2]int{lo, hi})
	var owned []string
	var foreign string
	for i := 0; len(owned) < 6 || foreign == ""; i++ {
		k := fmt.Sprint("key-", i)
		if g := keygroup.Of([]byte(k), 128); g >= lo && g < hi {
			owned = append(owned, k)
		} else if foreign == "" {
			foreign = k
		}
	}
	task := newTask(t, tickerJob(), b, nil)
	var c collector
	if err := task.ProcessBatch(recs("in", owned[0]+"=30", owned[1]+"=10", owned[2]+"=20", owned[3]+"=10", owned[4]+"=90"), &c); err != nil {
		t.Fatal(err)
	}
	err = task.ProcessBatch(recs("in", foreign+"=10"), &c)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("is not among the task's key groups [%d, %d)", lo, hi)) {
		t.Fatalf("timer for a key of another task: %v", err)
	}
	snap, err := b.Snapshot(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := snap.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// After the checkpoint the original fires some and sets another.
	if err := task.FireTimers(t0.Add(15*time.Second), &c); err != nil {
		t.Fatal(err)
	}
	if err := task.ProcessBatch(recs("in", owned[5]+"=25"), &c); err != nil {
		t.Fatal(err)
	}
	c.take()
	_ = task.Close()
	if err := b.NotifyComplete(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}

	cfg.Dir = t.TempDir()
	cfg.DisableLocalRecovery = true
	cfg.MaxParallelism, cfg.KeyGroups = 128, [2]int{lo, hi}
	rb, err := state.Restore(ctx, cfg, res.Handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rb.Close(ctx) })
	restored := newTask(t, tickerJob(), rb, nil)
	if err := restored.FireTimers(t0.Add(time.Minute), &c); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, due := range []struct {
		at   string
		keys []string
	}{{"10s", []string{owned[1], owned[3]}}, {"20s", []string{owned[2]}}, {"30s", []string{owned[0]}}} {
		slices.Sort(due.keys)
		for _, op := range []string{"x", "y"} {
			for _, k := range due.keys {
				want = append(want, "0:"+k+"="+op+"@"+due.at)
			}
		}
	}
	equal(t, "restored", c.take(), want)
	if err := restored.FireTimers(t0.Add(time.Hour), &c); err != nil {
		t.Fatal(err)
	}
	equal(t, "later", c.take(), []string{"0:" + owned[4] + "=x@1m30s", "0:" + owned[4] + "=y@1m30s"})
}
