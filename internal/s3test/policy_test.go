package s3test_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/weir-stream/weir/internal/s3test"
)

// outcomeTB records how Bucket ends a test instead of ending it. Embedding
// testing.TB supplies the unexported method; everything Bucket calls before
// giving up is overridden or forwarded.
type outcomeTB struct {
	testing.TB
	outcome string // "skip", "fatal" or "" (Bucket returned)
	msg     string
}

func (f *outcomeTB) Helper() {}
func (f *outcomeTB) Skipf(format string, args ...any) {
	f.outcome, f.msg = "skip", fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (f *outcomeTB) Fatalf(format string, args ...any) {
	f.outcome, f.msg = "fatal", fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func runBucket(t *testing.T) *outcomeTB {
	f := &outcomeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s3test.Bucket(f)
	}()
	<-done
	return f
}

// TestBucketWithoutServer: without a reachable server Bucket skips, or fails
// under WEIR_REQUIRE_S3=1. Needs no server.
func TestBucketWithoutServer(t *testing.T) {
	for _, tc := range []struct {
		endpoint, require, want string
	}{
		{"", "", "skip"},
		{"", "1", "fatal"},
		{"http://127.0.0.1:1", "", "skip"}, // nothing listens on port 1
		{"http://127.0.0.1:1", "1", "fatal"},
	} {
		t.Run(fmt.Sprintf("endpoint=%q,require=%q", tc.endpoint, tc.require), func(t *testing.T) {
			t.Setenv(s3test.EnvEndpoint, tc.endpoint)
			t.Setenv(s3test.EnvRequire, tc.require)
			f := runBucket(t)
			if f.outcome != tc.want {
				t.Fatalf("Bucket ended the test with %q (%s), want %q", f.outcome, f.msg, tc.want)
			}
			if !strings.Contains(f.msg, "make s3-up") {
				t.Fatalf("message does not say how to start the server: %s", f.msg)
			}
			t.Logf("%s: %s", f.outcome, f.msg)
		})
	}
}
