package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestBackoffJitteredAndBounded draws the waits of many loops, as many
// replicas meeting one failure would: each wait stays within ±50 % of the
// doubling interval (so within [Initial/2, 1.5 × Max]), and the loops do
// not wait alike.
func TestBackoffJitteredAndBounded(t *testing.T) {
	p := Policy{Initial: 200 * time.Millisecond, Max: 30 * time.Second}
	const loops, steps = 200, 12
	waits := make([][]time.Duration, steps)
	for range loops {
		b := p.Backoff()
		interval := p.Initial
		for s := range steps {
			w := b.NextBackOff()
			lo, hi := time.Duration(float64(interval)*(1-Jitter)), time.Duration(float64(interval)*(1+Jitter))+1
			if w < lo || w > hi {
				t.Fatalf("step %d: wait %v outside [%v, %v]", s, w, lo, hi)
			}
			if w < p.Initial/2 || w > p.Max*3/2+1 {
				t.Fatalf("step %d: wait %v outside the policy's bounds", s, w)
			}
			waits[s] = append(waits[s], w)
			interval = min(2*interval, p.Max)
		}
	}
	for s, ws := range waits {
		distinct := map[time.Duration]bool{}
		lo, hi := ws[0], ws[0]
		for _, w := range ws {
			distinct[w] = true
			lo, hi = min(lo, w), max(hi, w)
		}
		// 200 draws of a uniform ±50 %: all but a handful distinct, and
		// spread over most of the range.
		if len(distinct) < loops*9/10 {
			t.Errorf("step %d: only %d distinct waits of %d: not jittered", s, len(distinct), loops)
		}
		if float64(hi-lo) < 0.6*float64(min(p.Initial<<s, p.Max)) {
			t.Errorf("step %d: waits span only [%v, %v]", s, lo, hi)
		}
	}
}

func TestDo(t *testing.T) {
	p := Policy{Initial: time.Millisecond, Max: 4 * time.Millisecond}
	ctx := context.Background()
	var notes []int
	n := 0
	err := p.Do(ctx, func() error {
		n++
		if n < 4 {
			return errors.New("transient")
		}
		return nil
	}, func(attempt int, err error, wait time.Duration) {
		notes = append(notes, attempt)
		if wait < p.Initial/2 || wait > p.Max*3/2+1 {
			t.Errorf("attempt %d: wait %v out of bounds", attempt, wait)
		}
	})
	if err != nil || n != 4 || len(notes) != 3 || notes[2] != 3 {
		t.Fatalf("Do = %v after %d attempts, notes %v", err, n, notes)
	}

	perm := errors.New("no such bucket")
	n = 0
	err = p.Do(ctx, func() error { n++; return Permanent(perm) }, nil)
	if err != perm || n != 1 {
		t.Fatalf("permanent: Do = %v after %d attempts", err, n)
	}

	p.MaxAttempts = 3
	n = 0
	last := errors.New("still down")
	if err := p.Do(ctx, func() error { n++; return last }, nil); err != last || n != 3 {
		t.Fatalf("MaxAttempts: Do = %v after %d attempts", err, n)
	}

	p.MaxAttempts = 0
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := p.Do(cctx, func() error { return last }, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ctx end: Do = %v", err)
	}
}
