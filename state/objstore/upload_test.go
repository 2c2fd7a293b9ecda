package objstore_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"gocloud.dev/blob"
	"gocloud.dev/gcerrors"

	"github.com/weir-stream/weir/internal/cloudtest"
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
		url := "file://" + t.TempDir()
		b, err := blob.OpenBucket(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		checkUploadAtomic(t, url, b)
	})
	t.Run("s3", func(t *testing.T) {
		b, url := s3test.Bucket(t)
		checkUploadAtomic(t, url, b)
	})
}

func checkUploadAtomic(t *testing.T, url string, b *blob.Bucket) {
	ctx := context.Background()
	bucket := objstore.FromBlob(url, b)
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

// The store's operations on the gs:// and azblob:// emulators: atomic
// upload, conditional put (exists → ErrExists), get, list, delete.
func TestCloudSchemes(t *testing.T) {
	for _, scheme := range cloudtest.Schemes() {
		t.Run(scheme, func(t *testing.T) {
			b, url := cloudtest.Bucket(t, scheme)
			checkUploadAtomic(t, url, b)
			ctx := context.Background()
			s, err := objstore.Open(ctx, url, "job", objstore.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.PutIfAbsent(ctx, "chk-1/_metadata", []byte("one")); err != nil {
				t.Fatal(err)
			}
			if err := s.PutIfAbsent(ctx, "chk-1/_metadata", []byte("two")); !errors.Is(err, objstore.ErrExists) {
				t.Fatalf("second conditional put: %v, want ErrExists", err)
			}
			if got, err := s.Get(ctx, "chk-1/_metadata"); err != nil || string(got) != "one" {
				t.Fatalf("get: %q, %v", got, err)
			}
			if err := s.Put(ctx, "chk-1/t0/a", []byte("a")); err != nil {
				t.Fatal(err)
			}
			objs, err := s.List(ctx, "chk-1/")
			if err != nil || len(objs) != 2 {
				t.Fatalf("list: %+v, %v", objs, err)
			}
			if err := s.Delete(ctx, "chk-1/t0/a"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, "chk-1/t0/a"); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("get after delete: %v", err)
			}
		})
	}
}
