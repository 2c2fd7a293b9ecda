package state

import (
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// noSyncFS is the filesystem the live Pebble database runs on: every sync is
// a no-op. The live database is never reopened after a crash — a task always
// restores from a snapshot (local or downloaded), exactly as Flink runs
// RocksDB with the WAL disabled — so paying for its durability would only
// slow down writes and, above all, the synchronous part of a snapshot, which
// flushes the WAL and copies it into the snapshot directory. The snapshot
// directory is made durable in the asynchronous part, with real syncs on the
// underlying filesystem, before it is recorded as a local recovery copy.
type noSyncFS struct{ vfs.FS }

func (fs noSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return wrapNoSync(f, err)
}

func (fs noSyncFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.Open(name, opts...)
	return wrapNoSync(f, err)
}

func (fs noSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return wrapNoSync(f, err)
}

func (fs noSyncFS) OpenDir(name string) (vfs.File, error) {
	f, err := fs.FS.OpenDir(name)
	return wrapNoSync(f, err)
}

func (fs noSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return wrapNoSync(f, err)
}

func (fs noSyncFS) Unwrap() vfs.FS { return fs.FS }

func wrapNoSync(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

type noSyncFile struct{ vfs.File }

func (noSyncFile) Sync() error                       { return nil }
func (noSyncFile) SyncData() error                   { return nil }
func (noSyncFile) SyncTo(length int64) (bool, error) { return true, nil }

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
	return f.Close()
}

// writeFileAtomic writes data to name crash-safely: to name+".tmp", synced,
// renamed over name, directory synced. After a crash name holds either the
// old content or data, never a mix.
func writeFileAtomic(fs vfs.FS, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := fs.Rename(tmp, name); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return syncDir(fs, fs.PathDir(name))
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
