package stream_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

// day is the day of the scripts' times ("12:00:05.5").
var day = time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)

func parseClock(s string) (time.Time, error) {
	c, err := time.Parse("15:04:05.999", s)
	if err != nil {
		return time.Time{}, err
	}
	return day.Add(c.Sub(time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC))), nil
}

func fmtClock(t time.Time) string {
	if t.IsZero() {
		return "none"
	}
	return t.UTC().Format("15:04:05.999")
}

// etProbe is a keyed function WithEventTime driven by its elements'
// values: "set T" / "del T" set or delete an event-time timer, "pset T" a
// processing-time timer, "wm" emits the current watermark. Its timers emit
// "<domain> <time> ts=<timestamp>"; an event-time timer of a key starting
// with "chain" sets another one 1s later, three times.
type etProbe struct{ n *state.ValueState[int64] }

func (p *etProbe) Open(oc stream.OpenContext) error {
	var err error
	p.n, err = state.NewValueState(oc.Backend, oc.StateName("n"), state.Codec[int64](state.Int64Codec{}))
	return err
}

func (p *etProbe) ProcessElement(ctx *stream.Context[string], v string) error {
	cmd, arg, _ := strings.Cut(v, " ")
	if cmd == "wm" {
		return ctx.Emit("wm " + fmtClock(ctx.CurrentWatermark()))
	}
	at, err := parseClock(arg)
	if err != nil {
		return err
	}
	switch cmd {
	case "set":
		return ctx.RegisterEventTimeTimer(at)
	case "del":
		return ctx.DeleteEventTimeTimer(at)
	case "pset":
		return ctx.RegisterProcessingTimeTimer(at)
	}
	return fmt.Errorf("unknown command %q", v)
}

func (p *etProbe) OnTimer(ctx *stream.Context[string], at time.Time) error {
	if ctx.TimeDomain() == stream.EventTime && strings.HasPrefix(string(ctx.Key()), "chain") {
		n, _, err := p.n.Get()
		if err != nil {
			return err
		}
		if n < 3 {
			if err := p.n.Put(n + 1); err != nil {
				return err
			}
			if err := ctx.RegisterEventTimeTimer(at.Add(time.Second)); err != nil {
				return err
			}
		}
	}
	return ctx.Emit(fmt.Sprintf("%s %s ts=%s", ctx.TimeDomain(), fmtClock(at), fmtClock(ctx.Timestamp())))
}

func probeJob() *stream.Job {
	j := stream.NewJob("probe")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.StringCodec{})
	p := stream.Process(s, "p", func() stream.KeyedProcessFunction[string, string] { return &etProbe{} }, stream.WithEventTime())
	stream.To(p, stream.KafkaSink{Topic: "out"}, stream.StringCodec{})
	return j
}

// windowJob builds the job of a script's "job" command: records whose
// value is a number, windowed per key and aggregated (agg=count|sum|min|
// max|avg), results formatted as text.
func windowJob(args []datadriven.CmdArg) (*stream.Job, error) {
	var w stream.Windowing[[]byte]
	agg, name := "count", "w"
	for _, a := range args {
		v := ""
		if len(a.Vals) > 0 {
			v = a.Vals[0]
		}
		var dur time.Duration
		if a.Key == "name" {
			name = v
			continue
		}
		if a.Key != "kind" && a.Key != "late" && a.Key != "agg" {
			var err error
			if dur, err = time.ParseDuration(v); err != nil {
				return nil, err
			}
		}
		switch a.Key {
		case "kind":
			switch v {
			case "tumbling":
				w.Kind = stream.Tumbling
			case "sliding":
				w.Kind = stream.Sliding
			case "session":
				w.Kind = stream.Session
			default:
				return nil, fmt.Errorf("kind %q", v)
			}
		case "size":
			w.Size = dur
		case "slide":
			w.Slide = dur
		case "gap":
			w.Gap = dur
		case "lateness":
			w.AllowedLateness = dur
		case "every":
			w.EmitEvery = dur
		case "late":
			w.LateTopic = v
		case "agg":
			agg = v
		default:
			return nil, fmt.Errorf("unknown argument %s", a.Key)
		}
	}
	j := stream.NewJob("windows")
	s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{})
	num := func(v []byte) float64 {
		f, _ := strconv.ParseFloat(string(v), 64)
		return f
	}
	var res *stream.Stream[string]
	if agg == "count" {
		r := stream.Window(s, name, w, stream.Int64Codec{}, stream.CountAgg[[]byte]())
		res = stream.Map(r, func(r stream.WindowResult[int64]) (string, error) {
			return fmtResult(r, "count", fmt.Sprint(r.Value)), nil
		})
	} else {
		var a stream.AggregateFunc[[]byte, stream.NumAcc, float64]
		switch agg {
		case "sum":
			a = stream.SumAgg(num)
		case "min":
			a = stream.MinAgg(num)
		case "max":
			a = stream.MaxAgg(num)
		case "avg":
			a = stream.AvgAgg(num)
		default:
			return nil, fmt.Errorf("agg %q", agg)
		}
		r := stream.Window(s, name, w, stream.NumAccCodec{}, a)
		res = stream.Map(r, func(r stream.WindowResult[float64]) (string, error) {
			return fmtResult(r, agg, strconv.FormatFloat(r.Value, 'g', -1, 64)), nil
		})
	}
	stream.To(res, stream.KafkaSink{Topic: "out"}, stream.StringCodec{})
	return j, j.Build()
}

func fmtResult[U any](r stream.WindowResult[U], agg, v string) string {
	s := fmt.Sprintf("[%s, %s) %s=%s", fmtClock(r.Start), fmtClock(r.End), agg, v)
	if r.Early {
		s += " early"
	}
	return s
}

// etHarness runs a script against one task, which it can snapshot and
// restore into a new task.
type etHarness struct {
	t        *testing.T
	job      func() (*stream.Job, error)
	groups   [2]int // key groups owned (of 128), or zero: none
	store    *objstore.Store
	cfg      state.Config
	b        *state.Backend
	task     stream.Task
	clk      clock
	late     map[string]int
	snap     *state.SnapshotResult
	snapID   ckpt.ID
	offset   int64
	sinkName []string
	// names are the task's StateNames ("restore renamed").
	names map[string]string
	args  []datadriven.CmdArg // the job's
}

func (h *etHarness) open(restore *state.SnapshotResult) error {
	ctx := context.Background()
	if h.task != nil {
		_ = h.task.Close()
		_ = h.b.Close(ctx)
		h.task = nil
	}
	h.cfg.Dir = h.t.TempDir()
	h.cfg.DisableLocalRecovery = true
	if h.groups != [2]int{} {
		h.cfg.MaxParallelism, h.cfg.KeyGroups = 128, h.groups
	}
	var err error
	if restore != nil {
		h.b, err = state.Restore(ctx, h.cfg, restore.Handle)
	} else {
		h.b, err = state.Open(ctx, h.cfg)
	}
	if err != nil {
		return err
	}
	j, err := h.job()
	if err != nil {
		return err
	}
	h.sinkName = nil
	for _, s := range j.Sinks() {
		h.sinkName = append(h.sinkName, s.Topic)
	}
	h.task, err = j.NewTask(stream.TaskContext{Backend: h.b, Task: "task-0", Now: h.clk.Now, OnLate: func(op string) { h.late[op]++ }, StateNames: h.names})
	return err
}

func (h *etHarness) close() {
	if h.task != nil {
		_ = h.task.Close()
		_ = h.b.Close(context.Background())
	}
}

func (h *etHarness) print(c *collector) string {
	var b strings.Builder
	for _, r := range c.recs {
		fmt.Fprintf(&b, "%s %s: %s @%s", h.sinkName[r.sink], r.key, r.value, fmtClock(r.ts))
		if r.headers != "" {
			fmt.Fprintf(&b, " [%s]", r.headers)
		}
		b.WriteString("\n")
	}
	c.recs = nil
	return b.String()
}

func (h *etHarness) run(d *datadriven.TestData) (string, error) {
	var c collector
	switch d.Cmd {
	case "job":
		if d.Input == "probe" {
			h.job = func() (*stream.Job, error) { j := probeJob(); return j, j.Build() }
		} else {
			args := append([]datadriven.CmdArg(nil), d.CmdArgs...)
			h.job = func() (*stream.Job, error) { return windowJob(args) }
			h.args = args
		}
		if err := h.open(nil); err != nil {
			return "", err
		}
		return "ok\n", nil
	case "process":
		// Lines "key time [value]".
		var rs []stream.Record
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.SplitN(line, " ", 3)
			if len(f) < 2 {
				return "", fmt.Errorf("want key time [value], got %q", line)
			}
			ts, err := parseClock(f[1])
			if err != nil {
				return "", err
			}
			v := ""
			if len(f) == 3 {
				v = f[2]
			}
			rs = append(rs, stream.Record{Topic: "in", Key: []byte(f[0]), Value: []byte(v), Timestamp: ts, Offset: h.offset})
			h.offset++
		}
		if err := h.task.ProcessBatch(rs, &c); err != nil {
			return "", err
		}
	case "watermark":
		at, err := parseClock(d.CmdArgs[0].Key)
		if err != nil {
			return "", err
		}
		if err := h.task.AdvanceWatermark(at, &c); err != nil {
			return "", err
		}
	case "now":
		at, err := parseClock(d.CmdArgs[0].Key)
		if err != nil {
			return "", err
		}
		h.clk.now = at
		if err := h.task.FireTimers(at, &c); err != nil {
			return "", err
		}
	case "late":
		return fmt.Sprintf("late w: %d\n", h.late["w"]+h.late["w2"]), nil
	case "snapshot":
		h.snapID++
		snap, err := h.b.Snapshot(h.snapID, nil)
		if err != nil {
			return "", err
		}
		res, err := snap.Run(context.Background())
		if err != nil {
			return "", err
		}
		h.snap = res
		return "ok\n", nil
	case "restore":
		// The task fails: a new one restores the last snapshot. With
		// "renamed", the job's window is "w2", whose state and timers
		// the task stores as "w" (TaskContext.StateNames): a derived
		// operator renamed by an edit, whose state follows it.
		if d.HasArg("renamed") {
			args := h.args
			h.job = func() (*stream.Job, error) {
				return windowJob(append(slices.Clone(args), datadriven.CmdArg{Key: "name", Vals: []string{"w2"}}))
			}
			h.names = map[string]string{"w2": "w"}
		}
		if err := h.open(h.snap); err != nil {
			return "", err
		}
		return "ok\n", nil
	default:
		return "", fmt.Errorf("unknown command %s", d.Cmd)
	}
	return h.print(&c), nil
}

// TestEventTimeScripts runs the scripts of testdata/eventtime: event-time
// timers and windows of each kind, with out-of-order and late input,
// lateness, early results and restores.
func TestEventTimeScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/eventtime", func(t *testing.T, path string) {
		for _, groups := range []bool{false, true} {
			t.Run(fmt.Sprintf("groups=%v", groups), func(t *testing.T) {
				ctx := context.Background()
				store, err := objstore.Open(ctx, "mem://", strings.TrimSuffix(filepath.Base(path), ".txt"), objstore.Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = store.Close() })
				h := &etHarness{t: t, store: store, cfg: state.Config{Task: "task-0", Store: store}, clk: clock{now: day.Add(12 * time.Hour)}, late: map[string]int{}}
				if groups {
					// One task owning every key group: timers and state are
					// filed by group, fired across groups in one order.
					h.groups = [2]int{0, 128}
				}
				t.Cleanup(h.close)
				datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
					s, err := h.run(d)
					if err != nil {
						return "error: " + err.Error() + "\n"
					}
					return s
				})
			})
		}
	})
}
