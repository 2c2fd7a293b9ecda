package coordinator

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/compat"
	"github.com/weir-stream/weir/control"
)

// Sentinel errors of Step and Restore; test with errors.Is.
var (
	// ErrUnknownEvent: Step got an event type it does not know.
	ErrUnknownEvent = errors.New("coordinator: unknown event")
	// ErrNotRunning: a savepoint was requested while the task set is
	// incomplete or a generation change is in progress.
	ErrNotRunning = errors.New("coordinator: tasks not running")
	// ErrStopped: the job stopped with a savepoint; the core takes no more
	// requests or assignments.
	ErrStopped = errors.New("coordinator: job stopped")
	// ErrStopPending: a stop-with-savepoint is already in progress.
	ErrStopPending = errors.New("coordinator: stop-with-savepoint in progress")
	// ErrTargetTaken: a savepoint pending or retained has the requested
	// target; a second one would write its files over the first's.
	ErrTargetTaken = errors.New("coordinator: savepoint target taken")
	// ErrInvalidEvent: an event's values are unusable (an empty assignment,
	// a savepoint of kind checkpoint, metadata for a checkpoint that is not
	// fully acknowledged, ...). It reports a bug of the caller.
	ErrInvalidEvent = errors.New("coordinator: invalid event")
	// ErrHistory: Restore got records that no coordinator could have written.
	ErrHistory = errors.New("coordinator: inconsistent history")
	// ErrFailed: the job failed permanently (a Failed record); the core
	// takes no assignment or request until a Resumed record clears it.
	ErrFailed = errors.New("coordinator: job failed")
)

// recentSize is how many finished checkpoint IDs of the current generation
// the core remembers to classify late acks (Flink keeps 16).
const recentSize = 16

// phase is where the current generation is. It is volatile: Restore derives
// it, and the owner of a rebuilt core starts a new generation anyway.
type phase uint8

const (
	// phaseWaiting: no generation runs (none yet, or the task set is
	// incomplete).
	phaseWaiting phase = iota
	// phaseStarting: the Generation record is written; not every task runs.
	phaseStarting
	// phaseRunning: every task of the generation runs; triggering is on.
	phaseRunning
	// phaseStopped: a stop-with-savepoint completed.
	phaseStopped
	// phaseFailed: the job failed permanently; nothing is triggered or
	// assigned until a Resumed record.
	phaseFailed
)

var phaseNames = [...]string{"waiting", "starting", "running", "stopped", "failed"}

func (p phase) String() string { return phaseNames[p] }

// taskAck is one task's acknowledgement of a pending checkpoint; an empty
// handle means not acknowledged yet.
type taskAck struct {
	handle  string
	metrics control.AckMetrics
	shuffle []control.Position
}

// pending is a triggered checkpoint that has not completed or aborted.
type pending struct {
	id       ckpt.ID
	gen      uint64
	kind     ckpt.Kind
	target   string
	ts       time.Time // trigger time, from the trigger record
	deadline time.Time
	// acks is indexed like Core.tasks; remaining counts empty handles.
	// An ack is one map lookup (task to index) and one slice access: O(1)
	// whatever the number of tasks.
	acks       []taskAck
	remaining  int
	finalizing bool // fully acknowledged; waiting for MetadataWritten
}

// completed is a completed checkpoint or savepoint the core remembers.
type completed struct {
	id       ckpt.ID
	gen      uint64
	kind     ckpt.Kind
	target   string
	ts       time.Time
	metadata string
	// shuffle is the lowest position of each shuffle partition its tasks
	// read, sorted; known says whether the core has seen it: from the acks
	// of a checkpoint it completed or replayed, or from the _metadata
	// object (MetadataRead) after a Restore from the topics alone.
	shuffle []control.Position
	known   bool
}

// finished is a recently finished checkpoint of the current generation.
type finished struct {
	id        ckpt.ID
	completed bool
}

// Core is the checkpoint coordinator (Flink's CheckpointCoordinator) as a
// deterministic state machine. It is not safe for concurrent use: one
// goroutine owns it. It performs no I/O, reads no clock (time comes in
// through New, Restore and Tick), draws randomness only from Config.Random,
// and starts no goroutine.
//
// Every decision that must survive a failover is a control record: the core
// decides, builds the record, applies it to its own state with the same
// function Restore uses, and hands it out in Ready. So a core rebuilt from
// the records is in the state of the one that wrote them.
type Core struct {
	cfg Config
	now time.Time

	// Durable state: rebuilt by Restore from the records.
	gen            uint64
	assignment     control.Assignment
	fingerprint    string           // the job file of the current generation (control.Generation)
	schema         *compat.Schema   // the state schema of the current generation (Assign), or nil
	tasks          []control.TaskID // sorted
	index          map[control.TaskID]int
	lastID         ckpt.ID    // highest checkpoint ID ever used
	lastCompleted  ckpt.ID    // highest completed ID (restore point)
	pending        []*pending // by ID, ascending
	completed      []completed
	recent         []finished
	savepoints     []ckpt.ID // every savepoint ever completed: its state is never discarded
	failures       int       // consecutive counted failures
	lastCompletion time.Time
	failed         *control.Failed  // the job's permanent failure, until resumed
	stopped        *control.Stopped // the job stopped on purpose, until resumed
	// restore is the restore point a person chose (Assign.Restore) that
	// the current generation restored, until a checkpoint completes
	// after it: every generation until then restores it again.
	restore *RestorePoint
	// honoured are the --restore-from values generations restored, with
	// the generation that did: each is honoured once.
	honoured map[string]uint64
	skip     []control.Position // records every generation skips, sorted

	// Volatile state.
	phase       phase
	notRunning  []bool // by task index, during phaseStarting
	waitingFor  int
	scheduled   bool
	nextTrigger time.Time
	restartDue  bool
	// gcBacklog is the owner's last GCBacklog report; gcHeld is set when
	// the last Tick held back a due periodic trigger because of it.
	gcBacklog int
	gcHeld    bool
	// purged is the offset of the last purge of each shuffle partition
	// this core asked for (Ready.Purges); a rebuilt core starts empty and
	// asks again at its first completion (deleting below an offset twice
	// changes nothing).
	purged map[partition]int64

	out Ready
}

// New returns a core for a job with no history, at time now. It waits for a
// complete Assign.
func New(cfg Config, now time.Time) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Core{cfg: cfg, now: now}, nil
}

// Step feeds one event into the core. It returns an error only for an event
// the caller should not have sent (see the sentinel errors); acks, declines
// and other messages of the protocol never fail: their handling is reported
// in Ready.Outcomes.
func (c *Core) Step(e Event) error {
	var err error
	switch ev := e.(type) {
	case Acknowledge:
		c.ack(ev.Ack)
	case Decline:
		c.decline(ev.Decline)
	case Assign:
		err = c.assign(ev)
	case TaskRunning:
		c.taskRunning(ev)
	case RequestSavepoint:
		err = c.requestSavepoint(ev)
	case MetadataWritten:
		err = c.metadataWritten(ev)
	case MetadataFailed:
		err = c.metadataFailed(ev)
	case TaskFailed:
		c.taskFailed(ev.Failure)
	case MetadataRead:
		if err := control.Validate(ev.Metadata); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidEvent, err)
		}
		c.applyMetadata(ev.Metadata)
	case GCBacklog:
		if ev.Discards < 0 {
			return fmt.Errorf("%w: gc backlog %d", ErrInvalidEvent, ev.Discards)
		}
		c.gcBacklog = ev.Discards
	default:
		// reflect.TypeOf, unlike fmt's %T, keeps e from escaping, so that
		// Step(Acknowledge{...}) does not allocate.
		return fmt.Errorf("%w: %s", ErrUnknownEvent, reflect.TypeOf(e))
	}
	c.maybeRestart()
	return err
}

// Tick tells the core the time. It expires pending checkpoints whose timeout
// passed, then triggers a periodic checkpoint if one is due and allowed, and
// the gc backlog (GCBacklog) is within Config.MaxConcurrent.
// Time never goes backwards: an earlier now is treated as the latest one.
func (c *Core) Tick(now time.Time) {
	if now.After(c.now) {
		c.now = now
	}
	if c.phase == phaseStopped || c.phase == phaseFailed {
		return
	}
	for _, p := range slices.Clone(c.pending) {
		if !c.now.Before(p.deadline) {
			c.abort(p, control.AbortExpired, fmt.Sprintf("not complete after %v", c.cfg.Timeout))
		}
	}
	c.maybeRestart()
	c.gcHeld = false
	if c.triggerAllowed() {
		if c.gcBacklog > c.cfg.MaxConcurrent {
			c.gcHeld = true
			return
		}
		c.trigger(ckpt.KindCheckpoint, "", "")
	}
}

// HeldByGC reports whether the last Tick held back a due periodic
// checkpoint because the gc backlog exceeds Config.MaxConcurrent
// (GCBacklog).
func (c *Core) HeldByGC() bool { return c.gcHeld }

// triggerAllowed applies the rules of DESIGN.md section 5.1.
func (c *Core) triggerAllowed() bool {
	at, ok := c.triggerTime()
	return ok && !c.now.Before(at)
}

// triggerTime returns the time from which the rules of DESIGN.md section
// 5.1 allow the next periodic trigger, and false while something other
// than time forbids it.
func (c *Core) triggerTime() (time.Time, bool) {
	if c.phase != phaseRunning || !c.scheduled {
		return time.Time{}, false
	}
	periodic := 0
	for _, p := range c.pending {
		switch p.kind {
		case ckpt.KindStop:
			return time.Time{}, false // Flink stops the scheduler during stop-with-savepoint
		case ckpt.KindCheckpoint:
			periodic++
		}
	}
	if periodic >= c.cfg.MaxConcurrent {
		return time.Time{}, false
	}
	at := c.nextTrigger
	if pause := c.lastCompletion.Add(c.cfg.MinPause); pause.After(at) {
		at = pause
	}
	return at, true
}

// NextTrigger returns the time from which a Tick triggers the next periodic
// checkpoint, and whether only time stands in its way: the owner may tell
// the core the time then rather than at its next regular tick. The time is
// the later of the scheduled trigger and the end of the min pause after the
// last completion, and it may have passed already (a checkpoint that took
// longer than the interval completed just now): the owner should then tick
// at once. It reports false while something other than time holds the
// trigger back (the job is not running, max_concurrent checkpoints or a
// stop-with-savepoint are pending, or the gc backlog is too long): an event
// releases those, and the owner ticks the core on every event.
func (c *Core) NextTrigger() (time.Time, bool) {
	if c.gcBacklog > c.cfg.MaxConcurrent {
		return time.Time{}, false
	}
	return c.triggerTime()
}

// HasReady reports whether Ready has anything to do.
func (c *Core) HasReady() bool {
	o := &c.out
	return len(o.Records) > 0 || len(o.Metadata) > 0 || len(o.Notifications) > 0 ||
		len(o.Discards) > 0 || len(o.Purges) > 0 || o.Restart != nil || len(o.Outcomes) > 0 || o.Metrics.counting()
}

// Ready returns what the owner must do; see the Ready type for the order.
// The slices belong to the caller; the core never changes them.
func (c *Core) Ready() Ready {
	rd := c.out
	rd.Metrics.Generation = c.gen
	rd.Metrics.Pending = len(c.pending)
	rd.Metrics.LastCompleted = c.lastCompleted
	return rd
}

// Advance tells the core that rd, returned by Ready, was carried out. Events
// stepped since that Ready stay for the next one.
func (c *Core) Advance(rd Ready) {
	o := &c.out
	o.Records = drop(o.Records, len(rd.Records))
	o.Metadata = drop(o.Metadata, len(rd.Metadata))
	o.Notifications = drop(o.Notifications, len(rd.Notifications))
	o.Discards = drop(o.Discards, len(rd.Discards))
	o.Purges = drop(o.Purges, len(rd.Purges))
	o.Outcomes = drop(o.Outcomes, len(rd.Outcomes))
	if rd.Restart != nil && o.Restart == rd.Restart {
		o.Restart = nil
	}
	o.Metrics.subtract(rd.Metrics)
}

func drop[T any](s []T, n int) []T {
	if n >= len(s) {
		return nil
	}
	return s[n:]
}

// Status is a summary of the core's state, for people and tests.
type Status struct {
	Gen           uint64
	Phase         string
	Tasks         int
	LastID        ckpt.ID
	LastCompleted ckpt.ID
	Failures      int
	Pending       []PendingStatus
	Completed     []CompletedStatus
	// NextTrigger is when the next periodic trigger is due, if scheduled.
	NextTrigger time.Time
	Scheduled   bool
	// Failed is the job's permanent failure, nil unless Phase is "failed".
	Failed *control.Failed
	// Skip lists the records every generation skips.
	Skip []control.Position
	// GCBacklog is the owner's last GCBacklog report; HeldByGC is
	// Core.HeldByGC.
	GCBacklog int
	HeldByGC  bool
}

// PendingStatus summarizes one pending checkpoint.
type PendingStatus struct {
	ID         ckpt.ID
	Kind       ckpt.Kind
	Remaining  int
	Finalizing bool
	Deadline   time.Time
}

// CompletedStatus summarizes one retained checkpoint or savepoint.
type CompletedStatus struct {
	ID       ckpt.ID
	Kind     ckpt.Kind
	Metadata string
	// Shuffle is the lowest position of each shuffle partition its tasks
	// read, if ShuffleKnown; after a Restore from the topics alone it is
	// unknown until MetadataRead.
	Shuffle      []control.Position
	ShuffleKnown bool
}

// Status returns a summary of the core's state.
func (c *Core) Status() Status {
	s := Status{
		Gen: c.gen, Phase: c.phase.String(), Tasks: len(c.tasks), LastID: c.lastID,
		LastCompleted: c.lastCompleted, Failures: c.failures,
		NextTrigger: c.nextTrigger, Scheduled: c.scheduled, Skip: slices.Clone(c.skip),
		GCBacklog: c.gcBacklog, HeldByGC: c.gcHeld,
	}
	if c.failed != nil {
		f := *c.failed
		s.Failed = &f
	}
	for _, p := range c.pending {
		s.Pending = append(s.Pending, PendingStatus{ID: p.id, Kind: p.kind, Remaining: p.remaining,
			Finalizing: p.finalizing, Deadline: p.deadline})
	}
	for _, k := range c.completed {
		s.Completed = append(s.Completed, CompletedStatus{ID: k.id, Kind: k.kind, Metadata: k.metadata,
			Shuffle: slices.Clone(k.shuffle), ShuffleKnown: k.known})
	}
	return s
}

// Now returns the latest time the core was told.
func (c *Core) Now() time.Time { return c.now }

func (c *Core) find(id ckpt.ID) *pending {
	for _, p := range c.pending {
		if p.id == id {
			return p
		}
	}
	return nil
}

// gone classifies a checkpoint ID of the current generation that is not
// pending.
func (c *Core) gone(id ckpt.ID) AckResult {
	for _, k := range c.completed {
		if k.id == id {
			return AckDuplicate
		}
	}
	// A savepoint's state belongs to a person: never discard it, however
	// late the duplicate.
	if slices.Contains(c.savepoints, id) {
		return AckDuplicate
	}
	for _, f := range c.recent {
		if f.id == id {
			if f.completed {
				return AckDuplicate
			}
			return AckDiscarded
		}
	}
	if id == 0 || id > c.lastID {
		return AckUnknown
	}
	// Finished long ago: aborted, or completed and already released. Its
	// state is not needed either way.
	return AckDiscarded
}

func (c *Core) outcome(t control.Type, id ckpt.ID, gen uint64, task control.TaskID, r AckResult) {
	c.out.Outcomes = append(c.out.Outcomes, Outcome{Type: t, ID: id, Gen: gen, Task: task, Result: r})
	if t == control.TypeAck {
		c.out.Metrics.Acks[r]++
	}
}

func (c *Core) discard(d Discard) { c.out.Discards = append(c.out.Discards, d) }

// ack handles an acknowledgement (Flink's receiveAcknowledgeMessage).
func (c *Core) ack(a control.Ack) {
	if a.Gen != c.gen || c.gen == 0 {
		c.outcome(control.TypeAck, a.ID, a.Gen, a.Task, AckStale)
		return
	}
	p := c.find(a.ID)
	if p == nil {
		r := c.gone(a.ID)
		c.outcome(control.TypeAck, a.ID, a.Gen, a.Task, r)
		switch r {
		case AckUnknown:
			c.discard(Discard{ID: a.ID, Reason: DiscardUnknownAck, Handles: []string{a.Handle}})
		case AckDiscarded:
			c.discard(Discard{ID: a.ID, Reason: DiscardLateAck, Handles: []string{a.Handle}})
		}
		return
	}
	i, ok := c.index[a.Task]
	if !ok || a.Handle == "" {
		c.outcome(control.TypeAck, a.ID, a.Gen, a.Task, AckUnknown)
		if a.Handle != "" {
			c.discard(Discard{ID: a.ID, Reason: DiscardUnknownAck, Handles: []string{a.Handle}})
		}
		return
	}
	if p.acks[i].handle != "" {
		c.outcome(control.TypeAck, a.ID, a.Gen, a.Task, AckDuplicate)
		return
	}
	p.acks[i] = taskAck{handle: a.Handle, metrics: a.Metrics, shuffle: a.Shuffle}
	p.remaining--
	c.outcome(control.TypeAck, a.ID, a.Gen, a.Task, AckSuccess)
	if p.remaining == 0 {
		c.finalize(p)
	}
}

// finalize asks for the _metadata object of a fully acknowledged checkpoint.
func (c *Core) finalize(p *pending) {
	p.finalizing = true
	md := control.Metadata{ID: p.id, Gen: p.gen, Kind: p.kind, Target: p.target,
		TS: p.ts.UnixMilli(), Tasks: make([]control.TaskState, len(c.tasks)), Schema: c.schema}
	for i, t := range c.tasks { // c.tasks is sorted, as Metadata requires
		md.Tasks[i] = control.TaskState{Task: t, Handle: p.acks[i].handle, Metrics: p.acks[i].metrics,
			Shuffle: p.acks[i].shuffle}
	}
	c.out.Metadata = append(c.out.Metadata, md)
}

func (c *Core) decline(d control.Decline) {
	if d.Gen != c.gen || c.gen == 0 {
		c.outcome(control.TypeDecline, d.ID, d.Gen, d.Task, AckStale)
		return
	}
	p := c.find(d.ID)
	if p == nil {
		c.outcome(control.TypeDecline, d.ID, d.Gen, d.Task, c.gone(d.ID))
		return
	}
	if _, ok := c.index[d.Task]; !ok {
		c.outcome(control.TypeDecline, d.ID, d.Gen, d.Task, AckUnknown)
		return
	}
	c.outcome(control.TypeDecline, d.ID, d.Gen, d.Task, AckSuccess)
	c.abort(p, control.AbortDeclined, fmt.Sprintf("task %s: %s", d.Task, d.Reason))
}

func (c *Core) metadataWritten(ev MetadataWritten) error {
	if ev.Location == "" {
		return fmt.Errorf("%w: metadata of checkpoint %d written at an empty location", ErrInvalidEvent, ev.ID)
	}
	p := c.find(ev.ID)
	if p == nil {
		// Aborted (expired, say) while the object was being written: the
		// object names a checkpoint that does not exist. A repeated report
		// of a completed checkpoint changes nothing: its object is in use.
		if c.gone(ev.ID) != AckDuplicate {
			c.discard(Discard{ID: ev.ID, Reason: DiscardAborted, Metadata: ev.Location})
		}
		return nil
	}
	if !p.finalizing {
		return fmt.Errorf("%w: metadata of checkpoint %d written before every task acknowledged", ErrInvalidEvent, ev.ID)
	}
	c.complete(p, ev.Location)
	return nil
}

func (c *Core) metadataFailed(ev MetadataFailed) error {
	p := c.find(ev.ID)
	if p == nil {
		return nil
	}
	if !p.finalizing {
		return fmt.Errorf("%w: metadata of checkpoint %d failed before every task acknowledged", ErrInvalidEvent, ev.ID)
	}
	c.abort(p, control.AbortFinalizeFailed, ev.Reason)
	return nil
}

// complete completes p (Flink's completePendingCheckpoint): older periodic
// checkpoints are subsumed, the Complete record is written, older completed
// checkpoints beyond the retained count are released.
func (c *Core) complete(p *pending, location string) {
	for _, q := range slices.Clone(c.pending) {
		if q.id < p.id && q.kind == ckpt.KindCheckpoint {
			c.abort(q, control.AbortSubsumed, fmt.Sprintf("checkpoint %d completed", p.id))
		}
	}
	n := c.notification(p)
	n.Completed, n.Metadata = true, location
	rec := control.Complete{ID: p.id, Gen: p.gen, TS: c.now.UnixMilli(), Kind: p.kind, Target: p.target, Metadata: location}
	released := c.applyComplete(rec)
	n.Duration = time.UnixMilli(rec.TS).Sub(p.ts)
	c.out.Records = append(c.out.Records, rec)
	c.out.Metrics.Completed++
	for _, k := range released {
		c.discard(Discard{ID: k.id, Reason: DiscardReleased, Metadata: k.metadata})
	}
	c.purge()
	if p.kind == ckpt.KindStop {
		n.Stopped = true
		c.out.Notifications = append(c.out.Notifications, n)
		for _, q := range slices.Clone(c.pending) {
			c.abort(q, control.AbortStopped, fmt.Sprintf("job stopped with savepoint %d", p.id))
		}
		// Durable, so that every replica stops, also one started later,
		// and a new coordinator triggers nothing, until a resume.
		st := control.Stopped{Gen: p.gen, TS: rec.TS, Savepoint: p.id, Metadata: location}
		c.applyStopped(st)
		c.out.Records = append(c.out.Records, st)
		return
	}
	c.out.Notifications = append(c.out.Notifications, n)
}

func (c *Core) notification(p *pending) Notification {
	n := Notification{ID: p.id, Gen: p.gen, Kind: p.kind, Target: p.target,
		Tasks: len(p.acks), Acked: len(p.acks) - p.remaining}
	for _, a := range p.acks {
		n.StateBytes += a.metrics.StateBytes
		n.UploadedBytes += a.metrics.UploadedBytes
		n.MaxAlign = max(n.MaxAlign, time.Duration(a.metrics.AlignMS)*time.Millisecond)
	}
	return n
}

// abort aborts pending checkpoint p: writes the Abort record, discards the
// states acknowledged so far, and notifies.
func (c *Core) abort(p *pending, reason control.AbortReason, detail string) {
	n := c.notification(p)
	n.Reason, n.Detail = reason, detail
	n.Duration = c.now.Sub(p.ts)
	rec := control.Abort{ID: p.id, Gen: p.gen, Reason: reason, Detail: detail, Last: c.lastID}
	counted := c.applyAbort(rec)
	c.out.Records = append(c.out.Records, rec)
	var handles []string
	for _, a := range p.acks {
		if a.handle != "" {
			handles = append(handles, a.handle)
		}
	}
	if len(handles) > 0 {
		c.discard(Discard{ID: p.id, Reason: DiscardAborted, Handles: handles})
	}
	c.out.Notifications = append(c.out.Notifications, n)
	if counted {
		c.out.Metrics.Failed++
		if c.failures > c.cfg.TolerableFailures {
			c.restartDue = true
		}
	} else {
		c.out.Metrics.Aborted++
	}
}

// abortAll aborts every pending checkpoint, oldest first.
func (c *Core) abortAll(reason control.AbortReason, detail string) {
	for _, p := range slices.Clone(c.pending) {
		c.abort(p, reason, detail)
	}
}

// maybeRestart restarts the job when tolerable_failures is exceeded: a new
// generation with the same assignment, restored from the newest completed
// checkpoint (Flink fails the job and its restart strategy restores it).
func (c *Core) maybeRestart() {
	if !c.restartDue {
		return
	}
	c.restartDue = false
	if c.failures <= c.cfg.TolerableFailures || c.phase == phaseStopped || c.phase == phaseWaiting ||
		c.phase == phaseFailed || len(c.tasks) == 0 {
		return
	}
	r := &Restart{Failures: c.failures, Reason: fmt.Sprintf(
		"%d consecutive checkpoint failures exceed tolerable_failures %d", c.failures, c.cfg.TolerableFailures)}
	c.abortAll(control.AbortGeneration, "job restart: "+r.Reason)
	c.newGeneration(c.assignment)
	c.out.Restart = r
	c.out.Metrics.Restarts++
}

func (c *Core) newGeneration(a control.Assignment) {
	rec := control.Generation{Gen: c.gen + 1, Assignment: a, RestoreFrom: c.lastCompleted, Skip: slices.Clone(c.skip),
		Fingerprint: c.fingerprint}
	// A savepoint as the restore point: its _metadata is not at
	// chk-<n>/_metadata, so the record says where.
	for _, k := range c.completed {
		if k.id == c.lastCompleted && k.kind.IsSavepoint() {
			rec.RestoreMetadata = k.metadata
		}
	}
	// A restore point a person chose, until a checkpoint completes after
	// it, whatever the job's own newest checkpoint (a rollback).
	if r := c.restore; r != nil {
		rec.RestoreFrom, rec.RestoreMetadata, rec.RestoreLocation = r.ID, r.Metadata, r.Location
	}
	c.applyGeneration(rec)
	c.out.Records = append(c.out.Records, rec)
}

func (c *Core) assign(ev Assign) error {
	if r := ev.Restore; r != nil {
		if err := r.validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidEvent, err)
		}
	}
	restore := ev.Restore
	if restore != nil {
		if _, done := c.honoured[restore.Request]; done {
			restore = nil // honoured once: the job's newest checkpoint
		}
	}
	var halted error // the job stopped or failed: only a restore starts it again
	switch c.phase {
	case phaseStopped:
		halted = ErrStopped
	case phaseFailed:
		halted = fmt.Errorf("%w in generation %d: %s", ErrFailed, c.failed.Gen, c.failed.Reason)
	}
	if halted != nil && restore == nil {
		return halted
	}
	tasks, err := ev.Assignment.Tasks()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	for _, t := range append(slices.Clone(tasks), ev.Unplaced...) {
		if !t.Valid() {
			return fmt.Errorf("%w: task %q", ErrInvalidEvent, t.String())
		}
	}
	for _, t := range ev.Unplaced {
		if _, found := slices.BinarySearchFunc(tasks, t, control.TaskID.Compare); found {
			return fmt.Errorf("%w: task %s both placed and unplaced", ErrInvalidEvent, t)
		}
	}
	if len(tasks) == 0 && len(ev.Unplaced) == 0 {
		return fmt.Errorf("%w: assignment without tasks", ErrInvalidEvent)
	}
	if halted != nil && (len(ev.Unplaced) > 0 || len(tasks) == 0) {
		return halted // stays halted until the restore can start
	}
	if halted != nil {
		// A restore starts a stopped or failed job again, as processor
		// resume would, from the point chosen.
		rec := control.Resumed{Gen: c.gen, TS: c.now.UnixMilli()}
		c.applyResumed(rec)
		c.out.Records = append(c.out.Records, rec)
	}
	if len(ev.Unplaced) > 0 || len(tasks) == 0 {
		c.abortAll(control.AbortIncomplete, fmt.Sprintf("%d tasks not placed", len(ev.Unplaced)))
		c.phase = phaseWaiting
		c.scheduled = false
		return nil
	}
	c.abortAll(control.AbortGeneration, fmt.Sprintf("generation %d starts", c.gen+1))
	a := make(control.Assignment, len(ev.Assignment))
	for r, ts := range ev.Assignment {
		a[r] = slices.Clone(ts)
	}
	c.fingerprint, c.schema = ev.Fingerprint, ev.Schema
	if restore != nil {
		r := *restore
		c.restore = &r
	}
	c.newGeneration(a)
	if restore != nil {
		// The record that honours it, once.
		last := &c.out.Records[len(c.out.Records)-1]
		g := (*last).(control.Generation)
		g.RestoreRequest = restore.Request
		*last = g
		c.honour(g)
	}
	return nil
}

// taskFailed handles a task's report of a permanent failure: every pending
// checkpoint is aborted and the Failed record stops the job everywhere
// (DESIGN.md section 11). Reports of another generation, of an unknown task,
// or after the job already failed or stopped change nothing.
func (c *Core) taskFailed(f control.Failure) {
	if f.Gen != c.gen || c.gen == 0 {
		c.outcome(control.TypeFailure, 0, f.Gen, f.Task, AckStale)
		return
	}
	if _, ok := c.index[f.Task]; !ok {
		c.outcome(control.TypeFailure, 0, f.Gen, f.Task, AckUnknown)
		return
	}
	if c.phase == phaseFailed || c.phase == phaseStopped {
		c.outcome(control.TypeFailure, 0, f.Gen, f.Task, AckDuplicate)
		return
	}
	c.outcome(control.TypeFailure, 0, f.Gen, f.Task, AckSuccess)
	c.abortAll(control.AbortFailed, fmt.Sprintf("task %s failed: %s", f.Task, f.Reason))
	rec := control.Failed{Gen: f.Gen, TS: c.now.UnixMilli(), Task: f.Task, Cause: f.Cause, Reason: f.Reason, Record: f.Record}
	c.applyFailed(rec)
	c.out.Records = append(c.out.Records, rec)
}

func (c *Core) taskRunning(ev TaskRunning) {
	if c.phase != phaseStarting || ev.Gen != c.gen {
		return
	}
	i, ok := c.index[ev.Task]
	if !ok || !c.notRunning[i] {
		return
	}
	c.notRunning[i] = false
	c.waitingFor--
	if c.waitingFor > 0 {
		return
	}
	c.phase = phaseRunning
	c.notRunning = nil
	// The first trigger comes after a random delay in [min_pause, interval],
	// so that jobs started together do not checkpoint together.
	span := int64(c.cfg.Interval - c.cfg.MinPause)
	d := c.cfg.Random.Int64N(span + 1)
	d = min(max(d, 0), span)
	c.nextTrigger = c.now.Add(c.cfg.MinPause + time.Duration(d))
	c.scheduled = true
}

func (c *Core) requestSavepoint(ev RequestSavepoint) error {
	if !ev.Kind.IsSavepoint() {
		return fmt.Errorf("%w: savepoint of kind %q", ErrInvalidEvent, ev.Kind)
	}
	switch c.phase {
	case phaseStopped:
		return ErrStopped
	case phaseFailed:
		return fmt.Errorf("%w in generation %d: %s", ErrFailed, c.failed.Gen, c.failed.Reason)
	case phaseRunning:
	default:
		return fmt.Errorf("%w: generation %d is %s", ErrNotRunning, c.gen, c.phase)
	}
	if ev.Kind == ckpt.KindStop {
		for _, p := range c.pending {
			if p.kind == ckpt.KindStop {
				return fmt.Errorf("%w: checkpoint %d", ErrStopPending, p.id)
			}
		}
	}
	if ev.Target != "" {
		for _, p := range c.pending {
			if p.target == ev.Target {
				return fmt.Errorf("%w: %s is the target of pending checkpoint %d", ErrTargetTaken, ev.Target, p.id)
			}
		}
		for _, k := range c.completed {
			if k.target == ev.Target {
				return fmt.Errorf("%w: %s is the target of completed checkpoint %d", ErrTargetTaken, ev.Target, k.id)
			}
		}
	}
	c.trigger(ev.Kind, ev.Target, ev.Request)
	return nil
}

func (c *Core) trigger(kind ckpt.Kind, target, request string) {
	rec := control.Trigger{ID: c.lastID + 1, TS: c.now.UnixMilli(), Kind: kind, Gen: c.gen, Target: target, Request: request}
	c.applyTrigger(rec)
	c.out.Records = append(c.out.Records, rec)
	c.out.Metrics.Triggered++
}
