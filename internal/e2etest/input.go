package e2etest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Input produces a test's input records with an idempotent producer (so
// that retries across a broker restart neither lose nor repeat a record)
// and counts, per key, the records the broker acknowledged that the job
// must count: per record key, or for clicks (NewClicks) per page.
type Input struct {
	cl    *kgo.Client
	keys  int
	pages int // clicks: the number of pages; 0: records count per record key

	mu     sync.Mutex
	next   int            // index of the next good record
	perKey map[string]int // acknowledged counted records per key
	total  int
	err    error
}

// NewInput returns a producer of records to topic, over `keys` keys, closed
// when the test ends. Extra client options (for example a larger
// kgo.ProducerBatchMaxBytes) are added.
func NewInput(t testing.TB, brokers []string, topic string, keys int, opts ...kgo.Opt) *Input {
	t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks())}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("input client: %v", err)
	}
	t.Cleanup(cl.Close)
	return &Input{cl: cl, keys: keys, perKey: map[string]int{}}
}

// NewClicks returns a producer of click records to topic, for a job that
// counts per page what is keyed by user: record i is keyed by its user
// Key(i, users) and its value {"i": i, "user": user, "page": Page(i, pages)}
// names a page independent of the user, so that counting per page needs a
// shuffle. Counts are per page.
func NewClicks(t testing.TB, brokers []string, topic string, users, pages int, opts ...kgo.Opt) *Input {
	t.Helper()
	in := NewInput(t, brokers, topic, users, opts...)
	in.pages = pages
	return in
}

// Key is the key of good record i.
func Key(i, keys int) string { return fmt.Sprintf("user-%04d", i%keys) }

// Page is the page of click i among pages: spread over the pages by a hash
// of i (SplitMix64's finalizer), so that every user's clicks reach many
// pages.
func Page(i, pages int) string {
	z := uint64(i) + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return fmt.Sprintf("page-%04d", z%uint64(pages))
}

// Good produces n more good records: record i has key Key(i) and value
// {"i": i, "user": key}, or for clicks also "page": Page(i). It does not
// wait for them (Flush does).
func (in *Input) Good(ctx context.Context, n int) {
	for range n {
		in.mu.Lock()
		i := in.next
		in.next++
		in.mu.Unlock()
		k := Key(i, in.keys)
		if in.pages == 0 {
			v, _ := json.Marshal(map[string]any{"i": i, "user": k})
			in.Record(ctx, &kgo.Record{Key: []byte(k), Value: v}, true, nil)
			continue
		}
		page := Page(i, in.pages)
		v, _ := json.Marshal(map[string]any{"i": i, "user": k, "page": page})
		in.produce(ctx, &kgo.Record{Key: []byte(k), Value: v}, page, true, nil)
	}
}

// Record produces r. If counted, the job must count it once under its key
// when the broker acknowledges it. done, if set, is called with the
// produced record and its error.
func (in *Input) Record(ctx context.Context, r *kgo.Record, counted bool, done func(*kgo.Record, error)) {
	in.produce(ctx, r, string(r.Key), counted, done)
}

// produce produces r; if counted, the job must count it once under
// countKey.
func (in *Input) produce(ctx context.Context, r *kgo.Record, countKey string, counted bool, done func(*kgo.Record, error)) {
	in.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
		in.mu.Lock()
		if err != nil && in.err == nil {
			in.err = fmt.Errorf("produce input: %w", err)
		}
		if err == nil && counted {
			in.perKey[countKey]++
			in.total++
		}
		in.mu.Unlock()
		if done != nil {
			done(r, err)
		}
	})
}

// Flow produces good records at about rate per second in the background
// until the returned stop is called; stop waits for the goroutine.
func (in *Input) Flow(ctx context.Context, rate int) (stop func()) {
	// The records keep ctx: stopping the flow must not cancel the ones
	// already handed to the client.
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		const tick = 50 * time.Millisecond
		per := max(1, rate*int(tick)/int(time.Second))
		tk := time.NewTicker(tick)
		defer tk.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-tk.C:
				in.Good(ctx, per)
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(quit) }); wg.Wait() }
}

// Flush waits until every record produced so far is acknowledged, and
// returns the first produce error.
func (in *Input) Flush(ctx context.Context) error {
	err := in.cl.Flush(ctx)
	in.mu.Lock()
	defer in.mu.Unlock()
	return errors.Join(err, in.err)
}

// Counts returns the acknowledged counted records per key (per page for
// clicks), and their sum.
// Call it after Flush.
func (in *Input) Counts() (map[string]int, int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[string]int, len(in.perKey))
	for k, n := range in.perKey {
		out[k] = n
	}
	return out, in.total
}
