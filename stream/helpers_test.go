package stream_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// openBackend opens an empty state backend in a temporary directory.
func openBackend(t testing.TB, dir string) *state.Backend {
	t.Helper()
	b, err := state.Open(context.Background(), state.Config{Dir: dir, Task: "task-0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// out is one emitted record, copied.
type out struct {
	sink    int
	key     string
	value   string
	ts      time.Time
	headers string
	topic   string
}

func (o out) String() string { return fmt.Sprintf("%d:%s=%s", o.sink, o.key, o.value) }

// collector is an Emitter that copies what it gets: sink records to recs,
// shuffle records to shuffled (with the edge as sink).
type collector struct{ recs, shuffled []out }

func (c *collector) Shuffle(edge int, r stream.Record) error {
	c.shuffled = append(c.shuffled, copyOut(edge, r))
	return nil
}

func copyOut(sink int, r stream.Record) out {
	var hs []string
	for _, h := range r.Headers {
		hs = append(hs, h.Key+"="+string(h.Value))
	}
	return out{sink: sink, key: string(r.Key), value: string(r.Value), ts: r.Timestamp, headers: strings.Join(hs, ","), topic: r.Topic}
}

func (c *collector) Emit(sink int, r stream.Record) error {
	c.recs = append(c.recs, copyOut(sink, r))
	return nil
}

// take returns the records collected so far, as "sink:key=value", and
// forgets them.
func (c *collector) take() []string {
	var s []string
	for _, r := range c.recs {
		s = append(s, r.String())
	}
	c.recs = nil
	return s
}

// discard is an Emitter that drops everything.
type discard struct{}

func (discard) Emit(int, stream.Record) error    { return nil }
func (discard) Shuffle(int, stream.Record) error { return nil }

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// recs makes records of topic from "key=value" pairs, at offsets 0, 1...
// and timestamps t0, t0+1s...
func recs(topic string, kvs ...string) []stream.Record {
	out := make([]stream.Record, len(kvs))
	for i, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		out[i] = stream.Record{Key: []byte(k), Value: []byte(v), Timestamp: t0.Add(time.Duration(i) * time.Second), Topic: topic, Offset: int64(i)}
	}
	return out
}

// clock is a settable processing-time clock.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("%s:\ngot  %q\nwant %q", what, got, want)
	}
}

func newTask(t testing.TB, j *stream.Job, b *state.Backend, c *clock) stream.Task {
	t.Helper()
	tc := stream.TaskContext{Backend: b, Task: "task-0"}
	if c != nil {
		tc.Now = c.Now
	}
	task, err := j.NewTask(tc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = task.Close() })
	return task
}

var str = stream.Codec[string](stream.StringCodec{})
