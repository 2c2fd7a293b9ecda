package replica

import (
	"testing"
	"time"
)

// TestHeartbeat: a stall is the time since the last beat, except inside a
// marked wait (a backoff, a restore), however long, which ends with a beat.
func TestHeartbeat(t *testing.T) {
	h := newHeartbeat()
	now := time.Now()
	if d := h.Stalled(now); d > time.Second {
		t.Fatalf("fresh heartbeat stalled %v", d)
	}
	if d := h.Stalled(now.Add(time.Minute)); d < time.Minute {
		t.Fatalf("a minute without a beat: stalled %v", d)
	}
	resume := h.Wait()
	inner := h.Wait() // nested: a retry's backoff inside the restore wait
	if d := h.Stalled(now.Add(time.Hour)); d != 0 {
		t.Fatalf("inside a wait: stalled %v", d)
	}
	inner()
	if d := h.Stalled(time.Now().Add(time.Hour)); d != 0 {
		t.Fatalf("inside the outer wait: stalled %v", d)
	}
	resume()
	if d := h.Stalled(time.Now()); d > time.Second {
		t.Fatalf("right after a wait: stalled %v", d)
	}
	if d := h.Stalled(time.Now().Add(10 * time.Second)); d < 9*time.Second {
		t.Fatalf("10s after the wait: stalled %v", d)
	}
}
