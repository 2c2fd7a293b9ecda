package input

import (
	"fmt"
	"testing"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

var sink int

// BenchmarkStep measures the per-record path: data records of a task
// reading 16 partitions from 8 upstream tasks (128 aligner inputs), with a
// barrier from every upstream on every partition every 1 000 records per
// input. It must not allocate, but for a snapshot's Positions map.
func BenchmarkStep(b *testing.B) {
	for _, every := range []int{0, 1000} {
		b.Run(fmt.Sprintf("barrier_every=%d", every), func(b *testing.B) {
			const parts, ups = 16, 8
			cfg := Config{Upstreams: ups, Gen: 1}
			for p := range parts {
				cfg.Partitions = append(cfg.Partitions, int32(p))
			}
			c, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			now := time.Unix(0, 0)
			offs := make([]int64, parts)
			var id ckpt.ID
			delivered, i, k := 0, 0, 0
			b.ReportAllocs()
			for range b.N {
				p := i % parts
				ev := Event{Partition: int32(p), Offset: offs[p], Upstream: (i / parts) % ups, Gen: 1}
				offs[p]++
				if d, err := c.Step(ev, now); err != nil {
					b.Fatal(err)
				} else if d == Deliver {
					delivered++
				}
				i++
				if k++; every > 0 && k == every*parts*ups {
					k = 0
					id++
					for p := range parts {
						for u := range ups {
							ev := Event{Partition: int32(p), Offset: offs[p], Upstream: u, Gen: 1, Barrier: ckpt.Barrier{ID: id, Kind: ckpt.KindCheckpoint}}
							offs[p]++
							if _, err := c.Step(ev, now); err != nil {
								b.Fatal(err)
							}
						}
					}
					c.Actions()
				}
			}
			sink = delivered
		})
	}
}
