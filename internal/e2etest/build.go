package e2etest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ModuleRoot returns the directory of Weir's go.mod, found with `go env
// GOMOD` from the current directory (a test's package directory).
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: not inside a module")
	}
	return filepath.Dir(mod), nil
}

// BuildProcessor builds the stock binary, cmd/processor, into dir and
// returns its path.
func BuildProcessor(dir string) (string, error) {
	return build(dir, "processor", "./cmd/processor")
}

// BuildExample builds the Go program examples/<name> (a job defined in Go,
// whose main calls cli.Main; name may have a directory, as nexmark/q4)
// into dir, named after its last element, and returns its path.
func BuildExample(dir, name string) (string, error) {
	return build(dir, name, "./examples/"+name)
}

// build builds the package pkg of Weir's module into dir/name.
func build(dir, name, pkg string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, filepath.Base(name))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build %s: %v\n%s", pkg, err, stderr.Bytes())
	}
	return bin, nil
}
