package coordinator

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The pure packages: the coordinator core, the barrier aligner, the
// control messages, the shuffle input core, the watermark core, the
// compatibility check, the checkpoint vocabulary (checkpoint/ckpt) and the
// Kafka settings' vocabulary (kafkaio, not its sub-packages, which do the
// I/O). The Kafka runtime loop of the coordinator lives in the subpackage
// coordinator/runner, which this check does not cover.
var purePackages = []string{".", "../barrier", "../control", "../runtime/input", "../eventtime", "../compat", "../kafkaio", "../checkpoint/ckpt", "../jobview"}

// forbiddenImports are import path fragments no pure package may use.
var forbiddenImports = []string{
	"github.com/twmb/franz-go", // kgo, kadm, kmsg
	"github.com/cockroachdb/pebble",
	"math/rand", // also math/rand/v2: randomness is an input
	"crypto/rand",
	"os", "net", "io/fs", "syscall", "unsafe",
}

// clockFuncs are the functions of package time that read the clock or
// start timers (which run goroutines).
var clockFuncs = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
	"AfterFunc": true, "Tick": true, "NewTimer": true, "NewTicker": true,
}

// checkPure reports every violation in one parsed file.
func checkPure(fset *token.FileSet, f *ast.File, allowThirdParty func(string) bool) []string {
	var bad []string
	timeName := ""
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		for _, fb := range forbiddenImports {
			if path == fb || strings.HasPrefix(path, fb+"/") {
				bad = append(bad, fmt.Sprintf("%s: imports %s", fset.Position(imp.Pos()), path))
			}
		}
		if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") && !allowThirdParty(path) {
			bad = append(bad, fmt.Sprintf("%s: imports %s (only the standard library and weir's pure packages)", fset.Position(imp.Pos()), path))
		}
		if path == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			bad = append(bad, fmt.Sprintf("%s: go statement", fset.Position(n.Pos())))
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && timeName != "" && id.Name == timeName && clockFuncs[n.Sel.Name] {
				bad = append(bad, fmt.Sprintf("%s: reads the clock with time.%s", fset.Position(n.Pos()), n.Sel.Name))
			}
		}
		return true
	})
	return bad
}

func weirPure(path string) bool {
	return path == "github.com/weir-stream/weir/control" || path == "github.com/weir-stream/weir/barrier" ||
		path == "github.com/weir-stream/weir/compat" || path == "github.com/weir-stream/weir/checkpoint/ckpt"
}

// TestPurePackages fails if the coordinator core, the barrier aligner, the
// shuffle input core (runtime/input), the watermark core (eventtime), the
// checkpoint vocabulary (checkpoint/ckpt) or the control package imports
// kgo or pebble, reads the clock, draws random numbers from a global source,
// or starts a goroutine.
func TestPurePackages(t *testing.T) {
	fset := token.NewFileSet()
	checked := 0
	for _, dir := range purePackages {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			for _, v := range checkPure(fset, f, weirPure) {
				t.Error(v)
			}
		}
	}
	if checked < 8 {
		t.Fatalf("checked only %d files: wrong directories?", checked)
	}
	if _, err := os.Stat("runner"); err == nil {
		t.Log("coordinator/runner exists: it may do I/O and is not checked here")
	}
}

// TestPurityCheckCatches proves the check above can fail.
func TestPurityCheckCatches(t *testing.T) {
	src := `package p
import (
	"github.com/twmb/franz-go/pkg/kgo"
	clock "time"
	"math/rand/v2"
	"github.com/cockroachdb/pebble/v2"
)
func f() {
	go func() {}()
	_ = clock.Now()
	_ = rand.Int()
	var _ kgo.Client
	var _ pebble.DB
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(checkPure(fset, f, weirPure), "\n")
	for _, want := range []string{"imports github.com/twmb/franz-go/pkg/kgo", "imports math/rand/v2",
		"imports github.com/cockroachdb/pebble/v2", "go statement", "time.Now"} {
		if !strings.Contains(got, want) {
			t.Errorf("check missed %q; it reported:\n%s", want, got)
		}
	}
}
