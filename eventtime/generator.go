package eventtime

import (
	"fmt"
	"math"
	"time"
)

// MinWatermark is the watermark of an input about which nothing is known yet.
const MinWatermark int64 = math.MinInt64

// Generator is the watermark of one source input partition, with bounded
// out-of-orderness (Flink's forBoundedOutOfOrderness with withIdleness): its
// watermark is the largest event time observed minus the bound minus 1 ms,
// so a record at most the bound older than the newest one seen is not late.
// The zero Generator is not usable; use NewGenerator.
type Generator struct {
	bound int64         // max out-of-orderness, ms
	idle  time.Duration // 0: never idle
	max   int64         // largest event time observed, or MinWatermark
	last  time.Time     // processing time of the last record, or of creation
}

// GeneratorState is what a Generator snapshots: the largest event time it
// observed (MinWatermark if none).
type GeneratorState struct {
	MaxTimestamp int64 `json:"max_timestamp"`
}

// NewGenerator returns a generator that has observed nothing, made at
// processing time now (from which its idle timeout first runs).
// maxOutOfOrderness is rounded up to a whole millisecond; idleTimeout 0
// means the input is never idle. A negative duration is an error.
func NewGenerator(maxOutOfOrderness, idleTimeout time.Duration, now time.Time) (*Generator, error) {
	if maxOutOfOrderness < 0 {
		return nil, fmt.Errorf("eventtime: max out-of-orderness %v is negative", maxOutOfOrderness)
	}
	if idleTimeout < 0 {
		return nil, fmt.Errorf("eventtime: idle timeout %v is negative", idleTimeout)
	}
	bound := int64((maxOutOfOrderness + time.Millisecond - 1) / time.Millisecond)
	return &Generator{bound: bound, idle: idleTimeout, max: MinWatermark, last: now}, nil
}

// Observe records a record of event time ts read at processing time now.
// Any record, however late, makes the input active again.
func (g *Generator) Observe(ts int64, now time.Time) {
	if ts > g.max {
		g.max = ts
	}
	g.last = now
}

// Watermark returns the largest event time observed minus the bound minus
// 1 ms, or MinWatermark before any record.
func (g *Generator) Watermark() int64 {
	if g.max < MinWatermark+g.bound+1 {
		return MinWatermark
	}
	return g.max - g.bound - 1
}

// Idle says whether no record was observed for the idle timeout of
// processing time, up to now, since the last record (or since the generator
// was made, if none was). A generator with idle timeout 0 is never idle.
func (g *Generator) Idle(now time.Time) bool {
	return g.idle > 0 && now.Sub(g.last) >= g.idle
}

// Snapshot returns the generator's state.
func (g *Generator) Snapshot() GeneratorState {
	return GeneratorState{MaxTimestamp: g.max}
}

// Restore sets the generator's state to s, as if it had observed a record
// of event time s.MaxTimestamp, except that it does not make the input
// active (its idle timeout still runs from the last record or creation). A
// state older than what the generator observed already is ignored, so the
// watermark never goes backwards.
func (g *Generator) Restore(s GeneratorState) {
	if s.MaxTimestamp > g.max {
		g.max = s.MaxTimestamp
	}
}
