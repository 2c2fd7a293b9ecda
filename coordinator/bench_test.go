package coordinator

import (
	"fmt"
	"testing"
	"time"

	"github.com/weir-stream/weir/control"
)

// benchCore returns a running core over n tasks with checkpoint 1 pending,
// and the acks for it.
func benchCore(b *testing.B, n int) (*Core, []control.Ack) {
	tasks := make([]control.TaskID, n)
	for i := range tasks {
		tasks[i] = control.TaskID{Stage: "stage", Index: i}
	}
	cfg := testConfig()
	cfg.Timeout = time.Hour
	c := runningCore(b, cfg, tasks...)
	acks := make([]control.Ack, n)
	for i, t := range tasks {
		acks[i] = control.Ack{Gen: 1, Task: t, Handle: fmt.Sprintf("chk/%s.manifest", t)}
	}
	return c, acks
}

// nextRound completes the current checkpoint and triggers the next one.
func nextRound(b *testing.B, c *Core, acks []control.Ack, now *time.Time) {
	if id := acks[0].ID; id != 0 {
		if err := c.Step(MetadataWritten{ID: id, Location: "m"}); err != nil {
			b.Fatal(err)
		}
	}
	*now = now.Add(10 * time.Second)
	c.Tick(*now)
	rd := c.Ready()
	c.Advance(rd)
	id := c.lastID
	if len(c.pending) != 1 || c.pending[0].id != id {
		b.Fatalf("no checkpoint pending after tick: %+v", c.Status())
	}
	for i := range acks {
		acks[i].ID = id
	}
}

// BenchmarkAck measures one acknowledgement of a checkpoint that n tasks
// must acknowledge. It must not grow with n: the core finds the task by one
// map lookup and marks it in a slice. The last ack of each checkpoint, which
// builds the O(n) _metadata request, is left out of the timing; see
// BenchmarkCheckpointRound for the whole cost per ack.
func BenchmarkAck(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			c, acks := benchCore(b, n)
			now := t0
			nextRound(b, c, acks, &now)
			k := 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if k == n-1 {
					b.StopTimer()
					if err := c.Step(Acknowledge{acks[k]}); err != nil {
						b.Fatal(err)
					}
					nextRound(b, c, acks, &now)
					k = 0
					b.StartTimer()
				}
				if err := c.Step(Acknowledge{acks[k]}); err != nil {
					b.Fatal(err)
				}
				k++
			}
			b.StopTimer()
			if got := c.Ready().Metrics.Acks[AckSuccess]; got == 0 {
				b.Fatal("no ack succeeded")
			}
		})
	}
}

// BenchmarkCheckpointRound measures a whole checkpoint over n tasks:
// trigger, n acks, _metadata request, completion, Ready and Advance. It
// reports the cost per ack, which must stay flat as n grows.
func BenchmarkCheckpointRound(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("tasks=%d", n), func(b *testing.B) {
			c, acks := benchCore(b, n)
			now := t0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				nextRound(b, c, acks, &now)
				for _, a := range acks {
					if err := c.Step(Acknowledge{a}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/ack")
		})
	}
}
