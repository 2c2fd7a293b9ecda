package cli

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
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

	// A kill in the few milliseconds between a checkpoint's completion
	// and its commit loses that checkpoint's output in the embedded Kafka,
	// which dev says it does not promise (docs/dev.md) and says plainly
	// when it happens: then the attempt starts over on a fresh --dir.
	var dir string
	var printed1, printed2 []userCount
	for attempt := 1; ; attempt++ {
		dir = devDir(t)
		first := startDevProc(t, bin, dir, "--rate", "50")
		first.waitMatches(devOutputLine, 100)
		first.waitCheckpoint(3)
		// Kill while a partition of the output holds records of an open
		// transaction (its high watermark above its last stable offset),
		// as it does most of the time at 50 clicks a second.
		waitOpenTransaction(t, first.broker(), "clicks-per-user")
		first.kill9()
		printed1 = printedCounts(t, first.output())

		second := startDevProc(t, bin, dir, "--rate", "50")
		second.waitMatches(regexp.MustCompile(`^weir dev: the last run did not stop cleanly \(killed\?\): its \d+ open transactions are aborted`), 1)
		if second.waitMatchesOrExit(devOutputLine, 100) {
			second.waitCheckpoint(8)
			second.stop()
			printed2 = printedCounts(t, second.output())
			break
		}
		if !strings.Contains(second.stderr.String(), "the last run was killed after a checkpoint completed and before its output was committed") || attempt == 3 {
			second.fail("attempt %d: dev exited", attempt)
		}
		t.Logf("attempt %d: the kill came between a checkpoint's completion and its commit, which dev does not promise to survive; again", attempt)
	}

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

// waitOpenTransaction waits up to 30s until a partition of topic holds
// records of an open transaction: its high watermark is above its last
// stable offset.
func waitOpenTransaction(t *testing.T, broker, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for {
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		stable, serr := adm.ListCommittedOffsets(ctx, topic)
		if serr == nil {
			serr = stable.Error()
		}
		if err != nil || serr != nil {
			t.Fatalf("offsets of %s: %v, %v", topic, err, serr)
		}
		open := false
		ends.Each(func(e kadm.ListedOffset) {
			if s, ok := stable.Lookup(e.Topic, e.Partition); ok && e.Offset > s.Offset {
				open = true
			}
		})
		if open {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no open transaction in %s in 30s", topic)
		case <-time.After(10 * time.Millisecond): // polls the broker: no event to wait on
		}
	}
}
