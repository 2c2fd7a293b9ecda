package state

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/state/objstore"
)

// checkpointRun takes n checkpoints, each completed (registered, metadata
// written, notified), and returns their results and expected states.
func checkpointRun(t *testing.T, b *Backend, reg *Registry, kv *ValueState[string], rng *rand.Rand, want model, from, to ckpt.ID) (map[ckpt.ID]*SnapshotResult, map[ckpt.ID]model) {
	t.Helper()
	ctx := context.Background()
	res := map[ckpt.ID]*SnapshotResult{}
	states := map[ckpt.ID]model{}
	for id := from; id <= to; id++ {
		mutate(t, rng, kv, want, 1500)
		_ = flushDB(b)
		r := snapshotNow(t, b, id, "")
		if err := putMetadata(ctx, b.cfg.Store, id, []byte("meta")); err != nil {
			t.Fatal(err)
		}
		if err := reg.Register(ctx, id, []string{r.Handle}); err != nil {
			t.Fatal(err)
		}
		if err := b.NotifyComplete(ctx, id); err != nil {
			t.Fatal(err)
		}
		res[id] = r
		states[id] = want.clone()
	}
	return res, states
}

// objectsOf returns every object key checkpoint r needs.
func objectsOf(r *SnapshotResult) []string {
	out := []string{r.Handle}
	if r.Checkpoint != 0 {
		out = append(out, objstore.MetadataKey(r.Checkpoint))
	}
	for _, f := range r.Manifest.Files {
		if len(f.Parts) == 0 && !f.Inline {
			out = append(out, f.Key)
		}
		for _, p := range f.Parts {
			out = append(out, p.Key)
		}
	}
	return out
}

// Releasing checkpoints deletes exactly the objects no retained checkpoint
// needs.
func TestRegistryReleaseDeletesExactlyUnreferenced(t *testing.T) {
	ctx := context.Background()
	store, fb := newStore(t)
	b := openTest(t, testConfig(t, store, t.TempDir()))
	kv, _ := NewValueState(b, "kv", StringCodec{})
	reg := NewRegistry(store, nil)
	rng := rand.New(rand.NewPCG(11, 12))
	res, states := checkpointRun(t, b, reg, kv, rng, model{}, 1, 5)
	// With small memtables and many flushes, compactions drop files between
	// checkpoints, so that releases have something to delete.
	for _, release := range []ckpt.ID{1, 2, 3, 4} {
		if _, err := reg.Release(ctx, release); err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{}
		for id := release + 1; id <= 5; id++ {
			for _, k := range objectsOf(res[id]) {
				want[k] = true
			}
		}
		got := listKeys(t, store, "")
		if !slices.Equal(got, slices.Sorted(maps.Keys(want))) {
			t.Fatalf("after releasing %d: objects\n%q\nwant\n%q", release, got, slices.Sorted(maps.Keys(want)))
		}
	}
	sharedDeletes := 0
	for _, k := range fb.deletes {
		if strings.Contains(k, "/shared/") {
			sharedDeletes++
		}
	}
	if sharedDeletes == 0 {
		t.Fatal("no shared file was deleted: the test exercises nothing")
	}
	t.Logf("%d shared files deleted", sharedDeletes)
	if !slices.Equal(reg.Retained(), []ckpt.ID{5}) {
		t.Fatalf("retained %v", reg.Retained())
	}
	r := restoreTest(t, testConfig(t, store, t.TempDir()), res[5].Handle)
	if !maps.Equal(dump(t, r), states[5]) {
		t.Fatal("checkpoint 5 broken by releases")
	}
	if _, err := reg.Release(ctx, 4); err == nil {
		t.Fatal("released an unregistered checkpoint")
	}
}

// Injected object-store failures decline the snapshot and delete nothing a
// retained checkpoint still refers to.
func TestInjectedFailuresDeclineAndKeepReferenced(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name      string
		op, match string
		times     int
		transient bool
		wantOK    bool
	}{
		{"sst upload fails permanently", "upload", ".sst", 1, false, false},
		{"sst upload fails always", "upload", ".sst", -1, true, false},
		{"wal upload fails", "upload", ".log", -1, true, false},
		{"manifest upload fails", "upload", ".manifest", -1, true, false},
		{"transient sst failures are retried", "upload", ".sst", 2, true, true},
		{"transient manifest failure is retried", "upload", ".manifest", 1, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store, fb := newStore(t)
			b := openTest(t, testConfig(t, store, t.TempDir()))
			kv, _ := NewValueState(b, "kv", StringCodec{})
			reg := NewRegistry(store, nil)
			rng := rand.New(rand.NewPCG(13, 14))
			want := model{}
			res, states := checkpointRun(t, b, reg, kv, rng, want, 1, 2)
			before := listKeys(t, store, "")

			mutate(t, rng, kv, want, 1500)
			_ = flushDB(b)
			fb.fail(tc.op, tc.match, tc.times, tc.transient)
			s, err := b.Snapshot(3, nil)
			if err != nil {
				t.Fatal(err)
			}
			r3, err := s.Run(ctx)
			fb.clear()
			if tc.wantOK {
				if err != nil {
					t.Fatalf("snapshot failed despite retries: %v", err)
				}
				rb := restoreTest(t, testConfig(t, store, t.TempDir()), r3.Handle)
				if !maps.Equal(dump(t, rb), want) {
					t.Fatal("retried snapshot restores wrong state")
				}
				return
			}
			if err == nil {
				t.Fatal("snapshot succeeded despite failing uploads")
			}
			if !errors.Is(err, errInjected) {
				t.Fatalf("error does not carry the cause: %v", err)
			}
			// Nothing of snapshot 3 is left, everything of 1 and 2 is.
			if after := listKeys(t, store, ""); !slices.Equal(after, before) {
				t.Fatalf("objects after failed snapshot\n%q\nwant\n%q", after, before)
			}
			for _, id := range []ckpt.ID{1, 2} {
				rb := restoreTest(t, testConfig(t, store, t.TempDir()), res[id].Handle)
				if !maps.Equal(dump(t, rb), states[id]) {
					t.Fatalf("checkpoint %d damaged by the failed snapshot", id)
				}
			}
			// The backend recovers: the next snapshot succeeds.
			r4 := snapshotNow(t, b, 4, "")
			rb := restoreTest(t, testConfig(t, store, t.TempDir()), r4.Handle)
			if !maps.Equal(dump(t, rb), want) {
				t.Fatal("snapshot after a failed one restores wrong state")
			}
		})
	}
}

// Failures while deleting never delete what is still referenced, and
// deletions that failed are retried later.
func TestReleaseWithDeleteFailures(t *testing.T) {
	ctx := context.Background()
	store, fb := newStore(t)
	b := openTest(t, testConfig(t, store, t.TempDir()))
	kv, _ := NewValueState(b, "kv", StringCodec{})
	reg := NewRegistry(store, nil)
	res, states := checkpointRun(t, b, reg, kv, rand.New(rand.NewPCG(15, 16)), model{}, 1, 6)

	// _metadata cannot be deleted: nothing is, the checkpoint stays.
	before := listKeys(t, store, "")
	fb.fail("delete", "_metadata", -1, false)
	if _, err := reg.Release(ctx, 1); err == nil {
		t.Fatal("release succeeded without deleting _metadata")
	}
	fb.clear()
	if !slices.Equal(listKeys(t, store, ""), before) {
		t.Fatal("objects deleted although _metadata could not be")
	}
	if !slices.Contains(reg.Retained(), 1) {
		t.Fatal("checkpoint 1 unregistered")
	}
	if _, err := reg.Release(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// Shared files cannot be deleted: release reports it, later retries.
	fb.fail("delete", "shared/", -1, true)
	_, err := reg.Release(ctx, 2)
	fb.clear()
	var orphans []string
	for _, k := range objectsOf(res[2]) {
		if reg.Refs(k) == 0 && strings.HasPrefix(k, "shared/") {
			orphans = append(orphans, k)
		}
	}
	if len(orphans) == 0 {
		t.Fatal("checkpoint 2 has no file of its own: the test exercises nothing")
	}
	if err == nil {
		t.Fatal("release hid failed deletes")
	}
	for _, id := range []ckpt.ID{3, 4, 5, 6} {
		for _, k := range objectsOf(res[id]) {
			if _, err := store.Stat(ctx, k); err != nil {
				t.Fatalf("object %s of retained checkpoint %d: %v", k, id, err)
			}
		}
	}
	del, err := reg.CollectGarbage(ctx, time.Now().Add(-time.Hour), 0) // orphans first, regardless of age
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range orphans {
		if !slices.Contains(del.Keys, k) {
			t.Errorf("orphan %s not deleted on retry", k)
		}
	}
	for _, k := range orphans {
		if _, err := store.Stat(ctx, k); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("orphan %s still there: %v", k, err)
		}
	}
	r := restoreTest(t, testConfig(t, store, t.TempDir()), res[3].Handle)
	if !maps.Equal(dump(t, r), states[3]) {
		t.Fatal("checkpoint 3 damaged")
	}
}

// CollectGarbage removes leftovers of failed or abandoned snapshots and
// unregistered checkpoints, and keeps everything retained checkpoints and
// savepoints use.
func TestCollectGarbage(t *testing.T) {
	ctx := context.Background()
	store, _ := newStore(t)
	b := openTest(t, testConfig(t, store, t.TempDir()))
	kv, _ := NewValueState(b, "kv", StringCodec{})
	reg := NewRegistry(store, nil)
	rng := rand.New(rand.NewPCG(17, 18))
	want := model{}
	res, states := checkpointRun(t, b, reg, kv, rng, want, 1, 2)
	sp, _ := b.Savepoint(3, "sp1", []byte("op"))
	spRes, err := sp.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	spState := want.clone()
	// Checkpoint 4 uploads but never completes (its task "crashed"):
	// a stranger to the registry.
	mutate(t, rng, kv, want, 1500)
	_ = flushDB(b)
	r4 := snapshotNow(t, b, 4, "")
	_ = store.Put(ctx, objstore.MetadataKey(4), []byte("meta")) // coordinator died before complete

	del, err := reg.CollectGarbage(ctx, time.Now().Add(time.Hour), 0)
	deleted := del.Keys
	if err != nil {
		t.Fatal(err)
	}
	keep := map[string]bool{}
	for _, id := range []ckpt.ID{1, 2} {
		for _, k := range objectsOf(res[id]) {
			keep[k] = true
		}
	}
	var wantDeleted []string
	for _, k := range objectsOf(r4) {
		if !keep[k] {
			wantDeleted = append(wantDeleted, k)
		}
	}
	slices.Sort(deleted)
	slices.Sort(wantDeleted)
	if !slices.Equal(deleted, wantDeleted) {
		t.Fatalf("deleted\n%q\nwant\n%q", deleted, wantDeleted)
	}
	// Savepoint objects are untouched and self-contained.
	for _, f := range spRes.Manifest.Files {
		if !strings.HasPrefix(spRes.Manifest.ObjectKey(f), "savepoints/sp1/") {
			t.Fatalf("savepoint file outside its directory: %s", f.Key)
		}
	}
	for _, id := range []ckpt.ID{1, 2} {
		if _, err := reg.Release(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := reg.CollectGarbage(ctx, time.Now().Add(time.Hour), 0); err != nil {
		t.Fatal(err)
	}
	for _, k := range listKeys(t, store, "") {
		if !strings.HasPrefix(k, "savepoints/sp1/") {
			t.Errorf("object %s survived although nothing retains it", k)
		}
	}
	r := restoreTest(t, testConfig(t, store, t.TempDir()), spRes.Handle)
	if !maps.Equal(dump(t, r), spState) || string(r.Restored().OperatorState) != "op" {
		t.Fatal("savepoint restores wrong state")
	}
	// The first checkpoint after a savepoint restore shares nothing with it.
	rkv, _ := NewValueState(r, "kv", StringCodec{})
	put(t, rkv, "after", "savepoint")
	r5 := snapshotNow(t, r, 5, "")
	if r5.ReusedFiles != 0 {
		t.Fatalf("checkpoint after savepoint restore reused %d files", r5.ReusedFiles)
	}
	for _, f := range r5.Manifest.Files {
		if strings.HasPrefix(f.Key, "savepoints/") {
			t.Fatalf("checkpoint refers to savepoint file %s", f.Key)
		}
	}
	_ = states
}
