package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/internal/promtest"
)

// FullFS is a filesystem that can be made full: while Full is set, every
// write, create, link and mkdir fails with ENOSPC, as a full disk does.
type FullFS struct {
	vfs.FS
	Full atomic.Bool
}

func (fs *FullFS) enospc(op, name string) error {
	if fs.Full.Load() {
		return &os.PathError{Op: op, Path: name, Err: syscall.ENOSPC}
	}
	return nil
}

func (fs *FullFS) file(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return &fullFile{File: f, fs: fs}, nil
}

func (fs *FullFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.enospc("open", name); err != nil {
		return nil, err
	}
	return fs.file(fs.FS.Create(name, c))
}

func (fs *FullFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	return fs.file(fs.FS.OpenReadWrite(name, c, opts...))
}

func (fs *FullFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	if err := fs.enospc("open", newname); err != nil {
		return nil, err
	}
	return fs.file(fs.FS.ReuseForWrite(oldname, newname, c))
}

func (fs *FullFS) Link(oldname, newname string) error {
	if err := fs.enospc("link", newname); err != nil {
		return err
	}
	return fs.FS.Link(oldname, newname)
}

func (fs *FullFS) MkdirAll(dir string, perm os.FileMode) error {
	if err := fs.enospc("mkdir", dir); err != nil {
		return err
	}
	return fs.FS.MkdirAll(dir, perm)
}

type fullFile struct {
	vfs.File
	fs *FullFS
}

func (f *fullFile) Write(p []byte) (int, error) {
	if err := f.fs.enospc("write", ""); err != nil {
		return 0, err
	}
	return f.File.Write(p)
}

func (f *fullFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.fs.enospc("write", ""); err != nil {
		return 0, err
	}
	return f.File.WriteAt(p, off)
}

// TestFullDiskStopsTheTaskNotTheProcess fills the disk under a backend
// while a task writes state: the write loop (run under Guard, as the task
// runs it) ends with an ErrDisk that says the disk is full, the process
// does not panic, the failure is counted, Close returns, and once the disk
// has room a new backend opens in the same directory and works.
func TestFullDiskStopsTheTaskNotTheProcess(t *testing.T) {
	store, _ := newStore(t)
	fs := &FullFS{FS: vfs.Default}
	reg := prometheus.NewRegistry()
	cfg := testConfig(t, store, t.TempDir())
	cfg.FS, cfg.Registerer = fs, reg
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	write := func(b *Backend, from, to int) error {
		s, err := NewValueState(b, "v", StringCodec{})
		if err != nil {
			return err
		}
		value := strings.Repeat("x", 4096)
		for i := from; i < to; i++ {
			if err := b.Failed(); err != nil {
				return err // as the task's loop checks before every batch
			}
			b.SetCurrentKey(fmt.Appendf(nil, "k%08d", i))
			if err := s.Put(value); err != nil {
				return err
			}
			if i%64 == 0 {
				if err := b.Flush(); err != nil {
					return err
				}
			}
		}
		return b.Flush()
	}
	if err := b.Guard(func() error { return write(b, 0, 1000) }); err != nil {
		t.Fatalf("before the disk is full: %v", err)
	}

	fs.Full.Store(true)
	err = b.Guard(func() error { return write(b, 1000, 200_000) })
	if !errors.Is(err, ErrDisk) || !strings.Contains(err.Error(), "no space left on device") || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("writing to a full disk ended with %v, want an ErrDisk for ENOSPC", err)
	}
	t.Logf("the task's error: %v", err)
	if !errors.Is(b.Failed(), ErrDisk) {
		t.Fatalf("Failed() = %v", b.Failed())
	}
	if got := promtest.Sum(t, reg, "weir_state_disk_failures_total"); got != 1 {
		t.Fatalf("weir_state_disk_failures_total = %v, want 1", got)
	}
	closeWithin(t, b, 30*time.Second)

	// Still full: opening fails with the same clear error, no panic.
	if _, err := Open(context.Background(), cfg); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("open on a full disk: %v", err)
	}
	fs.Full.Store(false)
	b2 := openTest(t, cfg)
	if err := b2.Guard(func() error { return write(b2, 0, 2000) }); err != nil {
		t.Fatalf("after the disk has room again: %v", err)
	}
}

// TestFullDiskWriteStallEnds writes on after the disk is full without
// looking at Failed, as a task does within one batch, until Pebble's
// memtables are full many times over (1 MiB memtables, writes stop at
// 4): the flushes that fail on the full disk go to memory once the fault
// is recorded, so no write waits forever in Pebble's write stall and no
// flush is retried in a loop. Every value written reads back, and Close
// returns. Before, this hung until the test binary timed out.
func TestFullDiskWriteStallEnds(t *testing.T) {
	store, _ := newStore(t)
	fs := &FullFS{FS: vfs.Default}
	cfg := testConfig(t, store, t.TempDir())
	cfg.FS = fs
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewValueState(b, "v", StringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	value := strings.Repeat("y", 4096)
	const n = 6000 // 24 MiB
	fs.Full.Store(true)
	done := make(chan error, 1)
	go func() {
		done <- b.Guard(func() error {
			for i := range n {
				b.SetCurrentKey(fmt.Appendf(nil, "k%08d", i))
				if err := s.Put(value + strconv.Itoa(i)); err != nil {
					return err
				}
				if i%64 == 0 {
					if err := b.Flush(); err != nil {
						return err
					}
				}
			}
			if err := b.Flush(); err != nil {
				return err
			}
			for _, i := range []int{0, n / 2, n - 1} {
				b.SetCurrentKey(fmt.Appendf(nil, "k%08d", i))
				got, ok, err := s.Get()
				if err != nil || !ok || got != value+strconv.Itoa(i) {
					return fmt.Errorf("key %d read back %d bytes, %v, %v", i, len(got), ok, err)
				}
			}
			return nil
		})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("writing on a full disk: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a write on the full disk did not return in 60s (Pebble's write stall)")
	}
	if !errors.Is(b.Failed(), ErrDisk) {
		t.Fatalf("Failed() = %v, want the full disk", b.Failed())
	}
	closeWithin(t, b, 30*time.Second)
}

// closeWithin closes the failed backend b, failing the test if Close does
// not return within d (it must abandon a database Pebble cannot close).
func closeWithin(t *testing.T, b *Backend, d time.Duration) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- b.Close(context.Background()) }()
	select {
	case <-closed:
	case <-time.After(d):
		t.Fatalf("Close of the failed backend did not return in %v", d)
	}
}
