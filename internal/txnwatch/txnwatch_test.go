package txnwatch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A commit is confirmed by exactly one "ending transaction" with commit
// true, and no abort in its place.
func TestTxnWatchConfirmsCommits(t *testing.T) {
	w := New()
	ending := func(commit kgo.TransactionEndTry) {
		w.Log(kgo.LogLevelInfo, franzEndingTxn, "transactional_id", "x", "commit", commit, "producer_id", int64(1), "epoch", int16(0))
	}
	before := w.Snapshot()
	w.Log(kgo.LogLevelInfo, "beginning transaction", "transactional_id", "x")
	ending(kgo.TryCommit)
	w.Log(kgo.LogLevelInfo, "end transaction response successfully received", "commit", kgo.TryCommit)
	if !w.Committed(before) {
		t.Fatal("a commit the client attempted is not confirmed")
	}
	// v2: the client aborts in place of the commit.
	before = w.Snapshot()
	w.Log(kgo.LogLevelInfo, franzAbortedCommit+"; issuing an abort to clear any server-side partition registrations", "transactional_id", "x")
	ending(kgo.TryAbort)
	if w.Committed(before) {
		t.Fatal("an abort in place of the commit is confirmed")
	}
	// v1: the client sends nothing, logging at Debug only.
	before = w.Snapshot()
	w.Log(kgo.LogLevelDebug, "no records were produced during the commit; thus no transaction was began; ending without doing anything")
	if w.Committed(before) {
		t.Fatal("a commit the client skipped is confirmed")
	}
	// Two commits in one call cannot be one EndTransaction's.
	before = w.Snapshot()
	ending(kgo.TryCommit)
	ending(kgo.TryCommit)
	if w.Committed(before) {
		t.Fatal("two commits confirm one")
	}
}

// The watch works only while the Kafka client logs, at Info, each commit
// it attempts (with the commit flag) and the abort it makes in place of
// one.
// An upgrade of franz-go that changes either fails here: then see whether
// the library still has the gap (txnwatch.go) and what it says now.
func TestFranzGoSilentAbortMessages(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/twmb/franz-go").Output()
	if err != nil {
		t.Fatalf("go list -m github.com/twmb/franz-go: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "pkg", "kgo", "txn.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`LogLevelInfo, "` + franzEndingTxn + `",
		"transactional_id", *cl.cfg.txnID,
		"commit", commit,`,
		`LogLevelInfo, "` + franzAbortedCommit,
	} {
		if !strings.Contains(string(src), want) {
			t.Errorf("franz-go's kgo/txn.go no longer has %q", want)
		}
	}
}
