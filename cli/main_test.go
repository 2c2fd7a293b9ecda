package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weir-stream/weir/internal/e2etest"
)

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	root := newRootCmd(&out, nil)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "processor ") {
		t.Fatalf("version output %q", out.String())
	}
}

func TestValidate(t *testing.T) {
	var out bytes.Buffer
	root := newRootCmd(&out, nil)
	root.SetArgs([]string{"validate", "-c", "../examples/clicks-per-user.yaml"})
	if err := root.Execute(); err != nil {
		t.Fatalf("example job invalid: %v", err)
	}
	if !strings.Contains(out.String(), "ok (job clicks-per-user, 3 steps)") {
		t.Fatalf("validate output %q", out.String())
	}

	bad := t.TempDir() + "/bad.yaml"
	if err := os.WriteFile(bad, []byte("job: {name: x, pipeline: []}\ncheckpoint: {retained: 0, bogus: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	root = newRootCmd(&out, nil)
	root.SetErr(&errOut)
	root.SetArgs([]string{"validate", "-c", bad})
	if err := root.Execute(); err == nil {
		t.Fatal("bad config validated")
	}
	if !strings.Contains(errOut.String(), "checkpoint.bogus: unknown key") || !strings.Contains(errOut.String(), "checkpoint.retained: 0") {
		t.Fatalf("validate problems %q", errOut.String())
	}
}

// TestValidateSaysWhereAndTakesRunFlags runs `processor validate` as a user
// would: it takes the flags `run` takes, and each problem it prints names
// the file and line (or variable, or flag), the key path, the value and
// what was expected, never a Go source file or a library's message.
func TestValidateSaysWhereAndTakesRunFlags(t *testing.T) {
	clearConfigEnv(t)
	validate := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		root := newRootCmd(&out, nil)
		root.SetErr(&errOut)
		root.SetArgs(append([]string{"validate"}, args...))
		err := root.Execute()
		return out.String() + errOut.String(), err
	}
	if out, err := validate("-c", "../examples/clicks-per-user.yaml", "--checkpoint.interval=1s", "--log.level=debug"); err != nil {
		t.Fatalf("validate refuses run's flags: %v\n%s", err, out)
	}

	dir := t.TempDir()
	bad := dir + "/bad.yaml"
	yaml := `job:
  name: x
  pipeline:
    - source: {topics: [in]}
    - aggregate: {op: count}
    - sink: {topic: out}
kafka: {brokers: ["a:1"]}
checkpoint:
  interval: 2
  retained: three
`
	if err := os.WriteFile(bad, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("WEIR_STATE_BLOCK_CACHE_BYTES", "1GiB")
	out, err := validate("-c", bad, "--process.grace_period=soon")
	if err == nil {
		t.Fatalf("bad configuration validated:\n%s", out)
	}
	for _, want := range []string{
		bad + ":9:13: checkpoint.interval: 2: a duration needs a unit",
		bad + `:10:13: checkpoint.retained: "three": want a whole number`,
		`environment variable WEIR_STATE_BLOCK_CACHE_BYTES: state.block_cache_bytes: "1GiB": want a whole number`,
		`flag --process.grace_period: process.grace_period: "soon": want a duration`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("validate output lacks %q:\n%s", want, out)
		}
	}

	// The object-store URL, checked by validate and, with the same code,
	// by run before it connects to anything.
	for _, cmd := range []string{"validate", "run"} {
		var out, errOut bytes.Buffer
		root := newRootCmd(&out, nil)
		root.SetErr(&errOut)
		root.SetArgs([]string{cmd, "-c", "../examples/clicks-per-user.yaml", "--checkpoint.storage=s3://bucket?regoin=eu"})
		err := root.Execute()
		msg := errOut.String()
		if err != nil {
			msg += err.Error()
		}
		if want := `flag --checkpoint.storage: checkpoint.storage: "s3://bucket?regoin=eu": query parameter "regoin" is not one s3 takes (did you mean region?)`; err == nil || !strings.Contains(msg, want) {
			t.Errorf("%s: want %q, got %v\n%s", cmd, want, err, msg)
		}
	}

	// A sink that would share the dead-letter topic with other settings:
	// at the sink's line (the pipeline compiler found it before, citing its
	// own Go source position).
	dlq := strings.Replace(yaml, "{topics: [in]}", "{topics: [in], on_error: dead-letter, dead_letter_topic: out}", 1)
	dlq = strings.Replace(dlq, "{topic: out}", "{topic: out, delivery: at-least-once}", 1)
	dlq = strings.Replace(dlq, "  interval: 2\n  retained: three\n", "  interval: 2s\n", 1)
	if err := os.WriteFile(bad, []byte(dlq), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("WEIR_STATE_BLOCK_CACHE_BYTES")
	out, err = validate("-c", bad)
	if err == nil || !strings.Contains(out, bad+":6:21: job.pipeline[2].sink.topic: \"out\" is also the dead-letter topic") || strings.Contains(out, ".go:") {
		t.Fatalf("want the sink topic's problem at its line, with no Go position:\n%s", out)
	}
	t.Logf("\n%s", out)

	// A YAML syntax error is reported alone.
	if err := os.WriteFile(bad, []byte("job:\n  name: x\n   pipeline: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = validate("-c", bad)
	if err == nil || !strings.Contains(out, bad+":3: YAML syntax:") || strings.Contains(out, "required") {
		t.Fatalf("want the syntax error alone:\n%s", out)
	}
}

// TestVersionSetAtBuild builds the binary as `make build` does and checks
// that its version is the one the build gave (the -X flag names this
// package's variable).
func TestVersionSetAtBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary: skipped with -short")
	}
	root, err := e2etest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if out, err := exec.Command("make", "-s", "-C", root, "build", "BIN="+bin, "VERSION=v9.9.9-test").CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(bin, "processor"), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "processor v9.9.9-test (go") {
		t.Fatalf("version: %v: %q", err, out)
	}
}

// TestMakeRunPassesArgs: `make run ARGS=...` passes the flags to
// processor dev (make -n prints the command without running it).
func TestMakeRunPassesArgs(t *testing.T) {
	root, err := e2etest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("make", "-n", "-s", "-C", root, "run", "ARGS=--http :8081 --example views-per-page").CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || lines[len(lines)-1] != "bin/processor dev --http :8081 --example views-per-page" {
		t.Fatalf("make -n run ARGS=...: %v\n%s", err, out)
	}
}
