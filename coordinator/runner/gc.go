package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/coordinator"
	"github.com/weir-stream/weir/internal/retry"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
)

// Discarder keeps the job's object store down to what its checkpoints need
// (DESIGN.md section 7: the shared-file registry and garbage collection).
//
// Run calls Rebuild, Register, Discard and CollectGarbage from one goroutine,
// in the order their records became durable: Rebuild first in every
// coordinator term, then Register for each completed checkpoint before any
// Discard that the completion decided, and CollectGarbage after each
// generation the term starts. Run calls Clock from its own goroutine, before
// it appends a Generation record.
type Discarder interface {
	// Rebuild forgets what an earlier term registered and registers every
	// given completed checkpoint and savepoint, as Register does.
	Rebuild(ctx context.Context, completed []control.Complete) error
	// Register records completed checkpoint c, so that nothing it refers to
	// is deleted while it is retained; a savepoint is never released.
	Register(ctx context.Context, c control.Complete) error
	// Discard deletes the state d names: a released checkpoint, or what an
	// aborted checkpoint or a refused ack left under chk-<n>/.
	Discard(ctx context.Context, d coordinator.Discard) (state.Deleted, error)
	// Clock returns the object store's current time (state.StoreTime).
	Clock(ctx context.Context) (time.Time, error)
	// CollectGarbage deletes every object that no registered checkpoint
	// refers to and that was written before olderThan (a Clock reading),
	// and everything under chk-<n>/ of unregistered checkpoints n <=
	// deadUpTo (state.Registry.CollectGarbage), and every folder under
	// savepoints/ without a _metadata and with nothing written since
	// olderThan.
	CollectGarbage(ctx context.Context, olderThan time.Time, deadUpTo ckpt.ID) (state.Deleted, error)
}

// ObjectStoreGC is the Discarder of a job's object store: a state.Registry
// of the retained checkpoints and of every savepoint. It is used by one
// goroutine, except Clock, which is safe to call from any.
type ObjectStoreGC struct {
	store *objstore.Store
	log   *slog.Logger
	reg   *state.Registry
	// savepoints are the registered savepoints: never released.
	savepoints map[ckpt.ID]bool
}

// NewObjectStoreGC returns the Discarder of store.
func NewObjectStoreGC(store *objstore.Store, logger *slog.Logger) *ObjectStoreGC {
	return &ObjectStoreGC{store: store, log: logger.With("component", "gc"),
		reg: state.NewRegistry(store, logger), savepoints: map[ckpt.ID]bool{}}
}

// Rebuild implements Discarder.
func (g *ObjectStoreGC) Rebuild(ctx context.Context, completed []control.Complete) error {
	g.reg = state.NewRegistry(g.store, g.log)
	g.savepoints = map[ckpt.ID]bool{}
	for _, c := range completed {
		if err := g.Register(ctx, c); err != nil {
			return err
		}
	}
	g.log.Info("shared-file registry rebuilt", "checkpoints", len(g.reg.Retained()), "savepoints", len(g.savepoints))
	return nil
}

// Register implements Discarder: it reads c's _metadata and the task
// manifests it names. A savepoint whose objects a person deleted is skipped.
func (g *ObjectStoreGC) Register(ctx context.Context, c control.Complete) error {
	id := c.ID
	err := g.register(ctx, c)
	if err != nil && c.Kind.IsSavepoint() && errors.Is(err, objstore.ErrNotFound) {
		g.log.Warn("savepoint is gone; nothing of it is kept", "checkpoint_id", id, "metadata", c.Metadata, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("register checkpoint %d: %w", id, err)
	}
	if c.Kind.IsSavepoint() {
		g.savepoints[id] = true
	}
	return nil
}

func (g *ObjectStoreGC) register(ctx context.Context, c control.Complete) error {
	md, err := checkpoint.ReadCompleted(ctx, g.store, c)
	if err != nil {
		return err
	}
	handles := make([]string, len(md.Tasks))
	for i, ts := range md.Tasks {
		handles[i] = ts.Handle
	}
	return g.reg.Register(ctx, c.ID, handles)
}

// Discard implements Discarder. A released checkpoint goes with every
// shared file no retained checkpoint refers to. For an aborted checkpoint
// or a refused ack it deletes only what lies under chk-<n>/ (manifests, the
// files only that snapshot used, an orphaned _metadata): shared files it
// uploaded may be reused by a snapshot still in progress, so they are left
// to the task that uploaded them and to CollectGarbage. For an aborted
// savepoint it deletes each named task's manifest and folder under
// savepoints/<name>/ (and the _metadata if named), unless the savepoint
// has a _metadata the discard does not name.
func (g *ObjectStoreGC) Discard(ctx context.Context, d coordinator.Discard) (state.Deleted, error) {
	id := d.ID
	if d.Reason == coordinator.DiscardReleased {
		if g.savepoints[id] {
			return state.Deleted{}, fmt.Errorf("checkpoint %d is a savepoint: never released", id)
		}
		return g.reg.Release(ctx, id)
	}
	var del state.Deleted
	if g.reg.Registered(id) {
		return del, nil // completed after all: it keeps everything
	}
	// One listing of chk-<n>/ serves every handle; a savepoint's objects
	// and _metadata lie under savepoints/<name>/, listed once per name.
	var prefixes, lists []string
	var errs []error
	listChk := d.Metadata == objstore.MetadataKey(id)
	for _, h := range d.Handles {
		if name, task, ok := savepointHandle(h); ok {
			// A task snapshot of an aborted savepoint: its manifest and
			// its folder savepoints/<name>/<task>/. Kept if the savepoint
			// has a _metadata this discard does not name: the folder then
			// belongs to a savepoint that may exist (DESIGN.md invariant
			// 3), whatever this discard says.
			md := objstore.SavepointMetadataKey(name)
			if d.Metadata != md {
				if _, err := g.store.Stat(ctx, md); !errors.Is(err, objstore.ErrNotFound) {
					errs = append(errs, fmt.Errorf("discard checkpoint %d: %s kept: savepoint %s has a _metadata (%v)", id, h, name, err))
					continue
				}
			}
			prefixes = append(prefixes, objstore.SavepointPrefix(name)+task+"/", h)
			if !slices.Contains(lists, objstore.SavepointPrefix(name)) {
				lists = append(lists, objstore.SavepointPrefix(name))
			}
			continue
		}
		n, ok := objstore.ParseCheckpointKey(h)
		task, isManifest := strings.CutSuffix(h, ".manifest")
		if !ok || n != id || !isManifest {
			return del, fmt.Errorf("discard checkpoint %d: handle %q is no task manifest of it", id, h)
		}
		prefixes = append(prefixes, task+"/", h)
		listChk = true
	}
	if listChk {
		lists = append(lists, objstore.CheckpointPrefix(id))
	}
	if d.Metadata != "" {
		if d.Metadata != objstore.MetadataKey(id) {
			if !strings.HasPrefix(d.Metadata, "savepoints/") || !strings.HasSuffix(d.Metadata, "/_metadata") {
				return del, fmt.Errorf("discard checkpoint %d: %q is no metadata object", id, d.Metadata)
			}
			if !slices.ContainsFunc(lists, func(l string) bool { return strings.HasPrefix(d.Metadata, l) }) {
				lists = append(lists, d.Metadata)
			}
		}
		prefixes = append(prefixes, d.Metadata)
	}
	var victims []objstore.Object
	for _, l := range lists {
		objs, err := g.store.List(ctx, l)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		victims = append(victims, slices.DeleteFunc(objs, func(o objstore.Object) bool {
			return !slices.ContainsFunc(prefixes, func(p string) bool {
				// A prefix ending in / names a directory; any other, one
				// key (not a longer key that merely starts with it).
				return o.Key == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(o.Key, p))
			})
		})...)
	}
	errs = append(errs, g.deleteObjects(ctx, victims, &del)...)
	return del, errors.Join(errs...)
}

// deleteObjects deletes victims, adding each deleted object's key and
// size to del and counting the failures, whose errors it returns.
func (g *ObjectStoreGC) deleteObjects(ctx context.Context, victims []objstore.Object, del *state.Deleted) []error {
	keys := make([]string, len(victims))
	for i, o := range victims {
		keys[i] = o.Key
	}
	var errs []error
	for i, err := range g.store.DeleteEach(ctx, keys) {
		if err != nil {
			del.Failed++
			errs = append(errs, err)
			continue
		}
		del.Keys = append(del.Keys, victims[i].Key)
		del.Bytes += victims[i].Size
	}
	return errs
}

// savepointHandle returns the savepoint name and task of a savepoint's
// task manifest key, savepoints/<name>/<task>.manifest.
func savepointHandle(h string) (name, task string, ok bool) {
	rest, ok := strings.CutPrefix(h, "savepoints/")
	if !ok {
		return "", "", false
	}
	name, file, ok := strings.Cut(rest, "/")
	if !ok {
		return "", "", false
	}
	task, ok = strings.CutSuffix(file, ".manifest")
	if !ok || objstore.ValidName("savepoint", name) != nil || objstore.ValidName("task", task) != nil ||
		h != objstore.SavepointManifestKey(name, task) {
		return "", "", false
	}
	return name, task, true
}

// Clock implements Discarder.
func (g *ObjectStoreGC) Clock(ctx context.Context) (time.Time, error) {
	return state.StoreTime(ctx, g.store)
}

// CollectGarbage implements Discarder: state.Registry.CollectGarbage for
// shared/ and chk-*/, and collectSavepoints for savepoints/.
func (g *ObjectStoreGC) CollectGarbage(ctx context.Context, olderThan time.Time, deadUpTo ckpt.ID) (state.Deleted, error) {
	del, err := g.reg.CollectGarbage(ctx, olderThan, deadUpTo)
	sp, spErr := g.collectSavepoints(ctx, olderThan)
	del.Keys = append(del.Keys, sp.Keys...)
	del.Bytes += sp.Bytes
	del.Failed += sp.Failed
	return del, errors.Join(err, spErr)
}

// collectSavepoints deletes every folder savepoints/<name>/ that holds no
// _metadata and nothing written since olderThan: what a savepoint that
// never completed left when its tasks could not delete their copies (a
// replica killed, or a generation that ended, while they uploaded; the
// new coordinator does not know the acks of the one before). Such a
// folder is no savepoint (DESIGN.md invariant 3; processor savepoints
// delete removes the _metadata first), and a savepoint being taken after
// the generation started writes after olderThan.
func (g *ObjectStoreGC) collectSavepoints(ctx context.Context, olderThan time.Time) (state.Deleted, error) {
	var del state.Deleted
	objs, err := g.store.List(ctx, "savepoints/")
	if err != nil {
		return del, err
	}
	keep := map[string]bool{}
	for _, o := range objs {
		name, _, ok := strings.Cut(strings.TrimPrefix(o.Key, "savepoints/"), "/")
		if !ok || o.Key == objstore.SavepointMetadataKey(name) || !o.ModTime.Before(olderThan) {
			keep[name] = true
		}
	}
	var victims []objstore.Object
	for _, o := range objs {
		name, _, _ := strings.Cut(strings.TrimPrefix(o.Key, "savepoints/"), "/")
		if !keep[name] {
			victims = append(victims, o)
		}
	}
	errs := g.deleteObjects(ctx, victims, &del)
	if len(del.Keys) > 0 {
		g.log.Info("deleted what savepoints that never completed left", "objects", len(del.Keys), "bytes", del.Bytes)
	}
	return del, errors.Join(errs...)
}

// gcKind says what a gcWork item is.
type gcKind uint8

const (
	gcRebuild gcKind = iota
	gcRegister
	gcDiscard
	gcCollect
)

// gcWork is one item of the gc goroutine's work.
type gcWork struct {
	kind      gcKind
	completed []control.Complete // gcRebuild: every checkpoint to keep; gcRegister: one
	discard   coordinator.Discard
	// gcCollect: the object store's time before the generation, and the
	// highest checkpoint ID triggered before it.
	olderThan time.Time
	deadUpTo  ckpt.ID
}

// gcQueue hands work from Run's goroutine to the gc goroutine. It has no
// bound, so that Run never waits for the object store and never drops a
// registration: items are small and come once per checkpoint. The core
// keeps it short instead: it counts the discards queued or running (the gc
// backlog), and the core triggers no periodic checkpoint while that count
// exceeds max_concurrent (coordinator.GCBacklog).
type gcQueue struct {
	mu     sync.Mutex
	items  []gcWork
	closed bool // no more items: pop returns false once empty
	// discards counts the gcDiscard items pushed and not finished.
	discards int
	wake     chan struct{}
	// progress is signalled when a discard finishes, so that Run tells the
	// core at once rather than at its next tick.
	progress chan struct{}
	// backlog is the process's weir_checkpoint_gc_backlog: the queue of a
	// term that ended may still drain beside the next term's.
	backlog prometheus.Gauge
}

func newGCQueue(backlog prometheus.Gauge) *gcQueue {
	return &gcQueue{wake: make(chan struct{}, 1), progress: make(chan struct{}, 1), backlog: backlog}
}

func (q *gcQueue) push(w gcWork) {
	q.mu.Lock()
	q.items = append(q.items, w)
	if w.kind == gcDiscard {
		q.discards++
		q.backlog.Inc()
	}
	q.mu.Unlock()
	signal(q.wake)
}

// pending returns the number of discards queued or running.
func (q *gcQueue) pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.discards
}

// discarded counts one discard as finished.
func (q *gcQueue) discarded() {
	q.mu.Lock()
	q.discards--
	q.backlog.Dec()
	q.mu.Unlock()
	signal(q.progress)
}

// abandon drops what the queue still holds (the term's drain timed out):
// the next term's rebuild and collection find it.
func (q *gcQueue) abandon() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, w := range q.items {
		if w.kind == gcDiscard {
			q.discards--
			q.backlog.Dec()
		}
	}
	q.items = nil
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// close ends the queue: what it holds is still popped.
func (q *gcQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	signal(q.wake)
}

// pop waits for the next item; false when ctx ended, or the queue is closed
// and empty.
func (q *gcQueue) pop(ctx context.Context) (gcWork, bool) {
	for {
		if ctx.Err() != nil {
			return gcWork{}, false
		}
		q.mu.Lock()
		if len(q.items) > 0 {
			w := q.items[0]
			q.items[0] = gcWork{}
			q.items = q.items[1:]
			q.mu.Unlock()
			return w, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return gcWork{}, false
		}
		select {
		case <-q.wake:
		case <-ctx.Done():
			return gcWork{}, false
		}
	}
}

// gcGate tells the core the gc backlog before every Tick, and logs when the
// core holds periodic checkpoints back for it: at the first hold, and then
// at most once per heldLogInterval, with how often it happened since. Run's
// goroutine owns it.
type gcGate struct {
	q        *gcQueue
	log      *slog.Logger
	limit    int // max_concurrent, the core's bound
	reported int
	held     bool
	loggedAt time.Time
	holds    int // holds that began since the last log
}

// heldLogInterval is the least time between two "held back" logs: with a
// store that is slow for good, every checkpoint waits a little.
const heldLogInterval = time.Minute

func (g *gcGate) tick(core *coordinator.Core, now time.Time) {
	if n := g.q.pending(); n != g.reported {
		// Never fails: n is not negative.
		_ = core.Step(coordinator.GCBacklog{Discards: n})
		g.reported = n
	}
	core.Tick(now)
	held := core.HeldByGC()
	if held && !g.held {
		g.holds++
		if g.loggedAt.IsZero() || now.Sub(g.loggedAt) >= heldLogInterval {
			g.log.Warn("periodic checkpoints wait until checkpoint storage deletes what older ones left; the object store deletes slower than checkpoints complete",
				"gc_backlog", g.reported, "max_concurrent", g.limit, "holds_since_last_log", g.holds)
			g.loggedAt, g.holds = now, 0
		}
	}
	g.held = held
}

// gcLoop is the gc goroutine: it carries out the queue's items in order.
// Rebuilds and registrations are retried until they succeed (or the term
// ends): until checkpoint n is registered, nothing older may be released,
// or files n needs could go. Discards and collections are tried once; what
// they miss, a later Release or CollectGarbage finds.
func (r *Runner) gcLoop(ctx context.Context, log *slog.Logger, q *gcQueue) {
	d := r.opts.Discarder
	defer q.abandon()
	for {
		w, ok := q.pop(ctx)
		if !ok {
			return
		}
		switch w.kind {
		case gcRebuild, gcRegister:
			what := "register"
			op := func() error { return d.Register(ctx, w.completed[0]) }
			if w.kind == gcRebuild {
				what = "rebuild"
				op = func() error { return d.Rebuild(ctx, w.completed) }
			}
			policy := retry.Policy{Initial: 200 * time.Millisecond, Max: 30 * time.Second}
			_ = policy.Do(ctx, op, func(_ int, err error, wait time.Duration) {
				r.metrics.gcFailures.WithLabelValues(what).Inc()
				log.Warn("shared-file registry not updated; retrying, nothing is released meanwhile", "what", what, "wait", wait, "err", err)
			})
		case gcDiscard:
			what, failure := "aborted", "discard"
			if w.discard.Reason == coordinator.DiscardReleased {
				what, failure = "released", "release"
			}
			del, err := d.Discard(ctx, w.discard)
			r.metrics.observeDeleted(what, del)
			if err != nil && ctx.Err() == nil {
				r.metrics.gcFailures.WithLabelValues(failure).Inc()
				log.Warn("discard failed; garbage collection will retry", "checkpoint_id", w.discard.ID,
					"reason", w.discard.Reason, "deleted", len(del.Keys), "err", err)
			} else if w.discard.Reason == coordinator.DiscardReleased {
				log.Debug("checkpoint released", "checkpoint_id", w.discard.ID, "objects", len(del.Keys), "bytes", del.Bytes)
			}
			q.discarded()
		case gcCollect:
			del, err := d.CollectGarbage(ctx, w.olderThan, w.deadUpTo)
			r.metrics.observeDeleted("collected", del)
			if err != nil && ctx.Err() == nil {
				r.metrics.gcFailures.WithLabelValues("collect").Inc()
				log.Warn("garbage collection incomplete; the next generation retries", "deleted", len(del.Keys), "err", err)
			}
		}
	}
}

// retainedCompletes returns the Complete records a new term's registry is
// rebuilt from: the retained checkpoints (retained, from the rebuilt core)
// and every savepoint in the commit history.
func retainedCompletes(history []control.Message, retained []coordinator.CompletedStatus) []control.Complete {
	keep := make(map[ckpt.ID]bool, len(retained))
	for _, k := range retained {
		keep[k.ID] = true
	}
	seen := map[ckpt.ID]bool{}
	var out []control.Complete
	for _, m := range history {
		c, ok := m.(control.Complete)
		if !ok || seen[c.ID] || !(keep[c.ID] || c.Kind.IsSavepoint()) {
			continue
		}
		seen[c.ID] = true
		out = append(out, c)
	}
	return out
}
