package stream_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

// propEvent is one input record of the property test: key and event time
// (Unix ms).
type propEvent struct {
	key string
	ts  int64
}

// propWindowing is the windowing of one run, in ms.
type propWindowing struct {
	kind                            stream.WindowKind
	size, slide, gap, lateness, bnd int64
}

func (w propWindowing) fireAt(end int64) int64 { return end - 1 + w.lateness }

// windowsOf returns the windows [start, end) of a tumbling or sliding
// windowing that contain ts, by brute force over every start.
func (w propWindowing) windowsOf(ts int64) [][2]int64 {
	slide := w.slide
	if w.kind == stream.Tumbling {
		slide = w.size
	}
	var out [][2]int64
	for start := (ts/slide + 1) * slide; start > ts-w.size-slide; start -= slide {
		if start <= ts && ts < start+w.size {
			out = append(out, [2]int64{start, start + w.size})
		}
	}
	return out
}

// modelResults returns what the windows must emit at each watermark
// advance (one "key [start,end)=count" line each, sorted) and how many
// records are late, for events arriving in batches, with watermark wms[i]
// in force while batch i arrives (it advanced after batch i-1) and
// advancing to wms[i+1] after it.
//
// Tumbling and sliding: declaratively, a record is accepted into a window
// iff the window's firing time is after the watermark at the record's
// arrival; a record accepted nowhere is late; a window with accepted
// records fires at the first advance that reaches its firing time, with
// the count of its accepted records. Sessions: a plain simulation with
// lists of intervals.
func modelResults(w propWindowing, batches [][]propEvent, wms []int64) ([][]string, int) {
	out := make([][]string, len(batches))
	late := 0
	if w.kind == stream.Session {
		type sess struct {
			key        string
			start, end int64
			n          int
		}
		var open []sess
		for i, batch := range batches {
			for _, e := range batch {
				lo, hi := e.ts, e.ts+w.gap
				if w.fireAt(hi) <= wms[i] {
					late++
					continue
				}
				n := 1
				var keep []sess
				for _, s := range open {
					if s.key == e.key && s.start <= hi && s.end >= lo {
						lo, hi, n = min(lo, s.start), max(hi, s.end), n+s.n
						continue
					}
					keep = append(keep, s)
				}
				open = append(keep, sess{e.key, lo, hi, n})
			}
			var keep []sess
			for _, s := range open {
				if w.fireAt(s.end) <= wms[i+1] {
					out[i] = append(out[i], fmt.Sprintf("%s [%d,%d)=%d", s.key, s.start, s.end, s.n))
				} else {
					keep = append(keep, s)
				}
			}
			open = keep
			slices.Sort(out[i])
		}
		return out, late
	}
	type win struct {
		key        string
		start, end int64
	}
	count := map[win]int{}
	for i, batch := range batches {
		for _, e := range batch {
			accepted := false
			for _, se := range w.windowsOf(e.ts) {
				if w.fireAt(se[1]) > wms[i] {
					count[win{e.key, se[0], se[1]}]++
					accepted = true
				}
			}
			if !accepted {
				late++
			}
		}
	}
	for k, n := range count {
		f := w.fireAt(k.end)
		i, _ := slices.BinarySearch(wms, f) // the first watermark >= f
		if i == 0 || i > len(batches) {
			panic("window fires outside the run")
		}
		out[i-1] = append(out[i-1], fmt.Sprintf("%s [%d,%d)=%d", k.key, k.start, k.end, n))
	}
	for i := range out {
		slices.Sort(out[i])
	}
	return out, late
}

// TestWindowsMatchModel checks windows against modelResults: random event
// times in random arrival order, the watermark following max ts - bound
// after each batch (so some records are late), and the task failing after
// some batch and restored from a snapshot taken after an earlier one
// (what it emitted after the snapshot is discarded, as an aborted
// transaction would be, and the batches after it are processed again).
func TestWindowsMatchModel(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.Open(ctx, "mem://", "prop", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	noon := day.Add(12 * time.Hour).UnixMilli()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		w := propWindowing{
			kind:     rapid.SampledFrom([]stream.WindowKind{stream.Tumbling, stream.Sliding, stream.Session}).Draw(rt, "kind"),
			lateness: rapid.SampledFrom([]int64{0, 1, 500, 2000}).Draw(rt, "lateness"),
			bnd:      rapid.SampledFrom([]int64{0, 300, 1000, 3000}).Draw(rt, "bound"),
		}
		switch w.kind {
		case stream.Tumbling:
			w.size = rapid.SampledFrom([]int64{1, 1000, 2500}).Draw(rt, "size")
		case stream.Sliding:
			w.size = rapid.SampledFrom([]int64{1000, 3000}).Draw(rt, "size")
			w.slide = rapid.SampledFrom([]int64{w.size, w.size / 2, w.size / 3, 250}).Draw(rt, "slide")
		case stream.Session:
			w.gap = rapid.SampledFrom([]int64{1, 200, 1000}).Draw(rt, "gap")
		}
		n := rapid.IntRange(1, 200).Draw(rt, "n")
		spread := rapid.SampledFrom([]int64{0, 500, 2000, 5000}).Draw(rt, "disorder")
		events := make([]propEvent, n)
		for i := range events {
			ts := int64(i)*rapid.SampledFrom([]int64{10, 100}).Draw(rt, "step") - rapid.Int64Range(0, spread).Draw(rt, "jitter")
			events[i] = propEvent{key: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(rt, "key"), ts: noon + ts}
		}
		var batches [][]propEvent
		for rest := events; len(rest) > 0; {
			k := rapid.IntRange(1, min(20, len(rest))).Draw(rt, "batch")
			batches = append(batches, rest[:k])
			rest = rest[k:]
		}
		// wms[i] is in force during batch i; the last one flushes.
		wms := []int64{math.MinInt64}
		maxTs := int64(math.MinInt64)
		for i, b := range batches {
			for _, e := range b {
				maxTs = max(maxTs, e.ts)
			}
			next := max(wms[i], maxTs-w.bnd-1)
			if i == len(batches)-1 {
				next = math.MaxInt64 / 4
			}
			wms = append(wms, next)
		}
		want, wantLate := modelResults(w, batches, wms)

		// The job: counts per window.
		ws := stream.Windowing[[]byte]{Kind: w.kind, Size: time.Duration(w.size) * time.Millisecond, Slide: time.Duration(w.slide) * time.Millisecond,
			Gap: time.Duration(w.gap) * time.Millisecond, AllowedLateness: time.Duration(w.lateness) * time.Millisecond}
		newJob := func() *stream.Job {
			j := stream.NewJob("prop")
			s := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{})
			r := stream.Window(s, "w", ws, stream.Int64Codec{}, stream.CountAgg[[]byte]())
			f := stream.Map(r, func(r stream.WindowResult[int64]) (string, error) {
				if r.Early {
					return "", fmt.Errorf("early result without EmitEvery")
				}
				return fmt.Sprintf("%s [%d,%d)=%d", r.Key, r.Start.UnixMilli(), r.End.UnixMilli(), r.Value), nil
			})
			stream.To(f, stream.KafkaSink{Topic: "out"}, stream.StringCodec{})
			return j
		}
		cfg := state.Config{Task: fmt.Sprint("task-", run), Store: store, DisableLocalRecovery: true}
		if rapid.Bool().Draw(rt, "keyGroups") {
			cfg.MaxParallelism, cfg.KeyGroups = 128, [2]int{0, 128}
		}
		lateCount := 0
		open := func(h string, restore bool) (*state.Backend, stream.Task) {
			cfg.Dir = t.TempDir()
			var b *state.Backend
			var err error
			if restore {
				b, err = state.Restore(ctx, cfg, h)
			} else {
				b, err = state.Open(ctx, cfg)
			}
			if err != nil {
				rt.Fatal(err)
			}
			task, err := newJob().NewTask(stream.TaskContext{Backend: b, Task: cfg.Task, OnLate: func(string) { lateCount++ }})
			if err != nil {
				rt.Fatal(err)
			}
			return b, task
		}
		b, task := open("", false)
		snapAfter := rapid.IntRange(-1, len(batches)-1).Draw(rt, "snapshotAfter") // -1: no failure
		failAfter := len(batches) - 1
		if snapAfter >= 0 {
			failAfter = rapid.IntRange(snapAfter, len(batches)-1).Draw(rt, "failAfter")
		}
		var snap *state.SnapshotResult
		var lateAtSnap int
		got := make([][]string, len(batches))
		for i := 0; i < len(batches); i++ {
			rs := make([]stream.Record, len(batches[i]))
			for k, e := range batches[i] {
				rs[k] = stream.Record{Topic: "in", Key: []byte(e.key), Timestamp: time.UnixMilli(e.ts), Offset: int64(k)}
			}
			var c collector
			if err := task.ProcessBatch(rs, &c); err != nil {
				rt.Fatal(err)
			}
			if err := task.AdvanceWatermark(time.UnixMilli(wms[i+1]), &c); err != nil {
				rt.Fatal(err)
			}
			got[i] = nil
			for _, r := range c.recs {
				got[i] = append(got[i], r.value)
			}
			slices.Sort(got[i])
			if i == snapAfter && snap == nil {
				s, err := b.Snapshot(ckpt.ID(i+1), nil)
				if err != nil {
					rt.Fatal(err)
				}
				if snap, err = s.Run(ctx); err != nil {
					rt.Fatal(err)
				}
				lateAtSnap = lateCount
			}
			if i == failAfter && snap != nil && snapAfter >= 0 {
				// Fail: restore the snapshot and go on after its batch.
				_ = task.Close()
				_ = b.Close(ctx)
				b, task = open(snap.Handle, true)
				lateCount = lateAtSnap
				i = snapAfter
				snapAfter = -1
			}
		}
		_ = task.Close()
		_ = b.Close(ctx)
		for i := range batches {
			if strings.Join(got[i], " ") != strings.Join(want[i], " ") {
				rt.Fatalf("after batch %d (watermark %d):\ngot  %v\nwant %v", i, wms[i+1], got[i], want[i])
			}
		}
		if lateCount != wantLate {
			rt.Fatalf("late records: got %d, want %d", lateCount, wantLate)
		}
	})
}
