package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/nexmark"
)

// TestNexmarkCommand runs `processor nexmark` against a job's
// configuration on kfake: the generator's events, then with --flush one
// person an hour after the last on each partition; bad flags are refused
// before anything is written.
func TestNexmarkCommand(t *testing.T) {
	_, file, c := countJob(t, "nx")
	ctx := context.Background()
	code, _, stderr := runCLI(ctx, nil, "nexmark", "-c", file, "--topic", "nm", "--events", "3000", "--event-rate", "1000", "--seed", "4", "--partitions", "3", "--flush")
	if code != 0 || !strings.Contains(stderr, "nexmark: 3000 events (60 persons, 180 auctions, 2760 bids) to nm") || !strings.Contains(stderr, "flushed 3 partitions") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	gen, err := nexmark.NewGenerator(nexmark.Config{Seed: 4, Events: 3000, EventRate: 1000})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{} // key → values, in order
	var last int64
	for e, ok := gen.Next(); ok; e, ok = gen.Next() {
		want[string(nexmark.Key(e))] = append(want[string(nexmark.Key(e))], string(nexmark.AppendJSON(nil, e)))
		last = e.DateTime()
	}
	cl := c.Client(t, kgo.ConsumeTopics("nm"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	got := map[string][]string{}
	flushed := map[int32]bool{}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	flush := string(nexmark.AppendJSON(nil, nexmark.Flush(last)))
	for n := 0; n < 3003; {
		fs := cl.PollFetches(fctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("after %d records: %v", n, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			n++
			if string(r.Value) == flush {
				flushed[r.Partition] = true
				return
			}
			got[string(r.Key)] = append(got[string(r.Key)], string(r.Value))
		})
	}
	if len(flushed) != 3 || len(got) != len(want) {
		t.Fatalf("flushed partitions %v; %d keys, want %d", flushed, len(got), len(want))
	}
	for k, vs := range want {
		if strings.Join(got[k], "\n") != strings.Join(vs, "\n") {
			t.Fatalf("key %s: records differ from the generator's", k)
		}
	}

	code, _, stderr = runCLI(ctx, nil, "nexmark", "-c", file, "--events", "0", "--format", "avro")
	if code == 0 || !strings.Contains(stderr, "--events 0: must be > 0") || !strings.Contains(stderr, "--format avro needs --registry") {
		t.Fatalf("bad flags: exit %d: %s", code, stderr)
	}
}
