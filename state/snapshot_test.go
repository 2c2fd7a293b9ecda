package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/state/objstore"
)

// mutate applies n random puts and deletes to kv and to want.
func mutate(t testing.TB, rng *rand.Rand, kv *ValueState[string], want model, n int) {
	for range n {
		k := fmt.Sprintf("key-%04d", rng.IntN(2000))
		if rng.IntN(5) == 0 {
			del(t, kv, k)
			delete(want, k)
			continue
		}
		v := fmt.Sprintf("v%d-%s", rng.Int64(), strings.Repeat("x", rng.IntN(200)))
		put(t, kv, k, v)
		want[k] = v
	}
}

// Each snapshot, restored after later mutations, holds exactly the state at
// its barrier, and hands back its operator state.
func TestSnapshotMutateRestoreExact(t *testing.T) {
	store, _ := newStore(t)
	cfg := testConfig(t, store, t.TempDir())
	b := openTest(t, cfg)
	kv, err := NewValueState(b, "kv", StringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	want := model{}
	type snap struct {
		handle string
		want   model
	}
	var snaps []snap
	for id := ckpt.ID(1); id <= 6; id++ {
		mutate(t, rng, kv, want, 3000)
		if id%2 == 0 {
			// Some snapshots with data in SSTs, some with data only in the
			// memtable and WAL.
			if err := flushDB(b); err != nil {
				t.Fatal(err)
			}
		}
		res := snapshotNow(t, b, id, fmt.Sprintf("offsets@%d", id))
		if id != 3 { // 3 stays unconfirmed: 4 re-uploads its files and subsumes it
			if err := b.NotifyComplete(context.Background(), id); err != nil {
				t.Fatal(err)
			}
		}
		snaps = append(snaps, snap{res.Handle, want.clone()})
	}
	mutate(t, rng, kv, want, 1000)
	for i, s := range snaps {
		if i+1 == 3 {
			if _, err := Restore(context.Background(), testConfig(t, store, t.TempDir()), s.handle); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("subsumed snapshot 3: restore error %v, want not found", err)
			}
			continue
		}
		r := restoreTest(t, testConfig(t, store, t.TempDir()), s.handle)
		if r.RestoreInfo().Local {
			t.Fatal("restore into an empty directory claims local recovery")
		}
		if got := dump(t, r); !maps.Equal(got, s.want) {
			t.Fatalf("snapshot %d: restored %d keys, want %d (diff in content)", i+1, len(got), len(s.want))
		}
		if got := string(r.Restored().OperatorState); got != fmt.Sprintf("offsets@%d", i+1) {
			t.Fatalf("operator state = %q", got)
		}
		_ = r.Close(context.Background())
	}
	// The live backend still holds the newest state.
	if got := dump(t, b); !maps.Equal(got, want) {
		t.Fatal("live state changed by snapshots")
	}
}

// A checkpoint after a confirmed one uploads only the SST files the
// confirmed one does not have, and reuses the others.
func TestIncrementalUploadsOnlyNewFiles(t *testing.T) {
	store, fb := newStore(t)
	b := openTest(t, testConfig(t, store, t.TempDir()))
	kv, _ := NewValueState(b, "kv", StringCodec{})
	rng := rand.New(rand.NewPCG(3, 4))
	want := model{}
	mutate(t, rng, kv, want, 5000)
	_ = flushDB(b)
	r1 := snapshotNow(t, b, 1, "")
	if err := b.NotifyComplete(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	fb.takeUploads()
	mutate(t, rng, kv, want, 500)
	_ = flushDB(b)
	r2 := snapshotNow(t, b, 2, "")
	uploads := fb.takeUploads()
	_ = b.NotifyComplete(context.Background(), 2)
	// Without a flush, the next checkpoint uploads only the WAL's new tail.
	mutate(t, rng, kv, want, 50)
	r3 := snapshotNow(t, b, 3, "")
	var walUploads, otherShared []string
	for _, k := range fb.takeUploads() {
		switch {
		case strings.Contains(k, ".log."):
			walUploads = append(walUploads, k)
		case strings.Contains(k, "/shared/"):
			otherShared = append(otherShared, k)
		}
	}
	// (A background compaction may have written new SSTs meanwhile: those
	// are uploaded too, and nothing else.)
	var newSST []string
	for _, f := range r3.Manifest.Files {
		if f.Shared && !slices.ContainsFunc(r2.Manifest.Files, func(g FileEntry) bool { return g.equal(f) }) {
			newSST = append(newSST, testJob+"/"+f.Key)
		}
	}
	slices.Sort(otherShared)
	slices.Sort(newSST)
	if len(walUploads) != 1 || !slices.Equal(otherShared, newSST) {
		t.Fatalf("checkpoint 3 without flush uploaded WAL parts %q and shared files %q; want one WAL tail and %q", walUploads, otherShared, newSST)
	}
	prevWAL := map[string]FileEntry{}
	for _, f := range r2.Manifest.Files {
		if len(f.Parts) > 0 {
			prevWAL[f.Name] = f
		}
	}
	tails := 0
	for _, f := range r3.Manifest.Files {
		p, ok := prevWAL[f.Name]
		if !ok || len(f.Parts) == 0 {
			continue
		}
		if len(f.Parts) != len(p.Parts)+1 || !slices.Equal(f.Parts[:len(p.Parts)], p.Parts) || f.Size-p.Size != f.Parts[len(p.Parts)].Size {
			t.Fatalf("WAL %s: parts %+v after %+v: not the old parts plus one tail", f.Name, f.Parts, p.Parts)
		}
		tails++
	}
	if tails != 1 {
		t.Fatalf("%d WAL files extended by a tail, want 1", tails)
	}
	rr := restoreTest(t, testConfig(t, store, t.TempDir()), r3.Handle)
	if !maps.Equal(dump(t, rr), want) {
		t.Fatal("checkpoint with WAL parts restores wrong state")
	}
	_ = r1

	old := map[string]FileEntry{}
	for _, f := range r1.Manifest.Files {
		if f.Shared || len(f.Parts) > 0 {
			old[f.Name] = f
		}
	}
	var wantUploads []string
	reused, walParts := 0, 0
	for _, f := range r2.Manifest.Files {
		switch {
		case len(f.Parts) > 0:
			// A WAL: only the parts the confirmed checkpoint lacks.
			oldParts := map[Part]bool{}
			for _, p := range old[f.Name].Parts {
				oldParts[p] = true
			}
			for _, p := range f.Parts {
				if !oldParts[p] {
					wantUploads = append(wantUploads, p.Key)
				} else {
					walParts++
				}
			}
		case f.Inline:
			// In the manifest: no object.
		case !f.Shared:
			wantUploads = append(wantUploads, f.Key)
		case old[f.Name].Name != "":
			if !old[f.Name].equal(f) {
				t.Fatalf("reused file %s changed entry: %+v vs %+v", f.Name, old[f.Name], f)
			}
			reused++
		default:
			if !strings.HasPrefix(f.Key, "shared/t0/") {
				t.Fatalf("new shared file %s at %s", f.Name, f.Key)
			}
			wantUploads = append(wantUploads, f.Key)
		}
	}
	wantUploads = append(wantUploads, r2.Handle)
	for i := range uploads {
		uploads[i] = strings.TrimPrefix(uploads[i], testJob+"/")
	}
	slices.Sort(uploads)
	slices.Sort(wantUploads)
	if !slices.Equal(uploads, wantUploads) {
		t.Fatalf("checkpoint 2 uploaded\n%q\nwant\n%q", uploads, wantUploads)
	}
	_ = walParts
	if reused == 0 || r2.ReusedFiles < reused {
		t.Fatalf("reused %d files (result says %d); the test needs some", reused, r2.ReusedFiles)
	}
}

func TestManifestWrittenLast(t *testing.T) {
	store, fb := newStore(t)
	b := openTest(t, testConfig(t, store, t.TempDir()))
	kv, _ := NewValueState(b, "kv", StringCodec{})
	mutate(t, rand.New(rand.NewPCG(5, 6)), kv, model{}, 2000)
	_ = flushDB(b)
	res := snapshotNow(t, b, 1, "")
	uploads := fb.takeUploads()
	if last := uploads[len(uploads)-1]; last != testJob+"/"+res.Handle {
		t.Fatalf("last upload %s, want the manifest %s", last, res.Handle)
	}
	objects := 0
	for _, f := range res.Manifest.Files {
		if !f.Inline {
			objects++
		}
	}
	if objects == len(res.Manifest.Files) {
		t.Fatal("no file inline: OPTIONS and the markers should be")
	}
	if len(uploads) != objects+1 {
		t.Fatalf("%d uploads for %d files stored as objects", len(uploads), objects)
	}
}

// Two snapshots in flight: the second reuses the first's uploads; aborting
// the first keeps what the second needs.
func TestConcurrentSnapshotsAndAbort(t *testing.T) {
	store, fb := newStore(t)
	b := openTest(t, testConfig(t, store, t.TempDir()))
	kv, _ := NewValueState(b, "kv", StringCodec{})
	rng := rand.New(rand.NewPCG(7, 8))
	want := model{}
	mutate(t, rng, kv, want, 3000)
	_ = flushDB(b)
	s1, err := b.Snapshot(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	want1 := want.clone()
	mutate(t, rng, kv, want, 10)
	s2, err := b.Snapshot(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Snapshot(2, nil); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("repeated id: %v", err)
	}
	res1, err := s1.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	res2, err := s2.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res2.ReusedFiles == 0 {
		t.Fatal("snapshot 2 re-uploaded everything snapshot 1 uploaded")
	}
	if err := b.NotifyAborted(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	// Snapshot 1's manifest is gone, snapshot 2 still restores.
	if _, err := store.Stat(context.Background(), res1.Handle); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("aborted manifest: %v", err)
	}
	r := restoreTest(t, testConfig(t, store, t.TempDir()), res2.Handle)
	if got := dump(t, r); !maps.Equal(got, want) {
		t.Fatal("snapshot 2 lost files when 1 was aborted")
	}
	_ = want1
	// Completing 2 leaves nothing of 1 behind: every object belongs to 2.
	if err := b.NotifyComplete(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	referenced := map[string]bool{}
	for _, k := range objectsOf(res2) {
		referenced[k] = true
	}
	for _, k := range listKeys(t, store, "") {
		if !referenced[k] {
			t.Errorf("object %s belongs to no snapshot", k)
		}
	}
	_ = fb
}

// Cancelling the asynchronous part fails the snapshot and deletes what it
// uploaded; it logs no warning (a task that stops cleanly cancels the
// snapshot in flight).
func TestSnapshotCancel(t *testing.T) {
	store, fb := newStore(t)
	cfg := testConfig(t, store, t.TempDir())
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	b := openTest(t, cfg)
	kv, _ := NewValueState(b, "kv", StringCodec{})
	mutate(t, rand.New(rand.NewPCG(9, 9)), kv, model{}, 3000)
	_ = flushDB(b)
	s, _ := b.Snapshot(1, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	fb.onPut = func(string) {
		if n.Add(1) == 2 {
			cancel()
		}
	}
	if _, err := s.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled run: %v", err)
	}
	if keys := listKeys(t, store, ""); len(keys) != 0 {
		t.Fatalf("cancelled snapshot left %q", keys)
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("a cancelled snapshot logs a warning:\n%s", logs.String())
	}
	// The next snapshot works.
	fb.onPut = nil
	res := snapshotNow(t, b, 2, "")
	if res.ReusedFiles != 0 {
		t.Fatal("reused a file of the cancelled snapshot")
	}
	// Abort before Run: Run refuses.
	s3, _ := b.Snapshot(3, nil)
	if err := b.NotifyAborted(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	if _, err := s3.Run(context.Background()); err == nil {
		t.Fatal("aborted snapshot ran")
	}
}

// Between the synchronous and the asynchronous part, compactions may delete
// SSTs the snapshot holds: the snapshot still gets them, as they were.
func TestCompactionBetweenSyncAndAsyncPart(t *testing.T) {
	store, _ := newStore(t)
	cfg := testConfig(t, store, t.TempDir())
	// Only the compaction below: an automatic one could merge the files
	// first, and leave the manual one nothing to delete.
	cfg.TunePebble = func(o *pebble.Options) { o.DisableAutomaticCompactions = true }
	b := openTest(t, cfg)
	kv, _ := NewValueState(b, "kv", StringCodec{})
	rng := rand.New(rand.NewPCG(61, 62))
	want := model{}
	for range 4 {
		mutate(t, rng, kv, want, 1000)
		_ = flushDB(b)
	}
	s, err := b.Snapshot(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	want1 := want.clone()
	before, _ := b.DB().SSTables()
	mutate(t, rng, kv, want, 1000)
	if err := flushDB(b); err != nil {
		t.Fatal(err)
	}
	if err := b.DB().Compact(context.Background(), []byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	after, _ := b.DB().SSTables()
	live := map[uint64]bool{}
	for _, lvl := range after {
		for _, f := range lvl {
			live[uint64(f.FileNum)] = true
		}
	}
	gone := 0
	for _, lvl := range before {
		for _, f := range lvl {
			if !live[uint64(f.FileNum)] {
				gone++
			}
		}
	}
	if gone == 0 {
		t.Fatal("the compaction deleted no file the snapshot holds: the test exercises nothing")
	}
	res, err := s.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := restoreTest(t, testConfig(t, store, t.TempDir()), res.Handle)
	if !maps.Equal(dump(t, r), want1) {
		t.Fatal("snapshot restored wrong state after its files were compacted away")
	}
}

// Close leaves finished (possibly acknowledged) snapshots for the
// coordinator to complete, and cleans up unfinished ones.
func TestCloseKeepsFinishedSnapshots(t *testing.T) {
	ctx := context.Background()
	store, _ := newStore(t)
	b := openTest(t, testConfig(t, store, t.TempDir()))
	kv, _ := NewValueState(b, "kv", StringCodec{})
	want := model{}
	mutate(t, rand.New(rand.NewPCG(71, 72)), kv, want, 2000)
	_ = flushDB(b)
	res := snapshotNow(t, b, 1, "")
	mutate(t, rand.New(rand.NewPCG(73, 74)), kv, model{}, 2000)
	_ = flushDB(b)
	unfinished, err := b.Snapshot(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := unfinished.Run(ctx); err == nil {
		t.Fatal("snapshot ran after Close")
	}
	r := restoreTest(t, testConfig(t, store, t.TempDir()), res.Handle)
	if !maps.Equal(dump(t, r), want) {
		t.Fatal("finished snapshot damaged by Close")
	}
	for _, k := range listKeys(t, store, "") {
		if strings.HasPrefix(k, "chk-2/") {
			t.Fatalf("unfinished snapshot left %s", k)
		}
	}
}

// The operator state can be replaced between the synchronous and the
// asynchronous part (a sink learns its pre-committed handles late).
func TestSetOperatorStateBeforeRun(t *testing.T) {
	store, _ := newStore(t)
	b := openTest(t, testConfig(t, store, t.TempDir()))
	s, err := b.Snapshot(1, []byte("early"))
	if err != nil {
		t.Fatal(err)
	}
	late := []byte("late")
	s.SetOperatorState(late)
	late[0] = 'X' // the snapshot keeps its own copy
	res, err := s.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := restoreTest(t, testConfig(t, store, t.TempDir()), res.Handle)
	if got := string(r.Restored().OperatorState); got != "late" {
		t.Fatalf("operator state %q, want late", got)
	}
}

// Two pending snapshots whose WAL did not grow in between share one WAL
// piece: the second takes the first's upload, checksum included (it used to
// build a manifest with an empty checksum), and restores exactly.
func TestPendingSnapshotsShareWALPiece(t *testing.T) {
	store, _ := newStore(t)
	b := openTest(t, testConfig(t, store, t.TempDir()))
	kv, _ := NewValueState(b, "kv", StringCodec{})
	rng := rand.New(rand.NewPCG(7, 8))
	want := model{}
	mutate(t, rng, kv, want, 3000)
	s1, err := b.Snapshot(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := b.Snapshot(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s1.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	res2, err := s2.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res2.ReusedFiles == 0 {
		t.Fatal("snapshot 2 reused nothing: the test exercises nothing")
	}
	r := restoreTest(t, testConfig(t, store, t.TempDir()), res2.Handle)
	if got := dump(t, r); !maps.Equal(got, want) {
		t.Fatalf("restored %d keys, want %d", len(got), len(want))
	}
}

// A database that holds nothing is snapshotted as a manifest with no files
// and no local copy; restoring it opens an empty database, which snapshots
// the same way until the first write, after which snapshots carry files
// again (and a delete still counts as a write).
func TestEmptyDatabaseSnapshotHasNoFiles(t *testing.T) {
	ctx := context.Background()
	store, fb := newStore(t)
	cfg := testConfig(t, store, t.TempDir())
	b := openTest(t, cfg)
	fb.takeUploads()
	res := snapshotNow(t, b, 1, "offsets@1")
	if len(res.Manifest.Files) != 0 || res.UploadedFiles != 0 || res.StateBytes != 0 {
		t.Fatalf("empty snapshot: %d files, %d uploaded, %d bytes", len(res.Manifest.Files), res.UploadedFiles, res.StateBytes)
	}
	if up := fb.takeUploads(); len(up) != 1 || up[0] != testJob+"/"+res.Handle {
		t.Fatalf("empty snapshot uploaded %q, want only its manifest %s", up, res.Handle)
	}
	if names, err := b.fs.List(b.snapDir); err != nil || len(names) != 0 {
		t.Fatalf("empty snapshot left a local copy: %q (%v)", names, err)
	}
	if err := b.NotifyComplete(ctx, 1); err != nil {
		t.Fatal(err)
	}
	_ = b.Close(ctx)

	// Restored, with and without the directory it was taken in.
	for _, dir := range []string{cfg.Dir, t.TempDir()} {
		r := restoreTest(t, testConfig(t, store, dir), res.Handle)
		if got := dump(t, r); len(got) != 0 {
			t.Fatalf("restored %d keys from an empty snapshot", len(got))
		}
		if got := string(r.Restored().OperatorState); got != "offsets@1" {
			t.Fatalf("operator state = %q", got)
		}
		if again := snapshotNow(t, r, 2, "offsets@2"); len(again.Manifest.Files) != 0 {
			t.Fatalf("restored empty database: snapshot has %d files", len(again.Manifest.Files))
		}
		kv, err := NewValueState(r, "kv", StringCodec{})
		if err != nil {
			t.Fatal(err)
		}
		put(t, kv, "k", "v")
		full := snapshotNow(t, r, 3, "offsets@3")
		if len(full.Manifest.Files) == 0 {
			t.Fatal("snapshot after a write lists no files")
		}
		if err := r.NotifyComplete(ctx, 3); err != nil {
			t.Fatal(err)
		}
		_ = r.Close(ctx)
		r2 := restoreTest(t, testConfig(t, store, t.TempDir()), full.Handle)
		if got := dump(t, r2); !maps.Equal(got, model{"k": "v"}) {
			t.Fatalf("restored %v, want k=v", got)
		}
		_ = r2.Close(ctx)
	}

	// A delete of a key that was never there still takes the full path:
	// emptiness is tracked by writes, not by content.
	b2 := openTest(t, testConfig(t, store, t.TempDir()))
	kv, err := NewValueState(b2, "kv", StringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	del(t, kv, "nothing")
	if res := snapshotNow(t, b2, 10, ""); len(res.Manifest.Files) == 0 {
		t.Fatal("snapshot after a delete lists no files")
	}
}

// The operator state function runs after every file is uploaded and before
// the manifest: what it waits for (a sink's flush) overlaps the uploads. If
// it fails, Run fails with its error and leaves nothing behind.
func TestOperatorStateFuncAfterUploads(t *testing.T) {
	ctx := context.Background()
	store, fb := newStore(t)
	b := openTest(t, testConfig(t, store, t.TempDir()))
	kv, _ := NewValueState(b, "kv", StringCodec{})
	put(t, kv, "k", "v")
	fb.takeUploads()
	s, err := b.Snapshot(1, []byte("ignored"))
	if err != nil {
		t.Fatal(err)
	}
	var before []string
	s.SetOperatorStateFunc(func(context.Context) ([]byte, error) {
		before = fb.takeUploads()
		return []byte("handles"), nil
	})
	res, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != res.UploadedFiles || len(before) == 0 {
		t.Fatalf("%d objects uploaded before the operator state was asked for, want all %d files", len(before), res.UploadedFiles)
	}
	if after := fb.takeUploads(); len(after) != 1 || after[0] != testJob+"/"+res.Handle {
		t.Fatalf("uploaded after the operator state: %q, want only the manifest", after)
	}
	if got := string(res.Manifest.OperatorState); got != "handles" {
		t.Fatalf("operator state %q", got)
	}
	if err := b.NotifyComplete(ctx, 1); err != nil {
		t.Fatal(err)
	}

	put(t, kv, "k2", "v2")
	s2, err := b.Snapshot(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	flush := errors.New("flush failed")
	s2.SetOperatorStateFunc(func(context.Context) ([]byte, error) { return nil, flush })
	if _, err := s2.Run(ctx); !errors.Is(err, flush) {
		t.Fatalf("Run = %v, want the operator state's error", err)
	}
	if keys := listKeys(t, store, objstore.CheckpointPrefix(2)); len(keys) != 0 {
		t.Fatalf("failed snapshot left %q", keys)
	}
	if _, err := b.fs.Stat(b.snapPath(2)); err == nil {
		t.Fatal("failed snapshot left its local copy")
	}
	// Its shared uploads are gone too: only checkpoint 1's remain.
	var want []string
	for _, f := range res.Manifest.Files {
		for _, p := range f.Parts {
			want = append(want, p.Key)
		}
		if f.Shared {
			want = append(want, f.Key)
		}
	}
	slices.Sort(want)
	if got := listKeys(t, store, objstore.SharedPrefix("")); !slices.Equal(got, want) {
		t.Fatalf("shared objects after the failed snapshot: %q, want checkpoint 1's %q", got, want)
	}
	res3 := snapshotNow(t, b, 3, "")
	r := restoreTest(t, testConfig(t, store, t.TempDir()), res3.Handle)
	if got := dump(t, r); !maps.Equal(got, model{"k": "v", "k2": "v2"}) {
		t.Fatalf("restored %v", got)
	}
}

// A savepoint neither subsumes a checkpoint still pending nor is subsumed by
// a newer one, as in the coordinator: either may still complete, and its
// files must be there. A periodic checkpoint still subsumes older ones.
func TestSavepointsNeitherSubsumeNorAreSubsumed(t *testing.T) {
	ctx := context.Background()
	store, _ := newStore(t)
	b := openTest(t, testConfig(t, store, t.TempDir()))
	kv, err := NewValueState(b, "kv", StringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	want := model{}
	savepoint := func(id ckpt.ID, name string) *SnapshotResult {
		s, err := b.Savepoint(id, name, []byte("sp"))
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	restorable := func(what string, res *SnapshotResult, want model) {
		t.Helper()
		r, err := Restore(ctx, testConfig(t, store, t.TempDir()), res.Handle)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer func() { _ = r.Close(ctx) }()
		if got := dump(t, r); !maps.Equal(got, want) {
			t.Fatalf("%s: restored %d keys, want %d", what, len(got), len(want))
		}
	}
	mutate(t, rng, kv, want, 500)
	c1, w1 := snapshotNow(t, b, 1, "c1"), want.clone()
	mutate(t, rng, kv, want, 500)
	s2, w2 := savepoint(2, "sp2"), want.clone()
	if err := b.NotifyComplete(ctx, 2); err != nil {
		t.Fatal(err)
	}
	restorable("checkpoint 1 after savepoint 2 completed", c1, w1)
	mutate(t, rng, kv, want, 500)
	_ = flushDB(b)
	s3, w3 := savepoint(3, "sp3"), want.clone()
	mutate(t, rng, kv, want, 500)
	c4, w4 := snapshotNow(t, b, 4, "c4"), want.clone()
	if err := b.NotifyComplete(ctx, 4); err != nil {
		t.Fatal(err)
	}
	restorable("savepoint 3 after checkpoint 4 completed", s3, w3)
	restorable("savepoint 2", s2, w2)
	restorable("checkpoint 4", c4, w4)
	if _, err := Restore(ctx, testConfig(t, store, t.TempDir()), c1.Handle); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("checkpoint 1, subsumed by checkpoint 4: restore error %v, want not found", err)
	}
}
