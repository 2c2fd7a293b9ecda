package task

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// busyTime splits a task goroutine's wall time as Flink does: idle (waiting
// for input: a source or shuffle poll that returned nothing yet),
// backpressured (blocked writing output: a sink's or shuffle writer's
// produce buffer full) and busy (the rest: decoding, operators, state,
// timers, checkpoints). It publishes each as milliseconds per second of
// wall time, once a second, from the task goroutine: no lock.
//
// Idle is timed around every poll (two clock reads per poll, not per
// record). Output writes are per record, so one write in busySample is
// timed and counted busySample times: while a buffer is full every write
// blocks alike, and timing each would cost more than the 2 % the accounting
// may cost (docs/benchmarks.md).
type busyTime struct {
	on            bool
	idle, blocked time.Duration // in the window that started at since
	since         time.Time
	writes        uint32 // output writes since the last one timed

	busyG, blockedG, idleG prometheus.Gauge // nil: not published
}

const (
	// busySample is one in how many output writes is timed.
	busySample = 16
	// busyWindow is how often the gauges are published.
	busyWindow = time.Second
)

// timeWrite reports whether the next output write is to be timed.
func (b *busyTime) timeWrite() bool {
	if !b.on {
		return false
	}
	b.writes++
	if b.writes < busySample {
		return false
	}
	b.writes = 0
	return true
}

// wroteFor adds a timed write's duration, for every write it stands for.
func (b *busyTime) wroteFor(d time.Duration) { b.blocked += d * busySample }

// polledFor adds the time a poll waited for input.
func (b *busyTime) polledFor(d time.Duration) { b.idle += d }

// publish sets the gauges for the window ending at now, if it is a second
// long, and starts the next one.
func (b *busyTime) publish(now time.Time) {
	if b.since.IsZero() {
		b.since = now
		return
	}
	wall := now.Sub(b.since)
	if wall < busyWindow {
		return
	}
	idle := min(b.idle, wall)
	blocked := min(b.blocked, wall-idle)
	busy := wall - idle - blocked
	perSecond := func(d time.Duration) float64 { return float64(d) / float64(wall) * 1000 }
	if b.busyG != nil {
		b.busyG.Set(perSecond(busy))
		b.blockedG.Set(perSecond(blocked))
		b.idleG.Set(perSecond(idle))
	}
	b.idle, b.blocked, b.since = 0, 0, now
}
