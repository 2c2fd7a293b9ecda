package objstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/internal/s3test"
	"github.com/weir-stream/weir/state/objstore"
)

// TestOpenMissingBucketIsPermanent: on the real S3 server, a bucket that
// does not exist is an error at Open that matches ErrPermanent and says
// what is wrong, at once, not a transient error retried forever.
func TestOpenMissingBucketIsPermanent(t *testing.T) {
	_, url := s3test.Bucket(t) // skips (or fails under WEIR_REQUIRE_S3=1) without the server
	cfg, _ := s3test.ConfigFromEnv()
	cfg.Bucket = "weir-no-such-bucket-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	missing := cfg.URL("")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err := objstore.Open(ctx, missing, "job", objstore.Options{})
	if !errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("Open(%s) = %v, want ErrPermanent", missing, err)
	}
	if !strings.Contains(err.Error(), "the bucket does not exist") || objstore.IsTransient(err) {
		t.Fatalf("error %q: want 'the bucket does not exist', not transient", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Open took %v: retried a permanent error", d)
	}
	// The bucket that exists opens.
	s, err := objstore.Open(ctx, url, "job", objstore.Options{})
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	_ = s.Close()
}

// TestOpenFileURLErrors: on file://, a URL with a parameter the driver does
// not know is permanent; a root that cannot be created for now (a path
// through a regular file: how the replica tests model a storage outage) is
// not, and is retried.
func TestOpenFileURLErrors(t *testing.T) {
	dir := t.TempDir()
	_, err := objstore.Open(context.Background(), "file://"+dir+"/checkpoints?regoin=eu", "job", objstore.Options{})
	if !errors.Is(err, objstore.ErrPermanent) || !strings.Contains(err.Error(), "the URL cannot be opened") {
		t.Fatalf("Open(file://…?regoin=eu) = %v, want ErrPermanent: the URL cannot be opened", err)
	}
	f := filepath.Join(dir, "a-file")
	if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = objstore.Open(context.Background(), "file://"+f+"/checkpoints", "job", objstore.Options{})
	if err == nil || errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("Open(root through a file) = %v, want a transient error", err)
	}
	if _, err := objstore.Open(context.Background(), "s3://?regoin=eu", "job", objstore.Options{}); !errors.Is(err, objstore.ErrPermanent) {
		t.Fatalf("Open(s3://?regoin=eu) = %v, want ErrPermanent", err)
	}
}
