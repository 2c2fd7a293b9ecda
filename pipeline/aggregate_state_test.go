package pipeline_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"testing"

	"github.com/weir-stream/weir/keygroup"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// TestAggregatePositionalState: a running aggregate's state as the
// positional codec wrote it before the by-name encoding (its accumulator,
// and its count_distinct's values under map keys that start with the
// aggregate's index) continues for the unchanged job: the values go on,
// a distinct value seen before is not counted again. The key's first
// write migrates both to the by-name encoding, so that a reordered job
// after a restart reads them by name.
func TestAggregatePositionalState(t *testing.T) {
	j, err := compileYAML(t, `job:
  name: legacy
  pipeline:
    - source: {topics: [in]}
    - aggregate: {small: {sum: value.x}, big: {sum: value.y}, n: {count: true}, who: {count_distinct: value.who}}
    - sink: {topic: out}
`)
	if err != nil {
		t.Fatal(err)
	}
	r := newRunner(t, j)
	// What the positional codec wrote for key k after {"x":31,"y":3100,"who":"a"}.
	b := r.stages[0].b
	b.SetCurrentKey([]byte("k"))
	acc, err := state.NewValueState(b, "aggregate/acc", state.Codec[[]byte](state.BytesCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	distinct, err := state.NewMapState(b, "aggregate/distinct", state.BytesCodec{}, state.Codec[[]byte](state.BytesCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	old, _ := hex.DecodeString("01003e0100b8300101")
	if err := acc.Put(old); err != nil {
		t.Fatal(err)
	}
	// uvarint(3): the fourth aggregate; "a" as appendCanonical writes it.
	if err := distinct.Put([]byte{3, 5, 1, 'a'}, nil); err != nil {
		t.Fatal(err)
	}

	r.runLines(t, "k\t{\"x\":1,\"y\":100,\"who\":\"a\"}\nk\t{\"who\":\"b\"}\n")
	b.SetCurrentKey([]byte("k"))
	v, _, err := acc.Get()
	if err != nil || !bytes.HasPrefix(v, []byte{0x80, 0}) {
		t.Errorf("accumulator written back as % x, %v", v, err)
	}
	var keys []string
	if err := distinct.Range(func(k, _ []byte) bool { keys = append(keys, string(k)); return true }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"\x80\x00\x03who\x05\x01a", "\x80\x00\x03who\x05\x01b"}; len(keys) != 2 || keys[0] != want[0] || keys[1] != want[1] {
		t.Errorf("distinct keys %q, want %q", keys, want)
	}

	j2, err := compileYAML(t, `job:
  name: legacy
  pipeline:
    - source: {topics: [in]}
    - aggregate: {who: {count_distinct: value.who}, n: {count: true}, big: {sum: value.y}, small: {sum: value.x}}
    - sink: {topic: out}
`)
	if err != nil {
		t.Fatal(err)
	}
	r.restartWith(t, j2)
	r.runLines(t, "k\t{\"x\":1,\"who\":\"a\"}\nk\t{\"who\":\"c\"}\n")
	want := `out: k	{"key":"k","small":32,"big":3200,"n":2,"who":1}
out: k	{"key":"k","small":32,"big":3200,"n":3,"who":2}
out: k	{"key":"k","who":2,"n":4,"big":3200,"small":33}
out: k	{"key":"k","who":3,"n":5,"big":3200,"small":33}
`
	if got := r.out.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestAggregatePositionalStateMigratedAtOpen: a running aggregate that
// opens on state with positional accumulators rewrites them all by name
// (with their distinct values) and marks each key group, so that a key
// that gets no record before the job's aggregates are reordered is still
// read by name. In the legacy layout and with key groups.
func TestAggregatePositionalStateMigratedAtOpen(t *testing.T) {
	job := func(aggs string) *stream.Job {
		j, err := compileYAML(t, "job:\n  name: legacy\n  pipeline:\n    - source: {topics: [in]}\n    - aggregate: "+aggs+"\n    - sink: {topic: out}\n")
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	for _, maxParallelism := range []int{0, 8} {
		r := newRunner(t, job("{small: {sum: value.x}, big: {sum: value.y}, n: {count: true}, who: {count_distinct: value.who}}"))
		r.reopen(t, maxParallelism)
		b := r.stages[0].b
		acc, err := state.NewValueState(b, "aggregate/acc", state.Codec[[]byte](state.BytesCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		distinct, err := state.NewMapState(b, "aggregate/distinct", state.BytesCodec{}, state.Codec[[]byte](state.BytesCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		old, _ := hex.DecodeString("01003e0100b8300101") // small=31 big=3100 n=1 who=1 ("a")
		keys := []string{"k1", "k2", "k3", "k4", "k5"}
		for _, k := range keys {
			b.SetCurrentKey([]byte(k))
			if err := acc.Put(old); err != nil {
				t.Fatal(err)
			}
			if err := distinct.Put([]byte{3, 5, 1, 'a'}, nil); err != nil {
				t.Fatal(err)
			}
		}
		r.restart(t) // the task opens on the positional state

		b = r.stages[0].b
		acc, _ = state.NewValueState(b, "aggregate/acc", state.Codec[[]byte](state.BytesCodec{}))
		distinct, _ = state.NewMapState(b, "aggregate/distinct", state.BytesCodec{}, state.Codec[[]byte](state.BytesCodec{}))
		for _, k := range keys {
			b.SetCurrentKey([]byte(k))
			v, _, err := acc.Get()
			if err != nil || !bytes.HasPrefix(v, []byte{0x80, 0}) {
				t.Errorf("max parallelism %d: %s's accumulator after open: % x, %v", maxParallelism, k, v, err)
			}
			var dk []string
			if err := distinct.Range(func(k, _ []byte) bool { dk = append(dk, string(k)); return true }); err != nil {
				t.Fatal(err)
			}
			if len(dk) != 1 || dk[0] != "\x80\x00\x03who\x05\x01a" {
				t.Errorf("max parallelism %d: %s's distinct keys after open: %q", maxParallelism, k, dk)
			}
		}
		marks, _ := state.NewValueState(b, "aggregate/by_name", state.Codec[[]byte](state.BytesCodec{}))
		groups := map[int]bool{}
		for _, k := range keys {
			g := 0
			if maxParallelism > 0 {
				g = keygroup.Of([]byte(k), maxParallelism)
			}
			groups[g] = true
		}
		for g := range max(maxParallelism, 1) {
			b.SetCurrentKeyInGroup(nil, g)
			if _, ok, err := marks.Get(); err != nil || ok != groups[g] {
				t.Errorf("max parallelism %d: key group %d marked %v, want %v (%v)", maxParallelism, g, ok, groups[g], err)
			}
		}

		r.restartWith(t, job("{who: {count_distinct: value.who}, n: {count: true}, big: {sum: value.y}, small: {sum: value.x}}"))
		r.runLines(t, "k2\t{\"x\":1,\"who\":\"a\"}\nk5\t{\"who\":\"b\"}\n")
		want := `out: k2	{"key":"k2","who":1,"n":2,"big":3100,"small":32}
out: k5	{"key":"k5","who":2,"n":2,"big":3100,"small":31}
`
		if got := r.out.String(); got != want {
			t.Errorf("max parallelism %d: got\n%s\nwant\n%s", maxParallelism, got, want)
		}
	}
}

// reopen replaces every stage's task and backend by a new, empty one whose
// keyed state is filed under maxParallelism key groups (0: the legacy
// layout).
func (r *runner) reopen(t *testing.T, maxParallelism int) {
	t.Helper()
	ctx := context.Background()
	for i, st := range r.stages {
		_ = r.tasks[i].Close()
		if err := st.b.Close(ctx); err != nil {
			t.Fatal(err)
		}
		st.cfg.Dir, st.cfg.MaxParallelism = t.TempDir(), maxParallelism
		var err error
		if st.b, err = state.Open(ctx, st.cfg); err != nil {
			t.Fatal(err)
		}
		b := st.b
		t.Cleanup(func() { _ = b.Close(ctx) })
		r.tasks[i] = r.newTask(t, i, st)
	}
}
