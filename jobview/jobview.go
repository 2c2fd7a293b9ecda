// Package jobview is the view of a whole job that the REST API
// (/api/v1/…) and `processor status` show: its state, generation,
// replicas and their tasks, and its checkpoint history. It owns one thing,
// the fold of the job's control records (the commit, trigger and ack
// topics, package control) and of checkpoints' _metadata into that view.
//
// It is pure: no I/O, no clock, no goroutine. Whoever reads the topics
// (runtime/observe for a replica and the command line) feeds it records in
// each topic's order; Fold is not safe for concurrent use, and its owner
// guards it.
package jobview

import (
	"cmp"
	"slices"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
)

// The job's states.
const (
	// StateStarting: no generation yet (no replica placed the tasks).
	StateStarting = "starting"
	// StateRestoring: a generation started and not every one of its tasks
	// reported running yet.
	StateRestoring = "restoring"
	// StateRunning: every task of the newest generation runs.
	StateRunning = "running"
	// StateFailed: a permanent failure stopped the job (Job.Failure).
	StateFailed = "failed"
	// StateStopped: `processor stop` stopped the job (Job.Stopped).
	StateStopped = "stopped"
	// StateRefused: the replica that answers cannot restore the job's
	// newest checkpoint with its job file (set by the API, which knows
	// the local replica; Job.Refused).
	StateRefused = "refused"
)

// The statuses of a task.
const (
	TaskRestoring = "restoring"
	TaskRunning   = "running"
	TaskFailed    = "failed"
	TaskStopped   = "stopped"
)

// The statuses of a checkpoint.
const (
	// CheckpointInProgress: triggered, neither complete nor aborted.
	CheckpointInProgress = "in_progress"
	CheckpointCompleted  = "completed"
	// CheckpointFailed: aborted for a failure (expired, declined,
	// _metadata not written: control.AbortReason.CountsAsFailure).
	CheckpointFailed = "failed"
	// CheckpointAborted: aborted without failure (subsumed, the
	// generation changed, the job stopped or failed).
	CheckpointAborted = "aborted"
)

// keepCheckpoints is how many checkpoints a Fold keeps, newest first:
// enough for any `limit` the API serves.
const keepCheckpoints = 500

// Fold accumulates control records into the job's view. The zero value is
// not usable; call New.
type Fold struct {
	name    string
	gen     *control.Generation
	running map[control.TaskID]bool // tasks of gen that reported running
	// triggered is true once a checkpoint of gen was triggered: the
	// coordinator triggers only when every task runs, so all did, also
	// when their running records are gone from the ack topic.
	triggered bool
	failed    *control.Failed
	stopped   *control.Stopped
	ckpts     map[ckpt.ID]*Checkpoint
	reports   map[string]control.ReplicaReport // newest per replica
}

// New returns an empty fold for job name.
func New(name string) *Fold {
	return &Fold{name: name, running: map[control.TaskID]bool{}, ckpts: map[ckpt.ID]*Checkpoint{}, reports: map[string]control.ReplicaReport{}}
}

// Apply folds one control record in. Records of each topic must come in
// the topic's order; the topics may interleave in any way.
func (f *Fold) Apply(m control.Message) {
	switch m := m.(type) {
	case control.Generation:
		f.gen = &m
		clear(f.running)
		f.triggered = false
		f.failed, f.stopped = nil, nil
	case control.Running:
		if f.gen != nil && m.Gen == f.gen.Gen {
			f.running[m.Task] = true
		}
	case control.Failed:
		f.failed = &m
	case control.Stopped:
		f.stopped = &m
	case control.Resumed:
		f.failed, f.stopped = nil, nil
	case control.Trigger:
		c := f.checkpoint(m.ID)
		c.Kind, c.Target, c.Gen, c.TriggeredMS = kindOf(m.Kind), m.Target, m.Gen, m.TS
		if c.Status == "" {
			c.Status = CheckpointInProgress
		}
		if f.gen != nil && f.gen.Gen == m.Gen {
			c.expected, _ = f.gen.Assignment.Tasks()
			f.triggered = true
		}
	case control.Abort:
		c := f.checkpoint(m.ID)
		if c.Status == CheckpointCompleted {
			return
		}
		c.Gen = cmp.Or(c.Gen, m.Gen)
		c.Status = CheckpointAborted
		if m.Reason.CountsAsFailure() {
			c.Status = CheckpointFailed
		}
		c.AbortReason, c.Failure = string(m.Reason), m.Detail
	case control.Ack:
		c := f.checkpoint(m.ID)
		c.Gen = cmp.Or(c.Gen, m.Gen)
		t := c.task(m.Task)
		t.Status, t.Metrics, t.Reason = "acknowledged", m.Metrics, ""
	case control.Decline:
		c := f.checkpoint(m.ID)
		c.Gen = cmp.Or(c.Gen, m.Gen)
		t := c.task(m.Task)
		t.Status, t.Reason = "declined", m.Reason
	case control.Complete:
		c := f.checkpoint(m.ID)
		c.Kind, c.Target, c.Gen, c.Status = kindOf(m.Kind), m.Target, m.Gen, CheckpointCompleted
		c.CompletedMS, c.Metadata, c.AbortReason, c.Failure = m.TS, m.Metadata, "", ""
		if f.gen != nil && f.gen.Gen == m.Gen {
			f.triggered = true
		}
	case control.ReplicaReport:
		if old, ok := f.reports[m.Replica]; !ok || old.TS <= m.TS {
			f.reports[m.Replica] = m
		}
	}
	f.trim()
}

// ApplyMetadata folds a checkpoint's _metadata in: its trigger time and
// every task's part, for a checkpoint whose trigger or acks the topics no
// longer hold (the trigger topic is compacted, the ack topic kept a day).
func (f *Fold) ApplyMetadata(md control.Metadata) {
	c := f.checkpoint(md.ID)
	if c.TriggeredMS == 0 {
		c.TriggeredMS = md.TS
	}
	c.Kind, c.Target, c.Gen = kindOf(md.Kind), md.Target, cmp.Or(c.Gen, md.Gen)
	for _, s := range md.Tasks {
		t := c.task(s.Task)
		t.Status, t.Metrics = "acknowledged", s.Metrics
	}
	c.metadataRead = true
	f.trim()
}

func kindOf(k ckpt.Kind) string {
	if k.IsSavepoint() {
		return "savepoint"
	}
	return "checkpoint"
}

func (f *Fold) checkpoint(id ckpt.ID) *Checkpoint {
	c, ok := f.ckpts[id]
	if !ok {
		c = &Checkpoint{ID: id, Kind: "checkpoint"}
		f.ckpts[id] = c
	}
	return c
}

// trim drops the oldest checkpoints beyond keepCheckpoints.
func (f *Fold) trim() {
	if len(f.ckpts) <= keepCheckpoints+keepCheckpoints/10 {
		return
	}
	ids := make([]ckpt.ID, 0, len(f.ckpts))
	for id := range f.ckpts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids[:len(ids)-keepCheckpoints] {
		delete(f.ckpts, id)
	}
}

// NeedsMetadata returns the completed checkpoints among the newest limit
// whose tasks' figures are missing (their acks were not read) and whose
// _metadata was not folded in yet: the reader fetches those.
func (f *Fold) NeedsMetadata(limit int) []Checkpoint {
	var out []Checkpoint
	for _, c := range f.Checkpoints(limit) {
		if c.Status == CheckpointCompleted && !c.metadataRead && (c.TriggeredMS == 0 || len(c.Tasks) == 0) {
			out = append(out, c)
		}
	}
	return out
}

// Checkpoint is one checkpoint or savepoint as the job's history shows it.
type Checkpoint struct {
	ID     ckpt.ID `json:"id"`
	Kind   string  `json:"kind"` // checkpoint or savepoint
	Target string  `json:"target,omitempty"`
	Gen    uint64  `json:"generation"`
	Status string  `json:"status"`
	// TriggeredMS and CompletedMS are Unix milliseconds; 0 when unknown.
	TriggeredMS int64 `json:"triggered_ms"`
	CompletedMS int64 `json:"completed_ms,omitempty"`
	// DurationMS is trigger → complete, or trigger → now while in
	// progress (filled by View); absent when unknown.
	DurationMS *int64 `json:"duration_ms,omitempty"`
	// AbortReason is the control.AbortReason of a failed or aborted
	// checkpoint; Failure its detail (a decline's reason).
	AbortReason string `json:"abort_reason,omitempty"`
	Failure     string `json:"failure,omitempty"`
	// Acks is the number of tasks that acknowledged it, Expected the
	// number of tasks of its generation (0 when unknown).
	Acks     int `json:"acks"`
	Expected int `json:"expected,omitempty"`
	// StateBytes and UploadedBytes are summed over the acknowledged tasks.
	StateBytes    int64  `json:"state_bytes"`
	UploadedBytes int64  `json:"uploaded_bytes"`
	Metadata      string `json:"metadata,omitempty"`
	// Tasks are the tasks' parts, sorted by task: acknowledged (with
	// their sync, async and alignment times), declined (with the reason)
	// or, while in progress, pending.
	Tasks []TaskCheckpoint `json:"tasks"`

	expected     []control.TaskID
	metadataRead bool
}

// TaskCheckpoint is one task's part of a checkpoint.
type TaskCheckpoint struct {
	Task    control.TaskID     `json:"task"`
	Status  string             `json:"status"` // acknowledged, declined, pending
	Metrics control.AckMetrics `json:"metrics"`
	Reason  string             `json:"reason,omitempty"`
}

func (c *Checkpoint) task(id control.TaskID) *TaskCheckpoint {
	i, found := slices.BinarySearchFunc(c.Tasks, id, func(t TaskCheckpoint, id control.TaskID) int { return t.Task.Compare(id) })
	if !found {
		c.Tasks = slices.Insert(c.Tasks, i, TaskCheckpoint{Task: id})
	}
	return &c.Tasks[i]
}

// view returns a copy of c with its derived fields filled; nowMS is the
// reader's clock, for an in-progress checkpoint's duration.
func (c *Checkpoint) view(nowMS int64) Checkpoint {
	v := *c
	v.Tasks = slices.Clone(c.Tasks)
	v.Acks, v.StateBytes, v.UploadedBytes = 0, 0, 0
	for _, t := range v.Tasks {
		if t.Status == "acknowledged" {
			v.Acks++
			v.StateBytes += t.Metrics.StateBytes
			v.UploadedBytes += t.Metrics.UploadedBytes
		}
	}
	if len(c.expected) > 0 {
		v.Expected = len(c.expected)
		if v.Status == CheckpointInProgress {
			for _, id := range c.expected {
				if _, found := slices.BinarySearchFunc(c.Tasks, id, func(t TaskCheckpoint, id control.TaskID) int { return t.Task.Compare(id) }); !found {
					v.Tasks = append(v.Tasks, TaskCheckpoint{Task: id, Status: "pending"})
				}
			}
			slices.SortFunc(v.Tasks, func(a, b TaskCheckpoint) int { return a.Task.Compare(b.Task) })
		}
	}
	if v.Status == CheckpointCompleted && v.Expected == 0 {
		v.Expected = v.Acks
	}
	switch {
	case v.TriggeredMS == 0:
	case v.Status == CheckpointCompleted && v.CompletedMS >= v.TriggeredMS:
		d := v.CompletedMS - v.TriggeredMS
		v.DurationMS = &d
	case v.Status == CheckpointInProgress && nowMS >= v.TriggeredMS:
		d := nowMS - v.TriggeredMS
		v.DurationMS = &d
	}
	if v.Tasks == nil {
		v.Tasks = []TaskCheckpoint{}
	}
	return v
}

// Checkpoints returns the newest limit checkpoints, newest first (limit
// <= 0: all it keeps).
func (f *Fold) Checkpoints(limit int) []Checkpoint {
	return f.CheckpointsAt(limit, 0)
}

// CheckpointsAt is Checkpoints with in-progress durations up to nowMS.
func (f *Fold) CheckpointsAt(limit int, nowMS int64) []Checkpoint {
	ids := make([]ckpt.ID, 0, len(f.ckpts))
	for id := range f.ckpts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	if limit > 0 && len(ids) > limit {
		ids = ids[:limit]
	}
	out := make([]Checkpoint, len(ids))
	for i, id := range ids {
		out[i] = f.ckpts[id].view(nowMS)
	}
	return out
}

// Checkpoint returns checkpoint id, and false if the fold does not know
// it (never triggered, or older than the history it keeps).
func (f *Fold) Checkpoint(id ckpt.ID, nowMS int64) (Checkpoint, bool) {
	c, ok := f.ckpts[id]
	if !ok {
		return Checkpoint{}, false
	}
	return c.view(nowMS), true
}

// Job is the job as the control topics show it.
type Job struct {
	Name  string `json:"name"`
	State string `json:"state"`
	// Failure is set while the job is failed, Stopped while it is
	// stopped, Refused while the answering replica refuses to run it.
	Failure *Failure `json:"failure,omitempty"`
	Stopped *Stopped `json:"stopped,omitempty"`
	Refused string   `json:"refused,omitempty"`
	// Generation is the newest generation (0: none yet), RestoreFrom the
	// checkpoint it restored.
	Generation  uint64 `json:"generation"`
	RestoreFrom uint64 `json:"restore_from"`
	// Coordinator is the replica that last reported holding the
	// coordinator role ("" if none did).
	Coordinator string    `json:"coordinator"`
	Replicas    []Replica `json:"replicas"`
	// LiveReplicas counts the replicas whose last report is recent: 0
	// while no replica runs (the control topics keep the state of a job
	// whose replicas are all gone).
	LiveReplicas int `json:"live_replicas"`
	// Tasks are the generation's tasks, sorted, with their placement and
	// status.
	Tasks []Task `json:"tasks"`
	// LastCheckpoint is the newest completed checkpoint (nil if none).
	LastCheckpoint *Checkpoint `json:"last_checkpoint,omitempty"`
}

// Failure is a permanent failure and what to do about it.
type Failure struct {
	control.Failed
	// Resume is the command that resumes the job, for people.
	Resume string `json:"resume"`
}

// Stopped is a stop on purpose.
type Stopped struct {
	control.Stopped
	Resume string `json:"resume"`
}

// Replica is one replica: the tasks its generation gives it, and when it
// last reported (0: it never did; a replica whose tasks the generation
// lists but that has not reported may be dead).
type Replica struct {
	ID          string           `json:"id"`
	Tasks       []control.TaskID `json:"tasks"`
	Coordinator bool             `json:"coordinator"`
	// ReportedMS is its newest report's time, Unix milliseconds.
	ReportedMS int64 `json:"reported_ms"`
	// Generation is the newest generation it read, by its report.
	Generation uint64 `json:"generation"`
}

// Task is one task of the generation.
type Task struct {
	ID      control.TaskID `json:"id"`
	Stage   string         `json:"stage"`
	Index   int            `json:"index"`
	Replica string         `json:"replica"`
	Status  string         `json:"status"`
}

// ResumeHint is what to run to resume a failed job, for people.
func ResumeHint(f control.Failed) string {
	if !f.Record.IsZero() {
		return "fix the job (for example on_error: skip on the source or on the step that failed) and restart its replicas, then run `processor resume -c FILE`; " +
			"or skip the record with `processor resume -c FILE --skip " + f.Record.String() + "`"
	}
	return "fix the cause, then run `processor resume -c FILE`"
}

// Job returns the job's view. reportTTL (ms) is how old a replica's report
// may be for it to count as alive (as coordinator, and in Replicas when
// the generation gives it no task); nowMS is the reader's clock.
func (f *Fold) Job(nowMS, reportTTL int64) Job {
	j := Job{Name: f.name, State: StateStarting, Replicas: []Replica{}, Tasks: []Task{}}
	reps := map[string]*Replica{}
	replica := func(id string) *Replica {
		r, ok := reps[id]
		if !ok {
			r = &Replica{ID: id, Tasks: []control.TaskID{}}
			reps[id] = r
		}
		return r
	}
	if g := f.gen; g != nil {
		j.Generation, j.RestoreFrom = g.Gen, uint64(g.RestoreFrom)
		all := true
		for rep, ts := range g.Assignment {
			r := replica(rep)
			r.Tasks = append(r.Tasks, ts...)
			slices.SortFunc(r.Tasks, control.TaskID.Compare)
			for _, id := range ts {
				t := Task{ID: id, Stage: id.Stage, Index: id.Index, Replica: rep, Status: TaskRestoring}
				if f.running[id] || f.triggered {
					t.Status = TaskRunning
				} else {
					all = false
				}
				j.Tasks = append(j.Tasks, t)
			}
		}
		slices.SortFunc(j.Tasks, func(a, b Task) int { return a.ID.Compare(b.ID) })
		j.State = StateRestoring
		if all {
			j.State = StateRunning
		}
	}
	var coordTS int64
	for id, rep := range f.reports {
		live := nowMS-rep.TS <= reportTTL
		if live {
			j.LiveReplicas++
		}
		if _, placed := reps[id]; !placed && !live {
			continue
		}
		r := replica(id)
		r.ReportedMS, r.Generation = rep.TS, rep.Gen
		if rep.Coordinator && live && rep.TS > coordTS {
			j.Coordinator, coordTS = id, rep.TS
		}
	}
	for _, r := range reps {
		r.Coordinator = r.ID == j.Coordinator
		j.Replicas = append(j.Replicas, *r)
	}
	slices.SortFunc(j.Replicas, func(a, b Replica) int { return cmp.Compare(a.ID, b.ID) })
	switch {
	case f.failed != nil:
		j.State = StateFailed
		j.Failure = &Failure{Failed: *f.failed, Resume: ResumeHint(*f.failed)}
		for i := range j.Tasks {
			j.Tasks[i].Status = TaskStopped
			if j.Tasks[i].ID == f.failed.Task {
				j.Tasks[i].Status = TaskFailed
			}
		}
	case f.stopped != nil:
		j.State = StateStopped
		j.Stopped = &Stopped{Stopped: *f.stopped, Resume: "start it again with `processor resume -c FILE`"}
		for i := range j.Tasks {
			j.Tasks[i].Status = TaskStopped
		}
	}
	var last *Checkpoint
	for _, c := range f.ckpts {
		if c.Status == CheckpointCompleted && (last == nil || c.ID > last.ID) {
			last = c
		}
	}
	if last != nil {
		v := last.view(nowMS)
		j.LastCheckpoint = &v
	}
	return j
}

// Figures returns every replica's newest task figures, by task, from
// reports no older than reportTTL ms, and when each was measured.
func (f *Fold) Figures(nowMS, reportTTL int64) map[control.TaskID]Figures {
	out := map[control.TaskID]Figures{}
	for _, rep := range f.reports {
		if nowMS-rep.TS > reportTTL || (f.gen != nil && rep.Gen != f.gen.Gen) {
			continue
		}
		for _, t := range rep.Tasks {
			if old, ok := out[t.Task]; !ok || old.ReportedMS < rep.TS {
				out[t.Task] = Figures{TaskFigures: t, Replica: rep.Replica, ReportedMS: rep.TS}
			}
		}
	}
	return out
}

// Figures are a task's figures as its replica last reported them.
type Figures struct {
	control.TaskFigures
	Replica    string `json:"replica"`
	ReportedMS int64  `json:"reported_ms"`
}

// Generation returns the newest generation record, or nil.
func (f *Fold) Generation() *control.Generation { return f.gen }
