package control

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/compat"
)

// Version is the schema version this package writes. Decode accepts exactly
// the versions it knows how to read, which today is only Version.
const Version = 1

// Sentinel errors returned (wrapped) by Decode and Encode; test with errors.Is.
var (
	// ErrMalformed reports input that is not one JSON object of the expected
	// shape: bad JSON, trailing data, a field of the wrong JSON type, or a
	// field the message type does not have.
	ErrMalformed = errors.New("control: malformed message")
	// ErrUnknownVersion reports a "v" field this package cannot read, or a
	// missing one.
	ErrUnknownVersion = errors.New("control: unknown schema version")
	// ErrUnknownType reports a "type" field naming no message type, or a
	// missing one.
	ErrUnknownType = errors.New("control: unknown message type")
	// ErrInvalid reports a well-formed message whose values break a rule of
	// the protocol (an ID of 0, an unknown kind, a negative metric, ...).
	ErrInvalid = errors.New("control: invalid message")
)

// Type names a message type; it is the "type" field of the encoding.
type Type string

// The message types. All but TypeMetadata are records of the control topics
// (DESIGN.md section 4); TypeMetadata is the checkpoint's _metadata object.
const (
	TypeTrigger    Type = "trigger"
	TypeAbort      Type = "abort"
	TypeAck        Type = "ack"
	TypeDecline    Type = "decline"
	TypeRunning    Type = "running"
	TypeGeneration Type = "generation"
	TypeComplete   Type = "complete"
	TypeFailure    Type = "failure"
	TypeFailed     Type = "failed"
	TypeResumed    Type = "resumed"
	// TypeSavepointRequest is a person's request for a savepoint (processor
	// savepoint), on the ack topic, which the coordinator reads.
	TypeSavepointRequest Type = "savepoint_request"
	// TypeStopped marks a job stopped on purpose (processor stop).
	TypeStopped  Type = "stopped"
	TypeMetadata Type = "metadata"
	// TypeReplicaReport is a replica's periodic report of itself and its
	// tasks' figures, on the ack topic, for the job's view (package
	// jobview) that any replica and the command line serve.
	TypeReplicaReport Type = "replica_report"
)

// Topic names one of a job's three control topics.
type Topic string

// The control topics. Names are relative to the job's topic prefix.
const (
	TopicTrigger Topic = "trigger"
	TopicAck     Topic = "ack"
	TopicCommit  Topic = "commit"
)

// AbortReason says why a checkpoint was aborted. It is a closed set so that
// a coordinator rebuilt from the trigger topic can tell which aborts count as
// failures (see CountsAsFailure).
type AbortReason string

// The abort reasons.
const (
	// AbortExpired: the checkpoint did not complete within its timeout.
	AbortExpired AbortReason = "expired"
	// AbortDeclined: a task declined it.
	AbortDeclined AbortReason = "declined"
	// AbortFinalizeFailed: writing its _metadata object failed.
	AbortFinalizeFailed AbortReason = "finalize_failed"
	// AbortSubsumed: a newer checkpoint completed first.
	AbortSubsumed AbortReason = "subsumed"
	// AbortGeneration: the task set changed (failover, rescale, restart).
	AbortGeneration AbortReason = "generation"
	// AbortIncomplete: the task set became incomplete.
	AbortIncomplete AbortReason = "incomplete"
	// AbortStopped: the job stopped with a savepoint.
	AbortStopped AbortReason = "stopped"
	// AbortFailed: the job failed permanently (a Failed record follows).
	AbortFailed AbortReason = "failed"
)

// Valid reports whether r is one of the defined reasons.
func (r AbortReason) Valid() bool {
	switch r {
	case AbortExpired, AbortDeclined, AbortFinalizeFailed, AbortSubsumed,
		AbortGeneration, AbortIncomplete, AbortStopped, AbortFailed:
		return true
	}
	return false
}

// CountsAsFailure reports whether an abort for reason r counts towards the
// coordinator's tolerable consecutive failures (Flink's
// CheckpointFailureManager): expiry, decline and a failed finalization do;
// subsumption and the end of a generation or of the job do not.
func (r AbortReason) CountsAsFailure() bool {
	return r == AbortExpired || r == AbortDeclined || r == AbortFinalizeFailed
}

// TaskID names a task: stage name and parallel index. Its text form, used in
// JSON and in logs, is "<stage>/<index>", for example "enrich/3". A stage name
// is non-empty and contains no '/' and no whitespace; the index is a decimal
// number from 0, without leading zeros. TaskID is comparable and is used as a
// map key.
type TaskID struct {
	Stage string
	Index int
}

// String returns "<stage>/<index>".
func (t TaskID) String() string { return t.Stage + "/" + strconv.Itoa(t.Index) }

// Valid reports whether t follows the rules of TaskID.
func (t TaskID) Valid() bool {
	if t.Stage == "" || t.Index < 0 {
		return false
	}
	return !strings.ContainsFunc(t.Stage, func(r rune) bool {
		return r == '/' || r == ' ' || r == '\t' || r == '\n' || r == '\r' || r < 0x20 || r == 0x7f
	})
}

// ParseTaskID parses the text form "<stage>/<index>".
func ParseTaskID(s string) (TaskID, error) {
	stage, idx, ok := strings.Cut(s, "/")
	if !ok {
		return TaskID{}, fmt.Errorf("%w: task id %q: want <stage>/<index>", ErrInvalid, s)
	}
	n, err := strconv.Atoi(idx)
	if err != nil || idx == "" || (len(idx) > 1 && idx[0] == '0') || idx[0] == '+' || idx[0] == '-' {
		return TaskID{}, fmt.Errorf("%w: task id %q: index is not a decimal number", ErrInvalid, s)
	}
	t := TaskID{Stage: stage, Index: n}
	if !t.Valid() {
		return TaskID{}, fmt.Errorf("%w: task id %q", ErrInvalid, s)
	}
	return t, nil
}

// MarshalText implements encoding.TextMarshaler.
func (t TaskID) MarshalText() ([]byte, error) {
	if !t.Valid() {
		return nil, fmt.Errorf("%w: task id %q", ErrInvalid, t.String())
	}
	return []byte(t.String()), nil
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (t *TaskID) UnmarshalText(b []byte) error {
	id, err := ParseTaskID(string(b))
	if err != nil {
		return err
	}
	*t = id
	return nil
}

// Compare orders task IDs by stage, then index; it returns -1, 0 or +1.
func (t TaskID) Compare(u TaskID) int {
	if c := strings.Compare(t.Stage, u.Stage); c != 0 {
		return c
	}
	switch {
	case t.Index < u.Index:
		return -1
	case t.Index > u.Index:
		return 1
	}
	return 0
}

// Message is one control message. The set of implementations is closed: the
// pointer-free struct types of this package.
type Message interface {
	// Type returns the message's type, the "type" field of its encoding.
	Type() Type
	validate() error
}

// TopicOf returns the control topic a record of m's type is written to, and
// false for the _metadata object, which is no topic record.
func TopicOf(m Message) (Topic, bool) {
	switch m.Type() {
	case TypeTrigger, TypeAbort:
		return TopicTrigger, true
	case TypeAck, TypeDecline, TypeRunning, TypeFailure, TypeSavepointRequest, TypeReplicaReport:
		return TopicAck, true
	case TypeGeneration, TypeComplete, TypeFailed, TypeResumed, TypeStopped:
		return TopicCommit, true
	}
	return "", false
}

// Trigger starts checkpoint ID: every source reader injects barrier ID.
// Written by the coordinator to the trigger topic.
type Trigger struct {
	ID ckpt.ID `json:"id"`
	// TS is the trigger time in Unix milliseconds; the checkpoint expires at
	// TS plus the coordinator's timeout.
	TS   int64     `json:"ts"`
	Kind ckpt.Kind `json:"kind"`
	Gen  uint64    `json:"gen"`
	// Target is where a savepoint goes (a name or URL the person chose);
	// empty for periodic checkpoints.
	Target string `json:"target,omitempty"`
	// Request is the ID of the SavepointRequest that started a savepoint,
	// so that the person waiting for it knows its checkpoint ID; empty for
	// periodic checkpoints and savepoints started otherwise.
	Request string `json:"request,omitempty"`
}

// SavepointRequest asks the coordinator for a savepoint (Kind
// ckpt.KindSavepoint) written to Target, or a stop-with-savepoint
// (ckpt.KindStop). Written by `processor savepoint` to the ack topic, the
// one the coordinator reads; the trigger that starts it carries Request.
// (An addition to DESIGN.md section 4, which leaves the request's path to
// the runtime.)
type SavepointRequest struct {
	// Request identifies the request: unique, chosen by the requester.
	Request string    `json:"request"`
	Kind    ckpt.Kind `json:"kind"`
	// Target is the savepoint's name: its objects go under
	// savepoints/<target>/ in the job's object store.
	Target string `json:"target"`
	// TS is when the request was made, in Unix milliseconds: a coordinator
	// ignores requests older than it can still serve.
	TS int64 `json:"ts"`
}

// Barrier returns the barrier the trigger starts: what every task of the
// checkpoint sees of it (a periodic checkpoint if Kind is empty).
func (t Trigger) Barrier() ckpt.Barrier {
	kind := t.Kind
	if kind == "" {
		kind = ckpt.KindCheckpoint
	}
	return ckpt.Barrier{ID: t.ID, Kind: kind, Timestamp: t.TS, Target: t.Target}
}

// Abort cancels checkpoint ID: tasks discard its partial uploads.
// Written by the coordinator to the trigger topic.
type Abort struct {
	ID     ckpt.ID     `json:"id"`
	Gen    uint64      `json:"gen"`
	Reason AbortReason `json:"reason"`
	// Detail is free text for people (the decline reason, for example).
	Detail string `json:"detail,omitempty"`
	// Last is the highest checkpoint ID triggered so far (>= ID). A new
	// coordinator reads only the newest record of the trigger topic; when
	// that record is an abort of an older checkpoint, Last still tells it
	// which IDs are used. (An addition to DESIGN.md section 4.)
	Last ckpt.ID `json:"last"`
}

// AckMetrics are a task's measurements of one snapshot.
type AckMetrics struct {
	SyncMS        int64 `json:"sync_ms"`
	AsyncMS       int64 `json:"async_ms"`
	AlignMS       int64 `json:"align_ms"`
	StateBytes    int64 `json:"state_bytes"`
	UploadedBytes int64 `json:"uploaded_bytes"`
}

func (m AckMetrics) validate() error {
	if m.SyncMS < 0 || m.AsyncMS < 0 || m.AlignMS < 0 || m.StateBytes < 0 || m.UploadedBytes < 0 {
		return fmt.Errorf("%w: negative metric", ErrInvalid)
	}
	return nil
}

// Ack reports that Task snapshotted checkpoint ID: Handle names its task
// manifest. Written by the task to the ack topic.
type Ack struct {
	ID      ckpt.ID    `json:"id"`
	Gen     uint64     `json:"gen"`
	Task    TaskID     `json:"task"`
	Handle  string     `json:"handle"`
	Metrics AckMetrics `json:"metrics"`
	// Shuffle lists the task's position in every shuffle partition it
	// reads, at its snapshot: Offset is the restart position, the offset
	// of the first record the task has not processed. The coordinator
	// deletes shuffle records below the positions of every retained
	// checkpoint (DeleteRecords). Sorted, without repeats; absent for a
	// task that reads no shuffle topic. (An addition to DESIGN.md
	// section 4.)
	Shuffle []Position `json:"shuffle,omitempty"`
}

// Decline reports that Task could not snapshot checkpoint ID.
// Written by the task to the ack topic.
type Decline struct {
	ID     ckpt.ID `json:"id"`
	Gen    uint64  `json:"gen"`
	Task   TaskID  `json:"task"`
	Reason string  `json:"reason"`
}

// Running reports that Task restored the state of generation Gen and runs:
// when every task of a generation has reported it, the coordinator starts
// triggering checkpoints (the core's TaskRunning event). Written by the task
// to the ack topic. (An addition to DESIGN.md section 4: the design leaves
// open how the coordinator learns that a generation change is over.)
type Running struct {
	Gen  uint64 `json:"gen"`
	Task TaskID `json:"task"`
}

// Assignment maps a replica name to the tasks it runs.
type Assignment map[string][]TaskID

// Tasks returns every task of a, sorted, and an error if a task is assigned
// twice.
func (a Assignment) Tasks() ([]TaskID, error) {
	seen := make(map[TaskID]string)
	var out []TaskID
	replicas := make([]string, 0, len(a))
	for r := range a {
		replicas = append(replicas, r)
	}
	slices.Sort(replicas) // deterministic errors: the same input, the same message
	for _, r := range replicas {
		ts := a[r]
		for _, t := range ts {
			if prev, dup := seen[t]; dup {
				return nil, fmt.Errorf("%w: task %s assigned to both %q and %q", ErrInvalid, t, prev, r)
			}
			seen[t] = r
			out = append(out, t)
		}
	}
	slices.SortFunc(out, TaskID.Compare)
	return out, nil
}

// Generation starts generation Gen: Assignment places every task, and every
// task restores from checkpoint RestoreFrom (0: none, start from the
// configured start position). Written by the coordinator to the commit topic
// before any task of the generation starts.
type Generation struct {
	Gen         uint64     `json:"gen"`
	Assignment  Assignment `json:"assignment"`
	RestoreFrom ckpt.ID    `json:"restore_from"`
	// Skip lists input records every task of the generation drops unread:
	// the records an operator skipped with `processor resume --skip`, kept
	// in every later generation (a restore may read them again). Sorted,
	// without repeats; absent when empty.
	Skip []Position `json:"skip,omitempty"`
	// Fingerprint identifies the job file the generation runs: the
	// coordinator's own. Every task of the generation runs on a replica
	// with that file (a generation never runs two job files). Absent in
	// records of versions before it, and when the coordinator has none.
	Fingerprint string `json:"fingerprint,omitempty"`
	// RestoreMetadata is where RestoreFrom's _metadata is when it is not
	// chk-<n>/_metadata: a savepoint's savepoints/<target>/_metadata.
	// Absent otherwise, and in records of versions before it.
	RestoreMetadata string `json:"restore_metadata,omitempty"`
	// RestoreLocation is where RestoreFrom is when it is not in the job's
	// own checkpoint storage: the URL of a savepoint's or checkpoint's
	// folder that `processor run --restore-from` named (package
	// checkpoint, Source), read through a read-only store. RestoreMetadata
	// is then the key of its _metadata in that store. Every generation
	// carries it until a checkpoint of the job completes. Absent
	// otherwise, and in records of versions before it.
	RestoreLocation string `json:"restore_location,omitempty"`
	// RestoreRequest is the --restore-from value this generation honours:
	// set in the one generation that restored it first, so that a replica
	// started later with the same value resumes from the job's newest
	// checkpoint instead (honoured once). Absent otherwise.
	RestoreRequest string `json:"restore_request,omitempty"`
}

// Position names one input record. Its text form, used by the command
// line and in logs, is "<topic>/<partition>/<offset>" (a Kafka topic name
// has no '/').
type Position struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// String returns "<topic>/<partition>/<offset>".
func (p Position) String() string {
	return p.Topic + "/" + strconv.Itoa(int(p.Partition)) + "/" + strconv.FormatInt(p.Offset, 10)
}

// IsZero reports whether p names no record.
func (p Position) IsZero() bool { return p == Position{} }

// Compare orders positions by topic, partition, offset; it returns -1, 0
// or +1.
func (p Position) Compare(q Position) int {
	if c := strings.Compare(p.Topic, q.Topic); c != 0 {
		return c
	}
	if c := cmpInt(int64(p.Partition), int64(q.Partition)); c != 0 {
		return c
	}
	return cmpInt(p.Offset, q.Offset)
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (p Position) validate() error {
	if p.Topic == "" || strings.ContainsAny(p.Topic, "/ \t\n\r") || p.Partition < 0 || p.Offset < 0 {
		return fmt.Errorf("%w: record position %q", ErrInvalid, p.String())
	}
	return nil
}

// ParsePosition parses the text form "<topic>/<partition>/<offset>".
func ParsePosition(s string) (Position, error) {
	topic, rest, ok1 := strings.Cut(s, "/")
	part, off, ok2 := strings.Cut(rest, "/")
	if !ok1 || !ok2 {
		return Position{}, fmt.Errorf("%w: record %q: want <topic>/<partition>/<offset>", ErrInvalid, s)
	}
	pn, err1 := strconv.ParseInt(part, 10, 32)
	on, err2 := strconv.ParseInt(off, 10, 64)
	if err1 != nil || err2 != nil {
		return Position{}, fmt.Errorf("%w: record %q: partition and offset must be decimal numbers", ErrInvalid, s)
	}
	p := Position{Topic: topic, Partition: int32(pn), Offset: on}
	if err := p.validate(); err != nil {
		return Position{}, err
	}
	return p, nil
}

// checkPositions validates a sorted list of positions without repeats;
// an empty list must be absent (nil), so that encoding round-trips.
func checkPositions(ps []Position) error {
	if ps != nil && len(ps) == 0 {
		return fmt.Errorf("%w: empty skip list (leave the field out)", ErrInvalid)
	}
	for i, p := range ps {
		if err := p.validate(); err != nil {
			return err
		}
		if i > 0 && ps[i-1].Compare(p) >= 0 {
			return fmt.Errorf("%w: skip list not sorted or repeated at %s", ErrInvalid, p)
		}
	}
	return nil
}

// checkShuffle validates a list of shuffle positions: valid positions,
// sorted, at most one per partition; an empty list must be absent (nil).
func checkShuffle(ps []Position) error {
	if ps != nil && len(ps) == 0 {
		return fmt.Errorf("%w: empty shuffle list (leave the field out)", ErrInvalid)
	}
	for i, p := range ps {
		if err := p.validate(); err != nil {
			return fmt.Errorf("shuffle: %w", err)
		}
		if i > 0 && (ps[i-1].Compare(p) >= 0 || ps[i-1].Topic == p.Topic && ps[i-1].Partition == p.Partition) {
			return fmt.Errorf("%w: shuffle positions not sorted, or two for one partition, at %s", ErrInvalid, p)
		}
	}
	return nil
}

// FailureCause says what kind of permanent failure stopped a job: a closed
// set, so that a metric can carry it as a label.
type FailureCause string

// The failure causes.
const (
	// CauseRecord: an input record that does not decode, or that a step
	// cannot process (an expression fails on it), under on_error: fail.
	// Fix the job (on_error: skip or dead-letter) or skip the record.
	CauseRecord FailureCause = "record"
	// CauseStorage: the object store refuses the job's requests in a way no
	// retry fixes (no such bucket, access denied, invalid parameters).
	CauseStorage FailureCause = "storage"
	// CauseKafka: Kafka refuses the job's requests in a way no retry fixes
	// (a topic that does not exist, authorization).
	CauseKafka FailureCause = "kafka"
	// CauseJob: the job's definition or configuration does not match the
	// checkpoint it must restore from (a stage's parallelism or name
	// changed). Restore the settings the checkpoint was taken with.
	CauseJob FailureCause = "job"
)

// Valid reports whether c is one of the defined causes.
func (c FailureCause) Valid() bool {
	return c == CauseRecord || c == CauseStorage || c == CauseKafka || c == CauseJob
}

// Failure reports that Task failed permanently in generation Gen: no retry
// or restart can fix it. The coordinator turns it into a Failed record.
// Written by the task's replica to the ack topic. (An addition to DESIGN.md
// section 4: tasks report failures the way they report acks.)
type Failure struct {
	Gen    uint64       `json:"gen"`
	Task   TaskID       `json:"task"`
	Cause  FailureCause `json:"cause"`
	Reason string       `json:"reason"`
	// Record is the input record that caused it, if one did.
	Record Position `json:"record,omitzero"`
}

// Failed records that the job failed permanently in generation Gen (DESIGN.md
// sections 4 and 11): every replica, including one started later, stops its
// tasks and reports why until a Resumed record follows. Written by the
// coordinator to the commit topic.
type Failed struct {
	Gen uint64 `json:"gen"`
	// TS is the time the coordinator recorded it, in Unix milliseconds.
	TS     int64        `json:"ts"`
	Task   TaskID       `json:"task,omitzero"`
	Cause  FailureCause `json:"cause"`
	Reason string       `json:"reason"`
	Record Position     `json:"record,omitzero"`
}

// Resumed clears the failure of generation Gen: the job starts a new
// generation from its newest completed checkpoint, and every later
// generation skips the records of Skip. Written to the commit topic by
// `processor resume` under the coordinator's transactional ID (which fences
// any coordinator), only while the newest record of the history is the
// Failed record of Gen.
type Resumed struct {
	Gen  uint64     `json:"gen"`
	TS   int64      `json:"ts"`
	Skip []Position `json:"skip,omitempty"`
}

// Complete records that checkpoint ID is complete: its _metadata object exists
// at Metadata. Written by the coordinator to the commit topic, only after the
// object was written.
type Complete struct {
	ID  ckpt.ID `json:"id"`
	Gen uint64  `json:"gen"`
	// TS is the completion time in Unix milliseconds.
	TS int64 `json:"ts"`
	// Kind and Target repeat the trigger's, so that a coordinator rebuilt
	// from the commit topic alone knows a savepoint (never released) from a
	// checkpoint. (An addition to DESIGN.md section 4.)
	Kind     ckpt.Kind `json:"kind"`
	Target   string    `json:"target,omitempty"`
	Metadata string    `json:"metadata"`
}

// TaskState is one task's part of a checkpoint in its _metadata object.
type TaskState struct {
	Task    TaskID     `json:"task"`
	Handle  string     `json:"handle"`
	Metrics AckMetrics `json:"metrics"`
	// Shuffle repeats the task's Ack.Shuffle, so that a coordinator that
	// takes over knows the shuffle positions of the retained checkpoints.
	Shuffle []Position `json:"shuffle,omitempty"`
}

// Metadata is the content of a checkpoint's _metadata object: every task's
// handle, sorted by task. It is no topic record, but shares the versioned
// encoding so that it reads the same way.
type Metadata struct {
	ID     ckpt.ID     `json:"id"`
	Gen    uint64      `json:"gen"`
	Kind   ckpt.Kind   `json:"kind"`
	Target string      `json:"target,omitempty"`
	TS     int64       `json:"ts"`
	Tasks  []TaskState `json:"tasks"`
	// Schema is the state schema of the job that took the checkpoint
	// (package compat), which a restore compares with its own before it
	// writes anything; nil in checkpoints taken before schemas were
	// recorded. (An addition to DESIGN.md section 7.)
	Schema *compat.Schema `json:"schema,omitempty"`
}

// Type implements Message.
func (Trigger) Type() Type { return TypeTrigger }

// Type implements Message.
func (Abort) Type() Type { return TypeAbort }

// Type implements Message.
func (SavepointRequest) Type() Type { return TypeSavepointRequest }

// Stopped says the job was stopped on purpose: every replica stops its
// tasks and runs none, also one started later, until a Resumed record of
// generation Gen. Written to the commit topic by the coordinator right
// after the Complete record of a stop-with-savepoint (Savepoint is its ID,
// Metadata its _metadata), or by `processor stop` without a savepoint
// (Savepoint 0), under the coordinator's transactional ID. (An addition to
// DESIGN.md section 4.)
type Stopped struct {
	Gen       uint64  `json:"gen"`
	TS        int64   `json:"ts"`
	Savepoint ckpt.ID `json:"savepoint,omitempty"`
	Metadata  string  `json:"metadata,omitempty"`
}

// Type implements Message.
func (Stopped) Type() Type { return TypeStopped }

func (m Stopped) validate() error {
	if m.Gen == 0 {
		return fmt.Errorf("%w: gen must be positive", ErrInvalid)
	}
	if m.TS < 0 {
		return fmt.Errorf("%w: negative ts", ErrInvalid)
	}
	if (m.Savepoint == 0) != (m.Metadata == "") {
		return fmt.Errorf("%w: a stop's savepoint and its metadata go together", ErrInvalid)
	}
	return nil
}

func (m SavepointRequest) validate() error {
	if m.Request == "" {
		return fmt.Errorf("%w: empty request", ErrInvalid)
	}
	if !m.Kind.IsSavepoint() {
		return fmt.Errorf("%w: a savepoint request of kind %q", ErrInvalid, m.Kind)
	}
	if m.Target == "" {
		return fmt.Errorf("%w: a savepoint request without a target", ErrInvalid)
	}
	if m.TS < 0 {
		return fmt.Errorf("%w: negative ts", ErrInvalid)
	}
	return nil
}

// Type implements Message.
func (Ack) Type() Type { return TypeAck }

// Type implements Message.
func (Decline) Type() Type { return TypeDecline }

// Type implements Message.
func (Running) Type() Type { return TypeRunning }

// Type implements Message.
func (Generation) Type() Type { return TypeGeneration }

// Type implements Message.
func (Complete) Type() Type { return TypeComplete }

// Type implements Message.
func (Failure) Type() Type { return TypeFailure }

// Type implements Message.
func (Failed) Type() Type { return TypeFailed }

// Type implements Message.
func (Resumed) Type() Type { return TypeResumed }

// Type implements Message.
func (Metadata) Type() Type { return TypeMetadata }

func checkIDGen(id ckpt.ID, gen uint64) error {
	if id == 0 {
		return fmt.Errorf("%w: id must be positive", ErrInvalid)
	}
	if gen == 0 {
		return fmt.Errorf("%w: gen must be positive", ErrInvalid)
	}
	return nil
}

func checkKind(k ckpt.Kind, target string) error {
	if !k.Valid() {
		return fmt.Errorf("%w: kind %q", ErrInvalid, k)
	}
	if k == ckpt.KindCheckpoint && target != "" {
		return fmt.Errorf("%w: a periodic checkpoint has no target", ErrInvalid)
	}
	return nil
}

func (m Trigger) validate() error {
	if err := checkIDGen(m.ID, m.Gen); err != nil {
		return err
	}
	if m.TS < 0 {
		return fmt.Errorf("%w: negative ts", ErrInvalid)
	}
	if m.Request != "" && !m.Kind.IsSavepoint() {
		return fmt.Errorf("%w: a periodic checkpoint has no request", ErrInvalid)
	}
	return checkKind(m.Kind, m.Target)
}

func (m Abort) validate() error {
	if err := checkIDGen(m.ID, m.Gen); err != nil {
		return err
	}
	if !m.Reason.Valid() {
		return fmt.Errorf("%w: abort reason %q", ErrInvalid, m.Reason)
	}
	if m.Last < m.ID {
		return fmt.Errorf("%w: abort last %d below id %d", ErrInvalid, m.Last, m.ID)
	}
	return nil
}

func (m Ack) validate() error {
	if err := checkIDGen(m.ID, m.Gen); err != nil {
		return err
	}
	if !m.Task.Valid() {
		return fmt.Errorf("%w: task %q", ErrInvalid, m.Task.String())
	}
	if m.Handle == "" {
		return fmt.Errorf("%w: empty handle", ErrInvalid)
	}
	if err := m.Metrics.validate(); err != nil {
		return err
	}
	return checkShuffle(m.Shuffle)
}

func (m Decline) validate() error {
	if err := checkIDGen(m.ID, m.Gen); err != nil {
		return err
	}
	if !m.Task.Valid() {
		return fmt.Errorf("%w: task %q", ErrInvalid, m.Task.String())
	}
	return nil
}

func (m Running) validate() error {
	if m.Gen == 0 {
		return fmt.Errorf("%w: generation 0", ErrInvalid)
	}
	if !m.Task.Valid() {
		return fmt.Errorf("%w: task %q", ErrInvalid, m.Task.String())
	}
	return nil
}

func (m Generation) validate() error {
	if m.Gen == 0 {
		return fmt.Errorf("%w: gen must be positive", ErrInvalid)
	}
	ts, err := m.Assignment.Tasks()
	if err != nil {
		return err
	}
	if len(ts) == 0 {
		return fmt.Errorf("%w: generation %d assigns no task", ErrInvalid, m.Gen)
	}
	for _, t := range ts {
		if !t.Valid() {
			return fmt.Errorf("%w: task %q", ErrInvalid, t.String())
		}
	}
	if m.RestoreLocation != "" && m.RestoreFrom == 0 {
		return fmt.Errorf("%w: generation %d restores from %s without a checkpoint ID", ErrInvalid, m.Gen, m.RestoreLocation)
	}
	if m.RestoreRequest != "" && m.RestoreLocation == "" {
		return fmt.Errorf("%w: generation %d honours --restore-from %s without its location", ErrInvalid, m.Gen, m.RestoreRequest)
	}
	return checkPositions(m.Skip)
}

func checkFailure(gen uint64, task TaskID, cause FailureCause, reason string, record Position) error {
	if gen == 0 {
		return fmt.Errorf("%w: gen must be positive", ErrInvalid)
	}
	if task != (TaskID{}) && !task.Valid() {
		return fmt.Errorf("%w: task %q", ErrInvalid, task.String())
	}
	if !cause.Valid() {
		return fmt.Errorf("%w: failure cause %q", ErrInvalid, cause)
	}
	if reason == "" {
		return fmt.Errorf("%w: a failure needs a reason", ErrInvalid)
	}
	if !record.IsZero() {
		return record.validate()
	}
	return nil
}

func (m Failure) validate() error {
	if !m.Task.Valid() {
		return fmt.Errorf("%w: task %q", ErrInvalid, m.Task.String())
	}
	return checkFailure(m.Gen, m.Task, m.Cause, m.Reason, m.Record)
}

func (m Failed) validate() error {
	if m.TS < 0 {
		return fmt.Errorf("%w: negative ts", ErrInvalid)
	}
	return checkFailure(m.Gen, m.Task, m.Cause, m.Reason, m.Record)
}

func (m Resumed) validate() error {
	if m.Gen == 0 {
		return fmt.Errorf("%w: gen must be positive", ErrInvalid)
	}
	if m.TS < 0 {
		return fmt.Errorf("%w: negative ts", ErrInvalid)
	}
	return checkPositions(m.Skip)
}

func (m Complete) validate() error {
	if err := checkIDGen(m.ID, m.Gen); err != nil {
		return err
	}
	if m.TS < 0 {
		return fmt.Errorf("%w: negative ts", ErrInvalid)
	}
	if m.Metadata == "" {
		return fmt.Errorf("%w: empty metadata location", ErrInvalid)
	}
	return checkKind(m.Kind, m.Target)
}

func (m Metadata) validate() error {
	if err := checkIDGen(m.ID, m.Gen); err != nil {
		return err
	}
	if m.TS < 0 {
		return fmt.Errorf("%w: negative ts", ErrInvalid)
	}
	if err := checkKind(m.Kind, m.Target); err != nil {
		return err
	}
	if m.Schema != nil {
		if err := m.Schema.Validate(); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	for i, s := range m.Tasks {
		if !s.Task.Valid() {
			return fmt.Errorf("%w: task %q", ErrInvalid, s.Task.String())
		}
		if s.Handle == "" {
			return fmt.Errorf("%w: task %s: empty handle", ErrInvalid, s.Task)
		}
		if i > 0 && m.Tasks[i-1].Task.Compare(s.Task) >= 0 {
			return fmt.Errorf("%w: tasks not sorted or repeated at %s", ErrInvalid, s.Task)
		}
		if err := s.Metrics.validate(); err != nil {
			return fmt.Errorf("task %s: %w", s.Task, err)
		}
		if err := checkShuffle(s.Shuffle); err != nil {
			return fmt.Errorf("task %s: %w", s.Task, err)
		}
	}
	return nil
}

// Encode returns the versioned JSON encoding of m: one object whose first
// fields are "v" and "type", followed by m's fields. It rejects a message
// that Decode would reject.
func Encode(m Message) ([]byte, error) {
	if m == nil {
		return nil, fmt.Errorf("%w: nil message", ErrInvalid)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("encode %s: %w", m.Type(), err)
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w: %v", m.Type(), ErrInvalid, err)
	}
	var b bytes.Buffer
	b.Grow(len(body) + 32)
	fmt.Fprintf(&b, `{"v":%d,"type":%q`, Version, m.Type())
	if len(body) > 2 { // body is "{...}"; "{}" adds nothing
		b.WriteByte(',')
		b.Write(body[1:])
	} else {
		b.WriteByte('}')
	}
	return b.Bytes(), nil
}

// DecodeMetadata parses a checkpoint's _metadata object: Decode, and an
// error unless it holds a Metadata. It is the one reader of _metadata.
func DecodeMetadata(b []byte) (Metadata, error) {
	m, err := Decode(b)
	if err != nil {
		return Metadata{}, err
	}
	md, ok := m.(Metadata)
	if !ok {
		return Metadata{}, fmt.Errorf("%w: a %s where checkpoint metadata was expected", ErrInvalid, m.Type())
	}
	return md, nil
}

// Decode parses one encoded message. Errors wrap ErrMalformed,
// ErrUnknownVersion, ErrUnknownType or ErrInvalid. Decoding is strict: a
// field the type does not have, trailing data, or a missing required value
// is an error, so that a reader never acts on a message it misread.
func Decode(b []byte) (Message, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if raw == nil { // the input was JSON null
		return nil, fmt.Errorf("%w: null instead of an object", ErrMalformed)
	}
	hv, ok := raw["v"]
	if !ok {
		return nil, fmt.Errorf("%w: no \"v\" field", ErrUnknownVersion)
	}
	var v int
	if err := json.Unmarshal(hv, &v); err != nil {
		return nil, fmt.Errorf("%w: \"v\" is %s", ErrUnknownVersion, hv)
	}
	if v != Version {
		return nil, fmt.Errorf("%w: v=%d, this build reads v=%d", ErrUnknownVersion, v, Version)
	}
	ht, ok := raw["type"]
	if !ok {
		return nil, fmt.Errorf("%w: no \"type\" field", ErrUnknownType)
	}
	var t Type
	if err := json.Unmarshal(ht, &t); err != nil {
		return nil, fmt.Errorf("%w: \"type\" is %s", ErrUnknownType, ht)
	}
	delete(raw, "v")
	delete(raw, "type")
	body, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch t {
	case TypeTrigger:
		return decodeAs[Trigger](t, body)
	case TypeAbort:
		return decodeAs[Abort](t, body)
	case TypeAck:
		return decodeAs[Ack](t, body)
	case TypeDecline:
		return decodeAs[Decline](t, body)
	case TypeRunning:
		return decodeAs[Running](t, body)
	case TypeGeneration:
		return decodeAs[Generation](t, body)
	case TypeComplete:
		return decodeAs[Complete](t, body)
	case TypeFailure:
		return decodeAs[Failure](t, body)
	case TypeFailed:
		return decodeAs[Failed](t, body)
	case TypeResumed:
		return decodeAs[Resumed](t, body)
	case TypeMetadata:
		return decodeAs[Metadata](t, body)
	case TypeSavepointRequest:
		return decodeAs[SavepointRequest](t, body)
	case TypeStopped:
		return decodeAs[Stopped](t, body)
	case TypeReplicaReport:
		return decodeAs[ReplicaReport](t, body)
	}
	return nil, fmt.Errorf("%w: %q", ErrUnknownType, string(t))
}

// decodeAs decodes body, the fields of a message without "v" and "type",
// strictly into a T.
func decodeAs[T Message](t Type, body []byte) (Message, error) {
	var m T
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		if errors.Is(err, ErrInvalid) { // from TaskID.UnmarshalText
			return nil, fmt.Errorf("decode %s: %w", t, err)
		}
		return nil, fmt.Errorf("decode %s: %w: %v", t, ErrMalformed, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("decode %s: %w: trailing data", t, ErrMalformed)
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("decode %s: %w", t, err)
	}
	return m, nil
}

// Validate reports whether m obeys the rules Decode enforces, so that a
// reader of already-decoded messages (a coordinator rebuilt from history) can
// check them again. The error wraps ErrInvalid.
func Validate(m Message) error {
	if m == nil {
		return fmt.Errorf("%w: nil message", ErrInvalid)
	}
	return m.validate()
}

// ReplicaReport is a replica's report of itself, written to the ack topic
// every few seconds (http.report_interval) by every replica, so that any
// replica, reading the ack topic, can show the whole job: which replicas
// are alive, which one holds the coordinator role, and each task's
// figures. The coordinator ignores it. (An addition to DESIGN.md section
// 4: the design leaves the job's view to the runtime.)
type ReplicaReport struct {
	Replica string `json:"replica"`
	// TS is when the report was made, in Unix milliseconds.
	TS int64 `json:"ts"`
	// Gen is the newest generation the replica read; 0 before any.
	Gen uint64 `json:"gen"`
	// Coordinator is true while the replica holds the coordinator role.
	Coordinator bool `json:"coordinator,omitempty"`
	// Tasks are the figures of the tasks running on the replica, sorted
	// by task; absent when it runs none.
	Tasks []TaskFigures `json:"tasks,omitempty"`
}

// TaskFigures are one task's figures as its replica last measured them.
// Rates are per second over the replica's last report interval.
type TaskFigures struct {
	Task                TaskID  `json:"task"`
	RecordsInPerSecond  float64 `json:"records_in_per_second"`
	RecordsOutPerSecond float64 `json:"records_out_per_second"`
	// LagRecords is a source task's input lag (last stable offset − read
	// position, over its partitions); 0 for a downstream task.
	LagRecords int64 `json:"lag_records"`
	// WatermarkMS is the task's watermark in Unix milliseconds; 0 while
	// it has none.
	WatermarkMS              int64   `json:"watermark_ms"`
	BusyMSPerSecond          float64 `json:"busy_ms_per_second"`
	BackpressuredMSPerSecond float64 `json:"backpressured_ms_per_second"`
	IdleMSPerSecond          float64 `json:"idle_ms_per_second"`
}

// Type implements Message.
func (ReplicaReport) Type() Type { return TypeReplicaReport }

func (m ReplicaReport) validate() error {
	if m.Replica == "" {
		return fmt.Errorf("%w: a replica report without a replica", ErrInvalid)
	}
	if m.TS < 0 {
		return fmt.Errorf("%w: negative ts", ErrInvalid)
	}
	if m.Tasks != nil && len(m.Tasks) == 0 {
		return fmt.Errorf("%w: empty task list (leave the field out)", ErrInvalid)
	}
	for i, f := range m.Tasks {
		if !f.Task.Valid() {
			return fmt.Errorf("%w: task %q", ErrInvalid, f.Task.String())
		}
		if i > 0 && m.Tasks[i-1].Task.Compare(f.Task) >= 0 {
			return fmt.Errorf("%w: tasks not sorted or repeated at %s", ErrInvalid, f.Task)
		}
		if f.LagRecords < 0 || f.WatermarkMS < 0 || !figure(f.RecordsInPerSecond) || !figure(f.RecordsOutPerSecond) ||
			!figure(f.BusyMSPerSecond) || !figure(f.BackpressuredMSPerSecond) || !figure(f.IdleMSPerSecond) {
			return fmt.Errorf("%w: task %s: negative figure", ErrInvalid, f.Task)
		}
	}
	return nil
}

// figure reports whether x is a rate a report can carry: finite, not
// negative (JSON has no NaN).
func figure(x float64) bool { return x >= 0 && !math.IsInf(x, 1) }
