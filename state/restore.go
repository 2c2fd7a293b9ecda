package state

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/state/objstore"
)

// FileError reports a file of a snapshot that restore could not use: missing
// from object storage (Err wraps ErrMissingFile) or with the wrong size or
// checksum (ErrCorruptFile), or any other failure to fetch it.
type FileError struct {
	Checkpoint ckpt.ID
	Savepoint  string
	Task       string
	File       string // name in the Pebble directory
	Key        string // object key relative to the job root
	Err        error
}

func (e *FileError) Error() string {
	what := "checkpoint " + e.Checkpoint.String()
	if e.Savepoint != "" {
		what = "savepoint " + e.Savepoint
	}
	return fmt.Sprintf("state: restore %s, task %s: file %s (object %s): %v", what, e.Task, e.File, e.Key, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// RestoreInfo says how a restore went.
type RestoreInfo struct {
	Local           bool // local recovery: files linked from the local copy
	Duration        time.Duration
	DownloadedBytes int64
}

// Restore opens a task's state as of the snapshot whose manifest is at
// handle (a checkpoint's or a savepoint's). If Dir still holds exactly that
// snapshot — its local copy was recorded after it was made durable and
// uploaded, and every file has the size (and, with VerifyLocalChecksums, the
// checksum) the manifest names — the files are hard-linked from there (local
// recovery). Otherwise every file is downloaded in parallel and verified. A
// missing or corrupt file fails the restore with a *FileError naming the
// file and the checkpoint; restore never produces an empty or partial state
// (but a snapshot of an empty database lists no files, and restoring it
// opens an empty one).
//
// After a restore from a checkpoint, later snapshots reuse its files; after
// one from a savepoint, the first checkpoint uploads every file again, so
// that checkpoints never refer to a savepoint's files.
func Restore(ctx context.Context, cfg Config, handle string) (*Backend, error) {
	b, err := newBackend(cfg)
	if err != nil {
		return nil, err
	}
	if b.cfg.Store == nil {
		return nil, fmt.Errorf("%w: restore needs an object store", ErrSnapshot)
	}
	start := time.Now()
	src, foreign := b.restoreStore()
	m, err := ReadManifest(ctx, src, handle)
	if err != nil {
		return nil, err
	}
	if m.Task != b.cfg.Task || (!foreign && m.Job != b.cfg.Store.Job()) {
		return nil, fmt.Errorf("%w: manifest %s belongs to job %s task %s, not job %s task %s",
			ErrManifest, handle, m.Job, m.Task, b.cfg.Store.Job(), b.cfg.Task)
	}
	if err := b.checkKeyGroups(handle, m); err != nil {
		return nil, err
	}
	info, err := b.restoreFiles(ctx, m, func(ctx context.Context, m *Manifest, dir string) (int64, error) {
		return b.download(ctx, src, m, dir)
	}, !foreign)
	if err != nil {
		return nil, err
	}
	if err := b.openDB(); err != nil {
		return nil, err
	}
	b.restored = m
	b.lastSnap = m.Checkpoint
	b.empty = len(m.Files) == 0
	if m.Savepoint == "" && !foreign {
		// Reuse the checkpoint's SSTs; not its WAL parts: the restored
		// database writes new WAL files.
		b.mu.Lock()
		b.setConfirmedLocked(m.Checkpoint, m, false)
		b.mu.Unlock()
	}
	info.Duration = time.Since(start)
	b.metrics.restoreSeconds.Observe(info.Duration.Seconds())
	b.metrics.downloadedBytes.Add(float64(info.DownloadedBytes))
	b.restoreInfo = info
	b.cfg.Logger.Info("state restored", "checkpoint", m.Checkpoint, "savepoint", m.Savepoint, "from_job", m.Job,
		"foreign", foreign, "local", info.Local, "state_bytes", m.StateBytes, "downloaded_bytes", info.DownloadedBytes,
		"duration", info.Duration)
	return b, nil
}

// checkKeyGroups refuses a snapshot whose keys are filed under another
// number of key groups than the backend's (the layouts differ: no key would
// be found), or that holds other key groups than the task owns (moving key
// groups between tasks is a rescale, which Restore does not do).
func (b *Backend) checkKeyGroups(handle string, m *Manifest) error {
	if m.MaxParallelism != b.cfg.MaxParallelism {
		return fmt.Errorf("%w: snapshot %s files keyed state under max parallelism %d (0: no key groups), the task is configured with %d; job.max_parallelism is fixed at a job's first start",
			ErrKeyGroups, handle, m.MaxParallelism, b.cfg.MaxParallelism)
	}
	if m.KeyGroups != b.cfg.KeyGroups {
		return fmt.Errorf("%w: snapshot %s holds key groups [%d, %d), the task owns [%d, %d)",
			ErrKeyGroups, handle, m.KeyGroups[0], m.KeyGroups[1], b.cfg.KeyGroups[0], b.cfg.KeyGroups[1])
	}
	return nil
}

// restoreStore is where a restore reads its snapshots: RestoreStore
// (foreign: a store the job does not own, never linked locally nor
// reused by later snapshots), or else the job's own store.
func (b *Backend) restoreStore() (src *objstore.Store, foreign bool) {
	if b.cfg.RestoreStore != nil {
		return b.cfg.RestoreStore, true
	}
	return b.cfg.Store, false
}

// RestoreInfo returns how the backend was restored (zero if opened empty).
func (b *Backend) RestoreInfo() RestoreInfo { return b.restoreInfo }

// restoreFiles builds the database directory for m: in restore.tmp/, then
// renamed to db/, so that a crash never leaves a half-restored db/. The
// files come from the local copy if mayLink, or else from fetch (download,
// or downloadKeyGroups' part of them).
func (b *Backend) restoreFiles(ctx context.Context, m *Manifest, fetch func(context.Context, *Manifest, string) (int64, error), mayLink bool) (RestoreInfo, error) {
	fs := b.fs
	tmp := b.restoreDir()
	if err := fs.RemoveAll(tmp); err != nil {
		return RestoreInfo{}, fmt.Errorf("state: remove %s: %w", tmp, err)
	}
	if err := mkdirAllSync(fs, b.snapDir); err != nil {
		return RestoreInfo{}, fmt.Errorf("state: %w", err)
	}
	var info RestoreInfo
	keepLocal := ""            // the local copy kept: the directory name of a checkpoint
	empty := len(m.Files) == 0 // a snapshot of an empty database
	if empty {
		if err := fs.MkdirAll(tmp, 0o755); err != nil {
			return info, fmt.Errorf("state: mkdir %s: %w", tmp, err)
		}
	}
	if !empty && !b.cfg.DisableLocalRecovery && m.Savepoint == "" && mayLink {
		if err := b.linkLocal(m, tmp); err == nil {
			info.Local = true
			keepLocal = m.Checkpoint.String()
		} else {
			b.cfg.Logger.Info("no local recovery, downloading", "checkpoint", m.Checkpoint, "reason", err)
			_ = fs.RemoveAll(tmp)
		}
	}
	if !empty && !info.Local {
		n, err := fetch(ctx, m, tmp)
		if err != nil {
			_ = fs.RemoveAll(tmp)
			return info, err
		}
		info.DownloadedBytes = n
	}
	if err := syncDir(fs, tmp); err != nil {
		return info, err
	}
	if err := fs.RemoveAll(b.dbDir); err != nil {
		return info, fmt.Errorf("state: remove %s: %w", b.dbDir, err)
	}
	if err := fs.Rename(tmp, b.dbDir); err != nil {
		return info, fmt.Errorf("state: rename %s: %w", tmp, err)
	}
	if err := syncDir(fs, b.cfg.Dir); err != nil {
		return info, err
	}
	// Local copies other than the one just used are of no further use.
	names, err := fs.List(b.snapDir)
	if err != nil {
		return info, fmt.Errorf("state: list %s: %w", b.snapDir, err)
	}
	for _, n := range names {
		if keepLocal != "" && (n == keepLocal || n == keepLocal+".manifest") {
			continue
		}
		if err := fs.RemoveAll(fs.PathJoin(b.snapDir, n)); err != nil {
			return info, fmt.Errorf("state: remove %s: %w", n, err)
		}
	}
	return info, nil
}

// linkLocal builds dst from the local copy of m, or says why it cannot.
func (b *Backend) linkLocal(m *Manifest, dst string) error {
	fs := b.fs
	data, err := readFile(fs, b.snapMarker(m.Checkpoint))
	if err != nil {
		return fmt.Errorf("no recorded local copy: %w", err)
	}
	local, err := DecodeManifest(data)
	if err != nil {
		return fmt.Errorf("local record: %w", err)
	}
	if !sameFiles(local, m) {
		return errors.New("local copy is another snapshot")
	}
	src := b.snapPath(m.Checkpoint)
	for _, f := range m.Files {
		fi, err := fs.Stat(fs.PathJoin(src, f.Name))
		if err != nil {
			return fmt.Errorf("local file %s: %w", f.Name, err)
		}
		// A WAL captured by hard link may have grown since; its first
		// f.Size bytes are the snapshot's.
		if fi.Size() != f.Size && !(len(f.Parts) > 0 && fi.Size() > f.Size) {
			return fmt.Errorf("local file %s has %d bytes, manifest says %d", f.Name, fi.Size(), f.Size)
		}
	}
	if b.cfg.VerifyLocalChecksums {
		for _, f := range m.Files {
			if err := verifyLocal(fs, fs.PathJoin(src, f.Name), f); err != nil {
				return err
			}
		}
	}
	if err := fs.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, f := range m.Files {
		from, to := fs.PathJoin(src, f.Name), fs.PathJoin(dst, f.Name)
		if f.Shared {
			// Immutable: a hard link is as good as a copy.
			if err := fs.Link(from, to); err != nil {
				return fmt.Errorf("link %s: %w", f.Name, err)
			}
			continue
		}
		// Pebble appends to WAL and MANIFEST files: copy them (a WAL only
		// up to its length at the snapshot).
		if err := vfs.LimitedCopy(fs, from, to, f.Size); err != nil {
			return fmt.Errorf("copy %s: %w", f.Name, err)
		}
		if err := syncFile(fs, to); err != nil {
			return err
		}
	}
	return nil
}

func sameFiles(a, b *Manifest) bool {
	if a.Checkpoint != b.Checkpoint || a.Task != b.Task || len(a.Files) != len(b.Files) {
		return false
	}
	for i := range a.Files {
		if !a.Files[i].equal(b.Files[i]) {
			return false
		}
	}
	return true
}

// verifyLocal checks a local file's checksums against its entry.
func verifyLocal(fs vfs.FS, name string, f FileEntry) error {
	file, err := fs.Open(name, vfs.SequentialReadsOption)
	if err != nil {
		return err
	}
	defer file.Close()
	parts := f.Parts
	if len(parts) == 0 {
		parts = []Part{{Size: f.Size, SHA256: f.SHA256}}
	}
	var off int64
	for _, p := range parts {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(file, off, p.Size)); err != nil {
			return fmt.Errorf("read %s: %w", name, err)
		}
		if hex.EncodeToString(h.Sum(nil)) != p.SHA256 {
			return fmt.Errorf("local file %s: checksum mismatch at offset %d", f.Name, off)
		}
		off += p.Size
	}
	return nil
}

// download fetches every file of m into dst, in parallel, verifying each.
func (b *Backend) download(ctx context.Context, src *objstore.Store, m *Manifest, dst string) (int64, error) {
	fs := b.fs
	if err := fs.MkdirAll(dst, 0o755); err != nil {
		return 0, fmt.Errorf("state: mkdir %s: %w", dst, err)
	}
	sizes := make([]int64, len(m.Files))
	idx := make([]int, len(m.Files))
	for i := range idx {
		idx[i] = i
	}
	err := parallel(ctx, b.cfg.DownloadConcurrency, idx, func(ctx context.Context, i int) error {
		f := m.Files[i]
		if f.Inline {
			// In the manifest, which was validated (checksum included).
			if err := writeFileSync(fs, fs.PathJoin(dst, f.Name), f.Data); err != nil {
				return &FileError{Checkpoint: m.Checkpoint, Savepoint: m.Savepoint, Task: m.Task, File: f.Name, Err: err}
			}
			return nil
		}
		parts := f.Parts
		if len(parts) == 0 {
			parts = []Part{{Key: m.ObjectKey(f), Size: f.Size, SHA256: f.SHA256}}
		}
		part := fs.PathJoin(dst, f.Name+".part")
		file, err := fs.Create(part, vfs.WriteCategoryUnspecified)
		if err != nil {
			return &FileError{Checkpoint: m.Checkpoint, Savepoint: m.Savepoint, Task: m.Task, File: f.Name, Key: parts[0].Key, Err: err}
		}
		defer file.Close()
		var off int64
		for _, p := range parts {
			ferr := func(err error) error {
				return &FileError{Checkpoint: m.Checkpoint, Savepoint: m.Savepoint, Task: m.Task, File: f.Name, Key: p.Key, Err: err}
			}
			var (
				h  hash.Hash
				cw countingWriter
			)
			err := src.Download(ctx, p.Key, func() (io.Writer, error) {
				// A retry rewrites the part from its start.
				h = sha256.New()
				cw = countingWriter{w: io.MultiWriter(&offsetWriter{f: file, off: off}, h)}
				return &cw, nil
			})
			if errors.Is(err, objstore.ErrNotFound) {
				return ferr(fmt.Errorf("%w: %v", ErrMissingFile, err))
			}
			if err != nil {
				return ferr(err)
			}
			if cw.n != p.Size {
				return ferr(fmt.Errorf("%w: %d bytes, manifest says %d", ErrCorruptFile, cw.n, p.Size))
			}
			if sum := hex.EncodeToString(h.Sum(nil)); sum != p.SHA256 {
				return ferr(fmt.Errorf("%w: sha256 %s, manifest says %s", ErrCorruptFile, sum, p.SHA256))
			}
			off += p.Size
			sizes[i] += p.Size
		}
		if err := file.Sync(); err != nil {
			return &FileError{Checkpoint: m.Checkpoint, Savepoint: m.Savepoint, Task: m.Task, File: f.Name, Key: parts[0].Key, Err: err}
		}
		if err := fs.Rename(part, fs.PathJoin(dst, f.Name)); err != nil {
			return &FileError{Checkpoint: m.Checkpoint, Savepoint: m.Savepoint, Task: m.Task, File: f.Name, Key: parts[0].Key, Err: err}
		}
		return nil
	})
	var total int64
	for _, n := range sizes {
		total += n
	}
	return total, err
}

// offsetWriter writes sequentially from off.
type offsetWriter struct {
	f   vfs.File
	off int64
}

func (w *offsetWriter) Write(p []byte) (int, error) {
	n, err := w.f.WriteAt(p, w.off)
	w.off += int64(n)
	return n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
