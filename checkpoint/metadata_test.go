package checkpoint_test

import (
	"context"
	"errors"
	"testing"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/compat"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/state/objstore"
)

func memStore(t *testing.T) *objstore.Store {
	t.Helper()
	s, err := objstore.Open(context.Background(), "mem://", "job", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func metadata(id ckpt.ID) control.Metadata {
	return control.Metadata{ID: id, Gen: 1, Kind: ckpt.KindCheckpoint, TS: 5,
		Tasks:  []control.TaskState{{Task: control.TaskID{Stage: "main", Index: 0}, Handle: "chk-1/main-0.manifest"}},
		Schema: &compat.Schema{V: compat.Version, Fingerprint: "f", MaxParallelism: 8}}
}

// TestWriteReadMetadata: the one writer and reader of _metadata round-trip
// it, the write is conditional, a savepoint goes under savepoints/, and
// Latest finds the newest checkpoint.
func TestWriteReadMetadata(t *testing.T) {
	ctx := context.Background()
	store := memStore(t)
	if _, err := checkpoint.Latest(ctx, store); !errors.Is(err, checkpoint.ErrNone) {
		t.Fatalf("Latest of an empty store: %v", err)
	}
	for _, id := range []ckpt.ID{3, 12} {
		key, err := checkpoint.WriteMetadata(ctx, store, metadata(id))
		if err != nil || key != objstore.MetadataKey(id) {
			t.Fatalf("write %d: %q %v", id, key, err)
		}
	}
	if _, err := checkpoint.WriteMetadata(ctx, store, metadata(12)); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("second write of 12: %v, want ErrExists", err)
	}
	md, err := checkpoint.ReadID(ctx, store, 12)
	if err != nil || md.ID != 12 || md.Schema == nil || md.Schema.Fingerprint != "f" {
		t.Fatalf("read 12: %+v %v", md, err)
	}
	if _, err := checkpoint.ReadCompleted(ctx, store, control.Complete{ID: 4, Metadata: objstore.MetadataKey(12)}); err == nil {
		t.Fatal("the metadata of 12 read as 4's")
	}
	latest, err := checkpoint.Latest(ctx, store)
	if err != nil || latest != objstore.MetadataKey(12) {
		t.Fatalf("Latest: %q %v", latest, err)
	}
	sp := metadata(13)
	sp.Kind, sp.Target = ckpt.KindSavepoint, "before-upgrade"
	key, err := checkpoint.WriteMetadata(ctx, store, sp)
	if err != nil || key != objstore.SavepointMetadataKey("before-upgrade") {
		t.Fatalf("savepoint: %q %v", key, err)
	}
	if md, err := checkpoint.ReadMetadata(ctx, store, key); err != nil || md.Target != "before-upgrade" {
		t.Fatalf("read savepoint: %+v %v", md, err)
	}
}
