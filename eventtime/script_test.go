package eventtime

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// harness runs the scripts of testdata: named generators, as a source task
// has per input partition, and one valve, fed as the task loop feeds it.
type harness struct {
	now   time.Time
	names []string // generators, in creation order: valve input i is names[i]
	gens  map[string]*Generator
	cfgs  map[string][2]time.Duration
	v     *Valve
}

// state is what the snapshot command prints and restore reads.
type state struct {
	Generators map[string]GeneratorState `json:"generators,omitempty"`
	Valve      *ValveState               `json:"valve,omitempty"`
}

func fmtWM(wm int64) string {
	if wm == MinWatermark {
		return "min"
	}
	return strconv.FormatInt(wm, 10)
}

func (h *harness) output() string {
	wm, idle := h.v.Output()
	return fmt.Sprintf("output=%s idle=%t", fmtWM(wm), idle)
}

func (h *harness) inputs() string {
	var b strings.Builder
	for i := range h.v.Len() {
		wm, idle := h.v.Input(i)
		s := fmtWM(wm)
		if idle {
			s += "(idle)"
		}
		fmt.Fprintf(&b, " %s", s)
	}
	return "inputs" + b.String() + "\n" + h.output() + "\n"
}

func (h *harness) generator(t *testing.T, d *datadriven.TestData, name string) *Generator {
	g, ok := h.gens[name]
	if !ok {
		t.Fatalf("%s: no generator %q", d.Pos, name)
	}
	return g
}

func (h *harness) run(t *testing.T, d *datadriven.TestData) string {
	switch d.Cmd {
	case "generator":
		var name string
		var bound, idle time.Duration
		d.ScanArgs(t, "name", &name)
		if arg, ok := d.Arg("bound"); ok {
			bound = mustDuration(t, d, arg.SingleVal(t))
		}
		if arg, ok := d.Arg("idle"); ok {
			idle = mustDuration(t, d, arg.SingleVal(t))
		}
		g, err := NewGenerator(bound, idle, h.now)
		if err != nil {
			return "error: " + err.Error() + "\n"
		}
		h.names = append(h.names, name)
		h.gens[name], h.cfgs[name] = g, [2]time.Duration{bound, idle}
		return fmt.Sprintf("%s: watermark=%s idle=%t\n", name, fmtWM(g.Watermark()), g.Idle(h.now))
	case "observe":
		var b strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				t.Fatalf("%s: want <generator> <ts>, got %q", d.Pos, line)
			}
			ts, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			g := h.generator(t, d, f[0])
			g.Observe(ts, h.now)
			fmt.Fprintf(&b, "%s %d: watermark=%s\n", f[0], ts, fmtWM(g.Watermark()))
		}
		return b.String()
	case "tick":
		for _, arg := range d.CmdArgs {
			h.now = h.now.Add(mustDuration(t, d, strings.TrimPrefix(arg.Key, "+")))
		}
		return fmt.Sprintf("now=+%v\n", h.now.Sub(t0)) + h.watermarks()
	case "watermarks":
		return h.watermarks()
	case "valve":
		var n int
		d.ScanArgs(t, "n", &n)
		h.v = NewValve(n)
		return h.inputs()
	case "advance":
		var b strings.Builder
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				t.Fatalf("%s: want <input> <watermark>|idle|active, got %q", d.Pos, line)
			}
			i, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatalf("%s: %v", d.Pos, err)
			}
			switch f[1] {
			case "idle", "active":
				h.v.SetIdle(i, f[1] == "idle")
			case "min":
				h.v.Advance(i, MinWatermark)
			default:
				wm, err := strconv.ParseInt(f[1], 10, 64)
				if err != nil {
					t.Fatalf("%s: %v", d.Pos, err)
				}
				h.v.Advance(i, wm)
			}
			fmt.Fprintf(&b, "%s: %s\n", line, h.output())
		}
		return b.String()
	case "feed":
		// What a source task does every watermark interval: each
		// generator's idleness or watermark into its valve input.
		for i, name := range h.names {
			g := h.gens[name]
			if g.Idle(h.now) {
				h.v.SetIdle(i, true)
			} else {
				h.v.Advance(i, g.Watermark())
			}
		}
		return h.inputs()
	case "inputs":
		return h.inputs()
	case "snapshot":
		s := state{Generators: map[string]GeneratorState{}}
		for name, g := range h.gens {
			s.Generators[name] = g.Snapshot()
		}
		if h.v != nil {
			vs := h.v.Snapshot()
			s.Valve = &vs
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b) + "\n"
	case "restore":
		// A restart: every generator made again now, with its
		// configuration (if the input has generators), a valve of n
		// inputs (default: as before), then the state of the input
		// restored into them.
		var s state
		if err := json.Unmarshal([]byte(d.Input), &s); err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		for _, name := range h.names {
			if s.Generators == nil {
				break // a valve alone
			}
			cfg := h.cfgs[name]
			g, err := NewGenerator(cfg[0], cfg[1], h.now)
			if err != nil {
				t.Fatal(err)
			}
			if gs, ok := s.Generators[name]; ok {
				g.Restore(gs)
			}
			h.gens[name] = g
		}
		var b strings.Builder
		if s.Generators != nil {
			b.WriteString(h.watermarks())
		}
		if s.Valve != nil {
			n := 0
			if h.v != nil {
				n = h.v.Len()
			}
			d.MaybeScanArgs(t, "n", &n)
			h.v = NewValve(n)
			if err := h.v.Restore(*s.Valve); err != nil {
				return b.String() + "error: " + err.Error() + "\n"
			}
			b.WriteString(h.inputs())
		}
		return b.String()
	}
	t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
	return ""
}

func (h *harness) watermarks() string {
	var b strings.Builder
	for _, name := range h.names {
		g := h.gens[name]
		fmt.Fprintf(&b, "%s: watermark=%s idle=%t\n", name, fmtWM(g.Watermark()), g.Idle(h.now))
	}
	return b.String()
}

func mustDuration(t *testing.T, d *datadriven.TestData, s string) time.Duration {
	dur, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("%s: %v", d.Pos, err)
	}
	return dur
}

func TestScripts(t *testing.T) {
	paths, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(paths) < 4 {
		t.Fatalf("want at least 4 scripts in testdata, got %d (%v)", len(paths), err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			h := &harness{now: t0, gens: map[string]*Generator{}, cfgs: map[string][2]time.Duration{}}
			datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
				return h.run(t, d)
			})
		})
	}
}
