package objstore

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"
)

// flaky fails the first n uploads after performing them (a lost response)
// or before (a failed request).
type flaky struct {
	Bucket
	failBefore, failAfter atomic.Int32
	uploads               atomic.Int32
}

var errNet = errors.New("connection reset")

func (f *flaky) Upload(ctx context.Context, key string, r io.Reader, opts *blob.WriterOptions) error {
	f.uploads.Add(1)
	if f.failBefore.Add(-1) >= 0 {
		return errNet
	}
	err := f.Bucket.Upload(ctx, key, r, opts)
	if err == nil && f.failAfter.Add(-1) >= 0 {
		return errNet
	}
	return err
}

func newTestStore(t *testing.T) (*Store, *flaky) {
	f := &flaky{Bucket: FromBlob("mem://", memblob.OpenBucket(nil))}
	s, err := New(f, "job", Options{Retry: RetryPolicy{MaxAttempts: 4, InitialBackoff: time.Millisecond, MaxBackoff: 2 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, f
}

func TestRetryTransient(t *testing.T) {
	ctx := context.Background()
	s, f := newTestStore(t)
	f.failBefore.Store(3)
	if err := s.Put(ctx, "a", []byte("x")); err != nil {
		t.Fatalf("3 transient failures, 4 attempts: %v", err)
	}
	if got, _ := s.Get(ctx, "a"); string(got) != "x" {
		t.Fatalf("got %q", got)
	}
	f.failBefore.Store(4)
	if err := s.Put(ctx, "b", []byte("x")); !errors.Is(err, errNet) {
		t.Fatalf("4 failures: %v", err)
	}
	f.uploads.Store(0)
	if err := s.PutFrom(ctx, "c", func() (io.ReadCloser, error) { return nil, errors.New("no file") }); err == nil || f.uploads.Load() != 0 {
		t.Fatalf("source error retried or ignored: %v, %d uploads", err, f.uploads.Load())
	}
	if _, err := s.Get(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if err := s.Delete(ctx, "missing"); err != nil {
		t.Fatalf("delete missing: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	f.failBefore.Store(1)
	if err := s.Put(cctx, "d", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestPutIfAbsent(t *testing.T) {
	ctx := context.Background()
	s, f := newTestStore(t)
	if err := s.PutIfAbsent(ctx, "m", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(ctx, "m", []byte("two")); !errors.Is(err, ErrExists) {
		t.Fatalf("second: %v", err)
	}
	// The first try wrote the object but its response was lost: the retry
	// finds it and, since it holds our data, succeeds.
	f.failAfter.Store(1)
	if err := s.PutIfAbsent(ctx, "n", []byte("mine")); err != nil {
		t.Fatalf("lost response: %v", err)
	}
	// Someone else's object is still a conflict.
	if err := s.Put(ctx, "o", []byte("theirs")); err != nil {
		t.Fatal(err)
	}
	f.failBefore.Store(1)
	if err := s.PutIfAbsent(ctx, "o", []byte("mine")); !errors.Is(err, ErrExists) {
		t.Fatalf("conflict after retry: %v", err)
	}
}

func TestListAndDeletePrefix(t *testing.T) {
	ctx := context.Background()
	s, _ := newTestStore(t)
	for _, k := range []string{MetadataKey(3), TaskManifestKey(3, "t"), ExclusiveKey(3, "t", "MANIFEST-1"), SharedKey("t", "x.sst"), TaskManifestKey(30, "t")} {
		if err := s.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	objs, _ := s.List(ctx, CheckpointPrefix(3))
	if len(objs) != 3 {
		t.Fatalf("chk-3/ lists %d objects (chk-30 must not match)", len(objs))
	}
	if err := s.DeletePrefix(ctx, CheckpointPrefix(3), MetadataKey(3)); err != nil {
		t.Fatal(err)
	}
	all, _ := s.List(ctx, "")
	if len(all) != 2 {
		t.Fatalf("left %v", all)
	}
}

func TestLayoutAndNames(t *testing.T) {
	if id, ok := ParseCheckpointKey("chk-42/t.manifest"); !ok || id != 42 {
		t.Fatal(id, ok)
	}
	for _, k := range []string{"chk-042/x", "chk-/x", "chk-0/x", "shared/x", "chk-1"} {
		if _, ok := ParseCheckpointKey(k); ok {
			t.Errorf("%q parsed", k)
		}
	}
	for _, n := range []string{"", ".", "..", "a/b", `a\b`, "a\x00"} {
		if ValidName("task", n) == nil {
			t.Errorf("name %q accepted", n)
		}
	}
	if got := fileURLDefaults("file:///tmp/x"); !strings.Contains(got, "no_tmp_dir=true") {
		t.Errorf("file URL %q", got)
	}
	if got := fileURLDefaults("file:///tmp/x?no_tmp_dir="); strings.Contains(got, "true") || !strings.Contains(got, "metadata=skip") {
		t.Errorf("explicit setting overridden, or the other default missing: %q", got)
	}
	if got := fileURLDefaults("file:///tmp/x"); !strings.Contains(got, "metadata=skip") {
		t.Errorf("file URL %q writes sidecars", got)
	}
	if got := fileURLDefaults("file:///tmp/x?metadata=&no_tmp_dir=true"); got != "file:///tmp/x?metadata=&no_tmp_dir=true" {
		t.Errorf("explicit settings changed: %q", got)
	}
	if got := fileURLDefaults("s3://b?region=x"); got != "s3://b?region=x" {
		t.Errorf("s3 URL changed: %q", got)
	}
	if !IsTransient(errNet) || IsTransient(Permanent(errNet)) || IsTransient(context.Canceled) {
		t.Error("IsTransient")
	}
}

func TestOpenFileURL(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(context.Background(), "file://"+dir, "job", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put(context.Background(), "a/b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := New(nil, "a/b", Options{}); err == nil {
		t.Error("job name with a slash accepted")
	}
}

// TestFileDeleteRemovesEmptyCheckpointDir: in a file:// store, deleting
// the last object of chk-<n>/ removes the directory (fileblob leaves it),
// while a directory that still holds an object, and shared/<task>/, stay.
func TestFileDeleteRemovesEmptyCheckpointDir(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, err := Open(ctx, "file://"+root, "job", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range []string{"chk-3/_metadata", "chk-3/main-0.manifest", "chk-4/_metadata", "shared/main-0/1.sst"} {
		if err := s.Put(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(dir string) bool {
		_, err := os.Stat(filepath.Join(root, "job", dir))
		return err == nil
	}
	if err := s.Delete(ctx, "chk-3/_metadata"); err != nil {
		t.Fatal(err)
	}
	if !exists("chk-3") {
		t.Fatal("chk-3/ removed while it holds a manifest")
	}
	if err := s.DeletePrefix(ctx, "chk-", "chk-4/_metadata"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "shared/main-0/1.sst"); err != nil {
		t.Fatal(err)
	}
	if exists("chk-3") || exists("chk-4") {
		t.Error("an empty chk-<n>/ is left after its objects were deleted")
	}
	if !exists("shared/main-0") {
		t.Error("shared/main-0/ removed: the next snapshot uploads into it")
	}
}
