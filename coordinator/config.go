package coordinator

import (
	"errors"
	"fmt"
	"time"
)

// Source is the core's only source of randomness: the random initial delay of
// each generation's first periodic checkpoint. *rand.Rand from math/rand/v2
// satisfies it; tests inject a fixed one. Int64N returns a value in [0, n).
type Source interface {
	Int64N(n int64) int64
}

// Config holds the checkpointing settings of a job (the checkpoint section of
// the configuration, DESIGN.md section 11), in the names used there.
type Config struct {
	// Interval is the time between periodic triggers (interval).
	Interval time.Duration
	// Timeout is how long a checkpoint may take before it expires (timeout).
	Timeout time.Duration
	// MinPause is the least time between the completion of one checkpoint and
	// the next periodic trigger (min_pause); it is also the lower bound of the
	// random initial delay.
	MinPause time.Duration
	// MaxConcurrent bounds the pending periodic checkpoints (max_concurrent).
	// Savepoints do not count.
	MaxConcurrent int
	// TolerableFailures is how many consecutive checkpoint failures the job
	// tolerates; one more and the core restarts the job (tolerable_failures).
	TolerableFailures int
	// Retained is how many completed periodic checkpoints are kept; older ones
	// are released for garbage collection (retained).
	Retained int
	// Random draws the initial delay; required.
	Random Source
}

// ErrConfig is wrapped by every problem Validate reports.
var ErrConfig = errors.New("coordinator: invalid config")

// Validate reports every problem of c at once, each naming its key.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...)))
	}
	if c.Interval <= 0 {
		bad("interval %v must be positive", c.Interval)
	}
	if c.Timeout <= 0 {
		bad("timeout %v must be positive", c.Timeout)
	}
	if c.MinPause < 0 {
		bad("min_pause %v must not be negative", c.MinPause)
	}
	// The initial delay is drawn from [min_pause, interval] (DESIGN.md 5.1).
	if c.Interval > 0 && c.MinPause > c.Interval {
		bad("min_pause %v is larger than interval %v", c.MinPause, c.Interval)
	}
	if c.MaxConcurrent < 1 {
		bad("max_concurrent %d must be at least 1", c.MaxConcurrent)
	}
	if c.TolerableFailures < 0 {
		bad("tolerable_failures %d must not be negative", c.TolerableFailures)
	}
	// The newest completed checkpoint is what the job restores from: it is
	// always retained.
	if c.Retained < 1 {
		bad("retained %d must be at least 1", c.Retained)
	}
	if c.Random == nil {
		bad("random source is nil")
	}
	return errors.Join(errs...)
}
