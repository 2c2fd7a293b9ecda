package barrier

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPure fails if the barrier package imports anything but the standard
// library's pure packages, reads the clock, or starts a goroutine
// (DESIGN.md section 2). coordinator's TestPurePackages checks the same
// for all pure packages; this copy keeps `go test ./barrier` honest alone.
func TestPure(t *testing.T) {
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			first, _, _ := strings.Cut(path, "/")
			if strings.Contains(first, ".") || strings.HasPrefix(path, "math/rand") || path == "os" ||
				strings.HasPrefix(path, "net") || path == "syscall" || path == "unsafe" {
				t.Errorf("%s: imports %s", fset.Position(imp.Pos()), path)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				t.Errorf("%s: go statement", fset.Position(n.Pos()))
			case *ast.SelectorExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == "time" {
					switch n.Sel.Name {
					case "Now", "Since", "Until", "Sleep", "After", "AfterFunc", "Tick", "NewTimer", "NewTicker":
						t.Errorf("%s: reads the clock with time.%s", fset.Position(n.Pos()), n.Sel.Name)
					}
				}
			}
			return true
		})
	}
	if checked < 2 {
		t.Fatalf("checked %d files", checked)
	}
}
