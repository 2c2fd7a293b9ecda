package state

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// diskUsage is what the files under dir occupy on disk (allocated blocks,
// each inode once: a snapshot's hard links share their database's files).
func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	seen := map[uint64]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // Pebble deleted an obsolete file meanwhile
		}
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		st := info.Sys().(*syscall.Stat_t)
		if !seen[st.Ino] {
			seen[st.Ino] = true
			total += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// TestFreshStateIsSmallOnDisk: a task's state directory, opened with the
// default memtable size (64 MiB), written to, snapshotted twice and
// restored, occupies what it holds, not a preallocated WAL per task
// (Pebble preallocates 110% of the memtable size for each WAL file, 71 MB a
// task, though the live database never syncs: liveFS).
func TestFreshStateIsSmallOnDisk(t *testing.T) {
	store, _ := newStore(t)
	cfg := testConfig(t, store, t.TempDir())
	cfg.MemTableSize = 0 // the default, what a task runs with
	b := openTest(t, cfg)
	kv, err := NewValueState(b, "kv", StringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	// Two snapshots: Pebble preallocates a WAL at its second write.
	for i := range 1000 {
		put(t, kv, "k"+strconv.Itoa(i), "v"+strconv.Itoa(i))
	}
	snapshotNow(t, b, 1, "one")
	for i := range 1000 {
		put(t, kv, "k"+strconv.Itoa(i), "w"+strconv.Itoa(i))
	}
	const limit = 4 << 20
	res := snapshotNow(t, b, 2, "two")
	got := diskUsage(t, cfg.Dir)
	if got > limit {
		t.Errorf("a fresh task's state directory occupies %d bytes on disk after two snapshots, want at most %d", got, limit)
	}
	t.Logf("the state directory occupies %d bytes on disk after two snapshots", got)
	if err := b.Close(t.Context()); err != nil {
		t.Fatal(err)
	}

	// A restore from the snapshot (local recovery) reopens the database: no
	// preallocation there either, and the state is intact.
	r := restoreTest(t, cfg, res.Handle)
	if got := diskUsage(t, cfg.Dir); got > limit {
		t.Errorf("the restored task's state directory occupies %d bytes on disk, want at most %d", got, limit)
	}
	kv2, err := NewValueState(r, "kv", StringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	r.SetCurrentKey([]byte("k999"))
	if v, ok, err := kv2.Get(); err != nil || !ok || v != "w999" {
		t.Fatalf("restored k999 = %q, %v, %v; want w999", v, ok, err)
	}
}
