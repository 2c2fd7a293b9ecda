package objstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/weir-stream/weir/state/objstore"
)

// TestFileListWhileDeleting: on file://, a listing that runs while objects
// under its prefix are deleted returns (fileblob reads a directory, then
// stats each file: one deleted in between must not fail the listing, let
// alone as "the bucket does not exist").
func TestFileListWhileDeleting(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.Open(ctx, "file://"+t.TempDir(), "job", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for round := range 5 {
		var keys []string
		for i := range 100 {
			k := fmt.Sprintf("chk-%d/task-%d/f%03d", round, i%4, i)
			if err := store.Put(ctx, k, []byte("x")); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, k)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for _, k := range keys {
				_ = store.Delete(ctx, k)
			}
		})
		for range 20 {
			if _, err := store.List(ctx, "chk-"); err != nil {
				t.Fatalf("round %d: list while deleting: %v", round, err)
			}
		}
		wg.Wait()
	}
}
