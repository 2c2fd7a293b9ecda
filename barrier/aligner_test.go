package barrier

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type harness struct {
	a   *Aligner
	now time.Time
}

func inputs(t *testing.T, d *datadriven.TestData) []int {
	arg, ok := d.Arg("in")
	if !ok {
		t.Fatalf("%s: need in=", d.Pos)
	}
	var ins []int
	for _, v := range arg.Vals {
		i, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		ins = append(ins, i)
	}
	return ins
}

func argID(t *testing.T, d *datadriven.TestData) ckpt.ID {
	var id ckpt.ID
	d.ScanArgs(t, "id", &id)
	return id
}

func fmtActions(acts []Action, err error) string {
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	if len(acts) == 0 {
		return "(nothing)\n"
	}
	var b strings.Builder
	for _, a := range acts {
		b.WriteString(a.String())
		b.WriteString("\n")
	}
	return b.String()
}

// fmtStatus renders what the aligner holds, from its fields.
func fmtStatus(a *Aligner) string {
	var b strings.Builder
	fmt.Fprintf(&b, "latest=%d", a.latest)
	if a.cur != nil {
		fmt.Fprintf(&b, " aligning=%d since=+%v", a.cur.id, a.cur.start.Sub(t0))
	}
	var held []int
	for i := range a.held {
		if a.IsHeld(i) {
			held = append(held, i)
		}
	}
	if len(held) > 0 {
		fmt.Fprintf(&b, " held=%v", held)
	}
	return b.String() + "\n"
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	if h.a == nil && d.Cmd != "new" {
		t.Fatalf("%s: first command must be new", d.Pos)
	}
	switch d.Cmd {
	case "new":
		var n int
		d.ScanArgs(t, "inputs", &n)
		a, err := New(n)
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		*h = harness{a: a, now: t0}
		return fmtStatus(a)
	case "tick":
		for _, arg := range d.CmdArgs {
			dur, err := time.ParseDuration(strings.TrimPrefix(arg.Key, "+"))
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			h.now = h.now.Add(dur)
		}
		return fmt.Sprintf("now=+%v\n", h.now.Sub(t0))
	case "record":
		var b strings.Builder
		for _, i := range inputs(t, d) {
			if !h.a.IsHeld(i) {
				fmt.Fprintf(&b, "input %d: deliver\n", i)
			} else {
				fmt.Fprintf(&b, "input %d: held, keep the record\n", i)
			}
		}
		return b.String()
	case "barrier":
		var b strings.Builder
		id := argID(t, d)
		for _, i := range inputs(t, d) {
			acts, err := h.a.Barrier(i, id, h.now)
			fmt.Fprintf(&b, "barrier %d on input %d:\n", id, i)
			for _, line := range strings.Split(strings.TrimSuffix(fmtActions(acts, err), "\n"), "\n") {
				fmt.Fprintf(&b, "  %s\n", line)
			}
		}
		return b.String()
	case "abort":
		id := argID(t, d)
		var b strings.Builder
		fmt.Fprintf(&b, "abort %d:\n", id)
		for _, line := range strings.Split(strings.TrimSuffix(fmtActions(h.a.Abort(id, h.now), nil), "\n"), "\n") {
			fmt.Fprintf(&b, "  %s\n", line)
		}
		return b.String()
	case "status":
		return fmtStatus(h.a)
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

func TestScripts(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(paths) < 9 {
		t.Fatalf("want at least 9 scripts in testdata, got %d (%v)", len(paths), err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			h := &harness{}
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				return h.run(t, d)
			})
		})
	}
}

func TestErrors(t *testing.T) {
	if _, err := New(0); !errors.Is(err, ErrConfig) {
		t.Errorf("New(0) = %v", err)
	}
	a, _ := New(2)
	if _, err := a.Barrier(2, 1, t0); !errors.Is(err, ErrInput) {
		t.Errorf("barrier on input 2 of 2: %v", err)
	}
	if _, err := a.Barrier(-1, 1, t0); !errors.Is(err, ErrInput) {
		t.Errorf("barrier on input -1: %v", err)
	}
	if _, err := a.Barrier(0, 1, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Barrier(0, 1, t0); !errors.Is(err, ErrDuplicate) {
		t.Errorf("second barrier 1 on input 0: %v", err)
	}
}
