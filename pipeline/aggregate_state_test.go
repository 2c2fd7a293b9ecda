package pipeline_test

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/weir-stream/weir/state"
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
