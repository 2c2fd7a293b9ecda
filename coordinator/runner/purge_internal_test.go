package runner

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/control"
)

// timedPurger records when each purge came and what it deleted.
type timedPurger struct {
	mu    sync.Mutex
	at    []time.Time
	calls [][]control.Position
}

func (p *timedPurger) Purge(_ context.Context, below []control.Position) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.at = append(p.at, time.Now())
	p.calls = append(p.calls, below)
	return nil
}

func (p *timedPurger) snapshot() ([]time.Time, [][]control.Position) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.at...), append([][]control.Position(nil), p.calls...)
}

// TestPurgeInterval: the first purge goes at once; later ones are at least
// PurgeInterval apart, and what was queued meanwhile goes in one purge,
// each partition at its highest offset. With an interval of 0 every queued
// purge goes at once.
func TestPurgeInterval(t *testing.T) {
	const interval = 300 * time.Millisecond
	for _, iv := range []time.Duration{interval, 0} {
		t.Run(iv.String(), func(t *testing.T) {
			m, err := newMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			r := &Runner{opts: Options{PurgeInterval: iv, Now: time.Now}, metrics: m}
			p := &timedPurger{}
			q := newPurgeQueue()
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				r.purgeLoop(ctx, slog.New(slog.DiscardHandler), p, q)
			}()
			defer func() { cancel(); <-done }()

			pos := func(off int64) []control.Position {
				return []control.Position{{Topic: "s", Partition: 0, Offset: off}, {Topic: "s", Partition: 1, Offset: off}}
			}
			wait := func(n int) {
				t.Helper()
				deadline := time.Now().Add(5 * time.Second)
				for {
					at, _ := p.snapshot()
					if len(at) >= n {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d purges, want %d", len(at), n)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
			q.add(pos(1), true)
			wait(1)
			// Three completions in quick succession.
			for off := int64(2); off <= 4; off++ {
				q.add(pos(off), true)
				if iv == 0 {
					wait(int(off))
				}
			}
			if iv == 0 {
				return
			}
			wait(2)
			time.Sleep(2 * interval) // nothing more is queued: no third purge
			at, calls := p.snapshot()
			if len(at) != 2 {
				t.Fatalf("%d purges %v, want 2", len(at), calls)
			}
			if gap := at[1].Sub(at[0]); gap < interval {
				t.Errorf("purges %v apart, want at least %v", gap, interval)
			}
			if got := calls[1]; len(got) != 2 || got[0].Offset != 4 || got[1].Offset != 4 {
				t.Errorf("second purge %v, want both partitions below 4", got)
			}
		})
	}
}
