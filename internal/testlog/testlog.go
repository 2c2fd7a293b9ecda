// Package testlog gives tests an io.Writer for loggers (slog handlers)
// that goroutines may still write to after the test has returned.
//
// testing.T panics ("Log in goroutine after Test… has completed") when a
// goroutine logs after its test ended, and that panic ends the whole test
// binary: every other test of the package is lost with it. A replica's,
// coordinator's or client's goroutine can log one last line while it
// shuts down, so the writers here forward to t.Log until the test's
// cleanup runs and drop what comes after.
package testlog

import (
	"sync"
	"testing"
)

// Writer forwards each Write to t.Log, prefixed, until the test ends.
type Writer struct {
	mu     sync.Mutex
	t      testing.TB
	prefix string
	done   bool
}

// New returns a Writer for t. Each line written is logged as
// "<prefix>: <line>" (as is, when prefix is empty).
func New(t testing.TB, prefix string) *Writer {
	w := &Writer{t: t, prefix: prefix}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

// Write logs p, or drops it once the test has ended. It never fails.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	s := string(p)
	if n := len(s); n > 0 && s[n-1] == '\n' {
		s = s[:n-1]
	}
	if w.prefix != "" {
		w.t.Logf("%s: %s", w.prefix, s)
	} else {
		w.t.Log(s)
	}
	return len(p), nil
}
