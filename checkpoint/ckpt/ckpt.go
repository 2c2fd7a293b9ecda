// Package ckpt owns the vocabulary every package uses to talk about a
// checkpoint: its ID and its Kind. It is a pure leaf package (the standard
// library only, no I/O), so that the pure cores (control, coordinator,
// barrier, runtime/input) can use it as well as state, the Kafka I/O and the
// CLI. Package checkpoint, its parent, reads and writes the `_metadata`
// objects and may not be imported by the pure cores, because it does I/O.
//
// Neither type has a method that changes how it is encoded: an ID is a JSON
// number, a decimal in shuffle barrier headers and in object keys
// (chk-<n>), and a Kind a JSON string, as before they had a type of their
// own.
package ckpt

import "strconv"

// ID identifies a checkpoint (or savepoint) of a job. The coordinator
// assigns IDs from 1, strictly increasing for the life of the job, across
// coordinator failovers (DESIGN.md invariant 2); 0 is never a checkpoint and
// stands for "none" where a field may be empty.
type ID uint64

// String returns id in decimal: its form in object keys (chk-<n>), shuffle
// barrier headers, local snapshot directories and messages.
func (id ID) String() string { return strconv.FormatUint(uint64(id), 10) }

// Kind says what a checkpoint is for.
type Kind string

// The kinds of checkpoint.
const (
	// KindCheckpoint is a periodic checkpoint, triggered by the coordinator.
	KindCheckpoint Kind = "checkpoint"
	// KindSavepoint is a savepoint a person asked for. It is self-contained,
	// kept until deleted, and never subsumed or released by the coordinator.
	KindSavepoint Kind = "savepoint"
	// KindStop is a stop-with-savepoint: a savepoint after which the job stops.
	KindStop Kind = "stop"
)

// Valid reports whether k is one of the defined kinds.
func (k Kind) Valid() bool {
	return k == KindCheckpoint || k == KindSavepoint || k == KindStop
}

// IsSavepoint reports whether k is a savepoint of either kind.
func (k Kind) IsSavepoint() bool { return k == KindSavepoint || k == KindStop }

// Barrier is checkpoint ID's barrier as it travels: from the coordinator's
// trigger to every source task, and from task to task through the barrier
// records of shuffle topics (kafkaio/shuffle). Every task that takes part
// in a checkpoint sees the same Barrier.
type Barrier struct {
	ID   ID
	Kind Kind
	// Timestamp is when the coordinator triggered the checkpoint, in Unix
	// milliseconds: the time a barrier took to reach a task is measured
	// from it.
	Timestamp int64
	// Target is where a savepoint goes (the name or URL the person chose);
	// empty for a periodic checkpoint.
	Target string
}

// String returns "checkpoint 12", "savepoint 13 to <target>" and so on, for
// messages.
func (b Barrier) String() string {
	kind := b.Kind
	if kind == "" {
		kind = KindCheckpoint
	}
	s := string(kind) + " " + b.ID.String()
	if kind == KindStop {
		s = "stop-with-savepoint " + b.ID.String()
	}
	if b.Target != "" {
		s += " to " + b.Target
	}
	return s
}
