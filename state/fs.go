package state

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// liveFS is the filesystem the live Pebble database runs on.
//
// Every sync is a no-op. The live database is never reopened after a crash
// — a task always restores from a snapshot (local or downloaded), exactly as
// Flink runs RocksDB with the WAL disabled — so paying for its durability
// would only slow down writes and the synchronous part of a snapshot. The
// snapshot directory is made durable in the asynchronous part, with real
// syncs on the underlying filesystem, before it is recorded as a local
// recovery copy.
//
// Nothing is preallocated either (noSyncFile.Preallocate): a WAL occupies
// the bytes written to it.
//
// WAL files are never recycled (ReuseForWrite creates a new file), so a WAL
// file only ever grows by appends. That lets the synchronous part capture a
// WAL by hard link plus its current length instead of copying it: while a
// capture is armed, Pebble's Checkpoint copy of a WAL file becomes a hard
// link (the copy reads nothing), and the length at that moment is recorded;
// the asynchronous part uploads only that prefix, and only the part of it
// that an earlier, confirmed snapshot has not uploaded yet.
//
// SST hard links are deferred the same way: while a capture is armed, a Link
// from the database directory into the snapshot directory only records the
// pair, which makes the synchronous part independent of the number of files.
// The links are made by materialize in the asynchronous part or, if Pebble
// deletes the source first (a compaction made it obsolete), by Remove just
// before it deletes it: SSTs are immutable, so the link made later has the
// content the file had at the barrier.
type liveFS struct {
	vfs.FS
	mu       sync.Mutex
	capture  *walCapture         // non-nil while a synchronous part runs
	deferred map[string][]string // source path -> link paths not made yet
}

type walCapture struct {
	srcDir, dstDir string
	lengths        map[string]int64 // WAL file name -> length at the barrier
}

// Link defers links into the snapshot directory of an armed capture.
func (fs *liveFS) Link(oldname, newname string) error {
	fs.mu.Lock()
	if c := fs.capture; c != nil && fs.PathDir(newname) == c.dstDir && fs.PathDir(oldname) == c.srcDir {
		if fs.deferred == nil {
			fs.deferred = make(map[string][]string)
		}
		fs.deferred[oldname] = append(fs.deferred[oldname], newname)
		fs.mu.Unlock()
		return nil
	}
	fs.mu.Unlock()
	return fs.FS.Link(oldname, newname)
}

// Remove makes the deferred links of name before deleting it.
func (fs *liveFS) Remove(name string) error {
	fs.mu.Lock()
	links := fs.deferred[name]
	delete(fs.deferred, name)
	var errs []error
	for _, l := range links {
		if err := fs.FS.Link(name, l); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err) // the snapshot will miss the file and fail
		}
	}
	fs.mu.Unlock()
	return errors.Join(append(errs, fs.FS.Remove(name))...)
}

// materialize makes the deferred links into dir.
func (fs *liveFS) materialize(dir string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for src, links := range fs.deferred {
		keep := links[:0]
		for _, l := range links {
			if fs.PathDir(l) != dir {
				keep = append(keep, l)
				continue
			}
			if err := fs.FS.Link(src, l); err != nil {
				return fmt.Errorf("link %s: %w", l, err)
			}
		}
		if len(keep) == 0 {
			delete(fs.deferred, src)
		} else {
			fs.deferred[src] = keep
		}
	}
	return nil
}

// forget drops the deferred links into dir (its snapshot was dropped).
func (fs *liveFS) forget(dir string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for src, links := range fs.deferred {
		keep := links[:0]
		for _, l := range links {
			if fs.PathDir(l) != dir {
				keep = append(keep, l)
			}
		}
		if len(keep) == 0 {
			delete(fs.deferred, src)
		} else {
			fs.deferred[src] = keep
		}
	}
}

// startCapture arms the WAL capture for a checkpoint of srcDir into dstDir.
func (fs *liveFS) startCapture(srcDir, dstDir string) {
	fs.mu.Lock()
	fs.capture = &walCapture{srcDir: srcDir, dstDir: dstDir, lengths: make(map[string]int64)}
	fs.mu.Unlock()
}

// endCapture disarms the capture and returns the captured WAL lengths.
func (fs *liveFS) endCapture() map[string]int64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	c := fs.capture
	fs.capture = nil
	if c == nil {
		return nil
	}
	return c.lengths
}

func isWAL(name string) bool { return strings.HasSuffix(name, ".log") }

func (fs *liveFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	fs.mu.Lock()
	capt := fs.capture
	fs.mu.Unlock()
	if capt != nil && isWAL(name) && fs.PathDir(name) == capt.dstDir {
		src := fs.PathJoin(capt.srcDir, fs.PathBase(name))
		if err := fs.FS.Link(src, name); err != nil {
			return nil, err
		}
		f, err := fs.FS.Open(name)
		if err != nil {
			return nil, err
		}
		st, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return nil, err
		}
		fs.mu.Lock()
		capt.lengths[fs.PathBase(name)] = st.Size()
		fs.mu.Unlock()
		return discardWrites{f}, nil
	}
	f, err := fs.FS.Create(name, c)
	return wrapNoSync(f, err)
}

func (fs *liveFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	if err != nil {
		return nil, err
	}
	fs.mu.Lock()
	capt := fs.capture
	fs.mu.Unlock()
	if capt != nil && isWAL(name) && fs.PathDir(name) == capt.srcDir {
		return emptyReads{f}, nil // the copy is a link (Create above)
	}
	return noSyncFile{f}, nil
}

func (fs *liveFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return wrapNoSync(f, err)
}

func (fs *liveFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	return wrapNoSync(f, err)
}

// ReuseForWrite does not recycle: it removes oldname and creates newname, so
// that a WAL file captured by a hard link is never overwritten.
func (fs *liveFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.FS.Remove(oldname); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return fs.Create(newname, c)
}

func (fs *liveFS) Unwrap() vfs.FS { return fs.FS }

func wrapNoSync(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

type noSyncFile struct{ vfs.File }

func (noSyncFile) Sync() error     { return nil }
func (noSyncFile) SyncData() error { return nil }

// Preallocate allocates nothing. Pebble preallocates each WAL file in
// blocks of 110% of the memtable size (71 MB at the default 64 MiB) so that
// its fdatasyncs need not update the file's size; the live database never
// syncs, so the blocks bought nothing but disk: 71 MB a task, kept alive by
// the snapshots' hard links to the WAL as well.
func (noSyncFile) Preallocate(_, _ int64) error { return nil }

// SyncTo only starts writeback (Pebble calls it every BytesPerSync bytes).
func (f noSyncFile) SyncTo(length int64) (bool, error) {
	startWriteback(f.File, length)
	return false, nil
}

// emptyReads reads as an empty file.
type emptyReads struct{ vfs.File }

func (emptyReads) Read([]byte) (int, error) { return 0, io.EOF }

// discardWrites accepts and drops writes.
type discardWrites struct{ vfs.File }

func (discardWrites) Write(p []byte) (int, error)            { return len(p), nil }
func (discardWrites) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }
func (discardWrites) Preallocate(_, _ int64) error           { return nil }
func (discardWrites) Sync() error                            { return nil }
func (discardWrites) SyncData() error                        { return nil }
func (discardWrites) SyncTo(int64) (bool, error)             { return true, nil }

// syncDir fsyncs a directory, so that the names created in it survive a crash.
func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return d.Close()
}

// syncFile fsyncs an existing file.
func syncFile(fs vfs.FS, name string) error {
	f, err := fs.OpenReadWrite(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("open %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", name, err)
	}
	return nil
}

// writeFileAtomic writes data to name crash-safely: to name+".tmp", synced,
// renamed over name, directory synced. After a crash name holds either the
// old content or data, never a mix.
func writeFileAtomic(fs vfs.FS, name string, data []byte) error {
	tmp := name + ".tmp"
	if err := writeFileSync(fs, tmp, data); err != nil {
		return err
	}
	if err := fs.Rename(tmp, name); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return syncDir(fs, fs.PathDir(name))
}

// writeFileSync creates name with data and syncs it; the caller syncs the
// directory.
func writeFileSync(fs vfs.FS, name string, data []byte) error {
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync %s: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", name, err)
	}
	return nil
}

// readFile reads a whole file.
func readFile(fs vfs.FS, name string) ([]byte, error) {
	f, err := fs.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// exists reports whether name exists.
func exists(fs vfs.FS, name string) bool {
	_, err := fs.Stat(name)
	return err == nil
}

// mkdirAllSync creates dir and its missing parents and syncs every parent
// whose entries changed, so that the new directories survive a crash.
func mkdirAllSync(fs vfs.FS, dir string) error {
	var created []string
	for d := dir; ; {
		if _, err := fs.Stat(d); err == nil {
			break
		}
		created = append(created, d)
		parent := fs.PathDir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if len(created) == 0 {
		return nil
	}
	if err := fs.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("mkdir %s: %w", dir, err)
	}
	for _, d := range created {
		if err := syncDir(fs, fs.PathDir(d)); err != nil {
			return err
		}
	}
	return nil
}
