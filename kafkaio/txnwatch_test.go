package kafkaio

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The watch counts exactly the two messages, each in its own count.
func TestTxnWatchCounts(t *testing.T) {
	w := newTxnWatch(kgo.LogLevelDebug)
	w.Log(kgo.LogLevelInfo, "beginning transaction", "transactional_id", "x")
	w.Log(kgo.LogLevelInfo, "ending transaction", "commit", true)
	if got := w.snapshot(); got != (txnMisses{}) {
		t.Fatalf("ordinary lines counted: %+v", got)
	}
	w.Log(kgo.LogLevelInfo, franzAbortedCommit+"; issuing an abort to clear any server-side partition registrations", "transactional_id", "x")
	w.Log(kgo.LogLevelDebug, franzSkippedCommit+"; thus no transaction was began; ending without doing anything")
	w.Log(kgo.LogLevelDebug, franzSkippedCommit+"; thus no transaction was began; ending without doing anything")
	if got := w.snapshot(); got != (txnMisses{aborted: 1, skipped: 2}) {
		t.Fatalf("counts %+v, want 1 aborted, 2 skipped", got)
	}
}

// The watch works only while the Kafka client logs the two ends it makes
// without saying so to the caller, at the levels the watches listen at.
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
		`LogLevelInfo, "` + franzAbortedCommit,
		`LogLevelDebug, "` + franzSkippedCommit,
	} {
		if !strings.Contains(string(src), want) {
			t.Errorf("franz-go's kgo/txn.go no longer has %q", want)
		}
	}
}
