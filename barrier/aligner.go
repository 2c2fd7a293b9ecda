package barrier

import (
	"errors"
	"fmt"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"time"
)

// Sentinel errors of the aligner; test with errors.Is. Each reports an input
// stream that broke the protocol (or a caller bug), never a normal race.
var (
	// ErrInput: an input index outside [0, inputs).
	ErrInput = errors.New("barrier: no such input")
	// ErrEnded: a barrier, cancel marker or second end on an input that ended.
	ErrEnded = errors.New("barrier: input ended")
	// ErrDuplicate: the same barrier twice on one input.
	ErrDuplicate = errors.New("barrier: duplicate barrier")
	// ErrConfig: an aligner without inputs or with an unknown mode.
	ErrConfig = errors.New("barrier: invalid aligner config")
)

// Mode is the delivery guarantee of a task.
type Mode uint8

const (
	// ExactlyOnce aligns: an input that delivered barrier n is held until
	// barrier n arrived on every input (Flink's aligned checkpoints).
	ExactlyOnce Mode = iota
	// AtLeastOnce never holds an input; the task snapshots when the last
	// barrier n arrives (Flink's CheckpointBarrierTracker). Records after a
	// barrier may then be in the snapshot and be replayed after a restore.
	AtLeastOnce
)

// String returns "exactly-once" or "at-least-once".
func (m Mode) String() string {
	switch m {
	case ExactlyOnce:
		return "exactly-once"
	case AtLeastOnce:
		return "at-least-once"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ActionKind says what the task must do.
type ActionKind uint8

// The actions, in the order the aligner lists them for one event.
const (
	// Abort: checkpoint ID is given up by this task: drop any partial
	// snapshot of it, forward a cancel marker for ID downstream so that
	// downstream alignments release, and decline it if not yet acknowledged.
	Abort ActionKind = iota + 1
	// Snapshot: take the synchronous part of the snapshot for checkpoint ID
	// now, before processing any further record.
	Snapshot
	// Forward: send barrier ID downstream (after Snapshot, DESIGN.md 5.4).
	Forward
	// Hold: stop reading Input: it delivered the barrier of the alignment in
	// progress. Records it still delivers are refused by Record.
	Hold
	// Release: resume reading Input.
	Release
)

var actionNames = [...]string{Abort: "abort", Snapshot: "snapshot", Forward: "forward", Hold: "hold", Release: "release"}

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
	// ID is the checkpoint, for Abort, Snapshot and Forward.
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

// maxTracked bounds the checkpoints in flight in at-least-once mode (Flink
// tracks 50); beyond, the oldest is aborted.
const maxTracked = 50

// tracked is one checkpoint whose barriers are arriving.
type tracked struct {
	id    ckpt.ID
	start time.Time
	seen  []bool // by input
	// covered counts the inputs that delivered this barrier or ended, so
	// that aligned is one comparison (a shuffle reader has partitions ×
	// upstream tasks inputs, ~1 000).
	covered int
}

// Aligner is the barrier aligner of one task with a fixed number of inputs
// (Flink's SingleCheckpointBarrierHandler for aligned checkpoints, and
// CheckpointBarrierTracker for at-least-once). It is a pure value: it reads
// no clock (time comes with each barrier event), does no I/O, starts no
// goroutine, and is not safe for concurrent use. An input is whatever
// delivers one ordered stream of records and barriers: a Kafka partition, or
// one upstream task's records in a shuffle partition (DESIGN.md section 9).
//
// Record is the per-record path; it does not allocate. Barrier, Cancel and
// End return the actions to carry out, in order, in a slice that is valid
// until the next call; they do not allocate either once the aligner has
// seen as many concurrent checkpoints as it will.
type Aligner struct {
	mode    Mode
	held    []bool // by input; never set in at-least-once mode
	numHeld int
	ended   []bool
	// numEnded counts the ended inputs.
	numEnded int
	// latest is the highest checkpoint that completed or was aborted here;
	// barriers and cancel markers up to it are late and ignored.
	latest ckpt.ID
	// inflight are the checkpoints whose barriers are arriving, by ID. In
	// exactly-once mode there is at most one: the alignment in progress.
	inflight []*tracked
	free     []*tracked
	out      []Action
}

// New returns an aligner for a task with the given number of inputs.
func New(inputs int, mode Mode) (*Aligner, error) {
	if inputs < 1 {
		return nil, fmt.Errorf("%w: %d inputs", ErrConfig, inputs)
	}
	if mode != ExactlyOnce && mode != AtLeastOnce {
		return nil, fmt.Errorf("%w: mode %v", ErrConfig, mode)
	}
	return &Aligner{mode: mode, held: make([]bool, inputs), ended: make([]bool, inputs),
		out: make([]Action, 0, 2*inputs+4)}, nil
}

// Inputs returns the number of inputs.
func (a *Aligner) Inputs() int { return len(a.held) }

// Mode returns the aligner's mode.
func (a *Aligner) Mode() Mode { return a.mode }

// Record reports whether a record that arrived on input may be processed
// now. It returns false while the input is held: the task must keep the
// record (or seek the input back) and offer it again after Release. input
// must be in [0, Inputs()).
func (a *Aligner) Record(input int) bool { return !a.held[input] }

// IsHeld reports whether input is held.
func (a *Aligner) IsHeld(input int) bool { return a.held[input] }

// HeldInputs returns how many inputs are held.
func (a *Aligner) HeldInputs() int { return a.numHeld }

// check validates an event on input; what and id describe it, formatted
// only on error so that the happy path does not allocate.
func (a *Aligner) check(input int, what string, id ckpt.ID) error {
	if input < 0 || input >= len(a.held) {
		return fmt.Errorf("%w: %s on input %d of %d", ErrInput, describe(what, id), input, len(a.held))
	}
	if a.ended[input] {
		return fmt.Errorf("%w: %s on input %d", ErrEnded, describe(what, id), input)
	}
	return nil
}

func describe(what string, id ckpt.ID) string {
	if id == 0 {
		return what
	}
	return fmt.Sprintf("%s %d", what, id)
}

func (a *Aligner) find(id ckpt.ID) (int, *tracked) {
	for i, t := range a.inflight {
		if t.id == id {
			return i, t
		}
	}
	return -1, nil
}

func (a *Aligner) track(id ckpt.ID, now time.Time) *tracked {
	var t *tracked
	if n := len(a.free); n > 0 {
		t, a.free = a.free[n-1], a.free[:n-1]
		clear(t.seen)
	} else {
		t = &tracked{seen: make([]bool, len(a.held))}
	}
	t.id, t.start, t.covered = id, now, a.numEnded
	// IDs only grow past latest, and a new one is above every tracked one
	// (older barriers are ignored), so appending keeps inflight sorted.
	a.inflight = append(a.inflight, t)
	return t
}

// untrack removes inflight[i].
func (a *Aligner) untrack(i int) {
	t := a.inflight[i]
	copy(a.inflight[i:], a.inflight[i+1:])
	a.inflight[len(a.inflight)-1] = nil
	a.inflight = a.inflight[:len(a.inflight)-1]
	a.free = append(a.free, t)
}

func (a *Aligner) releaseAll() {
	for i, h := range a.held {
		if h {
			a.held[i] = false
			a.out = append(a.out, Action{Kind: Release, Input: i})
		}
	}
	a.numHeld = 0
}

// abortOlder aborts, oldest first, every tracked checkpoint below id.
func (a *Aligner) abortOlder(id ckpt.ID, now time.Time) {
	for len(a.inflight) > 0 && a.inflight[0].id < id {
		t := a.inflight[0]
		a.out = append(a.out, Action{Kind: Abort, ID: t.id, Alignment: now.Sub(t.start)})
		a.latest = max(a.latest, t.id)
		a.untrack(0)
	}
}

// aligned reports whether every input delivered t's barrier or ended.
func (a *Aligner) aligned(t *tracked) bool { return t.covered == len(a.held) }

// completeReady snapshots, oldest first, every tracked checkpoint that is
// aligned; completing one gives up the older ones (they can no longer
// align: every live input has passed their barrier).
func (a *Aligner) completeReady(now time.Time) {
	for i := 0; i < len(a.inflight); i++ {
		t := a.inflight[i]
		if !a.aligned(t) {
			continue
		}
		// Older ones first: abortOlder may release held inputs (exactly
		// once has no older ones; at-least-once holds nothing).
		for len(a.inflight) > 0 && a.inflight[0].id < t.id {
			o := a.inflight[0]
			a.out = append(a.out, Action{Kind: Abort, ID: o.id, Alignment: now.Sub(o.start)})
			a.untrack(0)
		}
		a.out = append(a.out,
			Action{Kind: Snapshot, ID: t.id, Alignment: now.Sub(t.start)},
			Action{Kind: Forward, ID: t.id})
		a.latest = max(a.latest, t.id)
		a.untrack(0)
		if a.mode == ExactlyOnce {
			a.releaseAll()
		}
		i = -1 // restart: the slice changed
	}
}

// Barrier handles barrier id arriving on input at time now.
func (a *Aligner) Barrier(input int, id ckpt.ID, now time.Time) ([]Action, error) {
	a.out = a.out[:0]
	if err := a.check(input, "barrier", id); err != nil {
		return nil, err
	}
	if id <= a.latest {
		return a.out, nil // late: that checkpoint completed or was aborted here
	}
	_, t := a.find(id)
	if t == nil {
		if n := len(a.inflight); n > 0 && a.inflight[n-1].id > id {
			return a.out, nil // older than one already under way: given up
		}
		if a.mode == ExactlyOnce {
			// Barrier n+1 before n completed: Flink aborts n.
			a.abortOlder(id, now)
			a.releaseAll()
		} else if len(a.inflight) == maxTracked {
			t := a.inflight[0]
			a.out = append(a.out, Action{Kind: Abort, ID: t.id, Alignment: now.Sub(t.start)})
			a.latest = max(a.latest, t.id)
			a.untrack(0)
		}
		t = a.track(id, now)
	}
	if t.seen[input] {
		return nil, fmt.Errorf("%w: barrier %d twice on input %d", ErrDuplicate, id, input)
	}
	t.seen[input] = true
	t.covered++
	if a.aligned(t) {
		a.completeReady(now)
		return a.out, nil
	}
	if a.mode == ExactlyOnce {
		a.held[input] = true
		a.numHeld++
		a.out = append(a.out, Action{Kind: Hold, Input: input})
	}
	return a.out, nil
}

// Cancel handles a cancel marker for checkpoint id arriving on input: the
// checkpoint was aborted upstream. The alignment of id (and of anything
// older) is given up and its held inputs released; later barriers of id are
// ignored.
func (a *Aligner) Cancel(input int, id ckpt.ID, now time.Time) ([]Action, error) {
	a.out = a.out[:0]
	if err := a.check(input, "cancel marker", id); err != nil {
		return nil, err
	}
	a.cancel(id, now)
	return a.out, nil
}

// Abort handles checkpoint id aborted by the coordinator (an abort read from
// the trigger topic, DESIGN.md 5.9), which comes on no input: a task reading
// a shuffle learns of aborts that way, not from cancel markers. It does what
// a cancel marker for id does: the alignment of id (and of anything older)
// is given up and its held inputs released; later barriers of id are
// ignored. An abort of a checkpoint that completed or was aborted here, or
// older than the alignment in progress, does nothing.
func (a *Aligner) Abort(id ckpt.ID, now time.Time) []Action {
	a.out = a.out[:0]
	a.cancel(id, now)
	return a.out
}

// cancel gives up checkpoint id, for Cancel and Abort.
func (a *Aligner) cancel(id ckpt.ID, now time.Time) {
	if id <= a.latest {
		return
	}
	var newest ckpt.ID
	if n := len(a.inflight); n > 0 {
		newest = a.inflight[n-1].id
	}
	if newest > id && a.mode == ExactlyOnce {
		return // older than the alignment in progress: already given up
	}
	a.abortOlder(id, now)
	if i, t := a.find(id); t != nil {
		a.out = append(a.out, Action{Kind: Abort, ID: id, Alignment: now.Sub(t.start)})
		a.untrack(i)
	} else if id > newest {
		// Aborted before any of its barriers arrived here.
		a.out = append(a.out, Action{Kind: Abort, ID: id})
	}
	a.latest = id
	if a.mode == ExactlyOnce {
		a.releaseAll()
	}
}

// End handles the end of input: it delivers nothing more, and counts as
// aligned for every checkpoint from now on. This may complete an alignment.
func (a *Aligner) End(input int, now time.Time) ([]Action, error) {
	a.out = a.out[:0]
	if err := a.check(input, "end of input", 0); err != nil {
		return nil, err
	}
	a.ended[input] = true
	a.numEnded++
	for _, t := range a.inflight {
		if !t.seen[input] {
			t.covered++
		}
	}
	a.completeReady(now)
	return a.out, nil
}

// Status is a summary of the aligner, for metrics and tests.
type Status struct {
	Mode Mode
	// Aligning lists the checkpoints whose barriers are arriving (at most
	// one in exactly-once mode) and Since when the oldest started.
	Aligning []ckpt.ID
	Since    time.Time
	// Held and Ended list inputs.
	Held, Ended []int
	// Latest is the highest checkpoint completed or aborted here.
	Latest ckpt.ID
}

// Status returns a summary of the aligner. It allocates; it is not meant
// for the per-record path.
func (a *Aligner) Status() Status {
	s := Status{Mode: a.mode, Latest: a.latest}
	for _, t := range a.inflight {
		s.Aligning = append(s.Aligning, t.id)
	}
	if len(a.inflight) > 0 {
		s.Since = a.inflight[0].start
	}
	for i := range a.held {
		if a.held[i] {
			s.Held = append(s.Held, i)
		}
		if a.ended[i] {
			s.Ended = append(s.Ended, i)
		}
	}
	return s
}
