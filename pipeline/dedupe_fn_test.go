package pipeline

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

var dt0 = time.Date(2026, 12, 1, 19, 0, 0, 0, time.UTC)

// dedupeJob is in → dedupe (the value is the dedupe key) → out.
func dedupeJob(t *testing.T, within time.Duration, eventTime bool) *stream.Job {
	t.Helper()
	j := stream.NewJob("dedupe")
	src := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{})
	in := stream.Map(src, func(v []byte) (dedupeIn[[]byte], error) { return dedupeIn[[]byte]{v: v, dk: v}, nil })
	var opts []stream.ProcessOption
	if eventTime {
		opts = append(opts, stream.WithEventTime())
	}
	out := stream.Process(in, "dedupe", newDedupeFn[[]byte](within, eventTime), opts...)
	stream.To(out, stream.KafkaSink{Topic: "out"}, stream.RawCodec{})
	if err := j.Build(); err != nil {
		t.Fatal(err)
	}
	return j
}

type dedupeRun struct {
	t    *testing.T
	j    *stream.Job
	b    *state.Backend
	task stream.Task
	now  time.Time
	out  []string
	off  int64
}

func (r *dedupeRun) Emit(_ int, rec stream.Record) error {
	r.out = append(r.out, string(rec.Value))
	return nil
}
func (r *dedupeRun) Shuffle(int, stream.Record) error { return nil }

func newDedupeRun(t *testing.T, j *stream.Job, b *state.Backend) *dedupeRun {
	r := &dedupeRun{t: t, j: j, b: b, now: dt0}
	task, err := j.NewTask(stream.TaskContext{Backend: b, Task: "in-0", Stage: j.Stages()[0].Name, Now: func() time.Time { return r.now }})
	if err != nil {
		t.Fatal(err)
	}
	r.task = task
	t.Cleanup(func() { _ = task.Close() })
	return r
}

// send sends values "v@d" (event time dt0+d) with record key k.
func (r *dedupeRun) send(values ...string) []string {
	r.t.Helper()
	var recs []stream.Record
	for _, s := range values {
		v, d, _ := strings.Cut(s, "@")
		ts := dt0
		if d != "" {
			dur, err := time.ParseDuration(d)
			if err != nil {
				r.t.Fatal(err)
			}
			ts = dt0.Add(dur)
		}
		recs = append(recs, stream.Record{Key: []byte("k"), Value: []byte(v), Topic: "in", Offset: r.off, Timestamp: ts})
		r.off++
	}
	if err := r.task.ProcessBatch(recs, r); err != nil {
		r.t.Fatal(err)
	}
	out := r.out
	r.out = nil
	return out
}

// entries returns the dedupe keys the key "k" holds in state.
func (r *dedupeRun) entries() []string {
	r.t.Helper()
	seen, err := state.NewMapState(r.b, "dedupe/seen", state.BytesCodec{}, state.Codec[int64](state.Int64Codec{}))
	if err != nil {
		r.t.Fatal(err)
	}
	exp, err := state.NewMapState(r.b, "dedupe/expiry", state.BytesCodec{}, state.Codec[[]byte](state.BytesCodec{}))
	if err != nil {
		r.t.Fatal(err)
	}
	r.b.SetCurrentKey([]byte("k"))
	var got []string
	_ = seen.Range(func(k []byte, _ int64) bool { got = append(got, string(k)); return true })
	n := 0
	_ = exp.Range(func([]byte, []byte) bool { n++; return true })
	if n != len(got) {
		r.t.Fatalf("%d expiry entries for %d seen", n, len(got))
	}
	return got
}

func openDedupeBackend(t *testing.T) *state.Backend {
	b, err := state.Open(context.Background(), state.Config{Dir: t.TempDir(), Task: "in-0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

func want(t *testing.T, what string, got []string, w ...string) {
	t.Helper()
	if !slices.Equal(got, w) {
		t.Errorf("%s: %q, want %q", what, got, w)
	}
}

// TestDedupeProcessingTime: duplicates within 10s of processing time are
// dropped, each sighting refreshes; the state expires by timer.
func TestDedupeProcessingTime(t *testing.T) {
	r := newDedupeRun(t, dedupeJob(t, 10*time.Second, false), openDedupeBackend(t))
	want(t, "first", r.send("a", "b", "a", "b", "c"), "a", "b", "c")
	r.now = dt0.Add(8 * time.Second)
	want(t, "at 8s", r.send("a"))
	r.now = dt0.Add(12 * time.Second) // b and c expired; a was seen at 8s
	want(t, "at 12s", r.send("a", "b"), "b")
	if err := r.task.FireTimers(r.now, r); err != nil {
		t.Fatal(err)
	}
	want(t, "state at 12s", r.entries(), "a", "b")
	r.now = dt0.Add(time.Minute)
	if err := r.task.FireTimers(r.now, r); err != nil {
		t.Fatal(err)
	}
	want(t, "state at 1m", r.entries())
	want(t, "after expiry", r.send("a"), "a")
}

// TestDedupeEventTime: duplicates by event time, out of order; the state
// expires as the watermark passes last seen + within.
func TestDedupeEventTime(t *testing.T) {
	r := newDedupeRun(t, dedupeJob(t, 10*time.Second, true), openDedupeBackend(t))
	want(t, "first", r.send("a@5s", "a@1s", "a@16s", "b@2s", "b@13s"), "a", "a", "b", "b")
	// a@1s is 4s before a@5s: a duplicate; a@16s is 11s after 5s: kept;
	// b@13s is 11s after b@2s: kept.
	want(t, "state", r.entries(), "a", "b")
	if err := r.task.AdvanceWatermark(dt0.Add(24*time.Second), r); err != nil {
		t.Fatal(err)
	}
	want(t, "state at wm 24s", r.entries(), "a") // b expired at 23s, a at 26s
	want(t, "a@25s", r.send("a@25s", "b@30s"), "b")
	if err := r.task.AdvanceWatermark(dt0.Add(time.Hour), r); err != nil {
		t.Fatal(err)
	}
	want(t, "state at wm 1h", r.entries())
}

// TestDedupeRestore: the seen keys and their timers are in the snapshot:
// a restored task drops the duplicates and expires the state once.
func TestDedupeRestore(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.Open(ctx, "mem://", "dedupe", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	cfg := state.Config{Dir: t.TempDir(), Task: "in-0", Store: store}
	b, err := state.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	j := dedupeJob(t, 10*time.Second, false)
	r := newDedupeRun(t, j, b)
	want(t, "before", r.send("a", "b"), "a", "b")
	snap, err := b.Snapshot(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := snap.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = r.task.Close()
	if err := b.NotifyComplete(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cfg.Dir = t.TempDir()
	cfg.DisableLocalRecovery = true
	rb, err := state.Restore(ctx, cfg, res.Handle)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rb.Close(ctx) })
	r = newDedupeRun(t, j, rb)
	r.now = dt0.Add(5 * time.Second)
	want(t, "restored", r.send("a", "c"), "c")
	r.now = dt0.Add(12 * time.Second)
	if err := r.task.FireTimers(r.now, r); err != nil {
		t.Fatal(err)
	}
	want(t, "expired b", r.entries(), "a", "c")
}
