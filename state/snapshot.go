package state

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/state/objstore"
)

// cleanupTimeout bounds the deletes that follow a failed or aborted
// snapshot; they run even when the snapshot's context was cancelled.
const cleanupTimeout = 30 * time.Second

// Snapshot is a snapshot whose synchronous part is done: a consistent,
// hard-linked Pebble checkpoint in the local directory snap/<id>/. Run does
// the asynchronous part.
type Snapshot struct {
	b         *Backend
	id        ckpt.ID
	savepoint string
	dir       string
	opStateFn func(context.Context) ([]byte, error) // nil: none
	walLen    map[string]int64                      // WAL files captured by link: length at the barrier
	syncDur   time.Duration
	created   time.Time

	// Guarded by b.mu.
	cancel  context.CancelFunc
	started bool
	aborted bool
	result  *SnapshotResult
	owned   []string // keys of shared uploads this snapshot owns
	written []string // exclusive keys this snapshot wrote
	done    chan struct{}
}

// SnapshotResult is what the asynchronous part produced: the handle to
// acknowledge and the figures for the ack's metrics.
type SnapshotResult struct {
	Checkpoint ckpt.ID
	// Handle is the manifest's key relative to the job root.
	Handle        string
	Manifest      *Manifest
	SyncDuration  time.Duration
	AsyncDuration time.Duration
	// StateBytes is the total size of the snapshot's files; UploadedBytes
	// what this snapshot uploaded (files and manifest).
	StateBytes    int64
	UploadedBytes int64
	UploadedFiles int
	ReusedFiles   int
}

// ID returns the snapshot's checkpoint ID.
func (s *Snapshot) ID() ckpt.ID { return s.id }

// SyncDuration returns the duration of the synchronous part.
func (s *Snapshot) SyncDuration() time.Duration { return s.syncDur }

// Snapshot takes the synchronous part of checkpoint id's snapshot: it
// flushes the WAL (to the page cache) and creates a Pebble checkpoint in
// snap/<id>/: the SSTs held for hard links made later (see liveFS), the WAL
// linked with its length at the barrier recorded, copies of the small
// MANIFEST and OPTIONS. Before that it flushes the record cache into one
// Pebble batch, which costs up to Config.RecordCacheBytes of writes. Beyond
// that its cost is bounded by the manifest's size (at most
// MaxManifestFileSize), whatever the size of the state, the number of files
// or what was written since the last flush. operatorState (source offsets, sink
// transaction handles) is stored in the task manifest as is.
//
// A database that holds nothing — opened empty or restored from a snapshot
// of an empty one, and not written since, as in a stateless stage's tasks —
// is snapshotted without Pebble: its manifest lists no files, Run only
// writes that manifest, and there is no local copy.
//
// Call it from the task goroutine, at the barrier; then run the returned
// Snapshot's Run in the background. Checkpoint IDs must increase.
func (b *Backend) Snapshot(id ckpt.ID, operatorState []byte) (*Snapshot, error) {
	return b.snapshot(id, "", operatorState)
}

// Savepoint is Snapshot for a savepoint: Run copies every file to
// savepoints/<name>/<task>/ and writes savepoints/<name>/<task>.manifest, so
// that the savepoint refers to nothing outside its directory and garbage
// collection never touches it.
func (b *Backend) Savepoint(id ckpt.ID, name string, operatorState []byte) (*Snapshot, error) {
	if err := objstore.ValidName("savepoint", name); err != nil {
		return nil, err
	}
	return b.snapshot(id, name, operatorState)
}

func (b *Backend) snapshot(id ckpt.ID, savepoint string, opState []byte) (*Snapshot, error) {
	s, err := b.snapshotFiles(id, savepoint)
	if err != nil {
		return nil, err
	}
	if opState != nil {
		s.SetOperatorState(opState)
	}
	return s, nil
}

func (b *Backend) snapshotFiles(id ckpt.ID, savepoint string) (*Snapshot, error) {
	if b.db == nil {
		return nil, ErrClosed
	}
	if err := b.Failed(); err != nil {
		return nil, err // its files are not to be trusted (diskfault.go)
	}
	if b.cfg.Store == nil {
		return nil, fmt.Errorf("%w: no object store configured", ErrSnapshot)
	}
	if err := objstore.CheckID(id); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	if id <= b.lastSnap {
		return nil, fmt.Errorf("%w: checkpoint %d is not after the last snapshot %d", ErrSnapshot, id, b.lastSnap)
	}
	start := time.Now()
	if b.empty {
		// Nothing to copy: the snapshot is a manifest that lists no files
		// (a stateless stage's tasks, every checkpoint). Restoring it opens
		// an empty database.
		return b.addPending(&Snapshot{
			b:         b,
			id:        id,
			savepoint: savepoint,
			syncDur:   time.Since(start),
			created:   b.cfg.Now(),
			done:      make(chan struct{}),
		})
	}
	// The record cache's writes belong to the checkpoint.
	if err := b.flushCache(); err != nil {
		b.metrics.snapshotsFailed.Inc()
		return nil, fmt.Errorf("state: snapshot %d: %w", id, err)
	}
	dir := b.snapPath(id)
	if err := b.fs.RemoveAll(dir); err != nil { // a leftover of a crash
		return nil, fmt.Errorf("state: snapshot %d: remove %s: %w", id, dir, err)
	}
	// WithFlushedWAL makes the WAL file hold every write so far before it
	// is copied; the task goroutine is blocked here, so nothing is written
	// concurrently and the checkpoint is exactly the state at the barrier.
	b.live.startCapture(b.dbDir, dir)
	err := b.db.Checkpoint(dir, pebble.WithFlushedWAL())
	walLengths := b.live.endCapture()
	if ferr := b.Failed(); err == nil && ferr != nil {
		err = ferr // a write up to the barrier was dropped (diskfault.go)
	}
	if err != nil {
		b.live.forget(dir)
		_ = b.fs.RemoveAll(dir)
		b.metrics.snapshotsFailed.Inc()
		return nil, fmt.Errorf("state: snapshot %d: pebble checkpoint: %w", id, err)
	}
	s := &Snapshot{
		b:         b,
		id:        id,
		savepoint: savepoint,
		dir:       dir,
		walLen:    walLengths,
		syncDur:   time.Since(start),
		created:   b.cfg.Now(),
		done:      make(chan struct{}),
	}
	return b.addPending(s)
}

// addPending records s, whose synchronous part is done, as pending.
func (b *Backend) addPending(s *Snapshot) (*Snapshot, error) {
	b.lastSnap = s.id
	b.mu.Lock()
	closed := b.mu.closed
	if !closed {
		b.mu.pending[s.id] = s
	}
	b.mu.Unlock()
	if closed {
		b.removeLocal(s)
		return nil, ErrClosed
	}
	b.metrics.syncSeconds.Observe(s.syncDur.Seconds())
	return s, nil
}

// removeLocal removes s's local copy, if it has one.
func (b *Backend) removeLocal(s *Snapshot) {
	if s.dir == "" {
		return
	}
	b.live.forget(s.dir)
	if err := b.fs.RemoveAll(s.dir); err != nil {
		b.cfg.Logger.Warn("remove local snapshot", "dir", s.dir, "err", err)
	}
}

func (b *Backend) snapPath(id ckpt.ID) string {
	return b.fs.PathJoin(b.snapDir, id.String())
}

func (b *Backend) snapMarker(id ckpt.ID) string { return b.snapPath(id) + ".manifest" }

// isShared reports whether a Pebble file is immutable once written and may
// therefore be shared by checkpoints: SSTs and blob files.
func isShared(name string) bool {
	return strings.HasSuffix(name, ".sst") || strings.HasSuffix(name, ".blob")
}

// Run is the asynchronous part: it makes the local snapshot durable, uploads
// the files that object storage does not have yet, writes the task manifest
// (after every file it lists) and records the local copy for local recovery.
// Cancelling ctx, or NotifyAborted, cancels it. On failure it deletes what
// only this snapshot uploaded and returns the error: the task declines the
// checkpoint. Run may be called once.
func (s *Snapshot) Run(ctx context.Context) (*SnapshotResult, error) {
	b := s.b
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b.mu.Lock()
	switch {
	case s.started:
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: snapshot %d already ran", ErrSnapshot, s.id)
	case s.aborted || b.mu.closed:
		b.mu.Unlock()
		close(s.done)
		return nil, fmt.Errorf("state: snapshot %d: %w", s.id, context.Canceled)
	}
	s.started = true
	s.cancel = cancel
	b.mu.Unlock()

	start := time.Now()
	res, err := s.run(ctx)
	if err != nil {
		b.metrics.snapshotsFailed.Inc()
		if ctx.Err() != nil {
			// Cancelled: the task stops, or the checkpoint was aborted.
			// Neither is a failure to warn about (a clean stop cancels
			// the snapshot in flight).
			b.cfg.Logger.Debug("snapshot cancelled", "checkpoint", s.id, "err", err)
		} else {
			b.cfg.Logger.Warn("snapshot failed", "checkpoint", s.id, "err", err)
		}
		close(s.done)
		b.dropSnapshot(context.WithoutCancel(ctx), s)
		return nil, fmt.Errorf("state: snapshot %d of task %s: %w", s.id, b.cfg.Task, err)
	}
	res.AsyncDuration = time.Since(start)
	b.mu.Lock()
	s.result = res
	b.mu.Unlock()
	close(s.done)
	b.metrics.snapshots.Inc()
	b.metrics.asyncSeconds.Observe(res.AsyncDuration.Seconds())
	b.metrics.uploadedBytes.Add(float64(res.UploadedBytes))
	b.metrics.stateBytes.Set(float64(res.StateBytes))
	b.cfg.Logger.Info("snapshot uploaded", "checkpoint", s.id, "savepoint", s.savepoint,
		"sync_ms", res.SyncDuration.Milliseconds(), "async_ms", res.AsyncDuration.Milliseconds(),
		"state_bytes", res.StateBytes, "uploaded_bytes", res.UploadedBytes,
		"uploaded_files", res.UploadedFiles, "reused_files", res.ReusedFiles)
	return res, nil
}

// run is the asynchronous part in three steps: the plan (planSnapshot, pure,
// over the local copy's files and the confirmed checkpoint), the upload
// (upload) and the manifest (writeManifest). The local copy syncs on a
// goroutine of its own meanwhile.
func (s *Snapshot) run(ctx context.Context) (*SnapshotResult, error) {
	files, err := s.localFiles()
	if err != nil {
		return nil, err
	}
	// Make the local copy durable (the live database runs without syncs)
	// while the files upload: only the local record, written last, needs it.
	local := s.syncLocalAsync(files)
	defer local.wait() // gone by the time Run returns; writeManifest reports its error
	b := s.b
	b.mu.Lock()
	base := b.mu.confirmed // replaced, never modified: readable without the lock
	b.mu.Unlock()
	plan, err := planSnapshot(planInput{
		Task:       b.cfg.Task,
		Instance:   b.instance,
		Checkpoint: s.id,
		Savepoint:  s.savepoint,
		Files:      files,
		Base:       base,
	})
	if err != nil {
		return nil, err
	}
	up, err := s.upload(ctx, plan)
	if err != nil {
		return nil, err
	}
	return s.writeManifest(ctx, up, local)
}

// localFiles materializes the local copy's held SSTs (see liveFS) and
// returns its files, sorted by name, as the plan sees them: their sizes,
// and the WAL files captured at the barrier. A snapshot without a local
// copy (an empty database) has none.
func (s *Snapshot) localFiles() ([]localFile, error) {
	if s.dir == "" {
		return nil, nil
	}
	b := s.b
	if err := b.live.materialize(s.dir); err != nil {
		return nil, err
	}
	names, err := b.fs.List(s.dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", s.dir, err)
	}
	slices.Sort(names)
	files := make([]localFile, len(names))
	for i, n := range names {
		fi, err := b.fs.Stat(b.fs.PathJoin(s.dir, n))
		if err != nil {
			return nil, fmt.Errorf("stat %s: %w", n, err)
		}
		walLen, captured := s.walLen[n]
		files[i] = localFile{Name: n, Size: fi.Size(), Captured: captured, WALLen: walLen}
	}
	return files, nil
}

// localSync is the sync of a snapshot's local copy, on a goroutine of its own.
type localSync struct {
	done chan struct{} // closed when the local copy is durable, or failed to be
	err  error         // set before done is closed
}

// wait waits for the sync and returns its error.
func (l *localSync) wait() error {
	<-l.done
	return l.err
}

// syncLocalAsync starts making the local copy's files, and the directories
// that name them, durable.
func (s *Snapshot) syncLocalAsync(files []localFile) *localSync {
	l := &localSync{done: make(chan struct{})}
	if s.dir == "" {
		close(l.done)
		return l
	}
	go func() {
		defer close(l.done)
		l.err = s.syncLocal(files)
	}()
	return l
}

// uploaded is what the upload step produced.
type uploaded struct {
	// Files are the manifest's entries, complete: every object they name is
	// written.
	Files []FileEntry
	// Bytes and Objects count what this snapshot wrote; Reused the files
	// whose entries reuse objects of the base or of other pending snapshots.
	Bytes   int64
	Objects int
	Reused  int
}

// uploadJob is one object the upload step writes: the Object of the plan's
// file number file.
type uploadJob struct {
	file   int
	shared *upload // the claim of a shared object; nil for one only this snapshot writes
}

// upload is the upload step: it carries out plan p. On Run's goroutine it
// reads the inline files and claims the shared objects (startFiles); then
// it uploads this snapshot's objects, at most Config.UploadConcurrency at a
// time, each on a goroutine of its own (uploadObjects); last it waits for
// the shared objects other pending snapshots were uploading, or uploads
// those whose upload failed (awaitShared).
func (s *Snapshot) upload(ctx context.Context, p *snapshotPlan) (*uploaded, error) {
	up := &uploaded{Files: make([]FileEntry, len(p.Files)), Reused: p.Reused}
	jobs, waits, err := s.startFiles(p, up)
	if err != nil {
		return nil, err
	}
	if err := s.uploadObjects(ctx, p, jobs, up); err != nil {
		return nil, err
	}
	if err := s.awaitShared(ctx, p, waits, up); err != nil {
		return nil, err
	}
	up.Objects = len(jobs)
	return up, nil
}

// startFiles sets up.Files to the plan's entries, reads the inline files
// into theirs, and claims the shared objects the plan names. It returns the
// objects this snapshot must upload, recorded as written (those only it
// writes) or owned (the shared ones, by acquire), and the files whose
// shared object another pending snapshot is uploading.
func (s *Snapshot) startFiles(p *snapshotPlan, up *uploaded) (jobs []uploadJob, waits []int, err error) {
	b := s.b
	for i := range p.Files {
		f := &p.Files[i]
		up.Files[i] = f.Entry
		up.Files[i].Parts = slices.Clone(f.Entry.Parts) // completed below, the plan's left as is
		switch f.Step {
		case stepInline:
			if up.Files[i], err = s.readInline(f.Entry); err != nil {
				return nil, nil, err
			}
		case stepUpload:
			jobs = append(jobs, uploadJob{file: i})
		case stepShared:
			got, claim, wait := b.acquire(s, f.Entry.Name, f.Object)
			switch {
			case wait:
				waits = append(waits, i)
			case claim != nil:
				jobs = append(jobs, uploadJob{file: i, shared: claim})
			default:
				reused, err := reuseShared(f, got, &up.Files[i])
				if err != nil {
					return nil, nil, err
				}
				if reused {
					up.Reused++
				}
			}
		}
	}
	// Recorded before they are written, so that a failed or aborted
	// snapshot deletes them (dropSnapshot), even half-written.
	b.mu.Lock()
	for _, j := range jobs {
		if j.shared == nil {
			s.written = append(s.written, p.Files[j.file].Object)
		}
	}
	b.mu.Unlock()
	return jobs, waits, nil
}

// uploadObjects uploads the jobs' objects in parallel, sets their
// checksums in up.Files and adds their sizes to up.Bytes. Each job
// completes its own file's entry: no two jobs share one.
func (s *Snapshot) uploadObjects(ctx context.Context, p *snapshotPlan, jobs []uploadJob, up *uploaded) error {
	b := s.b
	sizes := make([]int64, len(jobs))
	idx := make([]int, len(jobs))
	for i := range idx {
		idx[i] = i
	}
	err := parallel(ctx, b.cfg.UploadConcurrency, idx, func(ctx context.Context, ji int) error {
		j := jobs[ji]
		f := &p.Files[j.file]
		sum, err := b.uploadFile(ctx, b.fs.PathJoin(s.dir, f.Entry.Name), f.Object, f.Offset, f.Length)
		e := &up.Files[j.file]
		if err == nil {
			sizes[ji] = f.Length
			setChecksum(e, sum)
		}
		if j.shared != nil {
			if len(e.Parts) > 0 {
				b.finishUpload(j.shared, FileEntry{Name: e.Name, Key: f.Object, Size: f.Length, SHA256: sum}, err)
			} else {
				b.finishUpload(j.shared, *e, err)
			}
		}
		return err
	})
	for _, n := range sizes {
		up.Bytes += n
	}
	return err
}

// awaitShared completes the entries of the files waits names with the
// shared objects other pending snapshots were uploading for them
// (Backend.waitShared).
func (s *Snapshot) awaitShared(ctx context.Context, p *snapshotPlan, waits []int, up *uploaded) error {
	for _, i := range waits {
		f := &p.Files[i]
		got, err := s.b.waitShared(ctx, s, f.Entry.Name, f.Object, f.Offset, f.Length)
		if err != nil {
			return err
		}
		if len(f.Entry.Parts) == 0 {
			up.Files[i] = got
		} else {
			setChecksum(&up.Files[i], got.SHA256)
		}
	}
	return nil
}

// readInline reads an inline file of the local copy into its entry.
func (s *Snapshot) readInline(e FileEntry) (FileEntry, error) {
	data, err := readFile(s.b.fs, s.b.fs.PathJoin(s.dir, e.Name))
	if err != nil {
		return FileEntry{}, err
	}
	if int64(len(data)) != e.Size {
		return FileEntry{}, fmt.Errorf("file %s changed size from %d to %d", e.Name, e.Size, len(data))
	}
	sum := sha256.Sum256(data)
	e.Data, e.SHA256 = data, hex.EncodeToString(sum[:])
	return e, nil
}

// reuseShared completes entry e of planned file f with got, the entry of
// the shared object f claimed, which another pending snapshot (or, since
// the plan, the confirmed checkpoint) has uploaded. It reports whether the
// file counts as reused: a whole shared file, or a WAL piece that starts
// the file (one that continues the base's parts was counted by the plan).
func reuseShared(f *plannedFile, got FileEntry, e *FileEntry) (bool, error) {
	if len(f.Entry.Parts) == 0 {
		if got.Size != f.Length {
			return false, fmt.Errorf("shared file %s: local size %d, uploaded size %d", f.Entry.Name, f.Length, got.Size)
		}
		*e = got
		return true, nil
	}
	// Another pending snapshot uploaded this very piece (the WAL did not
	// grow in between).
	if got.Size != f.Length {
		return false, fmt.Errorf("WAL piece %s: local size %d, uploaded size %d", f.Object, f.Length, got.Size)
	}
	setChecksum(e, got.SHA256)
	return f.Offset == 0, nil
}

// setChecksum sets the checksum of the object the upload step writes for
// entry e: the whole file's, or its last part's.
func setChecksum(e *FileEntry, sum string) {
	if n := len(e.Parts); n > 0 {
		e.Parts[n-1].SHA256 = sum
		return
	}
	e.SHA256 = sum
}

// writeManifest is the manifest step, once every file's object is written:
// it asks for the operator state (SetOperatorStateFunc), writes the task
// manifest and, once the local copy is durable, records it for local
// recovery (or removes a savepoint's).
func (s *Snapshot) writeManifest(ctx context.Context, up *uploaded, local *localSync) (*SnapshotResult, error) {
	b := s.b
	m := &Manifest{
		Version:        manifestVersion,
		Job:            b.cfg.Store.Job(),
		Task:           b.cfg.Task,
		Checkpoint:     s.id,
		Savepoint:      s.savepoint,
		Instance:       b.instance,
		Created:        s.created.UTC(),
		MaxParallelism: b.cfg.MaxParallelism,
		KeyGroups:      b.cfg.KeyGroups,
		Files:          up.Files,
	}
	for _, e := range m.Files {
		m.StateBytes += e.Size
	}
	if s.opStateFn != nil {
		op, err := s.opStateFn(ctx)
		if err != nil {
			return nil, fmt.Errorf("operator state: %w", err)
		}
		m.OperatorState = op
	}
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("built an invalid manifest: %w", err)
	}
	data, err := m.Encode()
	if err != nil {
		return nil, err
	}
	// Every file is uploaded; only now may the manifest refer to them.
	handle := m.Handle()
	b.mu.Lock()
	s.written = append(s.written, handle)
	b.mu.Unlock()
	if err := b.cfg.Store.Put(ctx, handle, data); err != nil {
		return nil, fmt.Errorf("write manifest: %w", err)
	}
	if err := local.wait(); err != nil {
		return nil, err
	}
	switch {
	case s.dir == "":
		// No files: a restore needs nothing local.
	case s.savepoint == "":
		// The local copy is complete and durable; record it, crash-safely,
		// for local recovery.
		if err := writeFileAtomic(b.fs, b.snapMarker(s.id), data); err != nil {
			return nil, fmt.Errorf("record local snapshot: %w", err)
		}
	default:
		b.removeLocal(s)
	}
	return &SnapshotResult{
		Checkpoint:    s.id,
		Handle:        handle,
		Manifest:      m,
		SyncDuration:  s.syncDur,
		StateBytes:    m.StateBytes,
		UploadedBytes: up.Bytes + int64(len(data)),
		UploadedFiles: up.Objects,
		ReusedFiles:   up.Reused,
	}, nil
}

// syncLocal makes the files of the local copy, and the directories that
// name them, durable.
func (s *Snapshot) syncLocal(files []localFile) error {
	b := s.b
	for _, f := range files {
		if err := syncFile(b.fs, b.fs.PathJoin(s.dir, f.Name)); err != nil {
			return err
		}
	}
	if err := syncDir(b.fs, s.dir); err != nil {
		return err
	}
	return syncDir(b.fs, b.snapDir)
}

// acquire decides who uploads shared object key (of local file name) for
// snapshot s: it returns the entry of a confirmed file or of an object
// already uploaded (reuse it), or wait (another pending snapshot is
// uploading it right now: waitShared), or an upload that s must do and
// finish with finishUpload.
func (b *Backend) acquire(s *Snapshot, name, key string) (e FileEntry, up *upload, wait bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if e, ok := b.mu.confirmed[name]; ok && e.Key == key {
		return e, nil, false
	}
	if u, ok := b.mu.uploads[key]; ok {
		if _, mine := u.owners[s.id]; !mine {
			u.owners[s.id] = struct{}{}
			s.owned = append(s.owned, key)
		}
		select {
		case <-u.done:
			if u.err == nil {
				return u.entry, nil, false
			}
			// The earlier upload failed: do it again, below.
		default:
			return FileEntry{}, nil, true
		}
	}
	u := &upload{done: make(chan struct{}), owners: map[ckpt.ID]struct{}{s.id: {}}}
	if old, ok := b.mu.uploads[key]; ok {
		u.owners = old.owners
	} else {
		s.owned = append(s.owned, key)
	}
	b.mu.uploads[key] = u
	return FileEntry{}, u, false
}

// finishUpload records the outcome of an upload s did.
func (b *Backend) finishUpload(u *upload, e FileEntry, err error) {
	b.mu.Lock()
	u.entry, u.err = e, err
	close(u.done)
	b.mu.Unlock()
}

// waitShared waits for another snapshot's upload of object key (bytes
// [offset, offset+length) of local file name); if it failed, s uploads the
// object itself. It returns the object's entry.
func (b *Backend) waitShared(ctx context.Context, s *Snapshot, name, key string, offset, length int64) (FileEntry, error) {
	for range 3 {
		b.mu.Lock()
		u := b.mu.uploads[key]
		b.mu.Unlock()
		if u != nil {
			select {
			case <-u.done:
			case <-ctx.Done():
				return FileEntry{}, ctx.Err()
			}
			if u.err == nil {
				return u.entry, nil
			}
		}
		e, up, wait := b.acquire(s, name, key)
		if wait {
			continue
		}
		if up == nil {
			return e, nil
		}
		e = FileEntry{Name: name, Key: key, Size: length, Shared: isShared(name)}
		sum, err := b.uploadFile(ctx, b.fs.PathJoin(s.dir, name), key, offset, length)
		e.SHA256 = sum
		b.finishUpload(up, e, err)
		return e, err
	}
	return FileEntry{}, fmt.Errorf("object %s: upload by a concurrent snapshot failed", key)
}

// uploadFile uploads bytes [offset, offset+length) of a local file and
// returns their SHA-256. It fails if the file holds fewer bytes.
func (b *Backend) uploadFile(ctx context.Context, name, key string, offset, length int64) (string, error) {
	var h hash.Hash
	var n countingReader
	err := b.cfg.Store.PutFrom(ctx, key, func() (io.ReadCloser, error) {
		f, err := b.fs.Open(name, vfs.SequentialReadsOption)
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", name, err)
		}
		h = sha256.New()
		n = countingReader{r: io.TeeReader(io.NewSectionReader(f, offset, length), h), c: f}
		return &n, nil
	})
	if err != nil {
		return "", fmt.Errorf("upload %s: %w", key, err)
	}
	if n.n != length {
		return "", fmt.Errorf("upload %s: read %d bytes of %s at %d, want %d", key, n.n, name, offset, length)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

type countingReader struct {
	r io.Reader
	c io.Closer
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingReader) Close() error { return c.c.Close() }

// dropSnapshot forgets a failed or aborted snapshot and deletes what only it
// wrote: shared uploads no other pending or confirmed snapshot uses, its
// exclusive objects and manifest, its local copy.
func (b *Backend) dropSnapshot(ctx context.Context, s *Snapshot) {
	b.mu.Lock()
	if b.mu.pending[s.id] != s {
		b.mu.Unlock()
		return
	}
	delete(b.mu.pending, s.id)
	var keys []string
	for _, key := range s.owned {
		u := b.mu.uploads[key]
		if u == nil {
			continue
		}
		delete(u.owners, s.id)
		if len(u.owners) > 0 {
			continue
		}
		delete(b.mu.uploads, key)
		if _, conf := b.mu.confirmedKeys[key]; conf {
			continue
		}
		// Even a failed upload may have left an object (a lost response).
		keys = append(keys, key)
	}
	keys = append(keys, s.written...)
	b.mu.Unlock()

	// In parallel: when the store is failing, each delete spends its
	// retries, and the task declines only after this. Best effort: failures
	// are logged and left to garbage collection (Registry.CollectGarbage).
	ctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	defer cancel()
	_ = parallel(ctx, b.cfg.UploadConcurrency, keys, func(ctx context.Context, k string) error {
		if err := b.cfg.Store.Delete(ctx, k); err != nil {
			b.cfg.Logger.Warn("delete object of dropped snapshot", "checkpoint", s.id, "key", k, "err", err)
		}
		return nil
	})
	_ = b.fs.Remove(b.snapMarker(s.id))
	b.removeLocal(s)
}

// NotifyComplete tells the backend that checkpoint id is complete
// (notifyCheckpointComplete): its files become the base that later snapshots
// reuse, older pending snapshots are subsumed (aborted, their private
// uploads deleted) and older local snapshot copies are removed. Only a
// periodic checkpoint subsumes, and only periodic checkpoints, as the
// coordinator does: a savepoint neither subsumes an older checkpoint still
// pending nor is subsumed by a newer one (either may still complete).
func (b *Backend) NotifyComplete(ctx context.Context, id ckpt.ID) error {
	b.mu.Lock()
	s := b.mu.pending[id]
	if s != nil && s.result != nil {
		delete(b.mu.pending, id)
		if s.savepoint == "" && id > b.mu.confirmedID {
			b.setConfirmedLocked(id, s.result.Manifest, true)
		}
	} else {
		b.cfg.Logger.Warn("completed checkpoint has no successful local snapshot", "checkpoint", id)
	}
	var older []ckpt.ID
	for pid, p := range b.mu.pending {
		if s != nil && s.savepoint == "" && pid < id && p.savepoint == "" {
			older = append(older, pid)
		}
	}
	confirmedID := b.mu.confirmedID
	b.mu.Unlock()
	var errs []error
	for _, pid := range older {
		errs = append(errs, b.NotifyAborted(ctx, pid))
	}
	errs = append(errs, b.removeLocalSnapshotsBefore(confirmedID))
	return errors.Join(errs...)
}

// setConfirmedLocked makes m's shared files (and, if withWAL, its WAL parts:
// only for manifests this instance wrote, whose WAL files are the live ones)
// the base that later snapshots reuse.
func (b *Backend) setConfirmedLocked(id ckpt.ID, m *Manifest, withWAL bool) {
	conf := make(map[string]FileEntry)
	keys := make(map[string]struct{})
	for _, f := range m.Files {
		switch {
		case f.Shared:
			conf[f.Name] = f
			keys[f.Key] = struct{}{}
		case len(f.Parts) > 0 && withWAL:
			conf[f.Name] = f
			for _, p := range f.Parts {
				keys[p.Key] = struct{}{}
			}
		}
	}
	b.mu.confirmed = conf
	b.mu.confirmedKeys = keys
	b.mu.confirmedID = id
	for key := range b.mu.uploads {
		if _, ok := keys[key]; ok {
			delete(b.mu.uploads, key)
		}
	}
}

// NotifyAborted cancels checkpoint id's snapshot, waits for its
// asynchronous part to stop and deletes what only it uploaded. Unknown IDs
// are ignored.
func (b *Backend) NotifyAborted(ctx context.Context, id ckpt.ID) error {
	b.mu.Lock()
	s := b.mu.pending[id]
	if s == nil {
		b.mu.Unlock()
		return nil
	}
	s.aborted = true
	started := s.started
	if s.cancel != nil {
		s.cancel()
	}
	b.mu.Unlock()
	if started {
		select {
		case <-s.done:
		case <-ctx.Done():
			return fmt.Errorf("state: abort snapshot %d: %w", id, ctx.Err())
		}
	}
	b.dropSnapshot(ctx, s)
	b.cfg.Logger.Info("snapshot aborted", "checkpoint", id)
	return nil
}

// removeLocalSnapshotsBefore removes local snapshot copies older than keep
// that no pending snapshot uses.
func (b *Backend) removeLocalSnapshotsBefore(keep ckpt.ID) error {
	names, err := b.fs.List(b.snapDir)
	if err != nil {
		return fmt.Errorf("state: list %s: %w", b.snapDir, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, n := range names {
		u, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSuffix(n, ".tmp"), ".manifest"), 10, 64)
		if id := ckpt.ID(u); err != nil || id >= keep || b.mu.pending[id] != nil {
			continue
		}
		if err := b.fs.RemoveAll(b.fs.PathJoin(b.snapDir, n)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
