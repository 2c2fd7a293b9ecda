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

// BuildProcessor builds cmd/processor into dir and returns the binary's path.
func BuildProcessor(dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "processor")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/processor")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build processor: %v\n%s", err, stderr.Bytes())
	}
	return bin, nil
}
