package state

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/state/objstore"
)

// Registry is the shared-file registry: it counts, for every shared file,
// the retained checkpoints whose manifests refer to it, and deletes a file
// when the last of them is released. It belongs to the coordinator runtime,
// which registers a checkpoint when it completes and releases it when it is
// no longer retained. The registry holds no durable state of its own: after
// a coordinator failover, rebuild it by registering every retained
// checkpoint again (their handles are in the manifests under chk-<n>/).
//
// Savepoints are never registered; their files live under savepoints/ and
// nothing here deletes them. A Registry is safe for concurrent use.
type Registry struct {
	store *objstore.Store
	log   *slog.Logger

	mu struct {
		sync.Mutex
		refs map[string]int
		// sizes are the sizes of the shared keys in refs and orphans, as
		// the manifests list them.
		sizes       map[string]int64
		checkpoints map[ckpt.ID][]string // retained checkpoint -> its shared keys, deduplicated
		// orphans are unreferenced shared keys whose deletion failed; every
		// Release and CollectGarbage tries them again.
		orphans map[string]struct{}
	}
}

// NewRegistry returns an empty registry over store. logger may be nil.
func NewRegistry(store *objstore.Store, logger *slog.Logger) *Registry {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Registry{store: store, log: logger}
	r.mu.refs = make(map[string]int)
	r.mu.sizes = make(map[string]int64)
	r.mu.checkpoints = make(map[ckpt.ID][]string)
	r.mu.orphans = make(map[string]struct{})
	return r
}

// Register reads the task manifests of completed checkpoint id (handles, as
// the tasks acknowledged them) and adds a reference to every shared file
// they list. Call it before releasing older checkpoints, so that a file the
// new checkpoint shares with them is never deleted in between. Registering
// an ID twice is an error.
func (r *Registry) Register(ctx context.Context, id ckpt.ID, handles []string) error {
	ms := make([]*Manifest, 0, len(handles))
	for _, h := range handles {
		m, err := ReadManifest(ctx, r.store, h)
		if err != nil {
			return fmt.Errorf("state: register checkpoint %d: %w", id, err)
		}
		ms = append(ms, m)
	}
	return r.RegisterManifests(id, ms)
}

// RegisterManifests is Register with manifests already read.
func (r *Registry) RegisterManifests(id ckpt.ID, ms []*Manifest) error {
	if err := objstore.CheckID(id); err != nil {
		return err
	}
	sizes := make(map[string]int64)
	var keys []string
	for _, m := range ms {
		if m.Checkpoint != id {
			return fmt.Errorf("%w: manifest of task %s is for checkpoint %d, not %d", ErrManifest, m.Task, m.Checkpoint, id)
		}
		for _, o := range m.sharedObjects() {
			if _, dup := sizes[o.Key]; !dup {
				sizes[o.Key] = o.Size
				keys = append(keys, o.Key)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.mu.checkpoints[id]; dup {
		return fmt.Errorf("state: checkpoint %d is already registered", id)
	}
	r.mu.checkpoints[id] = keys
	for _, k := range keys {
		r.mu.refs[k]++
		r.mu.sizes[k] = sizes[k]
		delete(r.mu.orphans, k)
	}
	return nil
}

// Deleted is what a Release or CollectGarbage deleted.
type Deleted struct {
	// Keys are the deleted objects, relative to the job root.
	Keys []string
	// Bytes is their total size.
	Bytes int64
	// Failed counts deletes that failed; they are tried again later.
	Failed int
}

func (d *Deleted) add(key string, size int64) {
	d.Keys = append(d.Keys, key)
	d.Bytes += size
}

func (d *Deleted) merge(o Deleted) {
	d.Keys = append(d.Keys, o.Keys...)
	d.Bytes += o.Bytes
	d.Failed += o.Failed
}

// Retained returns the registered checkpoint IDs, ascending.
func (r *Registry) Retained() []ckpt.ID {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]ckpt.ID, 0, len(r.mu.checkpoints))
	for id := range r.mu.checkpoints {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Registered reports whether checkpoint id is registered.
func (r *Registry) Registered(id ckpt.ID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.mu.checkpoints[id]
	return ok
}

// Refs returns the number of retained checkpoints that refer to a shared
// key.
func (r *Registry) Refs(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.refs[key]
}

// Release releases checkpoint id: it deletes chk-<id>/_metadata first (from
// then on the checkpoint does not exist), then the rest of chk-<id>/ (task
// manifests, files only it used), then every shared file that no retained
// checkpoint refers to any more. If the _metadata cannot be deleted the
// checkpoint stays registered and Release returns the error; later delete
// failures are remembered and retried by the next Release or
// CollectGarbage. It returns what it deleted.
func (r *Registry) Release(ctx context.Context, id ckpt.ID) (Deleted, error) {
	var del Deleted
	r.mu.Lock()
	_, ok := r.mu.checkpoints[id]
	r.mu.Unlock()
	if !ok {
		return del, fmt.Errorf("state: release checkpoint %d: not registered", id)
	}
	prefix := objstore.CheckpointPrefix(id)
	objs, listErr := r.store.List(ctx, prefix)
	metadata := objstore.MetadataKey(id)
	if err := r.store.Delete(ctx, metadata); err != nil {
		del.Failed++
		return del, fmt.Errorf("state: release checkpoint %d: %w", id, err)
	}
	var errs []error
	if listErr != nil {
		// The rest of chk-<id>/ is left to CollectGarbage, which lists again.
		errs = append(errs, fmt.Errorf("state: release checkpoint %d: %w", id, listErr))
	}
	rest := slices.DeleteFunc(slices.Clone(objs), func(o objstore.Object) bool {
		if o.Key == metadata {
			del.add(o.Key, o.Size)
			return true
		}
		return false
	})
	for i, err := range r.deleteEach(ctx, rest) {
		if err != nil {
			del.Failed++
			errs = append(errs, fmt.Errorf("state: release checkpoint %d: %w", id, err))
			continue
		}
		del.add(rest[i].Key, rest[i].Size)
	}
	r.mu.Lock()
	keys := r.mu.checkpoints[id]
	delete(r.mu.checkpoints, id)
	for _, k := range keys {
		r.mu.refs[k]--
		if r.mu.refs[k] <= 0 {
			delete(r.mu.refs, k)
			r.mu.orphans[k] = struct{}{}
		}
	}
	r.mu.Unlock()
	orphans, err := r.deleteOrphans(ctx)
	del.merge(orphans)
	return del, errors.Join(append(errs, err)...)
}

// deleteOrphans deletes the unreferenced shared files it knows of.
func (r *Registry) deleteOrphans(ctx context.Context) (Deleted, error) {
	r.mu.Lock()
	var keys []string
	for k := range r.mu.orphans {
		keys = append(keys, k)
	}
	r.mu.Unlock()
	slices.Sort(keys)
	objs := make([]objstore.Object, len(keys))
	for i, k := range keys {
		objs[i].Key = k
	}
	var del Deleted
	var errs []error
	for i, err := range r.deleteEach(ctx, objs) {
		k := keys[i]
		if err != nil {
			del.Failed++
			errs = append(errs, fmt.Errorf("state: delete unreferenced %s: %w", k, err))
			continue
		}
		r.mu.Lock()
		if r.mu.refs[k] == 0 {
			delete(r.mu.orphans, k)
			del.add(k, r.mu.sizes[k])
			delete(r.mu.sizes, k)
		}
		r.mu.Unlock()
	}
	if len(del.Keys) > 0 {
		r.log.Info("deleted unreferenced shared files", "count", len(del.Keys), "bytes", del.Bytes)
	}
	return del, errors.Join(errs...)
}

// CollectGarbage deletes every object of the job that no retained
// checkpoint refers to: shared files (uploaded by snapshots that failed, were
// aborted, or whose task crashed) older than olderThan, and objects under
// chk-<n>/ of checkpoints that are not registered, if n <= deadUpTo or they
// are older than olderThan. It never touches savepoints/. Objects of
// checkpoints in progress are unreferenced too: pass an olderThan before the
// start of any checkpoint still in progress, in the object store's clock
// (StoreTime; for example taken before a new generation that aborts them
// all), and as deadUpTo an ID no checkpoint in progress has (0: none; after
// a new generation, the highest ID triggered before it: none of those can
// complete any more, whenever their objects were written). It returns what
// it deleted.
func (r *Registry) CollectGarbage(ctx context.Context, olderThan time.Time, deadUpTo ckpt.ID) (Deleted, error) {
	deleted, err := r.deleteOrphans(ctx)
	errs := []error{err}
	shared, err := r.store.List(ctx, objstore.SharedPrefix(""))
	if err != nil {
		return deleted, errors.Join(append(errs, err)...)
	}
	chk, err := r.store.List(ctx, "chk-")
	if err != nil {
		return deleted, errors.Join(append(errs, err)...)
	}
	var victims []objstore.Object
	var metadata []objstore.Object
	r.mu.Lock()
	for _, o := range shared {
		if r.mu.refs[o.Key] == 0 && o.ModTime.Before(olderThan) {
			victims = append(victims, o)
		}
	}
	for _, o := range chk {
		id, ok := objstore.ParseCheckpointKey(o.Key)
		if !ok {
			continue
		}
		if _, retained := r.mu.checkpoints[id]; retained || (id > deadUpTo && !o.ModTime.Before(olderThan)) {
			continue
		}
		if strings.HasSuffix(o.Key, "/_metadata") {
			metadata = append(metadata, o)
		} else {
			victims = append(victims, o)
		}
	}
	r.mu.Unlock()
	// Metadata first: a checkpoint stops existing before its files go.
	for _, group := range [][]objstore.Object{metadata, victims} {
		r.mu.Lock()
		group = slices.DeleteFunc(group, func(o objstore.Object) bool {
			referenced := r.mu.refs[o.Key] > 0
			if id, ok := objstore.ParseCheckpointKey(o.Key); ok {
				_, retained := r.mu.checkpoints[id]
				referenced = referenced || retained
			}
			return referenced // registered meanwhile
		})
		r.mu.Unlock()
		for i, err := range r.deleteEach(ctx, group) {
			if err != nil {
				deleted.Failed++
				errs = append(errs, fmt.Errorf("state: collect %s: %w", group[i].Key, err))
				continue
			}
			deleted.add(group[i].Key, group[i].Size)
		}
	}
	if len(deleted.Keys) > 0 {
		r.log.Info("garbage collected", "objects", len(deleted.Keys), "bytes", deleted.Bytes)
	}
	return deleted, errors.Join(errs...)
}

// deleteEach deletes every object of objs (objstore.Store.DeleteEach, a
// bounded number at once) and returns each one's error, in the order of
// objs. A failure stops nothing.
func (r *Registry) deleteEach(ctx context.Context, objs []objstore.Object) []error {
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	return r.store.DeleteEach(ctx, keys)
}

// clockKey is the object StoreTime writes. It lies outside shared/, chk-*/
// and savepoints/, so nothing else reads or deletes it.
const clockKey = "_gc_clock"

// StoreTime returns the object store's current time: the modification time
// of an object it writes now. Every object written after StoreTime returns
// has a modification time that is not before it, whatever the caller's own
// clock says, so it is the olderThan to pass to CollectGarbage for
// "everything written before now" (a store that keeps modification times in
// whole seconds rounds both down alike).
func StoreTime(ctx context.Context, store *objstore.Store) (time.Time, error) {
	if err := store.Put(ctx, clockKey, nil); err != nil {
		return time.Time{}, fmt.Errorf("state: read the object store's clock: %w", err)
	}
	o, err := store.Stat(ctx, clockKey)
	if err != nil {
		return time.Time{}, fmt.Errorf("state: read the object store's clock: %w", err)
	}
	return o.ModTime, nil
}
