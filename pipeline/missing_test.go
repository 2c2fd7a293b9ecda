package pipeline_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/pipeline"
)

// TestMissingFieldsCounted: with Env.Missing, every step counts, per
// field, the records whose value lacks a top-level field its expressions
// read as if it were always there, on the fast paths that read an
// undecoded value's text too (the aggregate's arguments, map's copied
// fields, nested ones included); value?.f and value.f ?? x are not
// counted.
func TestMissingFieldsCounted(t *testing.T) {
	for _, tc := range []struct {
		name, steps, records string
		want                 []string
	}{
		{"filter and aggregate", `
    - filter: {where: "value.amount > 1 || value.vip"}
    - aggregate: {spent: {sum: value.amout}, n: {count: true}}`,
			"k\t{\"amount\":5,\"vip\":false}\nk\t{\"amount\":7}\nk\t{\"vip\":true}\nk\t{\"amount\":0}\n",
			[]string{"job.pipeline[1].filter amount 1", "job.pipeline[1].filter vip 2", "job.pipeline[2].aggregate amout 3"}},
		{"map, copied and evaluated", `
    - map: {value: {id: value.id, c: "value?.coupon"}}
    - map: {value: {id: value.id, total: value.price * 2, c: "value.c ?? 'none'"}}`,
			"{\"id\":1,\"price\":3}\n{\"price\":4}\n",
			[]string{"job.pipeline[1].map id 1", "job.pipeline[2].map id 0", "job.pipeline[2].map price 2"}},
		{"map of nested members, copied", `
    - map: {value: {p: value.bid.price, q: "0.5 * value.bid.qty", t: value.ts}}`,
			"{\"bid\":{\"price\":1,\"qty\":2},\"ts\":2}\n{\"bid\":{\"price\":2,\"qty\":2}}\n{\"bid\":{\"qty\":2},\"ts\":1}\n",
			[]string{"job.pipeline[1].map bid 0", "job.pipeline[1].map ts 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			yaml := "job:\n  name: missing\n  pipeline:\n    - source: {topics: [orders]}" + tc.steps + "\n    - sink: {topic: out}\n"
			path := filepath.Join(t.TempDir(), "job.yaml")
			if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := config.Load(config.Source{File: path, YAML: []byte("kafka: {brokers: [127.0.0.1:9092]}\n"), NoEnv: true})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			counts := map[string]int{}
			j, err := pipeline.CompileWith(cfg.Job, pipeline.Env{Missing: func(step, field string) func() {
				k := step + " " + field
				mu.Lock()
				counts[k] += 0
				mu.Unlock()
				return func() {
					mu.Lock()
					counts[k]++
					mu.Unlock()
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			if out := RunJob(t, j, tc.records); strings.Contains(out, "error") {
				t.Fatalf("the job failed: %s", out)
			}
			var got []string
			for k, n := range counts {
				got = append(got, fmt.Sprintf("%s %d", k, n))
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("counts %q, want %q", got, tc.want)
			}
		})
	}
}
