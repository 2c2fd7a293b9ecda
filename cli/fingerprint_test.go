package cli

import (
	"fmt"
	"strings"
	"testing"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/pipeline"
)

// TestJobFingerprint: the fingerprint follows the job section and nothing
// else: the same job on another replica has the same one, an added step
// another.
func TestJobFingerprint(t *testing.T) {
	const base = `
job:
  name: fp
  pipeline:
    - source: {topics: [in], format: json}
%s    - aggregate: {op: count}
    - sink: {topic: out}
kafka: {brokers: [%s]}
process: {replica_id: %s}
`
	fp := func(step, broker, replica string) string {
		t.Helper()
		return fpOf(t, fmt.Sprintf(base, step, broker, replica))
	}
	v1 := fp("", "a:9092", "weir-0")
	if len(v1) != 64 || strings.Trim(v1, "0123456789abcdef") != "" {
		t.Fatalf("fingerprint %q: want 64 hex digits", v1)
	}
	if other := fp("", "b:9092", "weir-1"); other != v1 {
		t.Errorf("another replica and broker changed the fingerprint: %s, then %s", v1, other)
	}
	if v2 := fp("    - filter: {where: 'value.i >= 0'}\n", "a:9092", "weir-0"); v2 == v1 {
		t.Errorf("a filter added left the fingerprint %s unchanged", v1)
	}
	// Comments and blank lines move every expression's line: no change.
	filter := "    - filter: {where: 'value.i >= 0'}\n"
	if moved, v2 := fpOf(t, "# a comment\n\n"+fmt.Sprintf(base, filter, "a:9092", "weir-0")), fp(filter, "a:9092", "weir-0"); moved != v2 {
		t.Errorf("a comment changed the fingerprint: %s, then %s", v2, moved)
	}
}

func fpOf(t *testing.T, yaml string) string {
	t.Helper()
	{
		cfg, err := config.Load(config.Source{YAML: []byte(yaml), NoEnv: true})
		if err != nil {
			t.Fatal(err)
		}
		job, err := pipeline.Compile(cfg.Job)
		if err != nil {
			t.Fatal(err)
		}
		s, err := jobFingerprint(cfg, job)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}
