package state

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/keygroup"
	"github.com/weir-stream/weir/state/objstore"
)

// Sentinel errors, for errors.Is.
var (
	// ErrClosed reports use of a closed Backend.
	ErrClosed = errors.New("state: backend closed")
	// ErrNoCurrentKey reports keyed state access before SetCurrentKey.
	ErrNoCurrentKey = errors.New("state: no current key")
	// ErrStateKind reports a state name registered twice with different kinds.
	ErrStateKind = errors.New("state: state name already used by another kind of state")
	// ErrCorruptValue reports a stored value that its codec or framing cannot decode.
	ErrCorruptValue = errors.New("state: corrupt stored value")
	// ErrMissingFile reports a file of a snapshot that object storage does not have.
	ErrMissingFile = errors.New("state: snapshot file missing")
	// ErrCorruptFile reports a file of a snapshot whose size or checksum is wrong.
	ErrCorruptFile = errors.New("state: snapshot file corrupt")
	// ErrSnapshot reports a snapshot request the backend refuses (duplicate
	// or non-increasing checkpoint ID, unknown snapshot).
	ErrSnapshot = errors.New("state: invalid snapshot request")
	// ErrManifest reports a task manifest that cannot be used.
	ErrManifest = errors.New("state: invalid task manifest")
	// ErrKeyGroups reports a restore from a snapshot whose keyed state is
	// filed under another max parallelism, or holds other key groups, than
	// the restoring task's Config says.
	ErrKeyGroups = errors.New("state: snapshot key groups do not match the task's")
)

// Config configures the state backend of one task.
type Config struct {
	// Dir is the task's local state directory, state.dir/<job>/<task>. The
	// backend owns everything below it: db/ (the live Pebble database),
	// snap/ (local snapshot copies for local recovery), restore.tmp/ and
	// rescale.tmp/ (RestoreKeyGroups).
	Dir string
	// Task is the task ID; it names the task's objects in the store.
	Task string
	// Store is the job's object store. Required for snapshots and restore.
	Store *objstore.Store
	// RestoreStore, if set, is where Restore reads the snapshot instead
	// of Store: a restore point the job does not own (`processor run
	// --restore-from`: a savepoint or checkpoint of another job, or one
	// copied elsewhere), read-only. Its manifest may name another job.
	// Such a restore is never local (the local copies are the job's own
	// checkpoints, numbered in its own sequence), and the first snapshot
	// after it uploads every file into Store, as after a savepoint, so
	// that no checkpoint of the job refers to an object it does not own.
	RestoreStore *objstore.Store
	// Cache is the process-wide Pebble block cache (pebble.NewCache), shared
	// by every task of the replica. The backend takes its own reference. If
	// nil, the backend uses a private 64 MiB cache.
	Cache *pebble.Cache
	// FS is the local filesystem; nil means the OS (vfs.Default). Tests pass
	// a crashable in-memory filesystem.
	FS vfs.FS
	// Logger receives structured logs; nil discards them. It should
	// already name the task (runtime/task adds "task"): the backend adds
	// no key of its own, so that no log line carries one twice.
	Logger *slog.Logger
	// Registerer receives the backend's metrics (labelled with the task);
	// nil registers nothing.
	Registerer prometheus.Registerer
	// Now is the clock of state TTL; nil means time.Now.
	Now func() time.Time
	// UploadConcurrency and DownloadConcurrency bound parallel transfers per
	// snapshot / restore. Default 4 each.
	UploadConcurrency   int
	DownloadConcurrency int
	// DisableLocalRecovery makes every restore download, even when the local
	// directory still holds the snapshot.
	DisableLocalRecovery bool
	// VerifyLocalChecksums makes local recovery read every local file and
	// compare its checksum with the manifest, not only its size. It costs a
	// full read of the state.
	VerifyLocalChecksums bool
	// RecordCacheBytes bounds the task's record cache, the write-back cache
	// of value, aggregating and reducing state in front of Pebble. Zero
	// means DefaultRecordCacheBytes; a negative value turns the cache off.
	RecordCacheBytes int64
	// MemTableSize overrides the Pebble memtable size (default 64 MiB).
	MemTableSize uint64
	// TunePebble, if set, may change the Pebble options after the defaults
	// of PebbleOptions are applied.
	TunePebble func(*pebble.Options)
	// MaxParallelism is the number of key groups keyed state is filed
	// under (job.max_parallelism of a shuffled stage, at most
	// keygroup.Limit): each key's state is stored under its key group,
	// keygroup.Of(key, MaxParallelism), so that the state of a range of key
	// groups is one contiguous range of keys that can move to another task.
	// Zero keeps the legacy layout without key groups (stage main). A
	// snapshot records it; restoring it with another value is an error.
	MaxParallelism int
	// KeyGroups are the key groups [lo, hi) the task owns
	// (keygroup.Range): the groups whose timers it fires. Zero values mean
	// all, [0, MaxParallelism). It must be zero with MaxParallelism 0.
	KeyGroups [2]int
}

func (c *Config) validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("state: config: Dir is empty"))
	}
	if err := objstore.ValidName("task", c.Task); err != nil {
		errs = append(errs, fmt.Errorf("state: config: Task: %w", err))
	}
	if c.UploadConcurrency < 0 || c.DownloadConcurrency < 0 {
		errs = append(errs, errors.New("state: config: negative concurrency"))
	}
	// Key groups are stored in two bytes (keygroup.Limit).
	if c.MaxParallelism < 0 || c.MaxParallelism > keygroup.Limit {
		errs = append(errs, fmt.Errorf("state: config: MaxParallelism %d outside [0, %d]", c.MaxParallelism, keygroup.Limit))
	}
	if lo, hi := c.KeyGroups[0], c.KeyGroups[1]; lo != 0 || hi != 0 {
		switch {
		case c.MaxParallelism == 0:
			errs = append(errs, fmt.Errorf("state: config: KeyGroups [%d, %d) without MaxParallelism", lo, hi))
		case lo < 0 || lo >= hi || hi > c.MaxParallelism:
			errs = append(errs, fmt.Errorf("state: config: KeyGroups [%d, %d) is not a non-empty range within [0, %d)", lo, hi, c.MaxParallelism))
		}
	}
	return errors.Join(errs...)
}

func (c *Config) ensureDefaults() {
	if c.FS == nil {
		c.FS = vfs.Default
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.UploadConcurrency == 0 {
		c.UploadConcurrency = 4
	}
	if c.DownloadConcurrency == 0 {
		c.DownloadConcurrency = 4
	}
	if c.RecordCacheBytes == 0 {
		c.RecordCacheBytes = DefaultRecordCacheBytes
	}
	if c.MemTableSize == 0 {
		c.MemTableSize = 64 << 20
	}
	if c.MaxParallelism > 0 && c.KeyGroups == [2]int{} {
		c.KeyGroups = [2]int{0, c.MaxParallelism}
	}
}

// PebbleOptions returns the Pebble options Weir uses for task state, tuned
// for write-heavy keyed state that is made durable by snapshots rather than
// by the WAL (see docs/state.md for the reasoning behind each):
//
//   - 64 MiB memtables, up to 4 queued, so that bursts of updates are
//     absorbed in memory and flushes produce few, large L0 files;
//   - L0 compaction after 8 sublevels (RocksDB's trigger is 4): fewer, larger
//     L0 compactions, less write amplification (and fewer new files per
//     snapshot) for a little more read amplification, which the bloom
//     filters absorb;
//   - LBaseMaxBytes 256 MiB: fewer levels for states of a few GiB, hence
//     less write amplification and fewer new files per incremental snapshot;
//   - target file sizes 4 MiB in L0 doubling per level up to 32 MiB: files
//     small enough that a compaction rewrites (and a snapshot re-uploads)
//     little beyond the key ranges it touches;
//   - a 10-bit bloom filter on every level, because keyed state is read by
//     point lookups;
//   - up to 2 concurrent compactions;
//   - writeback started every MiB written (sync_file_range, not fsync), so
//     that dirty pages never pile up and stall the task when the kernel
//     throttles them;
//   - a manifest rolled at 1 MiB, which bounds what the synchronous part of
//     a snapshot copies;
//   - the newest format major version.
//
// cache is the shared block cache; fs the filesystem the database lives on.
func PebbleOptions(cache *pebble.Cache, fs vfs.FS, memTableSize uint64) *pebble.Options {
	o := &pebble.Options{
		Cache:                       cache,
		FS:                          fs,
		FormatMajorVersion:          pebble.FormatNewest,
		MemTableSize:                memTableSize,
		MemTableStopWritesThreshold: 4,
		L0CompactionThreshold:       8,
		L0StopWritesThreshold:       1000,
		LBaseMaxBytes:               256 << 20,
		MaxManifestFileSize:         1 << 20,
		MaxOpenFiles:                1000,
		CompactionConcurrencyRange:  func() (int, int) { return 1, 2 },
		// Writeback in the background every MiB: no durability (syncs are
		// no-ops, see liveFS), but no pile of dirty pages either.
		BytesPerSync:    1 << 20,
		WALBytesPerSync: 1 << 20,
	}
	size := int64(4 << 20)
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		o.TargetFileSizes[i] = size
		size = min(2*size, 32<<20)
	}
	o.EnsureDefaults()
	return o
}

// pebbleLogger sends Pebble's logs to slog: Pebble's info messages at debug
// level, since they describe routine flushes and compactions. Fatalf
// records the failure and never returns (diskfault.go).
type pebbleLogger struct {
	log   *slog.Logger
	fault *diskFault
}

func (l pebbleLogger) Infof(format string, args ...any) {
	l.log.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.log.Error("pebble cannot go on; the task stops and is restored from its checkpoint", "component", "pebble", "err", msg)
	l.fault.fatal(msg)
}

// Backend is the state of one task: a Pebble database with keyed state, its
// snapshots and their uploads.
//
// Concurrency: the keyed state API, SetCurrentKey and Snapshot (the
// synchronous part) belong to the task goroutine and must not be called
// concurrently. Snapshot.Run (the asynchronous part), NotifyComplete,
// NotifyAborted and Close may be called from any goroutine; they share the
// upload bookkeeping under mu.
type Backend struct {
	cfg      Config
	fs       vfs.FS // the real filesystem, with syncs, through faultFS
	fault    *diskFault
	live     *liveFS // what Pebble sees: no syncs, WAL capture
	db       *pebble.DB
	cache    *pebble.Cache
	dbDir    string
	snapDir  string
	instance string // random, names the shared files this incarnation uploads
	metrics  *metrics
	restored *Manifest
	// restoredAll are the manifests of a rescaling restore
	// (RestoreKeyGroups), in key-group order; nil otherwise.
	restoredAll []*Manifest

	// Task goroutine only.
	curKey      []byte
	curGroup    int // the current key's key group (MaxParallelism > 0)
	hasKey      bool
	states      map[string]*stateInfo
	lastSnap    ckpt.ID
	wo          *pebble.WriteOptions
	restoreInfo RestoreInfo
	rc          *recordCache // nil: off
	// empty: the database holds nothing, because it was opened empty (or
	// restored from a snapshot of an empty database) and nothing has been
	// written since. A snapshot of it has no files (see snapshot).
	empty bool

	mu snapMu
}

// snapMu guards the upload bookkeeping shared by the task goroutine and the
// asynchronous parts of snapshots.
type snapMu struct {
	sync.Mutex
	// confirmed maps local file names of the last confirmed (completed or
	// restored) checkpoint to their entries: a snapshot reuses their objects
	// without uploading. confirmedKeys holds those objects' keys. Both are
	// replaced, never modified (setConfirmedLocked): a map read under mu
	// may be used after it is released (Snapshot.run's plan does).
	confirmed     map[string]FileEntry
	confirmedKeys map[string]struct{}
	confirmedID   ckpt.ID
	// uploads are shared objects uploaded (or being uploaded) by snapshots
	// not yet confirmed, keyed by object key.
	uploads map[string]*upload
	// pending snapshots by checkpoint ID.
	pending map[ckpt.ID]*Snapshot
	closed  bool
}

// upload is one shared file uploaded by one or more pending snapshots.
type upload struct {
	done   chan struct{}
	entry  FileEntry
	err    error
	owners map[ckpt.ID]struct{}
}

// Open opens a task's state with no prior snapshot: whatever Dir holds is
// discarded (a task with no completed checkpoint starts empty).
func Open(ctx context.Context, cfg Config) (*Backend, error) {
	b, err := newBackend(cfg)
	if err != nil {
		return nil, err
	}
	if err := b.resetDir(); err != nil {
		return nil, err
	}
	if err := b.openDB(); err != nil {
		return nil, err
	}
	b.empty = true
	b.cfg.Logger.Info("state opened empty", "dir", b.cfg.Dir)
	return b, nil
}

func newBackend(cfg Config) (*Backend, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.ensureDefaults()
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("state: instance id: %w", err)
	}
	fault := &diskFault{dir: cfg.Dir}
	b := &Backend{
		cfg:      cfg,
		fs:       &faultFS{FS: cfg.FS, fault: fault},
		fault:    fault,
		dbDir:    cfg.FS.PathJoin(cfg.Dir, "db"),
		snapDir:  cfg.FS.PathJoin(cfg.Dir, "snap"),
		instance: hex.EncodeToString(rnd[:]),
		states:   make(map[string]*stateInfo),
		wo:       pebble.NoSync,
	}
	if cfg.RecordCacheBytes > 0 {
		b.rc = newRecordCache(cfg.RecordCacheBytes)
	}
	b.mu.confirmed = make(map[string]FileEntry)
	b.mu.confirmedKeys = make(map[string]struct{})
	b.mu.uploads = make(map[string]*upload)
	b.mu.pending = make(map[ckpt.ID]*Snapshot)
	m, err := newMetrics(cfg.Registerer, cfg.Task)
	if err != nil {
		return nil, err
	}
	b.metrics = m
	fault.onSet = m.diskFailures.Inc
	return b, nil
}

// resetDir removes the live database, local snapshots and restore (and
// rescaling restore) leftovers.
func (b *Backend) resetDir() error {
	for _, d := range []string{b.dbDir, b.snapDir, b.restoreDir(), b.rescaleDir()} {
		if err := b.fs.RemoveAll(d); err != nil {
			return fmt.Errorf("state: remove %s: %w", d, err)
		}
	}
	if err := mkdirAllSync(b.fs, b.snapDir); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}

func (b *Backend) restoreDir() string { return b.fs.PathJoin(b.cfg.Dir, "restore.tmp") }

func (b *Backend) openDB() error { return b.openDBWith(nil) }

// openDBWith opens the database with tune applied to its options last.
func (b *Backend) openDBWith(tune func(*pebble.Options)) error {
	cache := b.cfg.Cache
	if cache == nil {
		cache = pebble.NewCache(64 << 20)
	} else {
		cache.Ref()
	}
	b.live = &liveFS{FS: &pebbleFS{FS: b.fs, dir: b.dbDir, fault: b.fault}}
	o := PebbleOptions(cache, b.live, b.cfg.MemTableSize)
	o.Logger = pebbleLogger{log: b.cfg.Logger, fault: b.fault}
	if b.cfg.TunePebble != nil {
		b.cfg.TunePebble(o)
	}
	if tune != nil {
		tune(o)
	}
	var db *pebble.DB
	err := b.guard(func() error {
		var err error
		db, err = pebble.Open(b.dbDir, o)
		return err
	})
	if de := b.fault.get(); err != nil && de != nil {
		err = de
	}
	if err != nil {
		cache.Unref()
		return fmt.Errorf("state: open pebble %s: %w", b.dbDir, err)
	}
	b.db = db
	b.cache = cache
	return nil
}

// closeFailed closes a database whose disk failed. Pebble may hang or fail
// there (a lock its failed write left held), so it gets a few seconds, on
// a goroutine of its own, and is abandoned otherwise: the task is restored
// into a fresh directory anyway. An abandoned database keeps its memory
// and files until the process exits.
func (b *Backend) closeFailed(ctx context.Context) error {
	db, cache := b.db, b.cache
	b.db = nil
	done := make(chan error, 1)
	go func() {
		done <- b.guard(func() error {
			err := db.Close()
			cache.Unref()
			return err
		})
	}()
	wait := time.NewTimer(5 * time.Second)
	defer wait.Stop()
	select {
	case err := <-done:
		if err != nil {
			b.cfg.Logger.Debug("closing the failed state database", "err", err)
		}
	case <-wait.C:
		b.cfg.Logger.Warn("the failed state database did not close within 5s; abandoned", "dir", b.dbDir)
	case <-ctx.Done():
	}
	return nil
}

// DB returns the underlying Pebble database, for benchmarks and diagnostics.
// Writing to it directly bypasses the keyed state encoding and the record
// cache; call Flush before reading it.
func (b *Backend) DB() *pebble.DB {
	b.empty = false // the caller may write
	return b.db
}

// Restored returns the manifest the backend was restored from, or nil if it
// was opened empty. Its OperatorState is the blob the task handed in at that
// snapshot.
func (b *Backend) Restored() *Manifest { return b.restored }

// Close cancels snapshots whose asynchronous part has not finished (deleting
// what only they uploaded), closes the database and releases the cache
// reference. Snapshots that finished (and may have been acknowledged) are
// left alone: the coordinator may still complete them, and if it does not,
// Registry.CollectGarbage removes them. Local snapshot copies stay on disk
// for local recovery.
func (b *Backend) Close(ctx context.Context) error {
	b.mu.Lock()
	if b.mu.closed {
		b.mu.Unlock()
		return nil
	}
	b.mu.closed = true
	var ids []ckpt.ID
	for id, s := range b.mu.pending {
		if s.result == nil {
			ids = append(ids, id)
		}
	}
	b.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if err := b.NotifyAborted(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	if b.db != nil && b.fault.get() != nil {
		errs = append(errs, b.closeFailed(ctx))
	} else if b.db != nil {
		if err := b.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("state: close pebble: %w", err))
		}
		b.cache.Unref()
		b.db = nil
	}
	b.metrics.unregister()
	return errors.Join(errs...)
}
