package state

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The plan of a snapshot's asynchronous part, without a database, a file or
// an object store: which files are inline, uploaded, claimed as shared
// objects, or reused from the last confirmed checkpoint (the base).
func TestPlanSnapshot(t *testing.T) {
	const sum = "5ca1ab1e" // stands for the base's checksums
	sst := func(name string, size int64) localFile { return localFile{Name: name, Size: size} }
	wal := func(name string, size, atBarrier int64) localFile {
		return localFile{Name: name, Size: size, Captured: true, WALLen: atBarrier}
	}
	// Base entries as a checkpoint of instance i1 (or another) confirmed them.
	baseSST := func(instance, name string, size int64) FileEntry {
		return FileEntry{Name: name, Key: "shared/t0/" + instance + "-" + name, Size: size, SHA256: sum, Shared: true}
	}
	baseWAL := func(name string, sizes ...int64) FileEntry {
		e := FileEntry{Name: name}
		for _, n := range sizes {
			e.Parts = append(e.Parts, Part{Key: fmt.Sprintf("shared/t0/i1-%s.%d-%d", name, e.Size, e.Size+n), Size: n, SHA256: sum})
			e.Size += n
		}
		return e
	}
	base := func(es ...FileEntry) map[string]FileEntry {
		m := make(map[string]FileEntry)
		for _, e := range es {
			m[e.Name] = e
		}
		return m
	}
	// A small database's directory after its first flush.
	firstFiles := []localFile{
		sst("000004.sst", 2<<20),
		wal("000005.log", 300, 300),
		sst("MANIFEST-000006", 200),
		sst("OPTIONS-000007", 3000),
		sst("marker.manifest.000001.MANIFEST-000006", 0),
	}

	for _, tc := range []struct {
		name      string
		savepoint string
		files     []localFile
		base      map[string]FileEntry
		want      []string // describe of each planned file
		reused    int
		err       string
	}{{
		name: "an empty database: no files",
		want: []string{},
	}, {
		name:  "new files: SSTs and the WAL are shared objects to claim, small files inline",
		files: firstFiles,
		want: []string{
			"000004.sst shared size=2097152 key=shared/t0/i1-000004.sst shared -> shared/t0/i1-000004.sst[0,2097152)",
			"000005.log shared size=300 parts=[shared/t0/i1-000005.log.0-300:300] -> shared/t0/i1-000005.log.0-300[0,300)",
			"MANIFEST-000006 inline size=200 inline",
			"OPTIONS-000007 inline size=3000 inline",
			"marker.manifest.000001.MANIFEST-000006 inline size=0 inline",
		},
	}, {
		name: "a blob file is shared; a small WAL is never inline",
		files: []localFile{
			sst("000009.blob", 100),
			wal("000010.log", 10, 10),
		},
		want: []string{
			"000009.blob shared size=100 key=shared/t0/i1-000009.blob shared -> shared/t0/i1-000009.blob[0,100)",
			"000010.log shared size=10 parts=[shared/t0/i1-000010.log.0-10:10] -> shared/t0/i1-000010.log.0-10[0,10)",
		},
	}, {
		name: "a file of at most InlineMaxBytes is inline, a larger one an object of this checkpoint",
		files: []localFile{
			sst("MANIFEST-000006", InlineMaxBytes+1),
			sst("OPTIONS-000007", InlineMaxBytes),
		},
		want: []string{
			"MANIFEST-000006 upload size=16385 key=chk-7/t0/MANIFEST-000006 -> chk-7/t0/MANIFEST-000006[0,16385)",
			"OPTIONS-000007 inline size=16384 inline",
		},
	}, {
		name: "the WAL holds what it held at the barrier, not what was appended since",
		files: []localFile{
			wal("000005.log", 900, 300),
		},
		want: []string{
			"000005.log shared size=300 parts=[shared/t0/i1-000005.log.0-300:300] -> shared/t0/i1-000005.log.0-300[0,300)",
		},
	}, {
		name: "files already uploaded: a shared file of the base is reused as is, the WAL adds a piece",
		files: []localFile{
			sst("000004.sst", 2<<20),
			wal("000005.log", 700, 700),
			sst("000008.sst", 1<<20),
			sst("MANIFEST-000006", 400),
		},
		base: base(baseSST("i1", "000004.sst", 2<<20), baseWAL("000005.log", 300, 100)),
		want: []string{
			"000004.sst reuse size=2097152 key=shared/t0/i1-000004.sst sha=5ca1ab1e shared base",
			"000005.log shared size=700 parts=[shared/t0/i1-000005.log.0-300:300:5ca1ab1e shared/t0/i1-000005.log.300-400:100:5ca1ab1e shared/t0/i1-000005.log.400-700:300] -> shared/t0/i1-000005.log.400-700[400,700) base",
			"000008.sst shared size=1048576 key=shared/t0/i1-000008.sst shared -> shared/t0/i1-000008.sst[0,1048576)",
			"MANIFEST-000006 inline size=400 inline",
		},
		reused: 2,
	}, {
		name: "a WAL that did not grow since the base is its parts, nothing new",
		files: []localFile{
			wal("000005.log", 500, 400),
		},
		base: base(baseWAL("000005.log", 300, 100)),
		want: []string{
			"000005.log reuse size=400 parts=[shared/t0/i1-000005.log.0-300:300:5ca1ab1e shared/t0/i1-000005.log.300-400:100:5ca1ab1e] base",
		},
		reused: 1,
	}, {
		name: "a base of another instance (a restore) shares no key; a WAL shorter than the base's is another file",
		files: []localFile{
			sst("000004.sst", 2<<20),
			wal("000005.log", 200, 200),
		},
		base: base(baseSST("i0", "000004.sst", 2<<20), baseWAL("000005.log", 300)),
		want: []string{
			"000004.sst shared size=2097152 key=shared/t0/i1-000004.sst shared -> shared/t0/i1-000004.sst[0,2097152)",
			"000005.log shared size=200 parts=[shared/t0/i1-000005.log.0-200:200] -> shared/t0/i1-000005.log.0-200[0,200)",
		},
	}, {
		name:      "a savepoint copies every file into its directory, whatever the base has",
		savepoint: "sp",
		files:     firstFiles,
		base:      base(baseSST("i1", "000004.sst", 2<<20), baseWAL("000005.log", 100)),
		want: []string{
			"000004.sst upload size=2097152 key=t0/000004.sst -> savepoints/sp/t0/000004.sst[0,2097152)",
			"000005.log upload size=300 key=t0/000005.log -> savepoints/sp/t0/000005.log[0,300)",
			"MANIFEST-000006 inline size=200 inline",
			"OPTIONS-000007 inline size=3000 inline",
			"marker.manifest.000001.MANIFEST-000006 inline size=0 inline",
		},
	}, {
		name:  "a WAL not captured at the barrier",
		files: []localFile{sst("000005.log", 300)},
		err:   "WAL 000005.log was not captured at the barrier",
	}, {
		name:  "a WAL that shrank since the barrier",
		files: []localFile{wal("000005.log", 200, 300)},
		err:   "WAL 000005.log shrank from 300 to 200 bytes",
	}, {
		name:  "a shared file whose size is not the base's",
		files: []localFile{sst("000004.sst", 100)},
		base:  base(baseSST("i1", "000004.sst", 200)),
		err:   "shared file 000004.sst: local size 100, uploaded size 200",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			before := maps.Clone(tc.base)
			for n, e := range before {
				e.Parts = slices.Clone(e.Parts)
				before[n] = e
			}
			p, err := planSnapshot(planInput{
				Task:       "t0",
				Instance:   "i1",
				Checkpoint: 7,
				Savepoint:  tc.savepoint,
				Files:      tc.files,
				Base:       tc.base,
			})
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := make([]string, len(p.Files))
			for i, f := range p.Files {
				got[i] = describe(f)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("plan:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			if p.Reused != tc.reused {
				t.Errorf("reused %d files, want %d", p.Reused, tc.reused)
			}
			if p.Files == nil {
				t.Error("nil files: the manifest would say files: null")
			}
			// The plan's entries are its own: changing them leaves the base alone.
			for i := range p.Files {
				for j := range p.Files[i].Entry.Parts {
					p.Files[i].Entry.Parts[j].SHA256 = "changed"
				}
			}
			if !maps.EqualFunc(tc.base, before, FileEntry.equal) {
				t.Error("the plan modified its base")
			}
		})
	}
}

// describe renders a planned file as one line: name, step, size, its
// entry's key or parts (with sizes and known checksums), the object the
// upload step writes or claims (bytes [from,to) of the file), and whether it
// reuses the base.
func describe(f plannedFile) string {
	e := f.Entry
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s size=%d", e.Name, f.Step, e.Size)
	if e.Key != "" {
		fmt.Fprintf(&b, " key=%s", e.Key)
	}
	if e.SHA256 != "" {
		fmt.Fprintf(&b, " sha=%s", e.SHA256)
	}
	if len(e.Parts) > 0 {
		parts := make([]string, len(e.Parts))
		for i, p := range e.Parts {
			parts[i] = fmt.Sprintf("%s:%d", p.Key, p.Size)
			if p.SHA256 != "" {
				parts[i] += ":" + p.SHA256
			}
		}
		fmt.Fprintf(&b, " parts=[%s]", strings.Join(parts, " "))
	}
	if e.Shared {
		b.WriteString(" shared")
	}
	if e.Inline {
		b.WriteString(" inline")
	}
	if f.Object != "" {
		fmt.Fprintf(&b, " -> %s[%d,%d)", f.Object, f.Offset, f.Offset+f.Length)
	}
	if f.BaseReused {
		b.WriteString(" base")
	}
	return b.String()
}

// snapplan.go stays pure: it imports nothing that does I/O or reads a
// clock, starts no goroutine, and never touches a Backend or a Snapshot
// (their files, their lock, their uploads).
func TestPlanIsPure(t *testing.T) {
	allowed := map[string]bool{"fmt": true, "slices": true, "github.com/weir-stream/weir/state/objstore": true,
		"github.com/weir-stream/weir/checkpoint/ckpt": true} // pure, like the plan
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "snapplan.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); !allowed[path] {
			t.Errorf("%s: imports %s", fset.Position(imp.Pos()), path)
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			t.Errorf("%s: go statement", fset.Position(n.Pos()))
		case *ast.Ident:
			switch n.Name {
			case "Backend", "Snapshot", "upload", "snapMu":
				t.Errorf("%s: uses %s", fset.Position(n.Pos()), n.Name)
			}
		}
		return true
	})
}
