package stream_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

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
