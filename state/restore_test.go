package state

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"gocloud.dev/blob/memblob"

	"github.com/weir-stream/weir/state/objstore"
)

func oneCheckpoint(t *testing.T, store *objstore.Store, dir string) (*Backend, *SnapshotResult, model) {
	t.Helper()
	cfg := testConfig(t, store, dir)
	b := openTest(t, cfg)
	kv, _ := NewValueState(b, "kv", StringCodec{})
	want := model{}
	mutate(t, rand.New(rand.NewPCG(21, 22)), kv, want, 3000)
	_ = flushDB(b)
	mutate(t, rand.New(rand.NewPCG(23, 24)), kv, want, 300) // some in the WAL only
	res := snapshotNow(t, b, 1, "ops")
	if err := b.NotifyComplete(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	return b, res, want
}

// A missing or corrupt file fails the restore with an error that names the
// file and the checkpoint; nothing half-restored is left to open.
func TestRestoreMissingOrCorruptFile(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		damage func(store *objstore.Store, key string)
		want   error
	}{
		{"missing", func(s *objstore.Store, k string) { _ = s.Delete(ctx, k) }, ErrMissingFile},
		{"truncated", func(s *objstore.Store, k string) {
			d, _ := s.Get(ctx, k)
			_ = s.Put(ctx, k, d[:len(d)-1])
		}, ErrCorruptFile},
		{"bit flip", func(s *objstore.Store, k string) {
			d, _ := s.Get(ctx, k)
			d[len(d)/2] ^= 1
			_ = s.Put(ctx, k, d)
		}, ErrCorruptFile},
	} {
		for _, shared := range []bool{true, false} {
			t.Run(tc.name+map[bool]string{true: " sst", false: " wal"}[shared], func(t *testing.T) {
				store, _ := newStore(t)
				_, res, _ := oneCheckpoint(t, store, t.TempDir())
				var victim FileEntry
				for _, f := range res.Manifest.Files {
					if f.Shared == shared && (shared || strings.HasSuffix(f.Name, ".log")) {
						victim = f
					}
				}
				if victim.Name == "" {
					t.Fatal("no file to damage")
				}
				if len(victim.Parts) > 0 {
					victim.Key = victim.Parts[len(victim.Parts)-1].Key
				}
				tc.damage(store, victim.Key)
				dir := t.TempDir()
				_, err := Restore(ctx, testConfig(t, store, dir), res.Handle)
				if !errors.Is(err, tc.want) {
					t.Fatalf("restore error %v, want %v", err, tc.want)
				}
				var fe *FileError
				if !errors.As(err, &fe) || fe.File != victim.Name || fe.Key != victim.Key || fe.Checkpoint != 1 {
					t.Fatalf("error does not name the file and checkpoint: %v", err)
				}
				if !strings.Contains(err.Error(), victim.Name) || !strings.Contains(err.Error(), "checkpoint 1") {
					t.Fatalf("message lacks file or checkpoint: %v", err)
				}
				if exists(vfs.Default, dir+"/db") || exists(vfs.Default, dir+"/restore.tmp") {
					t.Fatal("failed restore left a database directory")
				}
			})
		}
	}
	t.Run("missing manifest", func(t *testing.T) {
		store, _ := newStore(t)
		_, err := Restore(ctx, testConfig(t, store, t.TempDir()), objstore.TaskManifestKey(9, "t0"))
		if !errors.Is(err, objstore.ErrNotFound) || !strings.Contains(err.Error(), "chk-9/t0.manifest") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("corrupt manifest", func(t *testing.T) {
		store, _ := newStore(t)
		_, res, _ := oneCheckpoint(t, store, t.TempDir())
		_ = store.Put(ctx, res.Handle, []byte(`{"v":1,"task":"t0","checkpoint":1,"files":[{"name":"x"}]}`))
		_, err := Restore(ctx, testConfig(t, store, t.TempDir()), res.Handle)
		if !errors.Is(err, ErrManifest) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("other task", func(t *testing.T) {
		store, _ := newStore(t)
		_, res, _ := oneCheckpoint(t, store, t.TempDir())
		cfg := testConfig(t, store, t.TempDir())
		cfg.Task = "t1"
		if _, err := Restore(ctx, cfg, res.Handle); !errors.Is(err, ErrManifest) {
			t.Fatalf("err = %v", err)
		}
	})
}

// Restore reuses the local copy when it is exactly the snapshot, and
// downloads otherwise.
func TestLocalRecovery(t *testing.T) {
	ctx := context.Background()
	store, fb := newStore(t)
	dir := t.TempDir()
	b, res, want := oneCheckpoint(t, store, dir)
	// Changes after the checkpoint must not leak into the restore.
	kv, _ := NewValueState(b, "kv", StringCodec{})
	put(t, kv, "after", "checkpoint")
	_ = flushDB(b)
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, store, dir)
	// Local recovery reads nothing from the store but the manifest.
	fb.fail("read", "shared/", -1, false)
	fb.fail("read", "/t0/", -1, false)
	r := restoreTest(t, cfg, res.Handle)
	fb.clear()
	if !r.RestoreInfo().Local || r.RestoreInfo().DownloadedBytes != 0 {
		t.Fatalf("restore info %+v, want local recovery", r.RestoreInfo())
	}
	if !maps.Equal(dump(t, r), want) {
		t.Fatal("local recovery restored wrong state")
	}
	// Writing on and restoring locally again still gives the checkpoint.
	kv2, _ := NewValueState(r, "kv", StringCodec{})
	put(t, kv2, "x", "y")
	_ = flushDB(r)
	_ = r.Close(ctx)
	r = restoreTest(t, cfg, res.Handle)
	if !r.RestoreInfo().Local || !maps.Equal(dump(t, r), want) {
		t.Fatal("second local recovery wrong")
	}
	_ = r.Close(ctx)

	// A damaged local copy (wrong size) is not used.
	snap := dir + "/snap/1"
	names, _ := vfs.Default.List(snap)
	for _, n := range names {
		if strings.HasSuffix(n, ".sst") {
			f, _ := vfs.Default.OpenReadWrite(snap+"/"+n, vfs.WriteCategoryUnspecified)
			fi, _ := f.Stat()
			_, _ = f.WriteAt([]byte("garbage!"), fi.Size())
			_ = f.Close()
			break
		}
	}
	r = restoreTest(t, cfg, res.Handle)
	if r.RestoreInfo().Local || !maps.Equal(dump(t, r), want) {
		t.Fatalf("damaged local copy: %+v", r.RestoreInfo())
	}
	_ = r.Close(ctx)

	// Same size, different content: only found with VerifyLocalChecksums.
	b2, res2, want2 := oneCheckpoint(t, store, t.TempDir())
	dir2 := b2.cfg.Dir
	_ = b2.Close(ctx)
	names, _ = vfs.Default.List(dir2 + "/snap/1")
	for _, n := range names {
		if strings.HasSuffix(n, ".sst") {
			f, _ := vfs.Default.OpenReadWrite(dir2+"/snap/1/"+n, vfs.WriteCategoryUnspecified)
			_, _ = f.WriteAt([]byte{0xff}, 100)
			_ = f.Close()
		}
	}
	cfg2 := testConfig(t, store, dir2)
	cfg2.VerifyLocalChecksums = true
	r = restoreTest(t, cfg2, res2.Handle)
	if r.RestoreInfo().Local || !maps.Equal(dump(t, r), want2) {
		t.Fatalf("corrupt local copy used: %+v", r.RestoreInfo())
	}
	_ = r.Close(ctx)

	// DisableLocalRecovery always downloads.
	cfg.DisableLocalRecovery = true
	r = restoreTest(t, cfg, res.Handle)
	if r.RestoreInfo().Local || r.RestoreInfo().DownloadedBytes == 0 {
		t.Fatalf("DisableLocalRecovery: %+v", r.RestoreInfo())
	}
}

// Open discards whatever the directory held.
func TestOpenStartsEmpty(t *testing.T) {
	store, _ := newStore(t)
	dir := t.TempDir()
	b, _, _ := oneCheckpoint(t, store, dir)
	_ = b.Close(context.Background())
	b2 := openTest(t, testConfig(t, store, dir))
	if got := dump(t, b2); len(got) != 0 {
		t.Fatalf("Open kept %d keys", len(got))
	}
	if b2.Restored() != nil {
		t.Fatal("Restored() of an empty backend")
	}
}

// Small files live in the manifest (inline): a restore from a fresh
// directory writes them from there; inline data that does not match its
// checksum, or that a version-1 manifest claims, makes the manifest
// invalid; and a version-1 manifest, which has no inline files, restores
// as before.
func TestInlineFiles(t *testing.T) {
	ctx := context.Background()
	store, _ := newStore(t)
	_, res, want := oneCheckpoint(t, store, t.TempDir())
	inline := 0
	for _, f := range res.Manifest.Files {
		if f.Inline {
			inline++
			if f.Size > InlineMaxBytes || f.Key != "" {
				t.Fatalf("inline file %s: size %d, key %q", f.Name, f.Size, f.Key)
			}
		}
	}
	if inline == 0 {
		t.Fatal("no inline file: the test exercises nothing")
	}
	r := restoreTest(t, testConfig(t, store, t.TempDir()), res.Handle)
	if r.RestoreInfo().Local || !maps.Equal(dump(t, r), want) {
		t.Fatal("restore from a manifest with inline files: wrong state")
	}
	_ = r.Close(ctx)

	damaged := func(edit func(m *Manifest)) error {
		m, err := ReadManifest(ctx, store, res.Handle)
		if err != nil {
			t.Fatal(err)
		}
		edit(m)
		data, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		_, err = DecodeManifest(data)
		return err
	}
	first := func(m *Manifest) *FileEntry {
		for i := range m.Files {
			if m.Files[i].Inline && len(m.Files[i].Data) > 0 {
				return &m.Files[i]
			}
		}
		t.Fatal("no non-empty inline file")
		return nil
	}
	for name, edit := range map[string]func(m *Manifest){
		"flipped byte":   func(m *Manifest) { first(m).Data[0] ^= 0xff },
		"version 1":      func(m *Manifest) { m.Version = 1 },
		"key and inline": func(m *Manifest) { first(m).Key = "chk-1/t0/x" },
		"data, no flag":  func(m *Manifest) { first(m).Inline = false },
	} {
		if err := damaged(edit); !errors.Is(err, ErrManifest) {
			t.Errorf("%s: decode error %v, want ErrManifest", name, err)
		}
	}

	// Version 1: every file an object. Upload the inline ones and restore.
	m, err := ReadManifest(ctx, store, res.Handle)
	if err != nil {
		t.Fatal(err)
	}
	m.Version = 1
	for i := range m.Files {
		f := &m.Files[i]
		if !f.Inline {
			continue
		}
		f.Key = objstore.ExclusiveKey(m.Checkpoint, m.Task, f.Name)
		if err := store.Put(ctx, f.Key, f.Data); err != nil {
			t.Fatal(err)
		}
		f.Inline, f.Data = false, nil
	}
	data, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, res.Handle, data); err != nil {
		t.Fatal(err)
	}
	r1 := restoreTest(t, testConfig(t, store, t.TempDir()), res.Handle)
	if !maps.Equal(dump(t, r1), want) {
		t.Fatal("version-1 manifest restores wrong state")
	}
}

// TestRestoreFromAnotherStore: a restore point the job does not own (a
// checkpoint of another job, read through a read-only store) restores
// exactly, never locally, writes nothing there, and the job's first
// snapshot after it uploads every file into the job's own store.
func TestRestoreFromAnotherStore(t *testing.T) {
	ctx := context.Background()
	old, _ := newStore(t)
	dir := t.TempDir()
	b := openTest(t, testConfig(t, old, dir))
	kv, err := NewValueState(b, "kv", StringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	want := model{}
	mutate(t, rng, kv, want, 2000)
	if err := flushDB(b); err != nil {
		t.Fatal(err)
	}
	mutate(t, rng, kv, want, 500)
	res := snapshotNow(t, b, 5, "offsets@5")
	if err := b.NotifyComplete(ctx, 5); err != nil {
		t.Fatal(err)
	}
	before := listKeys(t, old, "")
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}

	fb := &faultyBucket{Bucket: objstore.FromBlob("mem://", memblob.OpenBucket(nil))}
	mine, err := objstore.New(fb, "new-job", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer mine.Close()
	cfg := testConfig(t, mine, dir) // the same directory: its local copy must not be used
	cfg.RestoreStore = old
	r := restoreTest(t, cfg, res.Handle)
	if r.RestoreInfo().Local {
		t.Fatal("a restore from another store used the local copy")
	}
	if got := dump(t, r); !maps.Equal(got, want) {
		t.Fatalf("restored %d keys, want %d", len(got), len(want))
	}
	if got := string(r.Restored().OperatorState); got != "offsets@5" {
		t.Fatalf("operator state %q", got)
	}
	next := snapshotNow(t, r, 6, "offsets@6")
	m, err := ReadManifest(ctx, mine, next.Handle)
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, f := range m.Files {
		if f.Inline {
			continue
		}
		keys := []string{m.ObjectKey(f)}
		if len(f.Parts) > 0 {
			keys = nil
			for _, p := range f.Parts {
				keys = append(keys, p.Key)
			}
		}
		for _, k := range keys {
			files++
			if _, err := mine.Stat(ctx, k); err != nil {
				t.Errorf("file %s of the first snapshot after the restore is not in the job's store: %v", k, err)
			}
		}
	}
	if files == 0 {
		t.Fatal("the snapshot lists no file: the test shows nothing")
	}
	if after := listKeys(t, old, ""); !slices.Equal(before, after) {
		t.Fatalf("the other store changed: %v -> %v", before, after)
	}
	r2 := restoreTest(t, testConfig(t, mine, t.TempDir()), next.Handle)
	if got := dump(t, r2); !maps.Equal(got, want) {
		t.Fatalf("restored from the job's own snapshot: %d keys, want %d", len(got), len(want))
	}
}
