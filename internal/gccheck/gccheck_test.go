package gccheck

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
)

var sum = strings.Repeat("0", 64)

// put writes checkpoint id of kind (target for a savepoint) with one task
// whose manifest lists files, and returns its Complete record.
func put(t *testing.T, store *objstore.Store, id ckpt.ID, kind ckpt.Kind, target string, files ...string) control.Complete {
	t.Helper()
	ctx := context.Background()
	m := &state.Manifest{Version: 2, Job: "job", Task: "main-0", Checkpoint: id, Instance: "x"}
	if kind.IsSavepoint() {
		m.Savepoint = target
	}
	for i, k := range files {
		f := state.FileEntry{Name: fmt.Sprintf("%06d.sst", i), Key: k, Size: 1, SHA256: sum, Shared: !kind.IsSavepoint()}
		if err := store.Put(ctx, m.ObjectKey(f), []byte("x")); err != nil {
			t.Fatal(err)
		}
		m.Files = append(m.Files, f)
	}
	// A part of a file stored in pieces, and an inline file: the first
	// is an object, the second is not.
	if !kind.IsSavepoint() {
		part := objstore.SharedKey("main-0", fmt.Sprintf("wal-%d", id))
		if err := store.Put(ctx, part, []byte("x")); err != nil {
			t.Fatal(err)
		}
		m.Files = append(m.Files, state.FileEntry{Name: "000001.log", Size: 1, Parts: []state.Part{{Key: part, Size: 1, SHA256: sum}}})
	}
	m.Files = append(m.Files, state.FileEntry{Name: "OPTIONS", Size: 1, Inline: true, Data: []byte("o"),
		SHA256: "65c74c15a686187bb6bbf9958f494fc6b80068034a659a9ad44991b08c58f2d2"})
	m.StateBytes = int64(len(m.Files))
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, m.Handle(), b); err != nil {
		t.Fatal(err)
	}
	loc, err := checkpoint.WriteMetadata(ctx, store, control.Metadata{ID: id, Gen: 1, Kind: kind, Target: target, TS: 1,
		Tasks: []control.TaskState{{Task: control.TaskID{Stage: "main", Index: 0}, Handle: m.Handle()}}})
	if err != nil {
		t.Fatal(err)
	}
	return control.Complete{ID: id, Gen: 1, TS: 1, Kind: kind, Target: target, Metadata: loc}
}

func fixed(h []control.Message) History {
	return func(context.Context) ([]control.Message, error) { return h, nil }
}

func open(t *testing.T) *objstore.Store {
	t.Helper()
	store, err := objstore.Open(context.Background(), "file://"+t.TempDir(), "job", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// TestCheck: with retained 2, checkpoint 1 is released (its missing
// objects are no violation), checkpoints 3 and 4 and savepoint 2 are
// kept; a missing shared file, WAL part, task manifest, _metadata or
// savepoint file of theirs is reported, naming what refers to it.
func TestCheck(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		delete string // an object to delete before the check
		want   []string
	}{
		{name: "intact"},
		{name: "released checkpoint's file", delete: "shared/main-0/a.sst"},
		{name: "shared file", delete: "shared/main-0/c.sst",
			want: []string{"checkpoint 3: shared/main-0/c.sst (referred to by chk-3/main-0.manifest) is missing",
				"checkpoint 4: shared/main-0/c.sst (referred to by chk-4/main-0.manifest) is missing"}},
		{name: "wal part", delete: "shared/main-0/wal-4",
			want: []string{"checkpoint 4: shared/main-0/wal-4 (referred to by chk-4/main-0.manifest) is missing"}},
		{name: "manifest", delete: "chk-4/main-0.manifest",
			want: []string{"checkpoint 4: chk-4/main-0.manifest (referred to by chk-4/_metadata) is missing"}},
		{name: "metadata", delete: "chk-3/_metadata",
			want: []string{"checkpoint 3: chk-3/_metadata (referred to by complete record) is missing"}},
		{name: "savepoint file", delete: "savepoints/sp/main-0/b.sst",
			want: []string{"savepoint 2: savepoints/sp/main-0/b.sst (referred to by savepoints/sp/main-0.manifest) is missing"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := open(t)
			h := []control.Message{
				put(t, store, 1, ckpt.KindCheckpoint, "", "shared/main-0/a.sst"),
				put(t, store, 2, ckpt.KindSavepoint, "sp", "main-0/b.sst"),
				put(t, store, 3, ckpt.KindCheckpoint, "", "shared/main-0/c.sst"),
				put(t, store, 4, ckpt.KindCheckpoint, "", "shared/main-0/c.sst", "shared/main-0/d.sst"),
			}
			if tc.delete != "" {
				if err := store.Delete(ctx, tc.delete); err != nil {
					t.Fatal(err)
				}
			}
			r, err := Check(ctx, store, fixed(h), 2)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range r.Missing {
				got = append(got, m.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("missing %q, want %q", got, tc.want)
			}
			if !slices.Equal(r.Retained, []ckpt.ID{3, 4}) || !slices.Equal(r.Savepoints, []ckpt.ID{2}) {
				t.Fatalf("checked %v and savepoints %v, want [3 4] and [2]", r.Retained, r.Savepoints)
			}
			if tc.delete != "" {
				return
			}
			// Checkpoint 1's objects are the unreferenced ones; savepoints/
			// holds exactly what savepoint 2 refers to.
			want := []string{"chk-1/_metadata", "chk-1/main-0.manifest", "shared/main-0/a.sst", "shared/main-0/wal-1"}
			if slices.Sort(r.Unreferenced); !slices.Equal(r.Unreferenced, want) {
				t.Errorf("unreferenced %q, want %q", r.Unreferenced, want)
			}
			if !slices.Equal(r.CheckpointDirs, []ckpt.ID{1, 3, 4}) {
				t.Errorf("checkpoints with objects under chk-*/ %v, want [1 3 4]", r.CheckpointDirs)
			}
			if r.Savepoint != 3 || r.SavepointReferenced != 3 || r.Objects != 15 || r.MaxPerSnapshot != 4 {
				t.Errorf("report %s: want 15 objects, 3 under savepoints/ all referenced, 4 per task snapshot", r)
			}
		})
	}
}

// TestCheckReleasedMeanwhile: a checkpoint that the second read of the
// commit topic no longer keeps (released during the check) is not
// checked, whatever it lost; one kept at both reads is.
func TestCheckReleasedMeanwhile(t *testing.T) {
	ctx := context.Background()
	store := open(t)
	h := []control.Message{
		put(t, store, 1, ckpt.KindCheckpoint, "", "shared/main-0/a.sst"),
		put(t, store, 2, ckpt.KindCheckpoint, "", "shared/main-0/b.sst"),
	}
	if err := store.Delete(ctx, "shared/main-0/a.sst"); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, "shared/main-0/b.sst"); err != nil {
		t.Fatal(err)
	}
	c3 := put(t, store, 3, ckpt.KindCheckpoint, "", "shared/main-0/c.sst")
	reads := 0
	history := func(context.Context) ([]control.Message, error) {
		reads++
		if reads == 1 {
			return h, nil
		}
		return append(slices.Clone(h), c3), nil // 3 completed: 1 released
	}
	r, err := Check(ctx, store, history, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Missing) != 1 || r.Missing[0].ID != 2 || !slices.Equal(r.Retained, []ckpt.ID{2}) {
		t.Fatalf("report %s, missing %v: want checkpoint 2 checked, its shared file missing", r, r.Missing)
	}
}
