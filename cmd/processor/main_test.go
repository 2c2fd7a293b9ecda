package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	var out bytes.Buffer
	root := newRootCmd(&out)
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
	root := newRootCmd(&out)
	root.SetArgs([]string{"validate", "-c", "../../examples/clicks-per-user.yaml"})
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
	root = newRootCmd(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"validate", "-c", bad})
	if err := root.Execute(); err == nil {
		t.Fatal("bad config validated")
	}
	if !strings.Contains(errOut.String(), "checkpoint.bogus: unknown key") || !strings.Contains(errOut.String(), "checkpoint.retained: 0") {
		t.Fatalf("validate problems %q", errOut.String())
	}
}
