package eventtime

import (
	"errors"
	"fmt"
)

// ErrState is the error, for errors.Is, of a ValveState that is not one a
// Valve snapshots (inputs and idle flags of different lengths).
var ErrState = errors.New("eventtime: invalid valve state")

// Valve combines the watermarks of n inputs (Flink's StatusWatermarkValve):
// its output is the minimum over the active inputs' watermarks, and never
// decreases; an idle input does not hold it back. The output is idle iff
// every input is idle. When the last active input goes idle, the output
// rises to the highest watermark of any input, as Flink's valve flushes
// its channels: no input will advance any more, so what one input has
// reached is what the others are held to. (Without it, inputs that went
// idle at one instant, as the partitions of a restored task that read
// nothing new do, left the output at the lowest of them for good, and no
// window after it ever closed.) Every input starts active at MinWatermark.
type Valve struct {
	wm   []int64 // by input: the highest watermark seen
	idle []bool  // by input
	// active counts the inputs not idle; min is the lowest watermark among
	// them and atMin how many of them have it (valid when active > 0), so
	// that advancing an input costs a scan only when the last input at the
	// minimum leaves it.
	active int
	min    int64
	atMin  int
	out    int64 // never decreases
}

// ValveState is what a Valve snapshots: by input its watermark and whether
// it is idle, and the output.
type ValveState struct {
	Inputs []int64 `json:"inputs"`
	Idle   []bool  `json:"idle"`
	Output int64   `json:"output"`
}

// NewValve returns a valve over n inputs, all active at MinWatermark. A
// valve of 0 inputs (a task that reads nothing) is idle at MinWatermark. It
// panics if n is negative, as make does.
func NewValve(n int) *Valve {
	v := &Valve{wm: make([]int64, n), idle: make([]bool, n), out: MinWatermark}
	for i := range v.wm {
		v.wm[i] = MinWatermark
	}
	v.rescan()
	return v
}

// Len returns the number of inputs.
func (v *Valve) Len() int { return len(v.wm) }

// Advance sets input i's watermark to wm, unless it is lower than the last
// one (then only its being active changes), and makes i active. It panics
// if i is not an input, as an index out of range does.
func (v *Valve) Advance(i int, wm int64) {
	old := v.wm[i]
	if wm > old {
		v.wm[i] = wm
	}
	if v.idle[i] {
		v.idle[i] = false
		v.join(v.wm[i])
	} else if v.wm[i] > old && old == v.min {
		v.leave()
	}
	v.update()
}

// SetIdle marks input i idle or active; an input made active keeps its last
// watermark. It panics if i is not an input.
func (v *Valve) SetIdle(i int, idle bool) {
	if v.idle[i] == idle {
		return
	}
	v.idle[i] = idle
	if idle {
		v.active--
		if v.wm[i] == v.min {
			v.leave()
		}
	} else {
		v.join(v.wm[i])
	}
	v.update()
	if v.active == 0 {
		v.flush()
	}
}

// flush raises the output to the highest watermark of any input: every
// input is idle.
func (v *Valve) flush() {
	for _, wm := range v.wm {
		if wm > v.out {
			v.out = wm
		}
	}
}

// Output returns the valve's watermark, and whether every input is idle.
func (v *Valve) Output() (wm int64, idle bool) {
	return v.out, v.active == 0
}

// Input returns input i's watermark and whether it is idle.
func (v *Valve) Input(i int) (wm int64, idle bool) {
	return v.wm[i], v.idle[i]
}

// Snapshot returns a copy of the valve's state.
func (v *Valve) Snapshot() ValveState {
	return ValveState{Inputs: append([]int64(nil), v.wm...), Idle: append([]bool(nil), v.idle...), Output: v.out}
}

// Restore replaces the valve's state with s, a state snapshotted by a valve
// over the same inputs in the same order. The output never decreases: it is
// the larger of the valve's and s's.
//
// A state of a different number of inputs (a task that reads more or fewer
// partitions than when it snapshotted) cannot say which input is which: then
// every input restarts active at the restored output, so the output neither
// goes back nor advances before every input passed it. A state whose inputs
// and idle flags differ in length is an error wrapping ErrState. A state
// of every input idle flushes the output (see Valve).
func (v *Valve) Restore(s ValveState) error {
	if len(s.Inputs) != len(s.Idle) {
		return fmt.Errorf("%w: %d input watermarks, %d idle flags", ErrState, len(s.Inputs), len(s.Idle))
	}
	if s.Output > v.out {
		v.out = s.Output
	}
	if len(s.Inputs) != len(v.wm) {
		for i := range v.wm {
			v.wm[i], v.idle[i] = v.out, false
		}
	} else {
		copy(v.wm, s.Inputs)
		copy(v.idle, s.Idle)
	}
	v.rescan()
	v.update()
	if v.active == 0 {
		v.flush() // a state of every input idle, snapshotted without it
	}
	return nil
}

// join adds an input of watermark wm to the active ones.
func (v *Valve) join(wm int64) {
	v.active++
	switch {
	case v.active == 1 || wm < v.min:
		v.min, v.atMin = wm, 1
	case wm == v.min:
		v.atMin++
	}
}

// leave removes an input at the minimum from it: it advanced or went idle.
func (v *Valve) leave() {
	v.atMin--
	if v.atMin == 0 {
		v.rescan()
	}
}

// rescan recomputes active, min and atMin from the inputs.
func (v *Valve) rescan() {
	v.active, v.atMin = 0, 0
	for i, wm := range v.wm {
		if v.idle[i] {
			continue
		}
		v.join(wm)
	}
}

// update raises the output to the minimum over active inputs.
func (v *Valve) update() {
	if v.active > 0 && v.min > v.out {
		v.out = v.min
	}
}
