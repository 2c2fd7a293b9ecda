package runner

import (
	"context"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/compat"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/state/objstore"
)

// ObjectStoreMetadata writes _metadata objects into the job's object store
// at the keys of DESIGN.md section 7: chk-<n>/_metadata, or
// savepoints/<target>/_metadata for a savepoint with a target name.
type ObjectStoreMetadata struct {
	Store *objstore.Store
	// Schema, if set, is the job's state schema, which every _metadata
	// object records (package compat).
	Schema *compat.Schema
}

// WriteMetadata implements MetadataStore with a conditional put.
func (s ObjectStoreMetadata) WriteMetadata(ctx context.Context, m control.Metadata) (string, error) {
	if s.Schema != nil {
		m.Schema = s.Schema
	}
	return checkpoint.WriteMetadata(ctx, s.Store, m)
}

// ReadMetadata implements MetadataReader.
func (s ObjectStoreMetadata) ReadMetadata(ctx context.Context, location string) (control.Metadata, error) {
	return checkpoint.ReadMetadata(ctx, s.Store, location)
}
