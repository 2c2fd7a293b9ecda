package e2etest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Verifier reads a count job's output topic from the start with its own
// read_committed consumer, while the job runs, and checks every record as
// it arrives: for each key, the counts are exactly 1, 2, 3, … in order (a
// repeat is duplicated output, a gap lost output). It also notes when each
// record arrived, so a test can measure how long committed output stalled.
type Verifier struct {
	t      testing.TB
	topic  string
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	last       map[string]int // key → last count seen
	seen       int
	arrivals   []time.Time // arrival time of record batches, in order
	violations []string
	fetchErrs  int
}

// StartVerifier starts reading topic. It stops when the test ends. Extra
// client options (TLS, SASL: the verifier's own credentials) are added.
func StartVerifier(t testing.TB, brokers []string, topic string, opts ...kgo.Opt) *Verifier {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		t.Fatalf("verifier client: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	v := &Verifier{t: t, topic: topic, cancel: cancel, done: make(chan struct{}), last: map[string]int{}}
	go func() {
		defer close(v.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachError(func(string, int32, error) {
				v.mu.Lock()
				v.fetchErrs++ // a broker restart: the client retries
				v.mu.Unlock()
			})
			v.mu.Lock()
			n := v.seen
			fs.EachRecord(v.checkLocked)
			if v.seen > n {
				v.arrivals = append(v.arrivals, now)
			}
			v.mu.Unlock()
		}
	}()
	t.Cleanup(v.Stop)
	return v
}

// Stop stops reading; Check and the counts stay usable.
func (v *Verifier) Stop() {
	v.cancel()
	<-v.done
}

// checkLocked checks one output record. v.mu is held.
func (v *Verifier) checkLocked(r *kgo.Record) {
	var val struct {
		Key   *string `json:"key"`
		Count int     `json:"count"`
	}
	if err := json.Unmarshal(r.Value, &val); err != nil || val.Key == nil {
		v.violations = append(v.violations, fmt.Sprintf("%s[%d]@%d is not the count JSON: %.200q", r.Topic, r.Partition, r.Offset, r.Value))
		return
	}
	// The value's key is the record key as a JSON string; invalid UTF-8
	// becomes U+FFFD (docs/job-api.md). Compare with what encoding/json
	// makes of the key's bytes.
	enc, _ := json.Marshal(string(r.Key))
	var want string
	_ = json.Unmarshal(enc, &want)
	if *val.Key != want {
		v.violations = append(v.violations, fmt.Sprintf("%s[%d]@%d: record key %q carries value key %q", r.Topic, r.Partition, r.Offset, r.Key, *val.Key))
	}
	k := string(r.Key)
	prev := v.last[k]
	if val.Count != prev+1 {
		what := "gap (lost output)"
		if val.Count <= prev {
			what = "repeat (duplicated output)"
		}
		v.violations = append(v.violations, fmt.Sprintf("key %q: count %d after %d at %s[%d]@%d: a %s", k, val.Count, prev, r.Topic, r.Partition, r.Offset, what))
	}
	if val.Count > prev {
		v.last[k] = val.Count
	}
	v.seen++
}

// Seen is the number of output records read so far.
func (v *Verifier) Seen() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.seen
}

// Violations returns the problems found so far.
func (v *Verifier) Violations() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.violations)
}

// WaitSeen waits until at least n output records were read.
func (v *Verifier) WaitSeen(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for v.Seen() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("output %s: %d committed records after %v, want at least %d", v.topic, v.Seen(), timeout, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// WaitSeenWhile is WaitSeen that gives up as soon as alive returns an
// error (Replicas.Exited: a replica crashed), returning it.
func (v *Verifier) WaitSeenWhile(n int, timeout time.Duration, alive func() error) error {
	deadline := time.Now().Add(timeout)
	for v.Seen() < n {
		if err := alive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("output %s: %d committed records after %v, want at least %d", v.topic, v.Seen(), timeout, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// ArrivedBetween reports how many times committed output arrived after from
// and before to.
func (v *Verifier) ArrivedBetween(from, to time.Time) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := 0
	for _, a := range v.arrivals {
		if a.After(from) && a.Before(to) {
			n++
		}
	}
	return n
}

// WaitAdvance waits until committed output arrives after since, and returns
// how long after since it arrived: a fault's recovery time, when since is
// the fault's end.
func (v *Verifier) WaitAdvance(since time.Time, timeout time.Duration) (time.Duration, error) {
	deadline := since.Add(timeout)
	for {
		v.mu.Lock()
		var at time.Time
		if i, _ := slices.BinarySearchFunc(v.arrivals, since, func(a, s time.Time) int { return a.Compare(s) }); i < len(v.arrivals) {
			at = v.arrivals[i]
		}
		v.mu.Unlock()
		if !at.IsZero() {
			return at.Sub(since), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("output %s: no committed record arrived within %v", v.topic, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Check waits (up to timeout) until the verifier has read total records,
// then fails the test unless every key's counts are exactly 1..perKey[k]:
// every counted input record is in the committed output exactly once.
func (v *Verifier) Check(perKey map[string]int, total int, timeout time.Duration) {
	v.t.Helper()
	deadline := time.Now().Add(timeout)
	for v.Seen() < total && time.Now().Before(deadline) && len(v.Violations()) == 0 {
		time.Sleep(100 * time.Millisecond)
	}
	// Records beyond total would be duplicates: give them a moment to show.
	time.Sleep(time.Second)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.reportLocked(perKey, total, true)
}

// CheckPrefix fails the test unless every key's committed counts so far
// are 1..n with n at most perKey[k]: nothing repeated, nothing skipped,
// nothing the input does not hold. For a job that stopped.
func (v *Verifier) CheckPrefix(perKey map[string]int) {
	v.t.Helper()
	time.Sleep(time.Second)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.reportLocked(perKey, 0, false)
}

func (v *Verifier) reportLocked(perKey map[string]int, total int, whole bool) {
	v.t.Helper()
	bad := slices.Clone(v.violations)
	for k, n := range v.last {
		if n > perKey[k] {
			bad = append(bad, fmt.Sprintf("key %q: committed count reached %d, but only %d such records were produced", k, n, perKey[k]))
		}
	}
	if whole {
		for k, n := range perKey {
			if v.last[k] != n {
				bad = append(bad, fmt.Sprintf("key %q: committed count reached %d, want %d", k, v.last[k], n))
			}
		}
		if v.seen != total {
			bad = append(bad, fmt.Sprintf("verifier read %d output records, want %d", v.seen, total))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		if len(bad) > 20 {
			bad = append(bad[:20], fmt.Sprintf("… and %d more", len(bad)-20))
		}
		v.t.Fatalf("exactly-once check of %s failed:\n  %s", v.topic, strings.Join(bad, "\n  "))
	}
	if whole {
		v.t.Logf("verified: %d output records over %d keys, each key's counts 1..N exactly once", v.seen, len(perKey))
	} else {
		v.t.Logf("verified: %d output records over %d keys so far, each key's counts 1..n with nothing repeated or skipped", v.seen, len(v.last))
	}
}
