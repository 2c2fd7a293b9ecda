// Package gccheck checks, for tests, a job's object store against its
// commit history: every object that a retained checkpoint or a savepoint
// refers to must exist (DESIGN.md invariant 4), and what the store holds
// besides must stay bounded. It lists the job's prefix, and reads each
// _metadata object through package checkpoint and each task manifest
// through package state, the owners of those formats; it decides which
// checkpoints are retained from the commit topic's Complete records alone
// (the newest checkpoint.retained periodic ones, and every savepoint), not
// from the coordinator's code under test.
//
// It performs object-store reads only, never a write or a delete, and must
// not be imported by product code.
package gccheck

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
)

// History returns the records of the job's commit topic, read to its end
// at the time of the call (controltopic.ReadHistory, say).
type History func(ctx context.Context) ([]control.Message, error)

// Missing is an object that a kept checkpoint or savepoint refers to and
// that the store does not hold.
type Missing struct {
	ID   ckpt.ID
	Kind ckpt.Kind
	// Key is the missing object; From is what refers to it: the commit
	// topic's complete record for a _metadata object, the _metadata for a
	// task manifest, the manifest for a file.
	Key, From string
}

func (m Missing) String() string {
	return fmt.Sprintf("%s %d: %s (referred to by %s) is missing", m.Kind, m.ID, m.Key, m.From)
}

// Report is what one Check found.
type Report struct {
	// Objects counts the objects listed under the job's prefix; Savepoint
	// counts those under savepoints/, Checkpoint those under chk-*/ and
	// Shared those under shared/.
	Objects, Savepoint, Checkpoint, Shared int
	// CheckpointDirs are the checkpoints with objects under chk-<n>/,
	// ascending: retained, in flight, or not deleted yet.
	CheckpointDirs []ckpt.ID
	// Retained are the periodic checkpoints checked, Savepoints the
	// savepoints (both ascending): those kept both before and after the
	// listing.
	Retained, Savepoints []ckpt.ID
	// Referenced counts the distinct objects the checked checkpoints and
	// savepoints refer to: _metadata objects, task manifests, files;
	// SavepointReferenced those of them under savepoints/.
	Referenced, SavepointReferenced int
	// MaxPerSnapshot is the most objects one task snapshot of a checked
	// periodic checkpoint refers to: its manifest and its files.
	MaxPerSnapshot int
	// Unreferenced are the listed objects outside savepoints/ that no
	// checked checkpoint refers to and that are not the collector's own
	// (names starting with "_"): what checkpoints in flight wrote, and what
	// garbage collection has not deleted yet.
	Unreferenced []string
	// Missing is every object a checked checkpoint or savepoint refers to
	// that the listing lacked: a violation of invariant 4.
	Missing []Missing
}

// String summarizes r in one line.
func (r Report) String() string {
	return fmt.Sprintf("%d objects (%d shared, %d under chk-* of checkpoints %v, %d under savepoints); retained checkpoints %v and savepoints %v refer to %d, at most %d per task snapshot; %d unreferenced; %d missing",
		r.Objects, r.Shared, r.Checkpoint, r.CheckpointDirs, r.Savepoint, r.Retained, r.Savepoints, r.Referenced, r.MaxPerSnapshot,
		len(r.Unreferenced), len(r.Missing))
}

// kept returns the Complete records that history keeps: the newest
// retained periodic checkpoints and every savepoint, by ID.
func kept(history []control.Message, retained int) map[ckpt.ID]control.Complete {
	var periodic []control.Complete
	out := map[ckpt.ID]control.Complete{}
	for _, m := range history {
		c, ok := m.(control.Complete)
		if !ok {
			continue
		}
		if c.Kind.IsSavepoint() {
			out[c.ID] = c
		} else {
			periodic = append(periodic, c)
		}
	}
	slices.SortFunc(periodic, func(a, b control.Complete) int { return cmp.Compare(a.ID, b.ID) })
	periodic = slices.CompactFunc(periodic, func(a, b control.Complete) bool { return a.ID == b.ID })
	for _, c := range periodic[max(0, len(periodic)-retained):] {
		out[c.ID] = c
	}
	return out
}

// Check reads history, lists the job's store, reads the _metadata and
// task manifests of every checkpoint the history keeps (the newest
// retained periodic ones and every savepoint), and reads history again.
// It checks the checkpoints kept both times: one released in between may
// have lost its objects legitimately, and one kept at the second read was
// kept all through the listing, so each object it refers to was there to
// be listed. An object store error ends the check; a read that finds
// nothing is a Missing object.
func Check(ctx context.Context, store *objstore.Store, history History, retained int) (Report, error) {
	var r Report
	h1, err := history(ctx)
	if err != nil {
		return r, fmt.Errorf("gccheck: read the commit topic: %w", err)
	}
	before := kept(h1, retained)
	objs, err := store.List(ctx, "")
	if err != nil {
		return r, fmt.Errorf("gccheck: list the job's objects: %w", err)
	}
	exists := make(map[string]bool, len(objs))
	for _, o := range objs {
		exists[o.Key] = true
		switch {
		case strings.HasPrefix(o.Key, "savepoints/"):
			r.Savepoint++
		case strings.HasPrefix(o.Key, "chk-"):
			r.Checkpoint++
			if id, ok := objstore.ParseCheckpointKey(o.Key); ok && !slices.Contains(r.CheckpointDirs, id) {
				r.CheckpointDirs = append(r.CheckpointDirs, id)
			}
		case strings.HasPrefix(o.Key, objstore.SharedPrefix("")):
			r.Shared++
		}
	}
	r.Objects = len(objs)
	slices.Sort(r.CheckpointDirs)

	type ref struct {
		missing []Missing
		keys    []string
		perTask int
	}
	refs := map[ckpt.ID]*ref{}
	for id, c := range before {
		f := &ref{}
		refs[id] = f
		need := func(key, from string) bool {
			f.keys = append(f.keys, key)
			if !exists[key] {
				f.missing = append(f.missing, Missing{ID: id, Kind: c.Kind, Key: key, From: from})
				return false
			}
			return true
		}
		if !need(c.Metadata, "complete record") {
			continue
		}
		md, err := checkpoint.ReadCompleted(ctx, store, c)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // deleted after the listing: released, if ever, at the second read
		}
		if err != nil {
			return r, fmt.Errorf("gccheck: %s %d: %w", c.Kind, id, err)
		}
		for _, ts := range md.Tasks {
			if !need(ts.Handle, c.Metadata) {
				continue
			}
			m, err := state.ReadManifest(ctx, store, ts.Handle)
			if errors.Is(err, objstore.ErrNotFound) {
				continue
			}
			if err != nil {
				return r, fmt.Errorf("gccheck: %s %d: %w", c.Kind, id, err)
			}
			parts := m.Objects()
			for _, p := range parts {
				need(p.Key, ts.Handle)
			}
			f.perTask = max(f.perTask, 1+len(parts))
		}
	}

	h2, err := history(ctx)
	if err != nil {
		return r, fmt.Errorf("gccheck: read the commit topic again: %w", err)
	}
	after := kept(h2, retained)
	referenced := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(before)) {
		c := before[id]
		if _, ok := after[id]; !ok {
			continue
		}
		f := refs[id]
		if c.Kind.IsSavepoint() {
			r.Savepoints = append(r.Savepoints, id)
		} else {
			r.Retained = append(r.Retained, id)
			r.MaxPerSnapshot = max(r.MaxPerSnapshot, f.perTask)
		}
		for _, k := range f.keys {
			referenced[k] = true
		}
		r.Missing = append(r.Missing, f.missing...)
	}
	r.Referenced = len(referenced)
	for k := range referenced {
		if strings.HasPrefix(k, "savepoints/") {
			r.SavepointReferenced++
		}
	}
	for _, o := range objs {
		if !referenced[o.Key] && !strings.HasPrefix(o.Key, "savepoints/") && !strings.HasPrefix(o.Key, "_") {
			r.Unreferenced = append(r.Unreferenced, o.Key)
		}
	}
	return r, nil
}
