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
