package state

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/cloudtest"
	"github.com/weir-stream/weir/internal/s3test"
	"github.com/weir-stream/weir/state/objstore"
)

// Checkpoints written to and restored from s3:// on the real S3 server:
// incremental uploads, conditional _metadata, release, restore with
// verification, and a corrupt object detected.
func TestS3SnapshotRestore(t *testing.T) {
	_, url := s3test.Bucket(t)
	checkSnapshotRestoreOn(t, url)
}

// The same on the gs:// and azblob:// emulators (fake-gcs-server, Azurite).
func TestCloudSnapshotRestore(t *testing.T) {
	for _, scheme := range cloudtest.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			_, url := cloudtest.Bucket(t, scheme)
			checkSnapshotRestoreOn(t, url)
		})
	}
}

func checkSnapshotRestoreOn(t *testing.T, url string) {
	ctx := context.Background()
	store, err := objstore.Open(ctx, url, testJob, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	b := openTest(t, testConfig(t, store, t.TempDir()))
	kv, _ := NewValueState(b, "kv", StringCodec{})
	reg := NewRegistry(store, nil)
	rng := rand.New(rand.NewPCG(51, 52))
	res, states := checkpointRun(t, b, reg, kv, rng, model{}, 1, 4)
	if res[4].ReusedFiles == 0 {
		t.Fatal("no incremental reuse")
	}
	if err := putMetadata(ctx, store, 4, []byte("again")); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("conditional put: %v", err)
	}
	for _, id := range []ckpt.ID{1, 2} {
		if _, err := reg.Release(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []ckpt.ID{3, 4} {
		// A second store opened from the URL alone, as a restarted replica would.
		s2, err := objstore.Open(ctx, url, testJob, objstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r := restoreTest(t, testConfig(t, s2, t.TempDir()), res[id].Handle)
		if r.RestoreInfo().Local || !maps.Equal(dump(t, r), states[id]) {
			t.Fatalf("checkpoint %d restored wrong (local=%v)", id, r.RestoreInfo().Local)
		}
		_ = r.Close(ctx)
		_ = s2.Close()
	}
	// Damage one shared file: restore names it.
	var victim FileEntry
	for _, f := range res[4].Manifest.Files {
		if f.Shared {
			victim = f
		}
	}
	data, err := store.Get(ctx, victim.Key)
	if err != nil {
		t.Fatal(err)
	}
	data[0] ^= 0xff
	if err := store.Put(ctx, victim.Key, data); err != nil {
		t.Fatal(err)
	}
	_, err = Restore(ctx, testConfig(t, store, t.TempDir()), res[4].Handle)
	var fe *FileError
	if !errors.Is(err, ErrCorruptFile) || !errors.As(err, &fe) || fe.File != victim.Name || fe.Checkpoint != 4 {
		t.Fatalf("corrupt object: %v", err)
	}
}
