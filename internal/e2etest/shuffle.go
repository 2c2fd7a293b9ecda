package e2etest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ShufflePrefix is the name prefix of job's shuffle topics under the
// default topic prefix: a stage's shuffle topic is ShufflePrefix(job) +
// the stage's name.
func ShufflePrefix(job string) string { return "_weir." + job + ".shuffle." }

// ShuffleStarts returns, for each of job's shuffle topics (found by their
// name prefix), the log start offset of each of its partitions.
func ShuffleStarts(ctx context.Context, brokers []string, job string, opts ...kgo.Opt) (map[string]map[int32]int64, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	listed, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, fmt.Errorf("list topics: %w", err)
	}
	var topics []string
	for _, name := range listed.Names() {
		if strings.HasPrefix(name, ShufflePrefix(job)) {
			topics = append(topics, name)
		}
	}
	if len(topics) == 0 {
		return nil, fmt.Errorf("no topic named %s<stage>", ShufflePrefix(job))
	}
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %v: %w", topics, err)
	}
	out := map[string]map[int32]int64{}
	var errs []string
	starts.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, fmt.Sprintf("%s[%d]: %v", o.Topic, o.Partition, o.Err))
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	if len(errs) > 0 {
		slices.Sort(errs)
		return nil, fmt.Errorf("start offsets: %s", strings.Join(errs, "; "))
	}
	return out, nil
}

// CheckShufflePurged checks that the job's shuffle topics are those of
// stages, each with partitions partitions (one per key group), and, for
// up to a minute, that they were purged: on every one of them the log
// start offset of some partition is above 0 (records below a retained
// checkpoint's positions were deleted). It logs how many partitions were
// purged and how far.
func CheckShufflePurged(ctx context.Context, t testing.TB, brokers []string, job string, partitions int, stages ...string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for first := true; ; first = false {
		starts, err := ShuffleStarts(ctx, brokers, job)
		if first && err == nil {
			var want []string
			for _, st := range stages {
				want = append(want, ShufflePrefix(job)+st)
			}
			if got := slices.Sorted(maps.Keys(starts)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
				t.Fatalf("shuffle topics of %s: %v, want %v", job, got, want)
			}
			for topic, parts := range starts {
				if len(parts) != partitions {
					t.Fatalf("shuffle topic %s: %d partitions, want %d (one per key group)", topic, len(parts), partitions)
				}
			}
		}
		var purged, unpurged []string
		for _, topic := range slices.Sorted(maps.Keys(starts)) {
			n, deleted := 0, int64(0)
			for _, off := range starts[topic] {
				deleted += off
				if off > 0 {
					n++
				}
			}
			if n == 0 {
				unpurged = append(unpurged, topic)
				continue
			}
			purged = append(purged, fmt.Sprintf("%s: %d of %d partitions with a log start offset above 0, %d records deleted",
				topic, n, len(starts[topic]), deleted))
		}
		if err == nil && len(unpurged) == 0 {
			for _, p := range purged {
				t.Logf("shuffle topic purged: %s", p)
			}
			return
		}
		if time.Now().After(deadline) {
			if err != nil {
				t.Fatalf("shuffle topics of %s: %v", job, err)
			}
			t.Fatalf("shuffle topics never purged (every log start offset is 0): %v", unpurged)
		}
		time.Sleep(time.Second)
	}
}
