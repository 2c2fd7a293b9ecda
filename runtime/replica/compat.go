package replica

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/compat"
	"github.com/weir-stream/weir/control"
	kafkasink "github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/plan"
	"github.com/weir-stream/weir/state/objstore"
)

// This file is the replica's side of the compatibility check (package
// compat): before it joins the group, and as coordinator before it places
// tasks, a replica compares its job's state schema with the one recorded
// by the checkpoint a new generation would restore (the newest completed
// one). A replica whose job cannot restore it refuses: it does not join,
// writes nothing, and says why in its log, /readyz and
// weir_replica_job_refused, so that under a rolling update the replicas of
// the previous job file keep running (docs/operations.md, "Upgrading a
// job").

// refusedRecheck is how often a refusing replica compares its job with the
// newest checkpoint again.
const refusedRecheck = 30 * time.Second

// RefusedError is a replica that will not run its job against the job's
// newest checkpoint.
type RefusedError struct {
	Checkpoint ckpt.ID
	Err        error // a *compat.IncompatibleError, or why the schema could not be read
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("this replica's job file is refused: %v", e.Err)
}

func (e *RefusedError) Unwrap() error { return e.Err }

// restoreCheck is what a replica knows of the newest completed checkpoint
// and of its last comparison with it. Owned by Run's goroutine, but for
// refused, which /readyz reads.
type restoreCheck struct {
	newest  *control.Complete // the newest completed checkpoint seen
	checked ckpt.ID           // the checkpoint last compared (0: none)
	// checkedAt is the --restore-from location of the checkpoint last
	// compared, "" for one of the job's own.
	checkedAt string
	schema    *compat.Schema // the job's schema it was compared with
	result    compat.Result
	refused   atomic.Pointer[RefusedError]
}

// Refused returns why this replica refuses to run its job, or nil. Safe
// for use by any goroutine.
func (r *Replica) Refused() *RefusedError { return r.check.refused.Load() }

// schemaOf is the job's state schema under plan p, as the checkpoints of
// a generation of p record it.
func (r *Replica) schemaOf(p *plan.Plan) *compat.Schema {
	s := p.Schema(r.opts.Job, r.opts.Fingerprint, kafkasink.TxnIDPrefix(r.cfg.Kafka.TopicPrefix))
	return &s
}

// noteComplete records a completed checkpoint read from the commit topic.
func (r *Replica) noteComplete(c control.Complete) {
	if n := r.check.newest; n == nil || c.ID > n.ID {
		r.check.newest = &c
		r.met.lastCompletedTime.Set(float64(c.TS) / 1000)
	}
}

// checkRestore compares the job's schema sch with the newest completed
// checkpoint's (once per checkpoint and schema) and returns a
// *RefusedError if the job must not restore it. Compatible differences
// are logged once.
//
// With a pending --restore-from, the checkpoint the next generation
// restores is that restore point, and the job is compared with its
// schema instead.
func (r *Replica) checkRestore(ctx context.Context, sch *compat.Schema) error {
	if q := r.restorePending(); q != nil && q.point != nil {
		md := q.point.Metadata
		if md.ID != r.check.checked || r.check.checkedAt != q.src.Location || !reflect.DeepEqual(sch, r.check.schema) {
			res := compat.Compare(md.ID, md.Schema, sch)
			r.check.checked, r.check.checkedAt, r.check.schema, r.check.result = md.ID, q.src.Location, sch, res
			r.logCompare(res)
		}
		if err := r.check.result.Err(r.cfg.Process.AllowNonRestoredState); err != nil {
			return &RefusedError{Checkpoint: md.ID, Err: fmt.Errorf("--restore-from %s: %w", q.src.Request, err)}
		}
		return nil
	}
	n := r.check.newest
	if n == nil {
		return nil // nothing to restore: the job starts from its sources
	}
	if n.ID != r.check.checked || r.check.checkedAt != "" || !reflect.DeepEqual(sch, r.check.schema) {
		res, err := r.compare(ctx, n, sch)
		if err != nil {
			return err // the object store: retried
		}
		r.check.checked, r.check.checkedAt, r.check.schema, r.check.result = n.ID, "", sch, res
		r.logCompare(res)
	}
	if err := r.check.result.Err(r.cfg.Process.AllowNonRestoredState); err != nil {
		return &RefusedError{Checkpoint: n.ID, Err: err}
	}
	return nil
}

// compare reads the metadata of checkpoint c and compares its schema with
// the job's.
func (r *Replica) compare(ctx context.Context, c *control.Complete, sch *compat.Schema) (compat.Result, error) {
	md, err := checkpoint.ReadCompleted(ctx, r.store, *c)
	if errors.Is(err, objstore.ErrNotFound) {
		// A completed checkpoint without its metadata: the object store
		// was changed under the job (checkpoint.storage), and no
		// generation could restore it either.
		return compat.Result{}, fmt.Errorf("checkpoint %d: %w (checkpoint.storage %s)", c.ID, err, r.cfg.Checkpoint.Storage)
	}
	if err != nil {
		return compat.Result{}, fmt.Errorf("checkpoint %d: %w", c.ID, err)
	}
	return compat.Compare(c.ID, md.Schema, sch), nil
}

// restoreNames returns where generation g's checkpoint holds the state
// of the job's operators and stages an edit renamed (compat.Result's
// StateNames and StageNames: a derived operator renamed by an edit
// continues the state of the one defined as it, a stage named after it
// keeps its name): the comparison checkRestore made, if it was with that
// checkpoint, else one made now with the checkpoint's recorded schema.
// The names depend only on the job's operators and stages, not on the
// plan's task counts.
func (r *Replica) restoreNames(ctx context.Context, g control.Generation) (compat.Result, error) {
	if g.RestoreFrom == 0 {
		return compat.Result{}, nil
	}
	if r.check.checked == g.RestoreFrom && r.check.checkedAt == g.RestoreLocation {
		return r.check.result, nil
	}
	store := r.store
	if g.RestoreLocation != "" {
		p, err := r.restoreSource(ctx, g.RestoreLocation)
		if err != nil {
			return compat.Result{}, err
		}
		store = p.Store
	}
	md, err := checkpoint.ReadRestore(ctx, store, g.RestoreFrom, g.RestoreMetadata)
	if err != nil {
		return compat.Result{}, fmt.Errorf("checkpoint %d: %w", g.RestoreFrom, err)
	}
	return compat.Compare(g.RestoreFrom, md.Schema, r.schemaOf(r.plan)), nil
}

// samePlanNames reports whether plan p runs its stages under names (the
// job's stage name → the name it runs under, compat.Result.StageNames).
func samePlanNames(p *plan.Plan, names map[string]string) bool {
	for _, st := range p.Stages {
		want := names[st.JobName()]
		if want == "" {
			want = st.JobName()
		}
		if st.Name != want {
			return false
		}
	}
	return true
}

// logCompare logs what a comparison found: the compatible differences at
// Info (a new operator starts empty), state dropped under
// --allow-non-restored-state at Warn. A refusal is logged by the caller.
func (r *Replica) logCompare(res compat.Result) {
	if res.Unchecked {
		r.log.Warn("the checkpoint records no state schema (taken by a version of Weir before schemas): it is restored without a compatibility check", "checkpoint_id", res.Checkpoint)
		return
	}
	if !res.Allowed(r.cfg.Process.AllowNonRestoredState) {
		return
	}
	for _, d := range res.Differences {
		switch d.Level {
		case compat.Compatible:
			r.log.Info("job changed since the checkpoint: "+d.String(), "checkpoint_id", res.Checkpoint)
		case compat.Drops:
			r.log.Warn("state of the checkpoint not restored (process.allow_non_restored_state): "+d.String(), "checkpoint_id", res.Checkpoint)
		}
	}
}

// setRefused publishes (or clears, with nil) the replica's refusal, and
// logs a new one.
func (r *Replica) setRefused(e *RefusedError) {
	old := r.check.refused.Swap(e)
	if e == nil {
		r.met.refused.Set(0)
		if old != nil {
			r.log.Info("the job file runs again: no longer refused")
		}
		return
	}
	r.met.refused.Set(1)
	if old == nil || old.Error() != e.Error() {
		r.log.Error("refusing to run this job file: it is not compatible with the job's newest checkpoint; this replica takes no task and writes nothing, the others go on",
			"checkpoint_id", e.Checkpoint, "err", e.Err)
	}
}
