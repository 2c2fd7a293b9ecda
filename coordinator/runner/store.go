package runner

import (
	"context"
	"fmt"

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
	b, err := control.Encode(m)
	if err != nil {
		return "", err
	}
	key := objstore.MetadataKey(int64(m.ID))
	if m.Kind.IsSavepoint() && m.Target != "" {
		if err := objstore.ValidName("savepoint", m.Target); err != nil {
			return "", err
		}
		key = objstore.SavepointMetadataKey(m.Target)
	}
	if err := s.Store.PutIfAbsent(ctx, key, b); err != nil {
		return "", fmt.Errorf("write %s: %w", key, err)
	}
	return key, nil
}

// ReadMetadata implements MetadataReader.
func (s ObjectStoreMetadata) ReadMetadata(ctx context.Context, location string) (control.Metadata, error) {
	b, err := s.Store.Get(ctx, location)
	if err != nil {
		return control.Metadata{}, fmt.Errorf("read %s: %w", location, err)
	}
	md, err := control.DecodeMetadata(b)
	if err != nil {
		return control.Metadata{}, fmt.Errorf("decode %s: %w", location, err)
	}
	return md, nil
}
