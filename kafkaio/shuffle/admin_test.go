package shuffle_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/shuffle"
)

// TestEnsureTopics: missing topics are created with their partition count
// and the shuffle configuration, existing ones of that count accepted, and
// one of another count rejected with what to do.
func TestEnsureTopics(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		adm := c.Admin(t)
		a, b := kafkatest.Name(t, "a"), kafkatest.Name(t, "b")
		topics := map[string]int{a: 3, b: 5}
		if err := shuffle.EnsureTopics(ctx, adm, topics, -1); err != nil {
			t.Fatal(err)
		}
		details, err := adm.ListTopics(ctx, a, b)
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range topics {
			if n := len(details[name].Partitions); n != want {
				t.Fatalf("%s has %d partitions, want %d", name, n, want)
			}
		}
		cfgs, err := adm.DescribeTopicConfigs(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		rc, err := cfgs.On(a, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, cv := range rc.Configs {
			got[cv.Key] = cv.MaybeValue()
		}
		if got["cleanup.policy"] != "delete" || got["retention.ms"] != "-1" {
			t.Fatalf("configs of %s: cleanup.policy %q, retention.ms %q", a, got["cleanup.policy"], got["retention.ms"])
		}

		if err := shuffle.EnsureTopics(ctx, adm, topics, -1); err != nil {
			t.Fatalf("existing topics of the right count: %v", err)
		}

		err = shuffle.EnsureTopics(ctx, adm, map[string]int{a: 4, b: 5}, -1)
		var mis *shuffle.TopicMismatchError
		if !errors.Is(err, shuffle.ErrTopicMismatch) || !errors.As(err, &mis) || *mis != (shuffle.TopicMismatchError{Topic: a, Partitions: 3, Want: 4}) {
			t.Fatalf("EnsureTopics with another count = %v, want a mismatch of %s: 3, want 4", err, a)
		}
		for _, s := range []string{a, "3 partitions", "max parallelism is 4", "delete the topic", "job.max_parallelism to 3"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not say %q", err, s)
			}
		}
	})
}

// TestPurge: Purge moves the log start offsets up to the given offsets; a
// reader without a position starts there, and one whose position was purged
// fails instead of skipping the records it needed.
func TestPurge(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, opts, topic := setup(t, c, 2)
		fill(t, ctx, c, topic, 10, 0, 1)
		adm := c.Admin(t)
		if err := shuffle.Purge(ctx, adm, topic, map[int32]int64{0: 6, 1: 0}); err != nil {
			t.Fatal(err)
		}
		starts, err := adm.ListStartOffsets(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		for p, want := range map[int32]int64{0: 6, 1: 0} {
			if o, _ := starts.Lookup(topic, p); o.Err != nil || o.Offset != want {
				t.Fatalf("log start of partition %d: %d (%v), want %d", p, o.Offset, o.Err, want)
			}
		}
		if err := shuffle.Purge(ctx, adm, topic, map[int32]int64{0: 3}); err != nil {
			t.Fatalf("purge below the log start: %v", err)
		}

		r := newReader(t, ctx, opts, topic, 0, 1, nil)
		recs := readUntil(t, ctx, r, lastOf(0, 9))
		wantRun(t, "partition 0 from its log start", offsets(recs, 0), 6, 9)

		// A restored position below the log start (a savepoint's, which
		// purging ignores) or above the end (the topic was created again)
		// starts at the log start.
		for _, pos := range []int64{2, 50} {
			r = newReader(t, ctx, opts, topic, 0, 1, map[int32]int64{0: pos})
			recs = readUntil(t, ctx, r, lastOf(0, 9))
			wantRun(t, fmt.Sprintf("partition 0 restored at %d", pos), offsets(recs, 0), 6, 9)
		}
	})
}
