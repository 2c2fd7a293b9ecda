package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/weir-stream/weir/keygroup"
)

// Rescaling: a task of a stage whose parallelism changed since the
// snapshot restores the key groups it owns now (Config.KeyGroups) from the
// snapshots of the tasks that held them then. Every key of keyed state
// starts with its key group (keyed.go), so the state of a range of key
// groups is one key range, and the new database is put together from
// whole ranges:
//
//   - the snapshot with the largest overlap is restored as Restore does
//     (from the local copy if this directory holds exactly it, otherwise
//     downloaded in part: downloadKeyGroups), and the key groups outside
//     the task's range are excised from it (Pebble's Excise: virtual
//     SSTs, no rewrite);
//   - of every other overlapping snapshot, the files the task's key
//     groups need are downloaded into a scratch directory (at the same
//     time as the first; downloadKeyGroups), it is opened read-only, and
//     its overlapping range is copied into SST files that the database
//     ingests (Pebble's Ingest: no memtable, no WAL, no compaction).
//
// Nothing of it is used before it is complete: a failure closes the
// database and returns the error, and the next Restore or
// RestoreKeyGroups of the directory rebuilds db/ from scratch (Open
// empties it).

// RestoreKeyGroups opens a task's state from the snapshots at handles (task
// manifests of one checkpoint or savepoint, taken by the tasks of the
// task's stage under another parallelism): it holds exactly the keyed
// state of the key groups the task owns (Config.KeyGroups), taken from
// each snapshot whose key groups overlap them. Config.MaxParallelism must
// be the snapshots' (the number of key groups is fixed at a job's first
// start), the snapshots' key groups must be disjoint, and those that
// overlap the task's must cover them; a snapshot that does not overlap
// them is refused (the caller passes only those that do). A snapshot that
// holds state not filed under a key group fails the restore
// (ErrKeyGroups): it could not be divided.
//
// The backend's Restored manifest is the first of the overlapping
// snapshots, in key-group order; RestoredManifests returns them all, for
// their operator state. The first snapshot after the restore uploads every
// file, as after a savepoint: no file of the old tasks is shared.
func RestoreKeyGroups(ctx context.Context, cfg Config, handles []string) (*Backend, error) {
	b, err := newBackend(cfg)
	if err != nil {
		return nil, err
	}
	if b.cfg.Store == nil {
		return nil, fmt.Errorf("%w: restore needs an object store", ErrSnapshot)
	}
	if b.cfg.MaxParallelism == 0 {
		return nil, fmt.Errorf("%w: rescaling restore of task %s: the task has no key groups (MaxParallelism 0)", ErrKeyGroups, b.cfg.Task)
	}
	start := time.Now()
	ms, err := b.rescaleManifests(ctx, handles)
	if err != nil {
		return nil, err
	}
	info, err := b.rescaleFiles(ctx, ms)
	if err != nil {
		_ = b.fs.RemoveAll(b.rescaleDir())
		if b.db != nil {
			_ = b.db.Close()
			b.cache.Unref()
			b.db = nil
		}
		b.metrics.unregister()
		return nil, err
	}
	b.restored = ms[0]
	b.restoredAll = ms
	b.lastSnap = ms[0].Checkpoint
	b.empty = false
	info.Duration = time.Since(start)
	b.metrics.restoreSeconds.Observe(info.Duration.Seconds())
	b.metrics.downloadedBytes.Add(float64(info.DownloadedBytes))
	b.restoreInfo = info
	tasks := make([]string, len(ms))
	for i, m := range ms {
		tasks[i] = fmt.Sprintf("%s[%d,%d)", m.Task, m.KeyGroups[0], m.KeyGroups[1])
	}
	b.cfg.Logger.Info("state restored from another parallelism: key groups moved", "checkpoint", ms[0].Checkpoint,
		"savepoint", ms[0].Savepoint, "key_groups", fmt.Sprintf("[%d,%d)", b.cfg.KeyGroups[0], b.cfg.KeyGroups[1]),
		"from", tasks, "local", info.Local, "downloaded_bytes", info.DownloadedBytes, "duration", info.Duration)
	return b, nil
}

// RestoredManifests returns the manifests the backend was restored from:
// one after Restore, every overlapping one in key-group order after
// RestoreKeyGroups; nil if it was opened empty.
func (b *Backend) RestoredManifests() []*Manifest {
	if b.restoredAll != nil {
		return b.restoredAll
	}
	if b.restored != nil {
		return []*Manifest{b.restored}
	}
	return nil
}

// rescaleManifests reads the manifests at handles and checks that they can
// make up the task's key groups; it returns them in key-group order.
func (b *Backend) rescaleManifests(ctx context.Context, handles []string) ([]*Manifest, error) {
	if len(handles) == 0 {
		return nil, fmt.Errorf("%w: rescaling restore of task %s: no snapshot", ErrSnapshot, b.cfg.Task)
	}
	ms := make([]*Manifest, len(handles))
	var first *Manifest
	src, foreign := b.restoreStore()
	for i, h := range handles {
		m, err := ReadManifest(ctx, src, h)
		if err != nil {
			return nil, err
		}
		if !foreign && m.Job != b.cfg.Store.Job() {
			return nil, fmt.Errorf("%w: manifest %s belongs to job %s, not job %s", ErrManifest, h, m.Job, b.cfg.Store.Job())
		}
		if m.MaxParallelism != b.cfg.MaxParallelism {
			return nil, fmt.Errorf("%w: snapshot %s files keyed state under max parallelism %d (0: no key groups), the task is configured with %d; job.max_parallelism is fixed at a job's first start",
				ErrKeyGroups, h, m.MaxParallelism, b.cfg.MaxParallelism)
		}
		if first == nil {
			first = m
		}
		if m.Checkpoint != first.Checkpoint || m.Savepoint != first.Savepoint {
			return nil, fmt.Errorf("%w: snapshot %s is of checkpoint %d, %s of checkpoint %d: a task restores from one checkpoint",
				ErrSnapshot, h, m.Checkpoint, handles[0], first.Checkpoint)
		}
		ms[i] = m
	}
	slices.SortFunc(ms, func(x, y *Manifest) int { return x.KeyGroups[0] - y.KeyGroups[0] })
	lo, hi := b.cfg.KeyGroups[0], b.cfg.KeyGroups[1]
	next := lo // the first key group not yet covered
	for i, m := range ms {
		mlo, mhi := m.KeyGroups[0], m.KeyGroups[1]
		switch {
		case mhi <= lo || mlo >= hi:
			return nil, fmt.Errorf("%w: snapshot of task %s holds key groups [%d, %d), none of the task's [%d, %d)",
				ErrKeyGroups, m.Task, mlo, mhi, lo, hi)
		case i > 0 && mlo < ms[i-1].KeyGroups[1]:
			return nil, fmt.Errorf("%w: snapshots of tasks %s and %s hold overlapping key groups [%d, %d) and [%d, %d)",
				ErrKeyGroups, ms[i-1].Task, m.Task, ms[i-1].KeyGroups[0], ms[i-1].KeyGroups[1], mlo, mhi)
		case mlo > next:
			return nil, fmt.Errorf("%w: no snapshot holds key groups [%d, %d) of the task's [%d, %d)", ErrKeyGroups, next, mlo, lo, hi)
		}
		next = mhi
	}
	if next < hi {
		return nil, fmt.Errorf("%w: no snapshot holds key groups [%d, %d) of the task's [%d, %d)", ErrKeyGroups, next, hi, lo, hi)
	}
	return ms, nil
}

// overlap returns the part of m's key groups that the task owns.
func (b *Backend) overlap(m *Manifest) (lo, hi int) {
	return max(m.KeyGroups[0], b.cfg.KeyGroups[0]), min(m.KeyGroups[1], b.cfg.KeyGroups[1])
}

func (b *Backend) rescaleDir() string { return b.fs.PathJoin(b.cfg.Dir, "rescale.tmp") }

// rescaleFiles builds and opens the database of the task's key groups from
// ms (key-group order).
func (b *Backend) rescaleFiles(ctx context.Context, ms []*Manifest) (RestoreInfo, error) {
	fs := b.fs
	// The base: the largest overlap; of equal ones, this task's own
	// (its local copy may be here), else the first.
	base := 0
	for i, m := range ms {
		lo, hi := b.overlap(m)
		blo, bhi := b.overlap(ms[base])
		if hi-lo > bhi-blo || (hi-lo == bhi-blo && m.Task == b.cfg.Task && ms[base].Task != b.cfg.Task) {
			base = i
		}
	}
	scratch := b.rescaleDir()
	if err := fs.RemoveAll(scratch); err != nil {
		return RestoreInfo{}, fmt.Errorf("state: remove %s: %w", scratch, err)
	}
	if err := fs.MkdirAll(scratch, 0o755); err != nil {
		return RestoreInfo{}, fmt.Errorf("state: mkdir %s: %w", scratch, err)
	}

	// Everything at once: the base is restored into db/ (restoreFiles);
	// each other snapshot is downloaded into a scratch directory and its
	// overlap copied into SST files as soon as it is there, in chunks of
	// key groups on up to GOMAXPROCS goroutines in all.
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		errs  []error
		info  RestoreInfo
		bytes int64
		ssts  []string
	)
	fail := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	wg.Go(func() {
		blo, bhi := b.overlap(ms[base])
		_, foreign := b.restoreStore()
		i, err := b.restoreFiles(ctx, ms[base], func(ctx context.Context, m *Manifest, dir string) (int64, error) {
			return b.downloadKeyGroups(ctx, m, dir, blo, bhi)
		}, !foreign)
		mu.Lock()
		info = i
		mu.Unlock()
		fail(err)
	})
	copiers := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i, m := range ms {
		if i == base || len(m.Files) == 0 { // a snapshot of an empty database: nothing to copy
			continue
		}
		wg.Go(func() {
			dir := fs.PathJoin(scratch, fmt.Sprint(i))
			olo, ohi := b.overlap(m)
			n, err := b.downloadKeyGroups(ctx, m, dir, olo, ohi)
			mu.Lock()
			bytes += n
			mu.Unlock()
			if err != nil {
				fail(err)
				return
			}
			paths, err := b.copyKeyGroups(dir, m.Task, olo, ohi, fs.PathJoin(scratch, fmt.Sprintf("%d-", i)), copiers)
			mu.Lock()
			ssts = append(ssts, paths...)
			mu.Unlock()
			fail(err)
			if err == nil {
				fail(fs.RemoveAll(dir))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return info, err
	}
	info.DownloadedBytes += bytes

	// The base may hold placeholders of SSTs outside the task's key
	// groups (downloadKeyGroups): until they are excised, nothing may
	// read them, so the first open runs no compaction and loads no table
	// statistics; the database is opened again, as always, once they are
	// gone from it.
	if err := b.openDBWith(func(o *pebble.Options) {
		o.DisableAutomaticCompactions = true
		o.DisableTableStats = true
	}); err != nil {
		return info, err
	}
	if err := checkKeyGrouped(b.db, ms[base].Task); err != nil {
		return info, err
	}
	// The base's key groups that are not the task's: every placeholder
	// lies wholly in one of these ranges, and Pebble drops such a file
	// from the database without opening it.
	lo, hi := b.cfg.KeyGroups[0], b.cfg.KeyGroups[1]
	if ms[base].KeyGroups[0] < lo {
		if err := b.excise(ctx, ms[base].KeyGroups[0], lo); err != nil {
			return info, err
		}
	}
	if ms[base].KeyGroups[1] > hi {
		if err := b.excise(ctx, hi, ms[base].KeyGroups[1]); err != nil {
			return info, err
		}
	}
	if len(ssts) > 0 {
		if err := b.guard(func() error { return b.db.Ingest(ctx, ssts) }); err != nil {
			return info, fmt.Errorf("state: ingest key groups: %w", err)
		}
	}
	if err := b.guard(b.db.Close); err != nil {
		b.db = nil
		b.cache.Unref()
		return info, fmt.Errorf("state: close pebble %s: %w", b.dbDir, err)
	}
	b.db = nil
	b.cache.Unref()
	if err := b.openDB(); err != nil {
		return info, err
	}
	if err := fs.RemoveAll(scratch); err != nil {
		return info, fmt.Errorf("state: remove %s: %w", scratch, err)
	}
	return info, nil
}

// downloadKeyGroups downloads into dir what of snapshot m its key groups
// [lo, hi) need: every file but the SSTs; then, in place of each SST, a
// sparse file of its size, on which Pebble opens the snapshot read-only
// and tells each SST's key bounds (from the snapshot's MANIFEST, reading
// no SST); then the SSTs whose bounds overlap [lo, hi), over their
// placeholders. The others stay placeholders: an iterator bounded to
// [lo, hi) never opens a file outside its bounds. It returns the bytes
// downloaded.
func (b *Backend) downloadKeyGroups(ctx context.Context, m *Manifest, dir string, lo, hi int) (int64, error) {
	var ssts, others []FileEntry
	for _, f := range m.Files {
		if strings.HasSuffix(f.Name, ".sst") && !f.Inline {
			ssts = append(ssts, f)
		} else {
			others = append(others, f)
		}
	}
	part := *m
	part.Files = others
	src, _ := b.restoreStore()
	n, err := b.download(ctx, src, &part, dir)
	if err != nil || len(ssts) == 0 {
		return n, err
	}
	for _, f := range ssts {
		if err := sparseFile(b.fs, b.fs.PathJoin(dir, f.Name), f.Size); err != nil {
			return n, fmt.Errorf("state: placeholder %s: %w", f.Name, err)
		}
	}
	bounds, err := b.sstBounds(dir, m.Task)
	if err != nil {
		return n, err
	}
	start, end := KeyGroupBounds(lo, hi)
	part.Files = nil
	for _, f := range ssts {
		kb, ok := bounds[f.Name]
		if !ok || (bytes.Compare(kb[0], end) < 0 && bytes.Compare(kb[1], start) >= 0) {
			part.Files = append(part.Files, f) // overlapping, or not known: needed
		}
	}
	m2, err := b.download(ctx, src, &part, dir)
	return n + m2, err
}

// sparseFile creates name as a file of size bytes that occupies no disk.
func sparseFile(fs vfs.FS, name string, size int64) error {
	f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	if size > 0 {
		if _, err := f.WriteAt([]byte{0}, size-1); err != nil {
			_ = f.Close()
			return err
		}
	}
	return f.Close()
}

// sstBounds opens the database in dir read-only and returns each SST's
// smallest and largest user key, by file name.
func (b *Backend) sstBounds(dir, task string) (map[string][2][]byte, error) {
	out := map[string][2][]byte{}
	err := b.guard(func() error {
		db, err := pebble.Open(dir, b.readOnlyOptions())
		if err != nil {
			return fmt.Errorf("open the snapshot of task %s: %w", task, err)
		}
		defer db.Close()
		levels, err := db.SSTables()
		if err != nil {
			return err
		}
		for _, level := range levels {
			for _, t := range level {
				out[t.FileNum.String()+".sst"] = [2][]byte{slices.Clone(t.Smallest.UserKey), slices.Clone(t.Largest.UserKey)}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("state: key bounds of the snapshot of task %s: %w", task, err)
	}
	return out, nil
}

// readOnlyOptions are the options of an old task's snapshot opened
// read-only. The database is not open yet: the shared cache is the
// Config's (nil: Pebble's own, for this read).
func (b *Backend) readOnlyOptions() *pebble.Options {
	o := PebbleOptions(b.cfg.Cache, b.fs, b.cfg.MemTableSize)
	o.ReadOnly = true
	o.Logger = pebbleLogger{log: b.cfg.Logger, fault: b.fault}
	if b.cfg.TunePebble != nil {
		b.cfg.TunePebble(o)
	}
	return o
}

// excise removes key groups [lo, hi) from the database.
func (b *Backend) excise(ctx context.Context, lo, hi int) error {
	start, end := KeyGroupBounds(lo, hi)
	if err := b.guard(func() error { return b.db.Excise(ctx, pebble.KeyRange{Start: start, End: end}) }); err != nil {
		return fmt.Errorf("state: excise key groups [%d, %d): %w", lo, hi, err)
	}
	return nil
}

// checkKeyGrouped fails if db holds a key that is not filed under a key
// group: state that a rescale could not divide.
func checkKeyGrouped(db pebble.Reader, task string) error {
	first, end := KeyGroupBounds(0, keygroup.Limit)
	for _, r := range [][2][]byte{{nil, first}, {end, nil}} {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: r[0], UpperBound: r[1]})
		if err != nil {
			return fmt.Errorf("state: check key groups: %w", err)
		}
		found := it.First()
		var key []byte
		if found {
			key = slices.Clone(it.Key())
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("state: check key groups: %w", err)
		}
		if found {
			return fmt.Errorf("%w: the snapshot of task %s holds state that is not filed under a key group (key %x): it cannot be divided among tasks",
				ErrKeyGroups, task, key)
		}
	}
	return nil
}

// copyKeyGroups opens the database in dir (a snapshot of task, read-only)
// and writes its keyed state of key groups [lo, hi) into SST files named
// prefix<n>.sst, for Ingest: one per chunk of key groups, the chunks
// copied in parallel, each holding one of copiers while it runs. It
// returns the files written (a chunk without entries writes none).
func (b *Backend) copyKeyGroups(dir, task string, lo, hi int, prefix string, copiers chan struct{}) ([]string, error) {
	o := b.readOnlyOptions()
	var paths []string
	err := b.guard(func() error {
		src, err := pebble.Open(dir, o)
		if err != nil {
			return fmt.Errorf("open the snapshot of task %s: %w", task, err)
		}
		defer src.Close()
		if err := checkKeyGrouped(src, task); err != nil {
			return err
		}
		chunks := min(cap(copiers), hi-lo)
		written := make([]bool, chunks)
		errs := make([]error, chunks)
		var wg sync.WaitGroup
		for c := range chunks {
			wg.Go(func() {
				copiers <- struct{}{}
				defer func() { <-copiers }()
				clo, chi := lo+(hi-lo)*c/chunks, lo+(hi-lo)*(c+1)/chunks
				// Guarded on its own goroutine: a failed disk makes
				// Pebble panic (diskfault.go).
				errs[c] = b.guard(func() error {
					var err error
					written[c], err = b.copyRange(src, clo, chi, fmt.Sprintf("%s%d.sst", prefix, c), o)
					return err
				})
			})
		}
		wg.Wait()
		for c, w := range written {
			if w {
				paths = append(paths, fmt.Sprintf("%s%d.sst", prefix, c))
			}
		}
		return errors.Join(errs...)
	})
	if err != nil {
		return nil, fmt.Errorf("state: copy key groups [%d, %d) of task %s: %w", lo, hi, task, err)
	}
	return paths, nil
}

// copyRange writes src's entries of key groups [lo, hi) into an SST file
// at path; it writes no file if there are none.
func (b *Backend) copyRange(src *pebble.DB, lo, hi int, path string, o *pebble.Options) (bool, error) {
	start, end := KeyGroupBounds(lo, hi)
	it, err := src.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
	if err != nil {
		return false, err
	}
	defer it.Close()
	if !it.First() {
		return false, it.Error()
	}
	f, err := b.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return false, err
	}
	w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), o.MakeWriterOptions(6, o.FormatMajorVersion.MaxTableFormat()))
	for valid := true; valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err == nil {
			err = w.Set(it.Key(), v)
		}
		if err != nil {
			_ = w.Close()
			return false, err
		}
	}
	if err := it.Error(); err != nil {
		_ = w.Close()
		return false, err
	}
	return true, w.Close() // syncs and closes f
}
