package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOfflineCommandsNeedNoBrokers runs `processor validate` and `processor
// plan --partitions 4` through the binary on the first job of
// docs/yaml.md, which has no kafka section, with no WEIR_ variable set:
// both connect to nothing, so neither requires kafka.brokers. validate
// notes that run needs it; run itself still refuses the file.
func TestOfflineCommandsNeedNoBrokers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	doc, err := os.ReadFile("../docs/yaml.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	job, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 || strings.Contains(job, "kafka:") {
		t.Fatalf("docs/yaml.md's first YAML block is not a job without a kafka section:\n%s", job)
	}
	file := filepath.Join(t.TempDir(), "job.yaml")
	if err := os.WriteFile(file, []byte(job), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := buildProcessor(t)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WEIR_") {
			env = append(env, kv)
		}
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("validate", "-c", file)
	if err != nil || !strings.Contains(out, "ok (job orders-per-country") || strings.Contains(out, "required") {
		t.Errorf("validate: %v\n%s", err, out)
	}
	if !strings.Contains(out, "note: kafka.brokers is not set: run needs it") {
		t.Errorf("validate does not note that run needs kafka.brokers:\n%s", out)
	}
	out, err = run("plan", "-c", file, "--partitions", "4")
	if err != nil || !strings.Contains(out, "shuffle") || strings.Contains(out, "kafka.brokers") {
		t.Errorf("plan --partitions 4: %v\n%s", err, out)
	}
	// Commands that connect still require it.
	out, err = run("plan", "-c", file)
	if err == nil || !strings.Contains(out, "kafka.brokers: required") {
		t.Errorf("plan without --partitions: %v, want kafka.brokers required\n%s", err, out)
	}
}
