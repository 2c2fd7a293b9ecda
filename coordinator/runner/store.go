package runner

import (
	"context"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/state/objstore"
)

// ObjectStoreMetadata writes _metadata objects into the job's object store
// at the keys of DESIGN.md section 7: chk-<n>/_metadata, or
// savepoints/<target>/_metadata for a savepoint with a target name.
type ObjectStoreMetadata struct {
	Store *objstore.Store
}

// WriteMetadata implements MetadataStore with a conditional put.
func (s ObjectStoreMetadata) WriteMetadata(ctx context.Context, m control.Metadata) (string, error) {
	return checkpoint.WriteMetadata(ctx, s.Store, m)
}

// ReadMetadata implements MetadataReader.
func (s ObjectStoreMetadata) ReadMetadata(ctx context.Context, location string) (control.Metadata, error) {
	return checkpoint.ReadMetadata(ctx, s.Store, location)
}
