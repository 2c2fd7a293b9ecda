package barrier

import (
	"errors"
	"fmt"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

// Sentinel errors of the aligner; test with errors.Is. Each reports an input
// stream that broke the protocol (or a caller bug), never a normal race.
var (
	// ErrInput: an input index outside [0, inputs).
	ErrInput = errors.New("barrier: no such input")
	// ErrDuplicate: the same barrier twice on one input.
	ErrDuplicate = errors.New("barrier: duplicate barrier")
	// ErrConfig: an aligner without inputs.
	ErrConfig = errors.New("barrier: invalid aligner config")
)

// ActionKind says what the task must do.
type ActionKind uint8

// The actions, in the order the aligner lists them for one event.
const (
	// Abort: checkpoint ID is given up by this task: drop any partial
	// snapshot of it, and decline it if not yet acknowledged.
	Abort ActionKind = iota + 1
	// Snapshot: take the synchronous part of the snapshot for checkpoint ID
	// now, before processing any further record, then forward barrier ID
	// downstream (DESIGN.md 5.4).
	Snapshot
	// Hold: stop reading Input: it delivered the barrier of the alignment in
	// progress. IsHeld reports it until the Release.
	Hold
	// Release: resume reading Input.
	Release
)

var actionNames = [...]string{Abort: "abort", Snapshot: "snapshot", Hold: "hold", Release: "release"}

// String returns the lower-case name of k.
func (k ActionKind) String() string {
	if int(k) < len(actionNames) && actionNames[k] != "" {
		return actionNames[k]
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// Action is one thing the task must do.
type Action struct {
	Kind ActionKind
	// ID is the checkpoint, for Abort and Snapshot.
	ID ckpt.ID
	// Input is the input, for Hold and Release.
	Input int
	// Alignment is, for Snapshot and Abort, the time from the first barrier
	// of ID to this action (zero if no barrier of ID arrived).
	Alignment time.Duration
}

// String renders the action for logs and tests.
func (a Action) String() string {
	switch a.Kind {
	case Hold, Release:
		return fmt.Sprintf("%s input %d", a.Kind, a.Input)
	case Snapshot, Abort:
		return fmt.Sprintf("%s %d (alignment %v)", a.Kind, a.ID, a.Alignment)
	}
	return fmt.Sprintf("%s %d", a.Kind, a.ID)
}

// alignment is the checkpoint whose barriers are arriving.
type alignment struct {
	id    ckpt.ID
	start time.Time
	seen  []bool // by input
	// covered counts the inputs that delivered this barrier, so that
	// "aligned" is one comparison (a shuffle reader has partitions ×
	// upstream tasks inputs, ~1 000).
	covered int
}

// Aligner is the barrier aligner of one task with a fixed number of inputs
// (Flink's SingleCheckpointBarrierHandler for aligned checkpoints). It is a
// pure value: it reads no clock (time comes with each event), does no I/O,
// starts no goroutine, and is not safe for concurrent use. An input is
// whatever delivers one ordered stream of records and barriers: one
// upstream task's records in a shuffle partition (DESIGN.md section 9).
//
// IsHeld is the per-record path; it does not allocate. Barrier and Abort
// return the actions to carry out, in order, in a slice that is valid
// until the next call; they do not allocate either.
type Aligner struct {
	held []bool // by input
	// latest is the highest checkpoint that completed or was aborted here;
	// barriers up to it are late and ignored.
	latest ckpt.ID
	// cur is the alignment in progress, or nil; spare is the one reused
	// when the next starts.
	cur, spare *alignment
	out        []Action
}

// New returns an aligner for a task with the given number of inputs.
func New(inputs int) (*Aligner, error) {
	if inputs < 1 {
		return nil, fmt.Errorf("%w: %d inputs", ErrConfig, inputs)
	}
	return &Aligner{held: make([]bool, inputs), spare: &alignment{seen: make([]bool, inputs)},
		out: make([]Action, 0, inputs+2)}, nil
}

// IsHeld reports whether a record that arrived on input must wait: the
// input delivered the barrier of the alignment in progress, and the task
// must keep the record (or seek the input back) and offer it again after
// Release. input must be in [0, inputs).
func (a *Aligner) IsHeld(input int) bool { return a.held[input] }

// Aligning returns the checkpoint being aligned, or 0.
func (a *Aligner) Aligning() ckpt.ID {
	if a.cur == nil {
		return 0
	}
	return a.cur.id
}

// start begins the alignment of id.
func (a *Aligner) start(id ckpt.ID, now time.Time) {
	t := a.spare
	a.spare = nil
	clear(t.seen)
	t.id, t.start, t.covered = id, now, 0
	a.cur = t
}

// finish ends the alignment in progress with a Snapshot or an Abort of
// it. The caller releases the held inputs.
func (a *Aligner) finish(kind ActionKind, now time.Time) {
	t := a.cur
	a.out = append(a.out, Action{Kind: kind, ID: t.id, Alignment: now.Sub(t.start)})
	a.latest = max(a.latest, t.id)
	a.cur, a.spare = nil, t
}

func (a *Aligner) releaseAll() {
	for i, h := range a.held {
		if h {
			a.held[i] = false
			a.out = append(a.out, Action{Kind: Release, Input: i})
		}
	}
}

// Barrier handles barrier id arriving on input at time now.
func (a *Aligner) Barrier(input int, id ckpt.ID, now time.Time) ([]Action, error) {
	a.out = a.out[:0]
	if input < 0 || input >= len(a.held) {
		return nil, fmt.Errorf("%w: barrier %d on input %d of %d", ErrInput, id, input, len(a.held))
	}
	if id <= a.latest {
		return a.out, nil // late: that checkpoint completed or was aborted here
	}
	if a.cur != nil && a.cur.id > id {
		return a.out, nil // older than the alignment under way: given up
	}
	if a.cur == nil || a.cur.id != id {
		if a.cur != nil {
			// Barrier n+1 before n aligned: Flink aborts n.
			a.finish(Abort, now)
			a.releaseAll()
		}
		a.start(id, now)
	}
	t := a.cur
	if t.seen[input] {
		return nil, fmt.Errorf("%w: barrier %d twice on input %d", ErrDuplicate, id, input)
	}
	t.seen[input] = true
	t.covered++
	if t.covered == len(a.held) {
		a.finish(Snapshot, now)
		a.releaseAll()
		return a.out, nil
	}
	a.held[input] = true
	a.out = append(a.out, Action{Kind: Hold, Input: input})
	return a.out, nil
}

// Abort handles checkpoint id aborted by the coordinator (an abort read from
// the trigger topic, DESIGN.md 5.9), which comes on no input: a task reading
// a shuffle learns of aborts that way. The alignment of id (and of anything
// older) is given up and its held inputs released; later barriers of id are
// ignored. An abort of a checkpoint that completed or was aborted here, or
// older than the alignment in progress, does nothing.
func (a *Aligner) Abort(id ckpt.ID, now time.Time) []Action {
	a.out = a.out[:0]
	if id <= a.latest || (a.cur != nil && a.cur.id > id) {
		return a.out
	}
	if a.cur != nil && a.cur.id < id {
		a.finish(Abort, now) // an older alignment: given up too
	}
	if a.cur != nil {
		a.finish(Abort, now) // a.cur.id == id
	} else {
		// Aborted before any of its barriers arrived here.
		a.out = append(a.out, Action{Kind: Abort, ID: id})
	}
	a.latest = id
	a.releaseAll()
	return a.out
}
