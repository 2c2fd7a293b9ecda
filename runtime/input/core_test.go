package input

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type harness struct {
	c   *Core
	now time.Time
}

// parseEvent reads one line of a read command: "P@O uN [barrier ID]
// [gen G] [wm]" (wm: a watermark record).
func parseEvent(line string, gen uint64) (Event, error) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return Event{}, fmt.Errorf("want P@O uN [barrier ID] [gen G], got %q", line)
	}
	ps, os, ok := strings.Cut(f[0], "@")
	if !ok {
		return Event{}, fmt.Errorf("want P@O, got %q", f[0])
	}
	p, err1 := strconv.ParseInt(ps, 10, 32)
	off, err2 := strconv.ParseInt(os, 10, 64)
	u, err3 := strconv.Atoi(strings.TrimPrefix(f[1], "u"))
	if err := errors.Join(err1, err2, err3); err != nil {
		return Event{}, err
	}
	ev := Event{Partition: int32(p), Offset: off, Upstream: u, Gen: gen}
	if i := slices.Index(f[2:], "wm"); i >= 0 {
		ev.Watermark = true
		f = slices.Delete(f, 2+i, 3+i)
	}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseUint(f[i+1], 10, 64)
		if err != nil {
			return Event{}, err
		}
		switch f[i] {
		case "barrier":
			ev.Barrier = ckpt.Barrier{ID: ckpt.ID(v), Kind: ckpt.KindCheckpoint}
		case "savepoint", "stop":
			// A savepoint's barrier, with the target "sp-<ID>", or a
			// stop-with-savepoint's.
			ev.Barrier = ckpt.Barrier{ID: ckpt.ID(v), Kind: ckpt.Kind(f[i]), Target: fmt.Sprintf("sp-%d", v)}
		case "target":
			// Another target for the barrier given before it.
			ev.Barrier.Target = fmt.Sprintf("sp-%d", v)
		case "gen":
			ev.Gen = v
		default:
			return Event{}, fmt.Errorf("unknown field %q", f[i])
		}
	}
	return ev, nil
}

func fmtActions(b *strings.Builder, acts []Action) {
	for _, a := range acts {
		fmt.Fprintf(b, "  %s\n", a)
	}
}

func fmtPositions(m map[int32]int64) string {
	var b strings.Builder
	for i, p := range sortedKeys(m) {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%d:%d", p, m[p])
	}
	return b.String()
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	if h.c == nil && d.Cmd != "new" {
		t.Fatalf("%s: first command must be new", d.Pos)
	}
	switch d.Cmd {
	case "new":
		var cfg Config
		if arg, ok := d.Arg("partitions"); ok {
			for _, v := range arg.Vals {
				if v == "" {
					continue
				}
				p, err := strconv.ParseInt(v, 10, 32)
				if err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				cfg.Partitions = append(cfg.Partitions, int32(p))
			}
		}
		d.MaybeScanArgs(t, "upstreams", &cfg.Upstreams)
		d.MaybeScanArgs(t, "gen", &cfg.Gen)
		if arg, ok := d.Arg("start"); ok {
			cfg.Start = map[int32]int64{}
			for _, v := range arg.Vals {
				ps, os, _ := strings.Cut(v, ":")
				p, err1 := strconv.ParseInt(ps, 10, 32)
				off, err2 := strconv.ParseInt(os, 10, 64)
				if err := errors.Join(err1, err2); err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				cfg.Start[int32(p)] = off
			}
		}
		c, err := New(cfg)
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		*h = harness{c: c, now: t0}
		return "positions " + fmtPositions(c.Positions()) + "\n"
	case "tick":
		for _, arg := range d.CmdArgs {
			dur, err := time.ParseDuration(strings.TrimPrefix(arg.Key, "+"))
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			h.now = h.now.Add(dur)
		}
		return fmt.Sprintf("now=+%v\n", h.now.Sub(t0))
	case "read":
		var b strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			ev, err := parseEvent(line, h.c.gen)
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			dec, err := h.c.Step(ev, h.now)
			if err != nil {
				fmt.Fprintf(&b, "%s: error: %v\n", strings.TrimSpace(line), err)
				continue
			}
			fmt.Fprintf(&b, "%s: %s\n", strings.TrimSpace(line), dec)
			fmtActions(&b, h.c.Actions())
		}
		return b.String()
	case "abort":
		var id ckpt.ID
		d.ScanArgs(t, "id", &id)
		h.c.Abort(id, h.now)
		var b strings.Builder
		fmt.Fprintf(&b, "abort %d:\n", id)
		acts := h.c.Actions()
		if len(acts) == 0 {
			b.WriteString("  (nothing)\n")
		}
		fmtActions(&b, acts)
		return b.String()
	case "status":
		st := h.c.Stats()
		s := fmt.Sprintf("aligning=%d positions %s\ndelivered=%d stale=%d replayed=%d skipped=%d\n",
			h.c.Aligning(), fmtPositions(h.c.Positions()), st.Delivered, st.Stale, st.Replayed, st.Skipped)
		if st.Watermarks > 0 {
			s += fmt.Sprintf("watermarks=%d\n", st.Watermarks)
		}
		return s
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

func TestScripts(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(paths) < 7 {
		t.Fatalf("want at least 7 scripts in testdata, got %d (%v)", len(paths), err)
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

func TestStringers(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Deliver.String(), "deliver"}, {Decision(9).String(), "Decision(9)"},
		{Resume.String(), "resume"}, {ActionKind(0).String(), "ActionKind(0)"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
