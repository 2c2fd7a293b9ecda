// Package checkpoint owns what a checkpoint is to the rest of Weir, and is
// the one reader and writer of the `_metadata` objects that make a
// checkpoint or a savepoint exist (DESIGN.md section 7):
// `chk-<n>/_metadata` and `savepoints/<name>/_metadata` under the job's
// root in the object store. The coordinator writes them; a restoring task,
// the garbage collector, the compatibility check and the CLI read them,
// all through this package. The encoding is package control's. The
// vocabulary (the checkpoint ID type and Kind) is in the pure subpackage
// checkpoint/ckpt: the pure cores may import it, not this package, which
// does I/O.
package checkpoint

import (
	"context"
	"errors"
	"fmt"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/state/objstore"
)

// MetadataKey returns where m is stored: chk-<n>/_metadata, or
// savepoints/<target>/_metadata for a savepoint with a target name.
func MetadataKey(m control.Metadata) (string, error) {
	if m.Kind.IsSavepoint() && m.Target != "" {
		if err := objstore.ValidName("savepoint", m.Target); err != nil {
			return "", err
		}
		return objstore.SavepointMetadataKey(m.Target), nil
	}
	return objstore.MetadataKey(m.ID), nil
}

// WriteMetadata writes m with a conditional put and returns its key: it
// fails with an error wrapping objstore.ErrExists if the object is there
// already (a checkpoint ID is never used twice).
func WriteMetadata(ctx context.Context, store *objstore.Store, m control.Metadata) (string, error) {
	b, err := control.Encode(m)
	if err != nil {
		return "", err
	}
	key, err := MetadataKey(m)
	if err != nil {
		return "", err
	}
	if err := store.PutIfAbsent(ctx, key, b); err != nil {
		return "", fmt.Errorf("write %s: %w", key, err)
	}
	return key, nil
}

// ReadMetadata reads and decodes the _metadata object at key (as a
// complete record names it).
func ReadMetadata(ctx context.Context, store *objstore.Store, key string) (control.Metadata, error) {
	b, err := store.Get(ctx, key)
	if err != nil {
		return control.Metadata{}, fmt.Errorf("read %s: %w", key, err)
	}
	md, err := control.DecodeMetadata(b)
	if err != nil {
		return control.Metadata{}, fmt.Errorf("decode %s: %w", key, err)
	}
	return md, nil
}

// ReadCompleted reads the metadata of the checkpoint c completed, and
// checks that it is c's.
func ReadCompleted(ctx context.Context, store *objstore.Store, c control.Complete) (control.Metadata, error) {
	md, err := ReadMetadata(ctx, store, c.Metadata)
	if err != nil {
		return md, err
	}
	if md.ID != c.ID {
		return md, fmt.Errorf("%s is the metadata of checkpoint %d, not %d", c.Metadata, md.ID, c.ID)
	}
	return md, nil
}

// ReadID reads the metadata of checkpoint id (at chk-<id>/_metadata).
func ReadID(ctx context.Context, store *objstore.Store, id ckpt.ID) (control.Metadata, error) {
	md, err := ReadMetadata(ctx, store, objstore.MetadataKey(id))
	if err == nil && md.ID != id {
		err = fmt.Errorf("%s is the metadata of checkpoint %d", objstore.MetadataKey(id), md.ID)
	}
	return md, err
}

// ReadRestore reads the metadata of a generation's restore point,
// checkpoint id: at key if the generation names it (a savepoint's,
// control.Generation.RestoreMetadata), else at chk-<id>/_metadata.
func ReadRestore(ctx context.Context, store *objstore.Store, id ckpt.ID, key string) (control.Metadata, error) {
	if key == "" {
		return ReadID(ctx, store, id)
	}
	md, err := ReadMetadata(ctx, store, key)
	if err == nil && md.ID != id {
		err = fmt.Errorf("%s is the metadata of checkpoint %d, not %d", key, md.ID, id)
	}
	return md, err
}

// ErrNone reports a job without any checkpoint in its object store.
var ErrNone = errors.New("checkpoint: the job has no checkpoint in its object store")

// Latest returns the key of the newest checkpoint's _metadata in store,
// or an error wrapping ErrNone. Without the commit topic it cannot tell a
// complete checkpoint from one whose coordinator failed between writing
// _metadata and appending complete: both recorded the same job.
func Latest(ctx context.Context, store *objstore.Store) (string, error) {
	objs, err := store.List(ctx, "chk-")
	if err != nil {
		return "", err
	}
	var best ckpt.ID
	for _, o := range objs {
		if id, ok := objstore.ParseCheckpointKey(o.Key); ok && o.Key == objstore.MetadataKey(id) && id > best {
			best = id
		}
	}
	if best == 0 {
		return "", ErrNone
	}
	return objstore.MetadataKey(best), nil
}
