package coordinator

import (
	"fmt"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/compat"
	"github.com/weir-stream/weir/control"
)

// Event is an input of Core.Step. The set is closed: the types below.
type Event interface{ isEvent() }

// Acknowledge delivers an ack record read from the ack topic.
type Acknowledge struct{ control.Ack }

// Decline delivers a decline record read from the ack topic.
type Decline struct{ control.Decline }

// Assign reports a new placement of the job's tasks (a rebalance of the
// members group). Assignment maps each replica to its tasks. Unplaced lists
// tasks of the job that no replica runs: while it is not empty the task set
// is incomplete, every pending checkpoint is aborted and nothing is
// triggered. A complete assignment aborts every pending checkpoint and starts
// a new generation restored from the newest completed checkpoint.
type Assign struct {
	Assignment control.Assignment
	Unplaced   []control.TaskID
	// Fingerprint is the job file the new generation runs (the
	// coordinator replica's): its Generation record carries it, and so
	// does every restart of that generation.
	Fingerprint string
	// Schema is the state schema of the job and plan of the new
	// generation (package compat), which the _metadata of its checkpoints
	// record; nil records none.
	Schema *compat.Schema
	// Restore, if set, is a restore point a person chose (`processor run
	// --restore-from`) for the new generation instead of the job's newest
	// checkpoint. It is honoured once: unless a generation already
	// restored its Request, the new generation restores it and its record
	// says so (control.Generation.RestoreRequest), and so does every
	// generation after it until a checkpoint completes. A job stopped or
	// failed is resumed for it (a control.Resumed record first). An
	// honoured one is ignored: the generation restores the job's newest
	// checkpoint.
	Restore *RestorePoint
}

// RestorePoint is a restore point outside the job's own sequence of
// checkpoints: a savepoint or checkpoint of this job or another, at
// Location (control.Generation.RestoreLocation).
type RestorePoint struct {
	// ID is the checkpoint's ID in the job that took it; Metadata the key
	// of its _metadata at Location.
	ID       ckpt.ID
	Metadata string
	Location string
	// Request is the --restore-from value as given, recorded as honoured.
	Request string
}

func (r RestorePoint) validate() error {
	if r.ID == 0 || r.Metadata == "" || r.Location == "" || r.Request == "" {
		return fmt.Errorf("a restore point needs an ID, a _metadata key, a location and its request: %+v", r)
	}
	return nil
}

// TaskRunning reports that Task has restored the state of generation Gen and
// runs. When every task of the current generation runs, the generation change
// is over and periodic triggering starts after the random initial delay.
// How tasks report it is the runtime's business.
type TaskRunning struct {
	Gen  uint64
	Task control.TaskID
}

// RequestSavepoint is a person's request for a savepoint (Kind
// ckpt.KindSavepoint) or a stop-with-savepoint (ckpt.KindStop) written
// to Target. It is triggered at once, beside any periodic checkpoints.
type RequestSavepoint struct {
	Kind   ckpt.Kind
	Target string
	// Request identifies the request (control.SavepointRequest); the
	// trigger carries it. Empty for a request made otherwise.
	Request string
}

// MetadataWritten reports that the _metadata object of checkpoint ID, asked
// for in Ready.Metadata, was written at Location.
type MetadataWritten struct {
	ID       ckpt.ID
	Location string
}

// MetadataFailed reports that writing the _metadata object of checkpoint ID
// failed; the checkpoint is aborted and counts as a failure.
type MetadataFailed struct {
	ID     ckpt.ID
	Reason string
}

// TaskFailed is a task's report of a permanent failure (a control.Failure
// from the ack topic): the core aborts every pending checkpoint and records
// control.Failed, after which it triggers and assigns nothing until a
// control.Resumed record (replayed by Restore) clears it.
type TaskFailed struct {
	Failure control.Failure
}

// GCBacklog reports how many discards the owner took from Ready (Advance)
// and has not finished deleting: released checkpoints, and what aborted
// checkpoints and refused acks left (Flink's number of cleaning
// checkpoints). While it is above Config.MaxConcurrent no periodic
// checkpoint is triggered (Flink's CheckpointRequestDecider, FLINK-17073),
// so that checkpoint storage cannot grow faster than the object store
// deletes; a due trigger waits, and fires at the first Tick after the
// backlog is back within the bound. Savepoints are not held back. The owner
// reports the backlog whenever it changes; a new or restored core starts
// at 0.
type GCBacklog struct {
	Discards int
}

// MetadataRead delivers the _metadata object of a retained checkpoint,
// read by the owner after Restore: the commit topic's Complete records do
// not carry the checkpoints' shuffle positions, and the core purges no
// shuffle topic (Ready.Purges) while a retained checkpoint's positions are
// unknown. Metadata of a checkpoint the core does not retain is ignored.
type MetadataRead struct {
	Metadata control.Metadata
}

func (MetadataRead) isEvent()     {}
func (TaskFailed) isEvent()       {}
func (GCBacklog) isEvent()        {}
func (Acknowledge) isEvent()      {}
func (Decline) isEvent()          {}
func (Assign) isEvent()           {}
func (TaskRunning) isEvent()      {}
func (RequestSavepoint) isEvent() {}
func (MetadataWritten) isEvent()  {}
func (MetadataFailed) isEvent()   {}
