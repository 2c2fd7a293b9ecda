package replica

import (
	"sync/atomic"
	"time"
)

// Heartbeat tells whether a replica's Run loop still makes progress: the
// /livez answer. The loop beats each time it comes back to its select (at
// least once a second: its ticker wakes it when nothing else does), and
// marks the waits that are legitimately long — a backoff, the restore of
// its tasks at a new generation — so that they do not count as a stall.
// What does count is one step of the loop (a control record, a view, a
// completion) that does not return.
//
// Its methods are safe for concurrent use: the loop beats, the HTTP
// handler reads.
type Heartbeat struct {
	last    atomic.Int64 // unix nanoseconds of the last beat
	waiting atomic.Int32 // > 0 while the loop is in a marked wait
}

func newHeartbeat() *Heartbeat {
	h := &Heartbeat{}
	h.Beat()
	return h
}

// Beat records that the loop is making progress now.
func (h *Heartbeat) Beat() { h.last.Store(time.Now().UnixNano()) }

// Wait marks the start of a legitimate wait; the function it returns ends
// it (and beats).
func (h *Heartbeat) Wait() (resume func()) {
	h.waiting.Add(1)
	return func() {
		h.Beat()
		h.waiting.Add(-1)
	}
}

// Stalled returns how long the loop has gone without a beat at now, zero
// while it is in a marked wait.
func (h *Heartbeat) Stalled(now time.Time) time.Duration {
	if h.waiting.Load() > 0 {
		return 0
	}
	return max(0, now.Sub(time.Unix(0, h.last.Load())))
}
