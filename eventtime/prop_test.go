package eventtime

import (
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// valveModel is the reference: the output is the maximum over time of the
// minimum over the active inputs, or, while every input is idle, of the
// maximum over all inputs; each input's watermark the maximum it was
// given; idle iff every input is idle.
type valveModel struct {
	wm   []int64
	idle []bool
	out  int64
}

func newValveModel(n int) *valveModel {
	m := &valveModel{wm: make([]int64, n), idle: make([]bool, n), out: MinWatermark}
	for i := range m.wm {
		m.wm[i] = MinWatermark
	}
	return m
}

func (m *valveModel) step() {
	lowest, any := int64(math.MaxInt64), false
	for i, wm := range m.wm {
		if !m.idle[i] {
			lowest, any = min(lowest, wm), true
		}
	}
	if any {
		m.out = max(m.out, lowest)
	} else {
		for _, wm := range m.wm {
			m.out = max(m.out, wm)
		}
	}
}

func (m *valveModel) allIdle() bool {
	return !slices.Contains(m.idle, false)
}

// TestValveAgainstModel drives a valve and the model with random advances
// (often equal, often lower than before), idleness changes and restores
// (through JSON, of the same or another number of inputs), and compares
// every output; the output never decreases.
func TestValveAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 6).Draw(t, "n")
		v, m := NewValve(n), newValveModel(n)
		wmGen := rapid.OneOf(rapid.Int64Range(-20, 20), rapid.Just(MinWatermark), rapid.Just(int64(math.MaxInt64)))
		prev := MinWatermark
		for range rapid.IntRange(0, 200).Draw(t, "steps") {
			op := rapid.IntRange(0, 9).Draw(t, "op")
			switch {
			case n > 0 && op < 6:
				i, wm := rapid.IntRange(0, n-1).Draw(t, "i"), wmGen.Draw(t, "wm")
				v.Advance(i, wm)
				m.wm[i], m.idle[i] = max(m.wm[i], wm), false
			case n > 0 && op < 9:
				i, idle := rapid.IntRange(0, n-1).Draw(t, "i"), rapid.Bool().Draw(t, "idle")
				v.SetIdle(i, idle)
				m.idle[i] = idle
			default:
				b, err := json.Marshal(v.Snapshot())
				if err != nil {
					t.Fatal(err)
				}
				var s ValveState
				if err := json.Unmarshal(b, &s); err != nil {
					t.Fatal(err)
				}
				n2 := n
				if rapid.IntRange(0, 3).Draw(t, "resize") == 0 {
					n2 = rapid.IntRange(0, 6).Draw(t, "n2")
				}
				v = NewValve(n2)
				if err := v.Restore(s); err != nil {
					t.Fatal(err)
				}
				if n2 != n {
					m2 := newValveModel(n2)
					m2.out = m.out
					for i := range m2.wm {
						m2.wm[i] = m.out
					}
					n, m = n2, m2
				}
			}
			m.step()
			wm, idle := v.Output()
			if wm != m.out || idle != m.allIdle() {
				t.Fatalf("output %d idle %t, model %d idle %t (inputs %v idle %v)", wm, idle, m.out, m.allIdle(), m.wm, m.idle)
			}
			if wm < prev {
				t.Fatalf("output went back from %d to %d", prev, wm)
			}
			prev = wm
			for i := range n {
				if w, idle := v.Input(i); w != m.wm[i] || idle != m.idle[i] {
					t.Fatalf("input %d: %d idle %t, model %d idle %t", i, w, idle, m.wm[i], m.idle[i])
				}
			}
		}
	})
}

// TestGeneratorAgainstModel: the watermark is the largest timestamp seen
// minus the bound minus 1 ms (never decreasing), idle iff the idle timeout
// passed since the last record or creation, and a JSON round trip of the
// state restores the watermark.
func TestGeneratorAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		bound := time.Duration(rapid.IntRange(0, 5000).Draw(t, "bound_us")) * time.Microsecond
		idle := time.Duration(rapid.IntRange(0, 10).Draw(t, "idle_s")) * time.Second
		now := time.Unix(1000, 0)
		g, err := NewGenerator(bound, idle, now)
		if err != nil {
			t.Fatal(err)
		}
		boundMs := (bound.Microseconds() + 999) / 1000
		maxTs, last, seen := int64(0), now, false
		prev := MinWatermark
		for range rapid.IntRange(0, 100).Draw(t, "steps") {
			switch rapid.IntRange(0, 4).Draw(t, "op") {
			case 0, 1:
				ts := rapid.OneOf(rapid.Int64Range(-100000, 100000), rapid.Just(int64(math.MinInt64)), rapid.Just(int64(math.MaxInt64))).Draw(t, "ts")
				g.Observe(ts, now)
				if !seen || ts > maxTs {
					maxTs = ts
				}
				seen, last = true, now
			case 2, 3:
				now = now.Add(time.Duration(rapid.IntRange(0, 6000).Draw(t, "ms")) * time.Millisecond)
			case 4:
				b, err := json.Marshal(g.Snapshot())
				if err != nil {
					t.Fatal(err)
				}
				var s GeneratorState
				if err := json.Unmarshal(b, &s); err != nil {
					t.Fatal(err)
				}
				if g, err = NewGenerator(bound, idle, now); err != nil {
					t.Fatal(err)
				}
				g.Restore(s)
				last = now
			}
			want := MinWatermark
			if seen && maxTs-boundMs-1 <= maxTs && maxTs != math.MinInt64 {
				want = maxTs - boundMs - 1
			}
			if got := g.Watermark(); got != want {
				t.Fatalf("watermark %d, want %d (max %d, bound %d ms)", got, want, maxTs, boundMs)
			}
			if want < prev {
				t.Fatalf("watermark went back from %d to %d", prev, want)
			}
			prev = want
			if got, want := g.Idle(now), idle > 0 && now.Sub(last) >= idle; got != want {
				t.Fatalf("idle %t, want %t (%v since the last record, timeout %v)", got, want, now.Sub(last), idle)
			}
		}
	})
}
