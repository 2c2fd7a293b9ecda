package runner

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/coordinator"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
)

// gcModel is a job's checkpoint history as the coordinator sees it, and the
// objects each completed checkpoint refers to.
type gcModel struct {
	store    *objstore.Store
	history  []control.Message
	retained []ckpt.ID                       // completed periodic checkpoints kept, ascending
	saves    []ckpt.ID                       // savepoints, never released
	refs     map[ckpt.ID][]string            // completed ID -> every object it needs
	live     map[string][]string             // task -> its live shared files
	liveAt   map[ckpt.ID]map[string][]string // completed ID -> live then
	nextID   ckpt.ID
	nextFile int
}

const gcTestRetained = 2

var gcTestTasks = []string{"main-0", "main-1"}

func (m *gcModel) put(t *rapid.T, key string) {
	if err := m.store.Put(context.Background(), key, []byte(key)); err != nil {
		t.Fatal(err)
	}
}

// snapshot writes what checkpoint id's tasks upload: new shared files (the
// live set changes as compactions would), per-checkpoint files and
// manifests. It returns the handles and every object they refer to.
func (m *gcModel) snapshot(t *rapid.T, id ckpt.ID) ([]control.TaskState, []string) {
	var tasks []control.TaskState
	var keys []string
	for i, task := range gcTestTasks {
		live := m.live[task]
		// Compaction: some files go, some come.
		if len(live) > 0 {
			drop := rapid.IntRange(0, len(live)).Draw(t, "drop")
			live = slices.Delete(slices.Clone(live), 0, drop)
		}
		for range rapid.IntRange(0, 3).Draw(t, "add") {
			m.nextFile++
			k := objstore.SharedKey(task, fmt.Sprintf("%06d.sst", m.nextFile))
			m.put(t, k)
			live = append(live, k)
		}
		m.live[task] = live
		man := &state.Manifest{Version: 1, Job: "job", Task: task, Checkpoint: id, Instance: "x"}
		for _, k := range live {
			man.Files = append(man.Files, state.FileEntry{Name: k[strings.LastIndex(k, "/")+1:], Key: k, Size: 1,
				SHA256: strings.Repeat("0", 64), Shared: true})
		}
		own := objstore.ExclusiveKey(id, task, "MANIFEST-000001")
		m.put(t, own)
		man.Files = append(man.Files, state.FileEntry{Name: "MANIFEST-000001", Key: own, Size: 1, SHA256: strings.Repeat("0", 64)})
		man.StateBytes = int64(len(man.Files))
		b, err := man.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := m.store.Put(context.Background(), man.Handle(), b); err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, control.TaskState{Task: control.TaskID{Stage: "main", Index: i}, Handle: man.Handle()})
		keys = append(keys, man.Handle(), own)
		keys = append(keys, live...)
	}
	return tasks, keys
}

// complete makes id a completed checkpoint (or savepoint) and returns its
// Complete record and the checkpoints it releases.
func (m *gcModel) complete(t *rapid.T, kind ckpt.Kind) (control.Complete, []ckpt.ID) {
	m.nextID++
	id := m.nextID
	tasks, keys := m.snapshot(t, id)
	target := ""
	if kind == ckpt.KindSavepoint && rapid.Bool().Draw(t, "target") {
		target = fmt.Sprintf("sp%d", id)
	}
	loc, err := ObjectStoreMetadata{Store: m.store}.WriteMetadata(context.Background(),
		control.Metadata{ID: id, Gen: 1, Kind: kind, Target: target, TS: 1, Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	c := control.Complete{ID: id, Gen: 1, TS: 1, Kind: kind, Target: target, Metadata: loc}
	m.history = append(m.history, c)
	m.refs[id] = append(keys, loc)
	m.liveAt[id] = maps.Clone(m.live)
	if kind.IsSavepoint() {
		m.saves = append(m.saves, id)
		return c, nil
	}
	m.retained = append(m.retained, id)
	var released []ckpt.ID
	for len(m.retained) > gcTestRetained {
		released = append(released, m.retained[0])
		m.retained = m.retained[1:]
	}
	return c, released
}

// kept returns every object the retained checkpoints and savepoints need.
func (m *gcModel) kept() map[string]bool {
	keep := map[string]bool{}
	for _, id := range append(slices.Clone(m.retained), m.saves...) {
		for _, k := range m.refs[id] {
			keep[k] = true
		}
	}
	return keep
}

func (m *gcModel) objects(t *rapid.T) map[string]bool {
	objs, err := m.store.List(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, o := range objs {
		if o.Key != "_gc_clock" {
			out[o.Key] = true
		}
	}
	return out
}

// TestObjectStoreGCRebuildProperty runs random histories of completed
// checkpoints and savepoints, aborted checkpoints whose uploads stay behind,
// and coordinator failovers (a fresh ObjectStoreGC rebuilt from the history,
// then the collection after the new generation), and checks after every
// step that every object a retained checkpoint or a savepoint needs exists,
// and after every failover that nothing else is left.
func TestObjectStoreGCRebuildProperty(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		store, err := objstore.Open(ctx, "mem://", "job", objstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		m := &gcModel{store: store, refs: map[ckpt.ID][]string{}, live: map[string][]string{},
			liveAt: map[ckpt.ID]map[string][]string{}}
		gc := NewObjectStoreGC(store, log)
		if err := gc.Rebuild(ctx, nil); err != nil {
			t.Fatal(err)
		}
		for range rapid.IntRange(1, 30).Draw(t, "steps") {
			switch step := rapid.SampledFrom([]string{"checkpoint", "checkpoint", "checkpoint", "savepoint", "abort", "failover"}).Draw(t, "step"); step {
			case "checkpoint", "savepoint":
				kind := ckpt.KindCheckpoint
				if step == "savepoint" {
					kind = ckpt.KindSavepoint
				}
				c, released := m.complete(t, kind)
				if err := gc.Register(ctx, c); err != nil {
					t.Fatal(err)
				}
				for _, id := range released {
					if _, err := gc.Discard(ctx, coordinator.Discard{ID: id, Reason: coordinator.DiscardReleased, Metadata: objstore.MetadataKey(id)}); err != nil {
						t.Fatal(err)
					}
					for k := range m.objects(t) {
						if n, ok := objstore.ParseCheckpointKey(k); ok && n == id {
							t.Fatalf("released checkpoint %d left %s", id, k)
						}
					}
				}
			case "abort":
				m.nextID++
				tasks, _ := m.snapshot(t, m.nextID)
				if rapid.Bool().Draw(t, "discard") {
					var handles []string
					for _, ts := range tasks {
						handles = append(handles, ts.Handle)
					}
					if _, err := gc.Discard(ctx, coordinator.Discard{ID: m.nextID, Reason: coordinator.DiscardAborted, Handles: handles}); err != nil {
						t.Fatal(err)
					}
					for k := range m.objects(t) {
						if n, ok := objstore.ParseCheckpointKey(k); ok && n == m.nextID {
							t.Fatalf("aborted checkpoint %d left %s", m.nextID, k)
						}
					}
				}
			case "failover":
				// The new generation restores from the newest completed
				// checkpoint: its files are what the tasks have.
				m.live = map[string][]string{}
				if n := len(m.history); n > 0 {
					m.live = maps.Clone(m.liveAt[m.history[n-1].(control.Complete).ID])
				}
				gc = NewObjectStoreGC(store, log)
				var retained []coordinator.CompletedStatus
				for _, id := range m.retained {
					retained = append(retained, coordinator.CompletedStatus{ID: id})
				}
				if err := gc.Rebuild(ctx, retainedCompletes(m.history, retained)); err != nil {
					t.Fatal(err)
				}
				now, err := gc.Clock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				// Nothing is in flight here: everything written so far is
				// old enough (a coarse file-system clock may give the
				// newest objects the clock object's own time).
				if _, err := gc.CollectGarbage(ctx, now.Add(time.Second), m.nextID); err != nil {
					t.Fatal(err)
				}
				keep := m.kept()
				for k := range m.objects(t) {
					if !keep[k] {
						t.Fatalf("after a failover, %s is left although nothing refers to it", k)
					}
				}
			}
			objs := m.objects(t)
			for k := range m.kept() {
				if !objs[k] {
					t.Fatalf("object %s of a retained checkpoint or savepoint is gone (retained %v, savepoints %v)", k, m.retained, m.saves)
				}
			}
		}
	})
}

// TestDiscardAbortedSavepoint: the discard of an aborted savepoint deletes
// the task snapshots it names (manifest and folder under
// savepoints/<name>/), and then its _metadata if written late; it keeps
// the folder of a savepoint whose _metadata exists, and never touches
// another task's or another savepoint's objects.
func TestDiscardAbortedSavepoint(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.Open(ctx, "file://"+t.TempDir(), "job", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	keys := []string{
		"savepoints/sp/main-0.manifest", "savepoints/sp/main-0/000001.sst", "savepoints/sp/main-0/000002.sst",
		"savepoints/sp/main-1.manifest", "savepoints/sp/main-1/000003.sst",
		"savepoints/sp-2/main-0.manifest", "savepoints/sp-2/main-0/000001.sst",
		"savepoints/done/_metadata", "savepoints/done/main-0.manifest", "savepoints/done/main-0/000001.sst",
	}
	for _, k := range keys {
		if err := store.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	gc := NewObjectStoreGC(store, slog.New(slog.DiscardHandler))
	left := func() []string {
		objs, err := store.List(ctx, "savepoints/")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, o := range objs {
			out = append(out, o.Key)
		}
		slices.Sort(out)
		return out
	}

	del, err := gc.Discard(ctx, coordinator.Discard{ID: 5, Reason: coordinator.DiscardAborted,
		Handles: []string{"savepoints/sp/main-0.manifest"}})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(del.Keys)
	if want := keys[:3]; !slices.Equal(del.Keys, want) {
		t.Fatalf("deleted %q, want %q", del.Keys, want)
	}

	// A savepoint with a _metadata keeps its folder, whatever the
	// discard says.
	if _, err := gc.Discard(ctx, coordinator.Discard{ID: 6, Reason: coordinator.DiscardLateAck,
		Handles: []string{"savepoints/done/main-0.manifest"}}); err == nil || !strings.Contains(err.Error(), "has a _metadata") {
		t.Fatalf("discard in a savepoint with a _metadata: %v", err)
	}

	// The _metadata written after the abort goes alone.
	if err := store.Put(ctx, "savepoints/sp/_metadata", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := gc.Discard(ctx, coordinator.Discard{ID: 5, Reason: coordinator.DiscardAborted,
		Metadata: "savepoints/sp/_metadata"}); err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(keys[3:]))
	if got := left(); !slices.Equal(got, want) {
		t.Fatalf("left %q, want %q", got, want)
	}

	// A handle that is neither a checkpoint's nor a savepoint's manifest
	// is refused.
	for _, h := range []string{"savepoints/sp/main-1/000003.sst", "savepoints/../main-0.manifest", "shared/main-0/x.manifest"} {
		if _, err := gc.Discard(ctx, coordinator.Discard{ID: 5, Reason: coordinator.DiscardAborted, Handles: []string{h}}); err == nil {
			t.Errorf("discard of handle %q: no error", h)
		}
	}
	if got := left(); !slices.Equal(got, want) {
		t.Fatalf("left %q after refused discards, want %q", got, want)
	}
}

// TestCollectSavepointLeftovers: the collection after a generation deletes
// a folder under savepoints/ without a _metadata whose objects are all
// older than the generation (a savepoint that never completed), and keeps
// a completed savepoint's folder, however old, and one still being
// written.
func TestCollectSavepointLeftovers(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.Open(ctx, "file://"+t.TempDir(), "job", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	put := func(keys ...string) {
		for _, k := range keys {
			if err := store.Put(ctx, k, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	put("savepoints/aborted/main-0.manifest", "savepoints/aborted/main-0/000001.sst", "savepoints/aborted/main-1/000002.log",
		"savepoints/done/_metadata", "savepoints/done/main-0.manifest", "savepoints/done/main-0/000001.sst",
		"savepoints/late/main-0/000001.sst")
	// The generation starts: the store's clock moves past every object so far.
	var olderThan time.Time
	for {
		if olderThan, err = state.StoreTime(ctx, store); err != nil {
			t.Fatal(err)
		}
		o, err := store.Stat(ctx, "savepoints/late/main-0/000001.sst")
		if err != nil {
			t.Fatal(err)
		}
		if o.ModTime.Before(olderThan) {
			break
		}
		time.Sleep(10 * time.Millisecond) // a store whose clock has coarse steps
	}
	put("savepoints/late/main-1/000002.sst", "savepoints/new/main-0/000001.sst")

	gc := NewObjectStoreGC(store, slog.New(slog.DiscardHandler))
	del, err := gc.CollectGarbage(ctx, olderThan, 0)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(del.Keys)
	want := []string{"savepoints/aborted/main-0.manifest", "savepoints/aborted/main-0/000001.sst", "savepoints/aborted/main-1/000002.log"}
	if !slices.Equal(del.Keys, want) {
		t.Fatalf("deleted %q, want %q", del.Keys, want)
	}
	objs, err := store.List(ctx, "savepoints/")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 6 {
		t.Fatalf("%d objects left under savepoints/, want 6 (done, late, new)", len(objs))
	}
}
