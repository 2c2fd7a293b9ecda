// Package state owns operator state: keyed state on Pebble (one database per
// task), incremental snapshots to object storage through gocloud.dev/blob,
// restore, the object-store layout and garbage collection of files that no
// retained checkpoint or savepoint refers to. Package state/objstore holds
// the bucket access (URLs, layout keys, retries, conditional puts).
//
// # Pieces
//
//   - Backend: one task's Pebble database. Open (empty) or Restore (from a
//     task manifest, locally or by download). Keyed state handles
//     (ValueState, ListState, MapState, AggregatingState, ReducingState) are
//     created on it with a Codec and optional TTL, and read and write the
//     entry of the key set by SetCurrentKey. With Config.MaxParallelism > 0
//     every key's state is filed under its key group (keygroup.Of), so that
//     a range of key groups is one key range (KeyGroupBounds,
//     ScanKeyGroups). Restore restores a snapshot with the same
//     MaxParallelism and key groups; RestoreKeyGroups builds a task's key
//     groups from the snapshots of the tasks that held them under another
//     parallelism (rescale.go).
//   - Snapshot: Backend.Snapshot is the synchronous part at the barrier
//     (a Pebble checkpoint of hard links, the WAL captured by link and
//     length); Snapshot.Run the asynchronous part, in three steps: the
//     plan (planSnapshot, a pure function of the local copy's files and
//     the confirmed checkpoint: which files go inline in the manifest,
//     which are uploaded, which shared objects are claimed, which entries
//     reuse the confirmed checkpoint's objects), the upload of what object
//     storage lacks, then the task manifest. NotifyComplete and
//     NotifyAborted follow the coordinator's decisions.
//   - Registry: the coordinator's shared-file registry; Register a
//     completed checkpoint, Release one that is no longer retained,
//     CollectGarbage after a new generation (StoreTime reads the object
//     store's clock for it). WriteMetadata writes chk-<n>/_metadata
//     with a conditional put.
//
// # Goroutines
//
// The keyed state API, SetCurrentKey, Snapshot and PurgeExpired belong to
// the task goroutine (state handles reuse buffers and are not safe for
// concurrent use). Snapshot.Run runs on any goroutine, typically one per
// snapshot; NotifyComplete, NotifyAborted and Close may be called from any
// goroutine. They share the upload bookkeeping (Backend.mu). A Registry and
// an objstore.Store are safe for concurrent use.
//
// Within Snapshot.Run, Run's goroutine lists and stats the local copy,
// plans (reading the confirmed checkpoint's entries, which are replaced
// under Backend.mu and never modified), reads the inline files, claims
// the shared objects (Backend.acquire, under Backend.mu), waits for the
// shared objects other pending snapshots are uploading, asks for the
// operator state and writes the manifest. The uploads run on up to
// Config.UploadConcurrency goroutines that Run waits for, each completing
// its own file's manifest entry; the local copy is synced on one more
// goroutine, which Run waits for before it records the copy and before it
// returns.
//
// RestoreKeyGroups, like Restore, downloads on goroutines it waits for,
// and copies key groups on up to GOMAXPROCS more, which it waits for too.
//
// The package never imports coordinator, barrier or kafkaio, and holds no
// package-level mutable state; loggers, metric registries, clocks and the
// block cache are passed in.
//
// docs/state.md describes the layout on disk and in the bucket, the options
// and garbage collection for operators.
package state
