package coordinator

import (
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
)

// Ready is what the owner of a Core must do, collected since the last
// Advance. The owner carries it out in the order of the fields:
//
//  1. Records: produce every record, in order, in ONE Kafka transaction of
//     the coordinator's transactional producer — Trigger and Abort to the
//     trigger topic, Complete and Generation to the commit topic (see
//     control.TopicOf) — and commit the transaction. The order matters:
//     a Complete of generation g precedes the Generation record of g+1, and
//     a Trigger precedes its own Abort.
//  2. Metadata: write each checkpoint's _metadata object (conditional put:
//     it must not exist yet), then Step MetadataWritten (or MetadataFailed).
//     The core puts the Complete record of checkpoint n into Records only
//     after MetadataWritten for n, so _metadata is always written BEFORE its
//     complete record is appended (DESIGN.md invariant 3). Steps 1 and 2 of
//     one Ready therefore never depend on each other.
//  3. Notifications: tell local listeners (a person waiting for a savepoint,
//     the job's shutdown after a stop-with-savepoint, logs).
//  4. Discards: delete the named state, but only after the transaction of
//     step 1 committed: a release is decided by a Complete that must be
//     durable first, or a crash would leave the job with nothing to restore.
//  5. Purges: delete the shuffle records below each position
//     (DeleteRecords), also only after the transaction of step 1 committed:
//     the Complete that moved the oldest retained checkpoint must be durable,
//     or a coordinator rebuilt without it could restore from a checkpoint
//     whose positions are already deleted. A purge that fails needs no
//     retry of its own: the next one covers it.
//  6. Restart: informational; the Generation record that restarts the job is
//     already in Records.
//  7. Metrics: add the counters to the metrics registry.
//
// Then it calls Advance with this Ready, before it asks for the next one. If a step fails (the producer is
// fenced, say), the owner gives up the coordinator role instead: a new
// coordinator rebuilds its state from the durable records (Restore).
type Ready struct {
	// Records are control-topic records to write, in order.
	Records []control.Message
	// Metadata are _metadata objects to write; each lists every task's
	// handle of a fully acknowledged checkpoint.
	Metadata []control.Metadata
	// Notifications report checkpoints that completed or were aborted.
	Notifications []Notification
	// Discards name state that no checkpoint needs.
	Discards []Discard
	// Purges name, per shuffle partition, the first record any retained
	// checkpoint may still read: delete every record below Offset. Sorted;
	// a partition's offset is higher than in any earlier Ready of this
	// core (Core.purge says what is retained).
	Purges []control.Position
	// Restart is set when tolerable_failures was exceeded.
	Restart *Restart
	// Outcomes report how each ack and decline was handled.
	Outcomes []Outcome
	// Metrics are counters since the last Advance, and gauges.
	Metrics Metrics
}

// AckResult is how the core handled an ack (Flink's
// PendingCheckpoint.TaskAcknowledgeResult, plus Stale).
type AckResult uint8

// The results of an ack. For declines, Success means the decline aborted a
// pending checkpoint; Duplicate, Discarded and Unknown mean it was ignored.
const (
	// AckSuccess: the first ack of a task for a pending checkpoint.
	AckSuccess AckResult = iota
	// AckDuplicate: a repeated ack, or one for a checkpoint that completed;
	// ignored, and its state is kept (a completed checkpoint may use it).
	AckDuplicate
	// AckUnknown: from a task outside the checkpoint's task set, or for a
	// checkpoint never triggered; its state is discarded.
	AckUnknown
	// AckDiscarded: for a checkpoint that was aborted; its state is discarded.
	AckDiscarded
	// AckStale: from another generation; dropped without any effect
	// (DESIGN.md invariant 6). Its files are left to garbage collection.
	AckStale
	numAckResults
)

var ackResultNames = [numAckResults]string{"SUCCESS", "DUPLICATE", "UNKNOWN", "DISCARDED", "STALE"}

// String returns the upper-case name, as Flink logs it.
func (r AckResult) String() string {
	if r < numAckResults {
		return ackResultNames[r]
	}
	return "AckResult(?)"
}

// Outcome reports how one ack or decline was handled.
type Outcome struct {
	Type   control.Type // control.TypeAck or control.TypeDecline
	ID     ckpt.ID
	Gen    uint64
	Task   control.TaskID
	Result AckResult
}

// Notification reports the end of a checkpoint.
type Notification struct {
	ID     ckpt.ID
	Gen    uint64
	Kind   ckpt.Kind
	Target string
	// Completed is true for a completed checkpoint, false for an aborted one.
	Completed bool
	// Metadata is the location of the _metadata object, if Completed.
	Metadata string
	// Reason and Detail say why it was aborted, if not Completed.
	Reason control.AbortReason
	Detail string
	// Duration is from the trigger to the completion or abort.
	Duration time.Duration
	// Acked counts the tasks that acknowledged, of Tasks.
	Acked, Tasks int
	// StateBytes and UploadedBytes sum the acks; MaxAlign is the longest
	// alignment reported.
	StateBytes, UploadedBytes int64
	MaxAlign                  time.Duration
	// Stopped is true when this completed a stop-with-savepoint: the job must
	// now stop; the core triggers nothing more.
	Stopped bool
}

// DiscardReason says why state is discarded.
type DiscardReason string

// The discard reasons.
const (
	// DiscardUnknownAck: the state of an ack with result AckUnknown.
	DiscardUnknownAck DiscardReason = "unknown_ack"
	// DiscardLateAck: the state of an ack with result AckDiscarded.
	DiscardLateAck DiscardReason = "late_ack"
	// DiscardAborted: the acknowledged task states of an aborted checkpoint,
	// and the _metadata object of one aborted while it was being written.
	DiscardAborted DiscardReason = "aborted"
	// DiscardReleased: a completed checkpoint beyond the retained count. The
	// garbage collector reads its _metadata to drop its references to shared
	// files; a savepoint is never released.
	DiscardReleased DiscardReason = "released"
)

// Discard names state of checkpoint ID that nothing needs any more.
type Discard struct {
	ID     ckpt.ID
	Reason DiscardReason
	// Handles are task handles (manifests) to discard.
	Handles []string
	// Metadata is a _metadata object to discard with everything it alone
	// refers to.
	Metadata string
}

// Restart asks for a restart of the job from the newest completed
// checkpoint. The core has already aborted every pending checkpoint and put
// the new Generation record into Ready.Records.
type Restart struct {
	Reason   string
	Failures int
}

// Metrics are the core's counters since the last Advance and its gauges at
// the time of Ready.
type Metrics struct {
	Triggered int
	Completed int
	// Failed counts aborts that count as failures; Aborted counts the others
	// (subsumed, generation change, ...).
	Failed, Aborted int
	Acks            [numAckResults]int
	Restarts        int

	// Gauges.
	Generation    uint64
	Pending       int
	LastCompleted ckpt.ID
}

func (m Metrics) counting() bool {
	if m.Triggered|m.Completed|m.Failed|m.Aborted|m.Restarts != 0 {
		return true
	}
	for _, n := range m.Acks {
		if n != 0 {
			return true
		}
	}
	return false
}

func (m *Metrics) subtract(o Metrics) {
	m.Triggered -= o.Triggered
	m.Completed -= o.Completed
	m.Failed -= o.Failed
	m.Aborted -= o.Aborted
	m.Restarts -= o.Restarts
	for i := range m.Acks {
		m.Acks[i] -= o.Acks[i]
	}
}
