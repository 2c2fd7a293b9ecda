package cli

import (
	"encoding/json"
	"regexp"
	"slices"
	"testing"
)

// TestDevKill9KeepsCommittedOutput kills `processor dev` with SIGKILL while
// it writes output, starts it again on the same --dir, and reads the
// output topic with a read_committed consumer of its own against the
// embedded Kafka: every count dev printed as committed, before the kill or
// after it, is there, each user's counts are 1, 2, 3, ... with no gap and
// none twice, and the second run printed none of the first run's lines
// again. Without the abort markers dev writes after an unclean stop, the
// transactions the kill left open hide later committed output from such a
// reader (kfake takes them as aborted but writes no marker).
func TestDevKill9KeepsCommittedOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildProcessor(t)
	dir := devDir(t)

	first := startDevProc(t, bin, dir, "--rate", "50")
	first.waitMatches(devOutputLine, 100)
	first.waitCheckpoint(3)
	// Output is being written into an open transaction all the time at
	// 50 clicks a second: the kill leaves one open in each output
	// partition.
	first.kill9()
	printed1 := printedCounts(t, first.output())

	second := startDevProc(t, bin, dir, "--rate", "50")
	second.waitMatches(regexp.MustCompile(`^weir dev: the last run did not stop cleanly \(killed\?\): its \d+ open transactions are aborted`), 1)
	second.waitMatches(devOutputLine, 100)
	second.waitCheckpoint(8)
	second.stop()
	printed2 := printedCounts(t, second.output())

	third := startDevProc(t, bin, dir, "--rate", "0", "--quiet")
	values := readCommitted(t, third.broker(), "clicks-per-user")
	third.stop()
	if slices.ContainsFunc(third.output(), regexp.MustCompile(`did not stop cleanly`).MatchString) {
		t.Errorf("after a clean stop, dev says the last run did not stop cleanly:\n%v", third.output())
	}

	committed := map[userCount]int{}
	last := map[string]int{}
	for _, v := range values {
		var c userCount
		if err := json.Unmarshal(v, &c); err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		committed[c]++
		last[c.Key] = max(last[c.Key], c.Count)
	}
	for user, n := range last {
		for i := 1; i <= n; i++ {
			if k := committed[userCount{user, i}]; k != 1 {
				t.Errorf("%s: count %d committed %d times (of counts up to %d)", user, i, k, n)
			}
		}
	}
	seen := map[userCount]bool{}
	for run, printed := range [][]userCount{printed1, printed2} {
		for _, c := range printed {
			if committed[c] == 0 {
				t.Errorf("run %d printed %+v as committed; a read_committed reader does not see it", run+1, c)
			}
			if seen[c] {
				t.Errorf("run %d printed %+v again", run+1, c)
			}
			seen[c] = true
		}
	}
	t.Logf("printed %d then %d counts; %d committed over %d users", len(printed1), len(printed2), len(values), len(last))
}
