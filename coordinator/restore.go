package coordinator

import (
	"fmt"
	"slices"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
)

// Restore rebuilds a core from the job's durable history, at time now
// (event sourcing, DESIGN.md section 4). history is, in order:
//
//   - every record of the commit topic (Generation, Complete, Failed,
//     Resumed);
//   - then the newest committed record of the trigger topic (Trigger or
//     Abort), if any: IDs of checkpoints that were triggered but never
//     completed are never used again;
//   - then, optionally, the acks read after it (Ack; Decline records are
//     skipped, their effect is the Abort record that follows them);
//   - and, anywhere after their Complete records, the _metadata objects
//     (Metadata) of retained checkpoints, as MetadataRead gives them.
//
// Any longer stretch of the records in the order the core produced them
// (every Trigger and Abort too) is accepted as well and rebuilds the
// pending checkpoints exactly; the tests use that to show that a rebuilt
// core equals the original.
//
// The rebuilt core has the generation, assignment, completed checkpoints
// (retention applied), highest checkpoint ID, failure count and pending
// checkpoints the records imply. It does not repeat the work of the
// coordinator that wrote them: its Ready starts empty, so a _metadata write
// or a discard in flight at the crash is not asked for again (garbage
// collection of unreferenced files covers it). Its owner's next step is an
// Assign: a new coordinator always starts a new generation, which aborts
// whatever was pending.
func Restore(cfg Config, now time.Time, history []control.Message) (*Core, error) {
	c, err := New(cfg, now)
	if err != nil {
		return nil, err
	}
	for i, m := range history {
		if err := control.Validate(m); err != nil {
			return nil, fmt.Errorf("%w: record %d: %w", ErrHistory, i, err)
		}
		switch r := m.(type) {
		case control.Generation:
			if r.Gen <= c.gen {
				return nil, fmt.Errorf("%w: record %d: generation %d after generation %d", ErrHistory, i, r.Gen, c.gen)
			}
			c.applyGeneration(r)
		case control.Complete:
			c.applyComplete(r)
		case control.Trigger:
			c.applyTrigger(r)
		case control.Abort:
			c.applyAbort(r)
		case control.Failed:
			if r.Gen != c.gen {
				return nil, fmt.Errorf("%w: record %d: failure of generation %d in generation %d", ErrHistory, i, r.Gen, c.gen)
			}
			c.applyFailed(r)
		case control.Stopped:
			if r.Gen != c.gen {
				return nil, fmt.Errorf("%w: record %d: stop of generation %d in generation %d", ErrHistory, i, r.Gen, c.gen)
			}
			c.applyStopped(r)
		case control.Resumed:
			if (c.failed == nil || c.failed.Gen != r.Gen) && (c.stopped == nil || c.stopped.Gen != r.Gen) {
				return nil, fmt.Errorf("%w: record %d: resume of generation %d, which neither failed nor stopped", ErrHistory, i, r.Gen)
			}
			c.applyResumed(r)
		case control.Ack:
			c.ack(r)
		case control.Metadata:
			c.applyMetadata(r)
		case control.Decline, control.Failure:
		default:
			return nil, fmt.Errorf("%w: record %d: a %s is no control-topic record", ErrHistory, i, m.Type())
		}
	}
	c.restartDue = false
	c.out = Ready{}
	return c, nil
}

// The apply functions below are the only code that changes durable state.
// Live decisions and Restore both go through them, record by record.

func (c *Core) bumpID(id ckpt.ID) { c.lastID = max(c.lastID, id) }

// applyTrigger creates the pending checkpoint of a Trigger record.
func (c *Core) applyTrigger(r control.Trigger) {
	if r.ID <= c.lastID {
		return // already known: completed or aborted (replay only)
	}
	c.bumpID(r.ID)
	if r.Gen != c.gen || len(c.tasks) == 0 || c.phase == phaseWaiting || c.phase == phaseStopped {
		return // of another generation: only the ID counts
	}
	if c.phase == phaseStarting { // a trigger means every task ran (replay only)
		c.phase, c.notRunning, c.waitingFor = phaseRunning, nil, 0
	}
	ts := time.UnixMilli(r.TS)
	c.pending = append(c.pending, &pending{
		id: r.ID, gen: r.Gen, kind: r.Kind, target: r.Target, ts: ts,
		deadline: ts.Add(c.cfg.Timeout), acks: make([]taskAck, len(c.tasks)), remaining: len(c.tasks),
	})
	if r.Kind == ckpt.KindCheckpoint {
		c.nextTrigger, c.scheduled = ts.Add(c.cfg.Interval), true
	}
}

// applyAbort removes the pending checkpoint of an Abort record and reports
// whether the abort counted as a failure.
func (c *Core) applyAbort(r control.Abort) bool {
	c.bumpID(max(r.ID, r.Last))
	if r.Gen != c.gen {
		return false
	}
	i := slices.IndexFunc(c.pending, func(p *pending) bool { return p.id == r.ID })
	if i < 0 {
		return false
	}
	p := c.pending[i]
	c.pending = slices.Delete(c.pending, i, i+1)
	c.remember(finished{id: r.ID})
	// Like Flink's CheckpointFailureManager: only periodic checkpoints newer
	// than the last completed one count.
	if r.Reason.CountsAsFailure() && p.kind == ckpt.KindCheckpoint && p.id > c.lastCompleted {
		c.failures++
		return true
	}
	return false
}

func (c *Core) remember(f finished) {
	if len(c.recent) == recentSize {
		c.recent = slices.Delete(c.recent, 0, 1)
	}
	c.recent = append(c.recent, f)
}

// applyComplete records a completed checkpoint and returns the completed
// checkpoints it releases.
func (c *Core) applyComplete(r control.Complete) []completed {
	c.bumpID(r.ID)
	k := completed{id: r.ID, gen: r.Gen, kind: r.Kind, target: r.Target, ts: time.UnixMilli(r.TS), metadata: r.Metadata}
	if i := slices.IndexFunc(c.pending, func(p *pending) bool { return p.id == r.ID }); i >= 0 {
		p := c.pending[i]
		c.pending = slices.Delete(c.pending, i, i+1)
		var ps []control.Position
		for _, a := range p.acks {
			ps = append(ps, a.shuffle...)
		}
		k.shuffle, k.known = lowest(ps), true
	}
	i, _ := slices.BinarySearchFunc(c.completed, r.ID, func(k completed, id ckpt.ID) int {
		switch {
		case k.id < id:
			return -1
		case k.id > id:
			return 1
		}
		return 0
	})
	c.completed = slices.Insert(c.completed, i, k)
	c.lastCompleted = max(c.lastCompleted, r.ID)
	c.restore = nil // the job's own checkpoints are the restore point from now on
	c.failures = 0
	c.lastCompletion = k.ts
	if r.Gen == c.gen {
		c.remember(finished{id: r.ID, completed: true})
	}
	// Every savepoint, of any generation: a late ack or _metadata report
	// naming one must never discard what a person keeps, also once the
	// savepoint is older than every retained checkpoint (retain forgets
	// it there) and its generation is over. Savepoints are few.
	if r.Kind.IsSavepoint() && !slices.Contains(c.savepoints, r.ID) {
		c.savepoints = append(c.savepoints, r.ID)
	}
	return c.retain()
}

// retain releases the oldest periodic checkpoints beyond cfg.Retained and
// forgets savepoints older than every retained checkpoint. A savepoint is
// never released (it belongs to the person who asked for it), and the
// newest completed checkpoint, the restore point, is always retained.
func (c *Core) retain() []completed {
	n := 0
	for _, k := range c.completed {
		if k.kind == ckpt.KindCheckpoint {
			n++
		}
	}
	var released []completed
	kept := c.completed[:0]
	var oldestKept ckpt.ID
	for _, k := range c.completed {
		if k.kind == ckpt.KindCheckpoint && n > c.cfg.Retained {
			released = append(released, k)
			n--
			continue
		}
		if k.kind == ckpt.KindCheckpoint && oldestKept == 0 {
			oldestKept = k.id
		}
		kept = append(kept, k)
	}
	c.completed = slices.DeleteFunc(kept, func(k completed) bool {
		return k.kind != ckpt.KindCheckpoint && oldestKept != 0 && k.id < oldestKept
	})
	return released
}

// applyFailed stops the job: a Failed record.
func (c *Core) applyFailed(r control.Failed) {
	c.failed = &r
	c.phase = phaseFailed
	c.scheduled = false
	c.notRunning, c.waitingFor = nil, 0
}

// applyStopped stops the job on purpose: a Stopped record. Nothing is
// triggered or assigned until a Resumed record.
func (c *Core) applyStopped(r control.Stopped) {
	c.stopped = &r
	c.phase = phaseStopped
	c.scheduled = false
	c.pending = nil
	c.notRunning, c.waitingFor = nil, 0
}

// applyResumed clears the failure or the stop and adds the records to
// skip: the next Assign starts a new generation.
func (c *Core) applyResumed(r control.Resumed) {
	c.failed = nil
	c.stopped = nil
	c.phase = phaseWaiting
	for _, p := range r.Skip {
		if i, found := slices.BinarySearchFunc(c.skip, p, control.Position.Compare); !found {
			c.skip = slices.Insert(c.skip, i, p)
		}
	}
}

// applyGeneration starts the generation of a Generation record.
func (c *Core) applyGeneration(r control.Generation) {
	tasks, _ := r.Assignment.Tasks() // validated by the caller
	c.gen = r.Gen
	c.assignment = r.Assignment
	c.fingerprint = r.Fingerprint
	c.tasks = tasks
	c.index = make(map[control.TaskID]int, len(tasks))
	for i, t := range tasks {
		c.index[t] = i
	}
	c.pending = nil
	c.recent = nil
	c.failures = 0
	c.bumpID(r.RestoreFrom)
	c.restore = nil
	if r.RestoreLocation != "" {
		c.restore = &RestorePoint{ID: r.RestoreFrom, Metadata: r.RestoreMetadata, Location: r.RestoreLocation}
	}
	c.honour(r)
	c.skip = slices.Clone(r.Skip)
	c.failed = nil
	c.stopped = nil
	c.phase = phaseStarting
	c.notRunning = make([]bool, len(tasks))
	for i := range c.notRunning {
		c.notRunning[i] = true
	}
	c.waitingFor = len(tasks)
	c.scheduled = false
}

// honour records the --restore-from value generation r restored, if any.
func (c *Core) honour(r control.Generation) {
	if r.RestoreRequest == "" {
		return
	}
	if c.honoured == nil {
		c.honoured = map[string]uint64{}
	}
	c.honoured[r.RestoreRequest] = r.Gen
}
