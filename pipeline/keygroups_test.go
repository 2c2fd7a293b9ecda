package pipeline_test

import (
	"bytes"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weir-stream/weir/keygroup"
	"github.com/weir-stream/weir/state"
)

// Every kind of state a YAML job keeps in a stage behind a shuffle — a
// window's and an aggregate's (count, count_distinct, by-name marks), a
// dedupe's, an interval join's buffers, their event-time timers and the
// per-key-group watermark — is filed under a key group, so that a change
// of the stage's parallelism moves all of it (docs/state.md, "Rescaling";
// a rescaling restore refuses state it cannot divide). Each job runs with
// its stages' backends key-grouped, then every key in every backend must
// lie in the key-grouped range.
func TestStateIsKeyGrouped(t *testing.T) {
	for _, tc := range []struct{ name, yaml, records string }{
		{"window, aggregate, dedupe", `job:
  name: j
  pipeline:
    - source: {topics: [in], format: json}
    - key_by: {expr: value.page}
    - dedupe: {key: value.id, within: 10m}
    - window: {type: tumbling, size: 1m}
    - aggregate: {n: {count: true}, who: {count_distinct: value.who}}
    - sink: {topic: out, format: json}
`, "@0s k1\t{\"page\":\"a\",\"id\":1,\"who\":\"x\"}\n@10s k2\t{\"page\":\"b\",\"id\":2,\"who\":\"y\"}\n@20s k3\t{\"page\":\"a\",\"id\":1,\"who\":\"z\"}\nwatermark 30s\n@70s k4\t{\"page\":\"c\",\"id\":3,\"who\":\"x\"}\nwatermark 2m\n"},
		{"running aggregate", `job:
  name: j
  pipeline:
    - source: {topics: [in], format: json}
    - key_by: {expr: value.page}
    - aggregate: {n: {count: true}, who: {count_distinct: value.who}, s: {sum: value.id}}
    - sink: {topic: out, format: json}
`, "k1\t{\"page\":\"a\",\"id\":1,\"who\":\"x\"}\nk2\t{\"page\":\"b\",\"id\":2,\"who\":\"y\"}\nk3\t{\"page\":\"a\",\"id\":1,\"who\":\"z\"}\n"},
		{"interval join", `job:
  name: j
  pipeline:
    - source: {topics: [orders], format: json}
    - key_by: {field: id}
    - join: {stream: {name: payments, within: 5m}, as: payment}
    - sink: {topic: out, format: json}
  streams:
    payments:
      - source: {topics: [payments], format: json}
      - key_by: {expr: value.order}
`, "@0s x\t{\"id\":\"o1\"}\n@1m topic:payments y\t{\"order\":\"o1\",\"paid\":10}\n@2m topic:payments y\t{\"order\":\"o2\",\"paid\":20}\nwatermark 3m\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j, err := compileYAML(t, tc.yaml)
			if err != nil {
				t.Fatal(err)
			}
			r := newRunner(t, j)
			r.reopen(t, keygroup.DefaultMaxParallelism)
			if !r.runLines(t, tc.records) {
				t.Fatalf("the job failed:\n%s", r.out.String())
			}
			lo, hi := state.KeyGroupBounds(0, keygroup.Limit)
			entries := 0
			for i, st := range r.stages {
				if err := st.b.Flush(); err != nil {
					t.Fatal(err)
				}
				it, err := st.b.DB().NewIter(&pebble.IterOptions{})
				if err != nil {
					t.Fatal(err)
				}
				for ok := it.First(); ok; ok = it.Next() {
					entries++
					if k := it.Key(); bytes.Compare(k, lo) < 0 || bytes.Compare(k, hi) >= 0 {
						t.Errorf("stage %s: key %q is not filed under a key group", j.Stages()[i].Name, k)
					}
				}
				if err := it.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if entries == 0 {
				t.Fatalf("no state written: the test shows nothing\n%s", r.out.String())
			}
			t.Logf("%d entries, all key-grouped; output:\n%s", entries, r.out.String())
		})
	}
}
