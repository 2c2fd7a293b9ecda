package e2etest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// WindowKey names one window of one key: the key (a page) and the
// window's start, Unix milliseconds.
type WindowKey struct {
	Key   string
	Start int64
}

// WindowResult is one committed record of a window aggregate's output,
// decoded by hand from its documented JSON (docs/job-api.md):
// {"key":…,"window_start":…,"window_end":…,"<agg>":…} with RFC 3339 times.
type WindowResult struct {
	Key        string    // the value's "key"
	RecordKey  string    // the Kafka record's key
	Start, End time.Time // window_start, window_end
	Count      int64     // the aggregate's value (the field named by the reader's agg)
	Early      bool      // "early": true
	Timestamp  time.Time // the Kafka record's timestamp
	Arrived    time.Time // when the reader's poll returned it
	Pos        string    // topic[partition]@offset
}

// LateRecord is one committed record of a late topic: the input record's
// value, unchanged, and the headers naming the window it missed.
type LateRecord struct {
	Value       []byte
	WindowStart string // header weir-late-window-start
	WindowEnd   string // header weir-late-window-end
	LateBy      string // header weir-late-by
	Arrived     time.Time
	Pos         string
}

// WindowReader follows a window job's output topic and its late topic from
// their start with its own read_committed consumer, while the job runs,
// and keeps every record it reads: results by window, late records in
// order. It decodes them by hand and shares no code with Weir's packages.
// A record that does not decode is a violation. Checking what it read
// against the input is the test's (it knows the input).
type WindowReader struct {
	output, late, agg string
	cancel            context.CancelFunc
	done              chan struct{}

	mu         sync.Mutex
	results    map[WindowKey][]WindowResult
	nresults   int
	lates      []LateRecord
	violations []string
}

// StartWindowReader starts reading the output topic (results whose
// aggregate field is agg, "count" say) and the late topic ("" for none).
// It stops when the test ends.
func StartWindowReader(t testing.TB, brokers []string, output, late, agg string, opts ...kgo.Opt) *WindowReader {
	t.Helper()
	topics := []string{output}
	if late != "" {
		topics = append(topics, late)
	}
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200 * time.Millisecond),
	}, opts...)...)
	if err != nil {
		t.Fatalf("window reader client: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &WindowReader{output: output, late: late, agg: agg, cancel: cancel, done: make(chan struct{}),
		results: map[WindowKey][]WindowResult{}}
	go func() {
		defer close(r.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			r.mu.Lock()
			fs.EachRecord(func(rec *kgo.Record) { r.addLocked(rec, now) })
			r.mu.Unlock()
		}
	}()
	t.Cleanup(r.Stop)
	return r
}

// Stop stops reading; what was read stays available.
func (r *WindowReader) Stop() {
	r.cancel()
	<-r.done
}

func (r *WindowReader) addLocked(rec *kgo.Record, now time.Time) {
	pos := fmt.Sprintf("%s[%d]@%d", rec.Topic, rec.Partition, rec.Offset)
	if rec.Topic == r.late {
		l := LateRecord{Value: slices.Clone(rec.Value), Arrived: now, Pos: pos}
		for _, h := range rec.Headers {
			switch h.Key {
			case "weir-late-window-start":
				l.WindowStart = string(h.Value)
			case "weir-late-window-end":
				l.WindowEnd = string(h.Value)
			case "weir-late-by":
				l.LateBy = string(h.Value)
			}
		}
		r.lates = append(r.lates, l)
		return
	}
	var val map[string]json.RawMessage
	if err := json.Unmarshal(rec.Value, &val); err != nil {
		r.violations = append(r.violations, fmt.Sprintf("%s: not JSON: %.200q", pos, rec.Value))
		return
	}
	res := WindowResult{RecordKey: string(rec.Key), Timestamp: rec.Timestamp, Arrived: now, Pos: pos}
	var start, end string
	errs := []error{
		json.Unmarshal(val["key"], &res.Key),
		json.Unmarshal(val["window_start"], &start),
		json.Unmarshal(val["window_end"], &end),
		json.Unmarshal(val[r.agg], &res.Count),
	}
	if e, ok := val["early"]; ok {
		errs = append(errs, json.Unmarshal(e, &res.Early))
	}
	var err error
	if res.Start, err = time.Parse(time.RFC3339Nano, start); err != nil {
		errs = append(errs, err)
	}
	if res.End, err = time.Parse(time.RFC3339Nano, end); err != nil {
		errs = append(errs, err)
	}
	for _, err := range errs {
		if err != nil {
			r.violations = append(r.violations, fmt.Sprintf("%s: not a window result with key, window_start, window_end and %s: %v: %.200q", pos, r.agg, err, rec.Value))
			return
		}
	}
	k := WindowKey{Key: res.Key, Start: res.Start.UnixMilli()}
	r.results[k] = append(r.results[k], res)
	r.nresults++
}

// Results returns a copy of the results read so far, by window.
func (r *WindowReader) Results() map[WindowKey][]WindowResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[WindowKey][]WindowResult, len(r.results))
	for k, rs := range r.results {
		out[k] = slices.Clone(rs)
	}
	return out
}

// Late returns the late records read so far, in the order read.
func (r *WindowReader) Late() []LateRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lates)
}

// Counts returns how many results and late records were read so far.
func (r *WindowReader) Counts() (results, late int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nresults, len(r.lates)
}

// Violations returns the records that did not decode.
func (r *WindowReader) Violations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.violations)
}
