package state

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// A full or failing local disk (docs/operations.md, "The local state disk").
//
// Pebble cannot go on after a failed write of its WAL or MANIFEST: it
// panics, sometimes with a mutex it has already unlocked (rotateWAL closes
// a WAL whose write failed and panics; its caller's deferred Unlock then
// ends the process with "unlock of unlocked mutex", which no recover can
// catch), or calls its logger's Fatalf, which must not return. So Pebble
// must never see those errors:
//
//   - every file the backend and Pebble touch goes through faultFS, which
//     records the first disk error (ENOSPC, EDQUOT, EIO, EROFS) in the
//     backend's diskFault;
//   - Pebble's own files in the live database directory other than SSTs
//     (WAL, MANIFEST, OPTIONS, markers) go through pebbleFS as well, which
//     reports such a write as done and drops it, after recording the
//     fault. That is safe because the live database is never reopened
//     and never read from those files: a task always restores from a
//     snapshot (its syncs are no-ops already, see liveFS), and no snapshot
//     is taken once the fault is recorded (Snapshot checks Failed before
//     and after Pebble's checkpoint; a snapshot taken before it holds only
//     what was written before it). An SST write fails normally, and
//     Pebble retries the failed flush or compaction as a background
//     error; but once the fault is recorded, new SSTs (and blob files) of
//     the live directory are made in memory (pebbleFS.mem) and read from
//     there. Otherwise a flush that can never succeed is retried in a
//     tight loop (a core busy, a log line each time) and a write that
//     found the memtables full waits for it forever (Pebble's write stall
//     has no way out), so the task never comes back to check Failed: the
//     fault-tolerance test hung so in CI. The memory is bounded: the task
//     stops at its next batch;
//   - the task checks Failed before every batch and stops with the
//     DiskError; Close gives Pebble a few seconds and abandons the database
//     otherwise, and the task is restored from its checkpoint into a
//     fresh directory (with backoff, while the disk is still full);
//   - Fatalf records its message too and never returns: under Guard (the
//     task's loop, opening the database) it panics with a fatalPanic that
//     Guard returns as the error; on Pebble's goroutines it parks the
//     goroutine for good (runtime.Goexit would run deferred Unlocks of
//     mutexes Pebble has released, which ends the process), and the
//     database is abandoned.

// ErrDisk is the sentinel for errors.Is: the local state disk failed.
var ErrDisk = errors.New("state: local disk failed")

// DiskError is the error of a task whose state disk failed.
type DiskError struct {
	Dir string // the task's state directory
	Err error  // the first disk error, or Pebble's fatal message
}

func (e *DiskError) Error() string {
	return fmt.Sprintf("state: the local disk of %s failed (full or failing; see state.dir in docs/operations.md): %v", e.Dir, e.Err)
}

func (e *DiskError) Unwrap() error        { return e.Err }
func (e *DiskError) Is(target error) bool { return target == ErrDisk }

// diskFault is where a backend's first disk failure is recorded. It is
// written from any goroutine (Pebble's, the task's, uploads).
type diskFault struct {
	dir   string
	err   atomic.Pointer[DiskError]
	onSet func() // counts the failure; called once
}

// record keeps the first failure and returns the recorded one.
func (f *diskFault) record(err error) *DiskError {
	de := &DiskError{Dir: f.dir, Err: err}
	if f.err.CompareAndSwap(nil, de) && f.onSet != nil {
		f.onSet()
	}
	return f.err.Load()
}

// get returns the recorded failure, or nil.
func (f *diskFault) get() *DiskError { return f.err.Load() }

// isDiskError reports whether err is an error of the disk itself, rather
// than of a path or a permission.
func isDiskError(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		errors.Is(err, syscall.EIO) || errors.Is(err, syscall.EROFS)
}

// fatalPanic is what Fatalf panics with under Guard.
type fatalPanic struct{ err *DiskError }

// guardFrame is the function whose frame on a goroutine's stack says that
// Guard will recover a fatalPanic there.
const guardFrame = "github.com/weir-stream/weir/state.(*Backend).guard"

// underGuard reports whether the calling goroutine runs under guard.
func underGuard() bool {
	pcs := make([]uintptr, 512)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		fr, more := frames.Next()
		if strings.HasPrefix(fr.Function, guardFrame) {
			return true
		}
		if !more {
			return false
		}
	}
}

// fatal is Pebble's Fatalf: it never returns.
func (f *diskFault) fatal(msg string) {
	de := f.get()
	if de == nil {
		de = f.record(errors.New("pebble: " + msg))
	}
	if underGuard() {
		panic(fatalPanic{de})
	}
	// One of Pebble's goroutines: ending it (runtime.Goexit) would run
	// deferred Unlocks of mutexes Pebble has released, which ends the
	// process. It waits forever instead; the database is abandoned.
	select {}
}

// Guard runs fn, the caller's work on the backend (the task's record
// loop), and returns its error, or the disk failure that ended it: Pebble
// cannot go on after a failed write, and the backend must then be closed
// and the task restored from its checkpoint. Any other panic is not
// recovered.
func (b *Backend) Guard(fn func() error) error { return b.guard(fn) }

func (b *Backend) guard(fn func() error) (err error) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if fp, ok := v.(fatalPanic); ok {
			err = fp.err
			return
		}
		if de := b.fault.get(); de != nil {
			// Pebble panics with the error of a WAL write that failed.
			err = de
			return
		}
		panic(v)
	}()
	return fn()
}

// Failed returns the disk failure the backend recorded, or nil. A backend
// that failed must not be used again: close it and restore the task.
func (b *Backend) Failed() error {
	if de := b.fault.get(); de != nil {
		return de
	}
	return nil
}

// faultFS records the disk errors of the filesystem it wraps.
type faultFS struct {
	vfs.FS
	fault *diskFault
}

func (fs *faultFS) check(err error) error {
	if err != nil && isDiskError(err) {
		fs.fault.record(err)
	}
	return err
}

func (fs *faultFS) wrap(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, fs.check(err)
	}
	return &faultFile{File: f, fs: fs}, nil
}

func (fs *faultFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.Create(name, c))
}

func (fs *faultFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs *faultFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(fs.FS.ReuseForWrite(oldname, newname, c))
}

func (fs *faultFS) Link(oldname, newname string) error {
	return fs.check(fs.FS.Link(oldname, newname))
}

func (fs *faultFS) Rename(oldname, newname string) error {
	return fs.check(fs.FS.Rename(oldname, newname))
}

func (fs *faultFS) MkdirAll(dir string, perm os.FileMode) error {
	return fs.check(fs.FS.MkdirAll(dir, perm))
}

func (fs *faultFS) Unwrap() vfs.FS { return fs.FS }

// faultFile records the disk errors of writes and syncs.
type faultFile struct {
	vfs.File
	fs *faultFS
}

func (f *faultFile) Write(p []byte) (int, error) {
	n, err := f.File.Write(p)
	return n, f.fs.check(err)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.File.WriteAt(p, off)
	return n, f.fs.check(err)
}

func (f *faultFile) Sync() error     { return f.fs.check(f.File.Sync()) }
func (f *faultFile) SyncData() error { return f.fs.check(f.File.SyncData()) }
func (f *faultFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	return full, f.fs.check(err)
}
func (f *faultFile) Preallocate(off, length int64) error {
	return f.fs.check(f.File.Preallocate(off, length))
}
func (f *faultFile) Close() error { return f.fs.check(f.File.Close()) }

// pebbleFS is faultFS as Pebble sees it in the live database directory:
// a disk error on a file there that is not an SST is recorded and the
// write reported as done (see the comment at the top of this file).
type pebbleFS struct {
	vfs.FS // the backend's faultFS
	dir    string
	fault  *diskFault
	// mem holds the tables created after the fault (see the comment at
	// the top of this file); inMem names them. Made at the first such
	// table.
	memMu sync.Mutex
	mem   vfs.FS
	inMem map[string]bool
}

// isTable reports whether name is an SST or blob file of the live directory.
func (fs *pebbleFS) isTable(name string) bool {
	return fs.PathDir(name) == fs.dir && (strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob"))
}

// memTable returns the in-memory FS if name is held there.
func (fs *pebbleFS) memTable(name string) (vfs.FS, bool) {
	fs.memMu.Lock()
	defer fs.memMu.Unlock()
	if fs.inMem[name] {
		return fs.mem, true
	}
	return nil, false
}

// createInMemory creates table name in memory, after the fault.
func (fs *pebbleFS) createInMemory(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	fs.memMu.Lock()
	defer fs.memMu.Unlock()
	if fs.mem == nil {
		fs.mem, fs.inMem = vfs.NewMem(), map[string]bool{}
		if err := fs.mem.MkdirAll(fs.dir, 0o755); err != nil {
			return nil, err
		}
	}
	f, err := fs.mem.Create(name, c)
	if err == nil {
		fs.inMem[name] = true
	}
	return f, err
}

func (fs *pebbleFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if m, ok := fs.memTable(name); ok {
		return m.Open(name, opts...)
	}
	return fs.FS.Open(name, opts...)
}

func (fs *pebbleFS) Stat(name string) (vfs.FileInfo, error) {
	if m, ok := fs.memTable(name); ok {
		return m.Stat(name)
	}
	return fs.FS.Stat(name)
}

func (fs *pebbleFS) Remove(name string) error {
	fs.memMu.Lock()
	if fs.inMem[name] {
		delete(fs.inMem, name)
		m := fs.mem
		fs.memMu.Unlock()
		return m.Remove(name)
	}
	fs.memMu.Unlock()
	return fs.FS.Remove(name)
}

// swallows reports whether a write to name must never fail in Pebble's eyes.
func (fs *pebbleFS) swallows(name string) bool {
	return fs.PathDir(name) == fs.dir && !strings.HasSuffix(name, ".sst") && !strings.HasSuffix(name, ".blob")
}

func (fs *pebbleFS) wrap(name string, create func() (vfs.File, error)) (vfs.File, error) {
	if !fs.swallows(name) {
		return create()
	}
	f, err := create()
	if err != nil {
		if !isDiskError(err) {
			return nil, err
		}
		fs.fault.record(err)
		return &droppedFile{name: name}, nil
	}
	return &swallowFile{File: f, fault: fs.fault}, nil
}

func (fs *pebbleFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if fs.isTable(name) {
		if fs.fault.get() != nil {
			return fs.createInMemory(name, c)
		}
		f, err := fs.FS.Create(name, c) // faultFS records a disk error
		if err != nil && isDiskError(err) {
			return fs.createInMemory(name, c)
		}
		return f, err
	}
	return fs.wrap(name, func() (vfs.File, error) { return fs.FS.Create(name, c) })
}

func (fs *pebbleFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.wrap(name, func() (vfs.File, error) { return fs.FS.OpenReadWrite(name, c, opts...) })
}

func (fs *pebbleFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	return fs.wrap(newname, func() (vfs.File, error) { return fs.FS.ReuseForWrite(oldname, newname, c) })
}

func (fs *pebbleFS) Unwrap() vfs.FS { return fs.FS }

// swallowFile reports a failed write or sync as done once the fault is
// recorded (faultFS under it records it).
type swallowFile struct {
	vfs.File
	fault *diskFault
}

func (f *swallowFile) ok(err error) error {
	if err != nil && isDiskError(err) {
		f.fault.record(err)
		return nil
	}
	return err
}

func (f *swallowFile) Write(p []byte) (int, error) {
	if _, err := f.File.Write(p); f.ok(err) != nil {
		return 0, err
	}
	return len(p), nil
}

func (f *swallowFile) WriteAt(p []byte, off int64) (int, error) {
	if _, err := f.File.WriteAt(p, off); f.ok(err) != nil {
		return 0, err
	}
	return len(p), nil
}

func (f *swallowFile) Sync() error     { return f.ok(f.File.Sync()) }
func (f *swallowFile) SyncData() error { return f.ok(f.File.SyncData()) }
func (f *swallowFile) SyncTo(length int64) (bool, error) {
	full, err := f.File.SyncTo(length)
	return full, f.ok(err)
}
func (f *swallowFile) Preallocate(off, length int64) error {
	return f.ok(f.File.Preallocate(off, length))
}
func (f *swallowFile) Close() error { return f.ok(f.File.Close()) }

// droppedFile stands for a file that could not be created on a failed disk:
// it takes every write and keeps nothing.
type droppedFile struct {
	name string
	size int64
}

func (f *droppedFile) Close() error                           { return nil }
func (f *droppedFile) Read([]byte) (int, error)               { return 0, io.EOF }
func (f *droppedFile) ReadAt([]byte, int64) (int, error)      { return 0, io.EOF }
func (f *droppedFile) Write(p []byte) (int, error)            { f.size += int64(len(p)); return len(p), nil }
func (f *droppedFile) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }
func (f *droppedFile) Preallocate(int64, int64) error         { return nil }
func (f *droppedFile) Stat() (vfs.FileInfo, error)            { return droppedInfo{f}, nil }
func (f *droppedFile) Sync() error                            { return nil }
func (f *droppedFile) SyncTo(int64) (bool, error)             { return true, nil }
func (f *droppedFile) SyncData() error                        { return nil }
func (f *droppedFile) Prefetch(int64, int64) error            { return nil }
func (f *droppedFile) Fd() uintptr                            { return vfs.InvalidFd }

// droppedInfo is a droppedFile's FileInfo: its name and the bytes written.
type droppedInfo struct{ f *droppedFile }

func (i droppedInfo) Name() string           { return i.f.name }
func (i droppedInfo) Size() int64            { return i.f.size }
func (i droppedInfo) Mode() os.FileMode      { return 0o644 }
func (i droppedInfo) ModTime() time.Time     { return time.Time{} }
func (i droppedInfo) IsDir() bool            { return false }
func (i droppedInfo) Sys() any               { return nil }
func (i droppedInfo) DeviceID() vfs.DeviceID { return vfs.DeviceID{} }
