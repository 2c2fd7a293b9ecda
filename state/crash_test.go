package state

import (
	"context"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// clones collects crash clones of a crashable MemFS taken at chosen moments.
type clones struct {
	mu  sync.Mutex
	fs  *vfs.MemFS
	rng *rand.Rand
	at  []string
	fss []*vfs.MemFS
}

func (c *clones) take(where string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pct := []int{0, 50, 100}[len(c.fss)%3]
	c.fss = append(c.fss, c.fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: c.rng}))
	c.at = append(c.at, where)
}

// What survives a crash at any point of a snapshot's asynchronous part, or
// of a restore, always restores to exactly the checkpoint asked for: locally
// when the local copy was recorded durably, by download otherwise.
func TestCrashDuringSnapshotAndRestore(t *testing.T) {
	ctx := context.Background()
	store, fb := newStore(t)
	fs := vfs.NewCrashableMem()
	cfg := memFSConfig(t, store, fs)
	b := openTest(t, cfg)
	kv, _ := NewValueState(b, "kv", StringCodec{})
	rng := rand.New(rand.NewPCG(31, 32))
	want := model{}
	mutate(t, rng, kv, want, 2000)
	_ = flushDB(b)
	r1 := snapshotNow(t, b, 1, "")
	_ = b.NotifyComplete(ctx, 1)
	want1 := want.clone()

	c := &clones{fs: fs, rng: rand.New(rand.NewPCG(1, 1))}
	mutate(t, rng, kv, want, 2000)
	_ = flushDB(b)
	mutate(t, rng, kv, want, 200)
	s2, err := b.Snapshot(2, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.take("after sync part")
	fb.onPut = func(key string) { c.take("before upload " + key) }
	r2, err := s2.Run(ctx)
	fb.onPut = nil
	if err != nil {
		t.Fatal(err)
	}
	c.take("after async part")
	_ = b.NotifyComplete(ctx, 2)
	c.take("after notify")
	want2 := want.clone()

	restoreOn := func(fs vfs.FS, handle string, want model, where string) bool {
		t.Helper()
		rc := cfg
		rc.FS = fs
		r, err := Restore(ctx, rc, handle)
		if err != nil {
			t.Fatalf("crash %s: restore %s: %v", where, handle, err)
		}
		defer r.Close(ctx)
		if !maps.Equal(dump(t, r), want) {
			t.Fatalf("crash %s: restore %s: wrong state", where, handle)
		}
		return r.RestoreInfo().Local
	}
	sawLocal, sawDownload := false, false
	for i, cfs := range c.fss {
		where := c.at[i]
		// Crash during a restore too: clone the clone while downloading.
		var inner *clones
		if i%2 == 0 {
			inner = &clones{fs: cfs, rng: rand.New(rand.NewPCG(2, uint64(i)))}
			fb.onRead = func(key string) {
				if !strings.HasSuffix(key, ".manifest") {
					inner.take("restore reading " + key)
				}
			}
		}
		local2 := restoreOn(cfs, r2.Handle, want2, where)
		fb.onRead = nil
		if local2 {
			sawLocal = true
		} else {
			sawDownload = true
		}
		if strings.HasPrefix(where, "after") && where != "after sync part" && !local2 {
			t.Errorf("crash %s: local copy of a finished snapshot not used", where)
		}
		restoreOn(cfs, r1.Handle, want1, where)
		if inner != nil {
			for j, ifs := range inner.fss {
				restoreOn(ifs, r2.Handle, want2, where+", then during restore "+inner.at[j])
			}
		}
	}
	if !sawLocal || !sawDownload {
		t.Fatalf("crash points exercised local=%v download=%v; want both", sawLocal, sawDownload)
	}
	// The live database itself is never trusted after a crash: its syncs are
	// no-ops. Restore never opens it; Open discards it.
	b2 := openTest(t, Config{Dir: cfg.Dir, Task: "t0", Store: store, FS: c.fss[0]})
	if len(dump(t, b2)) != 0 {
		t.Fatal("Open kept state")
	}
}

func TestWriteFileAtomicCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	if err := mkdirAllSync(fs, "/d"); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(fs, "/d/f", []byte("old")); err != nil {
		t.Fatal(err)
	}
	crash := fs.CrashClone(vfs.CrashCloneCfg{})
	if got, _ := readFile(crash, "/d/f"); string(got) != "old" {
		t.Fatalf("synced file lost: %q", got)
	}
	// Write a new version but crash before the rename is synced: either
	// version may survive, never a mix or nothing.
	rng := rand.New(rand.NewPCG(3, 3))
	for i := range 20 {
		f, _ := fs.Create("/d/f.tmp", vfs.WriteCategoryUnspecified)
		_, _ = f.Write([]byte("new-content"))
		_ = f.Sync()
		_ = f.Close()
		_ = fs.Rename("/d/f.tmp", "/d/f")
		crash := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rng})
		got, err := readFile(crash, "/d/f")
		if err != nil || (string(got) != "old" && string(got) != "new-content") {
			t.Fatalf("round %d: %q %v", i, got, err)
		}
		if err := writeFileAtomic(fs, "/d/f", []byte("old")); err != nil {
			t.Fatal(err)
		}
	}
}
