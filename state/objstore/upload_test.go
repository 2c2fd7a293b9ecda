package objstore_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/weir-stream/weir/internal/s3test"
	"github.com/weir-stream/weir/state/objstore"
)

// failingReader yields n bytes, then fails.
type failingReader struct{ n int }

var errRead = errors.New("disk read failed")

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errRead
	}
	k := min(len(p), f.n)
	for i := range k {
		p[i] = 'x'
	}
	f.n -= k
	return k, nil
}

// An upload whose reader fails stores nothing (Bucket.Upload must be
// atomic); one that succeeds stores every byte, across copy buffers. On
// file:// and on the real S3 server.
func TestUploadAtomic(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		b, err := blob.OpenBucket(context.Background(), "file://"+t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		checkUploadAtomic(t, b)
	})
	t.Run("s3", func(t *testing.T) {
		b, _ := s3test.Bucket(t)
		checkUploadAtomic(t, b)
	})
}

func checkUploadAtomic(t *testing.T, b *blob.Bucket) {
	ctx := context.Background()
	bucket := objstore.FromBlob(b)
	key := "upload-" + strings.ReplaceAll(t.Name(), "/", "-")
	if err := bucket.Upload(ctx, key+"-bad", &failingReader{n: 200 << 10}, nil); !errors.Is(err, errRead) {
		t.Fatalf("upload with a failing reader: %v, want %v", err, errRead)
	}
	if _, err := b.Attributes(ctx, key+"-bad"); gcerrors.Code(err) != gcerrors.NotFound {
		t.Fatalf("a failed upload left an object (attributes: %v)", err)
	}
	want := strings.Repeat("0123456789abcdef", 20<<10) // 320 KiB: several buffers
	if err := bucket.Upload(ctx, key, strings.NewReader(want), nil); err != nil {
		t.Fatal(err)
	}
	r, err := b.NewReader(ctx, key, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	_ = r.Close()
	if err != nil || string(got) != want {
		t.Fatalf("read back %d bytes (%v), want %d", len(got), err, len(want))
	}
}
