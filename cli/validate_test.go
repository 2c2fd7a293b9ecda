package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidateReportsEveryStepProblem runs `processor validate` on a job
// file of the YAML language with several mistakes: every one is reported
// in the one run, each at the line and column where it was written, with
// its step's key path and a hint, and no Go source position.
func TestValidateReportsEveryStepProblem(t *testing.T) {
	clearConfigEnv(t)
	bad := filepath.Join(t.TempDir(), "orders.yaml")
	job := `job:
  name: orders
  pipeline:
    - source: {topics: [orders]}
    - filter: {wher: "value.amount > 0"}
    - filter: {where: "value.amount >> 2 && value.ok"}
    - map: {value: {id: value.id}, on_error: ignore}
    - aggregate:
        total: {summ: value.amount}
        count: value.id
    - route:
        - {when: "value.amount > 1000", to: bigg}
  streams:
    big: [ {sink: {topic: big-orders}} ]
kafka: {brokers: ["127.0.0.1:9092"]}
`
	if err := os.WriteFile(bad, []byte(job), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	root := newRootCmd(&out, nil)
	root.SetErr(&errOut)
	root.SetArgs([]string{"validate", "-c", bad})
	err := root.Execute()
	got := out.String() + errOut.String()
	if err == nil {
		t.Fatalf("bad job validated:\n%s", got)
	}
	for _, want := range []string{
		bad + ":5:16: job.pipeline[1].filter.wher: unknown key (did you mean where?)",
		bad + `:7:46: job.pipeline[3].map.on_error: "ignore": must be fail, skip or dead-letter`,
		bad + ":9:17: job.pipeline[4].aggregate.total.summ: unknown key (did you mean sum?)",
		bad + `:10:16: job.pipeline[4].aggregate.count: "value.id": count takes no expression: write count: true`,
		bad + `:12:45: job.pipeline[5].route[0].to: "bigg" is not a stream of job.streams (streams: big) (did you mean big?)`,
		bad + ":14:10: job.streams.big: not used",
		// The expression's own error, at the character it names, although
		// the job has other problems (the compiler does not run).
		bad + ":6:38: job.pipeline[2].filter.where: ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("validate output lacks %q", want)
		}
	}
	if n := strings.Count(got, bad+":"); n != 7 {
		t.Errorf("%d problems, want 7 (no knock-on problems)", n)
	}
	if strings.Contains(got, ".go:") {
		t.Errorf("a Go source position in a message for YAML users")
	}
	if err != nil && !strings.Contains(err.Error(), "problem(s)") {
		t.Errorf("exit error %v", err)
	}
	if t.Failed() {
		t.Logf("output:\n%s", got)
	}
}

// TestValidateReportsEveryExpressionProblem: `processor validate` reports
// every expression's problem, types included, whether the job has other
// problems (the compiler cannot run) or not (the compiler stops at the
// first step with a problem): a filter whose where is a string is not
// hidden by another expression's error, and an aggregate of a string
// literal is refused.
func TestValidateReportsEveryExpressionProblem(t *testing.T) {
	clearConfigEnv(t)
	dir := t.TempDir()
	for _, other := range []string{"", "    - filtr: {where: value.a > 1}\n"} {
		bad := filepath.Join(dir, "orders.yaml")
		job := `job:
  name: orders
  pipeline:
    - source: {topics: [orders]}
    - filter: {where: "upper(value.name)"}
    - map: {value: {x: "value.a +* 2"}}
    - aggregate: {total: {sum: "'x'"}, top: {max: "value.a > 1"}, n: {avg: value.n}}
` + other + `    - sink: {topic: out}
kafka: {brokers: ["127.0.0.1:9092"]}
`
		if err := os.WriteFile(bad, []byte(job), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		root := newRootCmd(&out, nil)
		root.SetErr(&out)
		root.SetArgs([]string{"validate", "-c", bad})
		if err := root.Execute(); err == nil {
			t.Fatalf("bad job validated:\n%s", out.String())
		}
		want := []string{
			bad + ":5:24: job.pipeline[1].filter.where: expected bool, but got string",
			bad + `:6:34: job.pipeline[2].map.value.x: unexpected token Operator("*")`,
			bad + ":7:33: job.pipeline[3].aggregate.total.sum: expected a number, but the expression is a string",
			bad + ":7:52: job.pipeline[3].aggregate.top.max: expected a number or a string, but the expression is a bool",
		}
		if other != "" {
			want = append(want, bad+":8:7: job.pipeline[4].filtr: unknown key (did you mean filter?)")
		}
		got := out.String()
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("validate output lacks %q", w)
			}
		}
		if n := strings.Count(got, bad+":"); n != len(want) {
			t.Errorf("%d problems, want %d", n, len(want))
		}
		if t.Failed() {
			t.Fatalf("output:\n%s", got)
		}
	}
}
