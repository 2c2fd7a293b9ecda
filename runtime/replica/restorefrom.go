package replica

import (
	"context"
	"errors"
	"fmt"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/coordinator"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/state/objstore"
)

// This file is the replica's side of `processor run --restore-from`
// (Options.RestoreFrom): a restore point a person chose, honoured once.
//
// The rule. A replica's value is pending from its start until a
// generation record arrives: if that generation restores the value
// (control.Generation.RestoreRequest), the value is honoured; if it does
// not, the value is dropped, with a warning. Only the coordinator replica
// acts on its value: it hands it to the core with the assignment
// (coordinator.Assign.Restore), so the first generation it starts after
// its start restores it. So when replicas disagree, the coordinator's
// value wins and every other replica's is dropped by the generation that
// follows its join; a replica that joins a running job with a value does
// not roll it back later, when it becomes the coordinator. A value that a
// generation of the job's history restored already is ignored from the
// start (honoured once), and logged as such: a pod restarted with the
// Helm value still set resumes from the job's newest checkpoint. A value
// with another fragment (#2) is another request.
//
// A pending value overrides a stop or a permanent failure of the job: its
// coordinator starts it again (a resumed record, then the generation), as
// `processor resume` would. Before it joins, and as coordinator before it
// places tasks, the replica compares its job with the restore point's
// schema instead of the newest checkpoint's (compat.go), and refuses as
// for a checkpoint. A location that holds no restore point is a permanent
// error: `run` exits, naming it.

// restoreRequest is this replica's --restore-from value. Owned by Run's
// goroutine.
type restoreRequest struct {
	src checkpoint.Source
	// pending: neither honoured nor dropped yet.
	pending bool
	// since is the commit topic's end at this replica's first session
	// (-1 before it): a generation record at or after it came after the
	// replica's start, and decides the value as one read live does.
	since int64
	// point is the restore point, opened while pending.
	point *checkpoint.Point
}

// restorePending returns the replica's pending restore point, or nil.
func (r *Replica) restorePending() *restoreRequest {
	if r.restoreReq == nil || !r.restoreReq.pending {
		return nil
	}
	return r.restoreReq
}

// noteRestoreHistory decides, from the commit topic's records at the
// start of a session (end is where they end), whether the value is still
// pending: a generation that restored it already makes it honoured. The
// records before this replica's start do not drop it; a generation record
// written since (one a session that ended did not read) does, as one read
// live.
func (r *Replica) noteRestoreHistory(recs []controltopic.Record, end int64) {
	q := r.restoreReq
	if q == nil || !q.pending {
		return
	}
	if q.since < 0 {
		q.since = end
	}
	for _, rec := range recs {
		g, ok := rec.Msg.(control.Generation)
		if ok && rec.Offset >= q.since {
			r.noteRestoreGeneration(g)
			return
		}
		if ok && g.RestoreRequest == q.src.Request {
			q.pending = false
			r.closeRestorePoint()
			r.log.Info("--restore-from ignored: generation "+fmt.Sprint(g.Gen)+" restored it already (honoured once); the job resumes from its newest checkpoint",
				"restore_from", q.src.Request, "generation", g.Gen, "commit_topic", r.topics.Commit, "offset", rec.Offset)
			return
		}
	}
}

// noteRestoreGeneration follows a generation record read while the value
// is pending: it honours the value, or drops it.
func (r *Replica) noteRestoreGeneration(g control.Generation) {
	q := r.restorePending()
	if q == nil {
		return
	}
	q.pending = false
	r.closeRestorePoint()
	if g.RestoreRequest == q.src.Request {
		r.log.Info("--restore-from honoured: the generation restores it", "restore_from", q.src.Request,
			"generation", g.Gen, "checkpoint_id", g.RestoreFrom)
		return
	}
	r.log.Warn("--restore-from dropped: a generation started without it (the coordinator replica's value, if any, decides; give every replica the same value)",
		"restore_from", q.src.Request, "generation", g.Gen, "generation_restore_request", g.RestoreRequest, "restore_from_checkpoint", g.RestoreFrom)
}

// openRestorePoint opens the pending value's restore point, once. A
// location that holds none is a permanent error.
func (r *Replica) openRestorePoint(ctx context.Context) error {
	q := r.restorePending()
	if q == nil || q.point != nil {
		return nil
	}
	p, err := checkpoint.OpenSource(ctx, q.src.Location, objstore.Options{Logger: r.log})
	if errors.Is(err, checkpoint.ErrNotRestorePoint) || errors.Is(err, objstore.ErrPermanent) {
		return permanent{err}
	}
	if err != nil {
		return err
	}
	q.point = p
	r.pendingRestore.Store(&q.src.Request)
	r.log.Info("--restore-from: the job restores this point at its next generation", "restore_from", q.src.Request,
		"checkpoint_id", p.Metadata.ID, "kind", p.Metadata.Kind, "metadata", p.Key)
	return nil
}

func (r *Replica) closeRestorePoint() {
	r.pendingRestore.Store(nil)
	if q := r.restoreReq; q != nil && q.point != nil {
		_ = q.point.Store.Close()
		q.point = nil
	}
}

// PendingRestore returns this replica's --restore-from value while it is
// pending and its restore point was found, or "". Safe from any
// goroutine: /readyz reports a replica of a stopped or failed job with a
// pending value ready (waiting), so that a rolling update that sets the
// value goes on to the next pod, until a replica with it holds the
// coordinator role and starts the job.
func (r *Replica) PendingRestore() string {
	if p := r.pendingRestore.Load(); p != nil {
		return *p
	}
	return ""
}

// assignRestore is the pending restore point as the core takes it, or
// nil.
func (r *Replica) assignRestore() *coordinator.RestorePoint {
	q := r.restorePending()
	if q == nil || q.point == nil {
		return nil
	}
	return &coordinator.RestorePoint{ID: q.point.Metadata.ID, Metadata: q.point.Key, Location: q.src.Location, Request: q.src.Request}
}

// restoreSource returns the opened restore point of a generation that
// restores a location (control.Generation.RestoreLocation), opening it
// once per location: every task of the generation reads it.
func (r *Replica) restoreSource(ctx context.Context, location string) (*checkpoint.Point, error) {
	if p, ok := r.sources[location]; ok {
		return p, nil
	}
	p, err := checkpoint.OpenSource(ctx, location, objstore.Options{Logger: r.log})
	if err != nil {
		return nil, err
	}
	if r.sources == nil {
		r.sources = map[string]*checkpoint.Point{}
	}
	r.sources[location] = p
	return p, nil
}

// closeSources closes the restore points opened for generations.
func (r *Replica) closeSources() {
	for loc, p := range r.sources {
		_ = p.Store.Close()
		delete(r.sources, loc)
	}
}
