// Package retry is Weir's one retry policy: exponential backoff with
// jitter (github.com/cenkalti/backoff/v5), so that replicas that meet the
// same failure at the same moment — a broker restart, an object-store
// outage — do not all retry in lockstep. Every retry loop of the product
// builds its waits here; each loop keeps its own decision of what to retry
// and when to stop. (The Kafka client's own request retries and group
// rejoins are jittered by franz-go itself.)
//
// Owns no state: a Policy is a value, the backoff it returns belongs to
// the loop (it is not safe for concurrent use).
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Jitter is the spread of every wait: a wait is the current interval
// times a random factor in [1-Jitter, 1+Jitter].
const Jitter = 0.5

// Policy bounds a retry loop's waits: the interval starts at Initial and
// doubles after each failure up to Max; each wait is that interval ±50 %,
// so never shorter than Initial/2 nor longer than 1.5 × Max.
type Policy struct {
	Initial time.Duration
	Max     time.Duration
	// MaxAttempts ends Do after that many attempts; 0 retries until the
	// context ends.
	MaxAttempts int
}

// Backoff returns the waits of p, for loops that wait by themselves.
func (p Policy) Backoff() *backoff.ExponentialBackOff {
	b := &backoff.ExponentialBackOff{
		InitialInterval:     p.Initial,
		RandomizationFactor: Jitter,
		Multiplier:          2,
		MaxInterval:         p.Max,
	}
	b.Reset()
	return b
}

// Do runs op until it returns nil, an error marked Permanent (returned
// unwrapped), p.MaxAttempts attempts fail (the last error is returned), or
// ctx ends (ctx's error is returned). Before each wait it calls notify,
// if set, with the attempt that failed (from 1), its error and the wait.
func (p Policy) Do(ctx context.Context, op func() error, notify func(attempt int, err error, wait time.Duration)) error {
	attempt := 0
	opts := []backoff.RetryOption{
		backoff.WithBackOff(p.Backoff()),
		backoff.WithMaxElapsedTime(0), // bounded by ctx and MaxAttempts only
		backoff.WithNotify(func(err error, wait time.Duration) {
			if notify != nil {
				notify(attempt, err, wait)
			}
		}),
	}
	if p.MaxAttempts > 0 {
		opts = append(opts, backoff.WithMaxTries(uint(p.MaxAttempts)))
	}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		attempt++
		return struct{}{}, op()
	}, opts...)
	return err
}

// Permanent marks err as one Do must not retry; Do returns err itself.
func Permanent(err error) error { return backoff.Permanent(err) }
