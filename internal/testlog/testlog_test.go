package testlog

import (
	"testing"
)

// recorder is a testing.TB that records what is logged and holds the
// cleanup, so that the test can end "its" test when it likes.
type recorder struct {
	testing.TB
	logged  []string
	cleanup func()
}

func (r *recorder) Log(args ...any) { r.logged = append(r.logged, args[0].(string)) }
func (r *recorder) Logf(format string, args ...any) {
	r.logged = append(r.logged, args[0].(string)+": "+args[1].(string))
}
func (r *recorder) Cleanup(f func()) { r.cleanup = f }

// TestWriteAfterEndIsDropped: lines written during the test are logged,
// without the handler's trailing newline and after the prefix; once the
// test's cleanup has run, writes are dropped (testing.T would panic) and
// still report the whole length, so that a logger never sees an error.
func TestWriteAfterEndIsDropped(t *testing.T) {
	r := &recorder{TB: t}
	w := New(r, "replica-1")
	if n, err := w.Write([]byte("level=INFO msg=up\n")); err != nil || n != 18 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	r.cleanup()
	if n, err := w.Write([]byte("late\n")); err != nil || n != 5 {
		t.Fatalf("Write after the end = %d, %v; want 5, nil", n, err)
	}
	if len(r.logged) != 1 || r.logged[0] != "replica-1: level=INFO msg=up" {
		t.Fatalf("logged %q; want only the line written during the test", r.logged)
	}

	r2 := &recorder{TB: t}
	if _, err := New(r2, "").Write([]byte("x\n")); err != nil || len(r2.logged) != 1 || r2.logged[0] != "x" {
		t.Fatalf("without a prefix: logged %q, %v", r2.logged, err)
	}
}
