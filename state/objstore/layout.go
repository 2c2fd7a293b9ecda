package objstore

import (
	"fmt"
	neturl "net/url"
	"path"
	"strconv"
	"strings"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

// The object-store layout of DESIGN.md section 7, relative to <root>/<job>/:
//
//	shared/<task>/<file>               immutable files, shared by checkpoints
//	chk-<n>/<task>.manifest            one per task
//	chk-<n>/<task>/<file>              files only checkpoint n uses (Pebble MANIFEST, WAL, OPTIONS)
//	chk-<n>/_metadata                  written last, by the coordinator
//	savepoints/<name>/<task>.manifest  self-contained copies …
//	savepoints/<name>/<task>/<file>
//	savepoints/<name>/_metadata

// SharedKey is the key of an immutable file shared by checkpoints.
func SharedKey(task, file string) string { return "shared/" + task + "/" + file }

// SharedPrefix is the prefix of every shared file (of task, if not empty).
func SharedPrefix(task string) string {
	if task == "" {
		return "shared/"
	}
	return "shared/" + task + "/"
}

// CheckpointPrefix is the prefix of every object of checkpoint id.
func CheckpointPrefix(id ckpt.ID) string { return "chk-" + id.String() + "/" }

// TaskManifestKey is the key of task's manifest in checkpoint id.
func TaskManifestKey(id ckpt.ID, task string) string {
	return CheckpointPrefix(id) + task + ".manifest"
}

// ExclusiveKey is the key of a file that only checkpoint id of task uses.
func ExclusiveKey(id ckpt.ID, task, file string) string {
	return CheckpointPrefix(id) + task + "/" + file
}

// MetadataKey is the key of checkpoint id's metadata object.
func MetadataKey(id ckpt.ID) string { return CheckpointPrefix(id) + "_metadata" }

// SavepointPrefix is the prefix of every object of savepoint name.
func SavepointPrefix(name string) string { return "savepoints/" + name + "/" }

// SavepointManifestKey is the key of task's manifest in savepoint name.
func SavepointManifestKey(name, task string) string {
	return SavepointPrefix(name) + task + ".manifest"
}

// SavepointMetadataKey is the key of savepoint name's metadata object.
func SavepointMetadataKey(name string) string { return SavepointPrefix(name) + "_metadata" }

// ParseCheckpointKey returns the checkpoint ID of a key under chk-<n>/.
func ParseCheckpointKey(key string) (ckpt.ID, bool) {
	rest, ok := strings.CutPrefix(key, "chk-")
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(num, 10, 64)
	if err != nil || id == 0 || strconv.FormatUint(id, 10) != num {
		return 0, false
	}
	return ckpt.ID(id), true
}

// CheckID reports an error unless id is a valid (positive) checkpoint ID.
func CheckID(id ckpt.ID) error {
	if id == 0 {
		return fmt.Errorf("state/objstore: checkpoint id %d is not positive", id)
	}
	return nil
}

// URL returns the location of key, relative to job's root, in the object
// store at storage (checkpoint.storage): the storage URL with <job>/<key>
// appended to its path, its query kept. It is the form `processor validate
// --against` reads (a savepoint's folder or _metadata).
func URL(storage, job, key string) string {
	u, err := neturl.Parse(storage)
	if err != nil || u.Scheme == "" {
		return strings.TrimSuffix(storage, "/") + "/" + job + "/" + key
	}
	u.Path = path.Join("/", u.Path, job, key)
	return u.String()
}
