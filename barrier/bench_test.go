package barrier

import (
	"fmt"
	"testing"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

var sink int

// BenchmarkRecord measures the per-record path: one IsHeld call for a
// record of input i%n while no alignment runs. It must not allocate.
func BenchmarkRecord(b *testing.B) {
	for _, n := range []int{1, 4, 64} {
		b.Run(fmt.Sprintf("inputs=%d", n), func(b *testing.B) {
			a, err := New(n)
			if err != nil {
				b.Fatal(err)
			}
			delivered := 0
			b.ReportAllocs()
			i := 0
			for range b.N {
				if !a.IsHeld(i) {
					delivered++
				}
				if i++; i == n {
					i = 0
				}
			}
			sink = delivered
		})
	}
}

// BenchmarkRecordWithBarriers measures records with a checkpoint every
// 1 000 records per input: every input delivers barrier k in turn (all but
// the last are held; records of held inputs are refused), then the
// alignment completes. The cost per record includes the barrier work; it
// must not allocate either.
func BenchmarkRecordWithBarriers(b *testing.B) {
	for _, n := range []int{1, 4, 64} {
		b.Run(fmt.Sprintf("inputs=%d", n), func(b *testing.B) {
			a, err := New(n)
			if err != nil {
				b.Fatal(err)
			}
			every := 1000 * n
			now := time.Unix(0, 0)
			var id ckpt.ID
			delivered, i, k := 0, 0, 0
			b.ReportAllocs()
			for range b.N {
				if !a.IsHeld(i) {
					delivered++
				}
				if i++; i == n {
					i = 0
				}
				if k++; k == every {
					k = 0
					id++
					for in := range n {
						if _, err := a.Barrier(in, id, now); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
			sink = delivered
		})
	}
}

// BenchmarkAlign1024 measures one checkpoint's alignment over 1 024 inputs
// (a downstream task reading 128 shuffle partitions from 8 upstream tasks):
// every input delivers barrier k in turn, the first 1 023 are held, the last
// completes the alignment and releases them. One op is one whole alignment.
func BenchmarkAlign1024(b *testing.B) {
	const n = 1024
	a, err := New(n)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Unix(0, 0)
	var id ckpt.ID
	b.ReportAllocs()
	for range b.N {
		id++
		for in := range n {
			if _, err := a.Barrier(in, id, now); err != nil {
				b.Fatal(err)
			}
		}
	}
	sink = int(id)
}
