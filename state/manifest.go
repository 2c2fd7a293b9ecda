package state

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/keygroup"
	"github.com/weir-stream/weir/state/objstore"
)

// manifestVersion is the version this build writes. Version 2 added inline
// files (FileEntry.Inline); this build reads versions 1 and 2.
const manifestVersion = 2

// InlineMaxBytes is the size up to which a snapshot keeps a file that is
// neither shared (an SST) nor a WAL in its manifest rather than as an
// object of its own, as Flink keeps state smaller than
// state.storage.fs.memory-threshold (20 KB) in its checkpoint metadata.
// Those files are Pebble's OPTIONS (3 KiB), MANIFEST (from 39 bytes to
// MaxManifestFileSize) and empty marker files: four of the five objects a
// task with little state wrote per checkpoint, each one PUT (and on
// file://, one file created) on the checkpoint's critical path.
const InlineMaxBytes = 16 << 10

// Manifest is a task's snapshot as stored in object storage
// (chk-<n>/<task>.manifest or savepoints/<name>/<task>.manifest): every file
// the task's Pebble database needs, with size and checksum, and the small
// operator state the task handed in (source offsets, sink transaction
// handles). It is written after every file it lists.
type Manifest struct {
	Version    int     `json:"v"`
	Job        string  `json:"job"`
	Task       string  `json:"task"`
	Checkpoint ckpt.ID `json:"checkpoint"`
	// Savepoint is the savepoint name, empty for a checkpoint. A savepoint's
	// file keys are relative to its directory savepoints/<name>/, so that the
	// savepoint is self-contained.
	Savepoint string    `json:"savepoint,omitempty"`
	Instance  string    `json:"instance"`
	Created   time.Time `json:"created"`
	// MaxParallelism is the number of key groups the task's keyed state is
	// filed under (Config.MaxParallelism; absent: 0, the legacy layout),
	// and KeyGroups the range [lo, hi) the task owned. A restore must use
	// the same MaxParallelism: the keys' layout depends on it.
	MaxParallelism int    `json:"max_parallelism,omitempty"`
	KeyGroups      [2]int `json:"key_groups,omitzero"`
	// StateBytes is the total size of Files.
	StateBytes    int64       `json:"state_bytes"`
	Files         []FileEntry `json:"files"`
	OperatorState []byte      `json:"operator_state,omitempty"`
}

// FileEntry is one file of a snapshot.
type FileEntry struct {
	// Name is the file's name in the Pebble directory, e.g. 000123.sst.
	Name string `json:"name"`
	// Key is the object key, relative to the job root for a checkpoint
	// (shared/<task>/… or chk-<n>/<task>/…), relative to the savepoint
	// directory for a savepoint.
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Shared marks an immutable file (SST) that later checkpoints may reuse.
	Shared bool `json:"shared,omitempty"`
	// Parts, if set, hold the file as consecutive pieces, each its own
	// shared object (a WAL: each checkpoint uploads only what was appended
	// since the last confirmed one). Key and SHA256 are then empty and Size
	// is the sum of the parts' sizes.
	Parts []Part `json:"parts,omitempty"`
	// Inline marks a small file (at most InlineMaxBytes) kept in the
	// manifest itself, as Data, rather than as an object: Key is then
	// empty, and Size and SHA256 describe Data.
	Inline bool   `json:"inline,omitempty"`
	Data   []byte `json:"data,omitempty"`
}

// Part is one piece of a file stored in several objects.
type Part struct {
	Key    string `json:"key"` // relative to the job root
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// equal reports whether two entries describe the same stored file.
func (f FileEntry) equal(g FileEntry) bool {
	if f.Name != g.Name || f.Key != g.Key || f.Size != g.Size || f.SHA256 != g.SHA256 || f.Shared != g.Shared || len(f.Parts) != len(g.Parts) ||
		f.Inline != g.Inline || !bytes.Equal(f.Data, g.Data) {
		return false
	}
	for i := range f.Parts {
		if f.Parts[i] != g.Parts[i] {
			return false
		}
	}
	return true
}

// ObjectKey returns the key, relative to the job root, of file f.
func (m *Manifest) ObjectKey(f FileEntry) string {
	if m.Savepoint != "" {
		return objstore.SavepointPrefix(m.Savepoint) + f.Key
	}
	return f.Key
}

// Objects returns every object a restore from m reads, keys relative to
// the job root: each file stored whole (a shared or exclusive file of a
// checkpoint, a savepoint's own copy) and each part of a file stored in
// pieces. Inline files are in the manifest itself and need none; the
// manifest's own key is Handle. It is what garbage collection must never
// delete while m's checkpoint or savepoint is kept (DESIGN.md invariant 4).
func (m *Manifest) Objects() []Part {
	var out []Part
	for _, f := range m.Files {
		switch {
		case f.Inline:
		case len(f.Parts) > 0:
			out = append(out, f.Parts...)
		default:
			out = append(out, Part{Key: m.ObjectKey(f), Size: f.Size, SHA256: f.SHA256})
		}
	}
	return out
}

// sharedObjects returns the key and size of every shared object the
// manifest lists: shared files and the parts of files stored in pieces.
func (m *Manifest) sharedObjects() []Part {
	if m.Savepoint != "" {
		return nil
	}
	var out []Part
	for _, f := range m.Files {
		if f.Shared {
			out = append(out, Part{Key: f.Key, Size: f.Size, SHA256: f.SHA256})
		}
		out = append(out, f.Parts...)
	}
	return out
}

// Handle is the key, relative to the job root, of the manifest itself: what
// a task acknowledges and what a restore starts from.
func (m *Manifest) Handle() string {
	if m.Savepoint != "" {
		return objstore.SavepointManifestKey(m.Savepoint, m.Task)
	}
	return objstore.TaskManifestKey(m.Checkpoint, m.Task)
}

// Encode returns the manifest as JSON.
func (m *Manifest) Encode() ([]byte, error) { return json.MarshalIndent(m, "", " ") }

// DecodeManifest parses and validates a manifest.
func DecodeManifest(data []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrManifest, err)
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

func (m *Manifest) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrManifest}, args...)...))
	}
	if m.Version < 1 || m.Version > manifestVersion {
		bad("unknown version %d (this build reads 1 to %d)", m.Version, manifestVersion)
	}
	if err := objstore.ValidName("task", m.Task); err != nil {
		bad("%v", err)
	}
	if m.Checkpoint <= 0 {
		bad("checkpoint id %d", m.Checkpoint)
	}
	if m.MaxParallelism < 0 || m.MaxParallelism > keygroup.Limit {
		bad("max_parallelism %d outside [0, %d]", m.MaxParallelism, keygroup.Limit)
	}
	if lo, hi := m.KeyGroups[0], m.KeyGroups[1]; (m.MaxParallelism == 0) != (m.KeyGroups == [2]int{}) ||
		m.MaxParallelism > 0 && (lo < 0 || lo >= hi || hi > m.MaxParallelism) {
		bad("key_groups [%d, %d) do not fit max_parallelism %d", lo, hi, m.MaxParallelism)
	}
	seen := make(map[string]bool)
	var total int64
	for _, f := range m.Files {
		if f.Name == "" || strings.ContainsAny(f.Name, "/\\") || f.Name == "." || f.Name == ".." || seen[f.Name] {
			bad("bad or duplicate file name %q", f.Name)
		}
		seen[f.Name] = true
		total += f.Size
		if len(f.Parts) > 0 {
			var sum int64
			for _, p := range f.Parts {
				if !validKey(p.Key) || p.Size < 0 || len(p.SHA256) != 64 {
					bad("file %s: bad part %+v", f.Name, p)
				}
				sum += p.Size
			}
			if f.Key != "" || f.SHA256 != "" || f.Shared || sum != f.Size || m.Savepoint != "" {
				bad("file %s: parts inconsistent with the entry", f.Name)
			}
			continue
		}
		if f.Inline || len(f.Data) > 0 {
			sum := sha256.Sum256(f.Data)
			if !f.Inline || m.Version < 2 || f.Key != "" || f.Shared || f.Size != int64(len(f.Data)) ||
				f.Size > InlineMaxBytes || f.SHA256 != hex.EncodeToString(sum[:]) {
				bad("file %s: inline data inconsistent with the entry", f.Name)
			}
			continue
		}
		if !validKey(f.Key) {
			bad("file %s: bad key %q", f.Name, f.Key)
		}
		if f.Size < 0 || len(f.SHA256) != 64 {
			bad("file %s: bad size %d or checksum %q", f.Name, f.Size, f.SHA256)
		}
	}
	if total != m.StateBytes {
		bad("state_bytes %d is not the sum of the file sizes %d", m.StateBytes, total)
	}
	return errors.Join(errs...)
}

func validKey(k string) bool {
	return k != "" && path.Clean(k) == k && !strings.HasPrefix(k, "../") && !strings.HasPrefix(k, "/") && k != ".."
}

// ReadManifest reads and validates the manifest at handle (a key relative
// to the job root).
func ReadManifest(ctx context.Context, store *objstore.Store, handle string) (*Manifest, error) {
	data, err := store.Get(ctx, handle)
	if err != nil {
		return nil, fmt.Errorf("state: read manifest %s: %w", handle, err)
	}
	m, err := DecodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("state: manifest %s: %w", handle, err)
	}
	return m, nil
}

// parallel runs fn for every item with at most n at a time. The first error
// cancels the context the others see; parallel waits for all and returns
// every error.
func parallel[T any](ctx context.Context, n int, items []T, fn func(ctx context.Context, item T) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, max(n, 1))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, it := range items {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, it); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				cancel()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	return ctx.Err() // cancelled from outside, maybe before every item ran
}
