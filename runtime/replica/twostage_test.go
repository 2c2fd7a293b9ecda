package replica_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/shuffle"
)

// TestTwoStageExactlyOnce runs a job with a shuffle (input keyed by user,
// counted per page) on two in-process replicas: one is stopped and started
// again twice while checkpoints are in flight every 100ms, so that some
// stops fall between an upstream task's barrier and its downstream tasks'
// snapshot. An independent read_committed consumer checks that every page's
// counts are exactly 1..N, with the input records' headers carried through
// the shuffle; the shuffle topic's log start offsets show that purging ran.
// On kfake and on the real broker.
func TestTwoStageExactlyOnce(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const (
			partitions = 4
			pages      = 40
			records    = 6000
		)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "two")
		in, out := job+"-in", job+"-out"
		c.CreateTopic(t, in, partitions, nil)
		c.CreateTopic(t, out, partitions, nil)
		dir := t.TempDir()
		produce := func(from, to int) { produceClicks(ctx, t, c, in, pages, from, to) }
		start := func(id string) *testReplica {
			return startReplica(ctx, t, id, twoStageYAML(job, in, out, c.Brokers[0], "file://"+dir+"/checkpoints", dir, id))
		}
		produce(0, records/3)
		a, b := start("a"), start("b")
		waitReady(t, a.Replica, b.Replica)
		waitCommitted(ctx, t, c, out, records/6)
		a.stop()
		produce(records/3, 2*records/3)
		a = start("a")
		waitReady(t, a.Replica, b.Replica)
		waitCommitted(ctx, t, c, out, records/2)
		b.stop()
		produce(2*records/3, records)
		b = start("b")
		waitReady(t, a.Replica, b.Replica)
		verifyCounts(ctx, t, c, out, pages, records)

		// Purging: after a few more checkpoints, every partition of the
		// shuffle topic starts above 0.
		shuffleTopic := "_weir." + job + ".shuffle.count"
		adm := c.Admin(t)
		deadline := time.Now().Add(30 * time.Second)
		for {
			starts, err := adm.ListStartOffsets(ctx, shuffleTopic)
			if err != nil {
				t.Fatal(err)
			}
			purged, all := 0, 0
			starts.Each(func(o kadm.ListedOffset) {
				all++
				if o.Offset > 0 {
					purged++
				}
			})
			if purged == all && all > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d partitions of %s purged after 30s", purged, all, shuffleTopic)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// produceClicks writes clicks from..to-1 into in, keyed by user, each on
// page i%pages and with a "trace" header.
func produceClicks(ctx context.Context, t *testing.T, c *kafkatest.Cluster, in string, pages, from, to int) {
	t.Helper()
	cl := c.Client(t, kgo.DefaultProduceTopic(in))
	for i := from; i < to; i++ {
		user := fmt.Sprintf("user-%03d", (i*7)%101)
		v, _ := json.Marshal(map[string]any{"i": i, "user": user, "page": fmt.Sprintf("page-%02d", i%pages)})
		cl.Produce(ctx, &kgo.Record{Key: []byte(user), Value: v,
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte(strconv.Itoa(i))}}}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Error(err)
	}
}

// twoStageYAML is the views-per-page job: clicks keyed by user, re-keyed by
// page, counted by 3 downstream tasks over 16 key groups.
func twoStageYAML(job, in, out, broker, storage, dir, id string) string {
	return fmt.Sprintf(`
job:
  name: %s
  parallelism: 3
  max_parallelism: 16
  pipeline:
    - source: {topics: [%s], format: json}
    - key_by: {field: page}
    - aggregate: {op: count}
    - sink: {topic: %s}
kafka: {brokers: [%s], session_timeout: 6s}
checkpoint: {interval: 100ms, timeout: 20s, purge_interval: 1s, storage: "%s"}
state: {dir: "%s/state-%s"}
http: {address: ""}
process: {replica_id: %s, grace_period: 20s}
`, job, in, out, broker, storage, dir, id, id)
}

// TestShuffleTopicMismatchStops: a shuffle topic that exists with another
// partition count than job.max_parallelism stops the replica with an error
// naming both counts, instead of retrying.
func TestShuffleTopicMismatchStops(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "mis")
		in, out := job+"-in", job+"-out"
		c.CreateTopic(t, in, 2, nil)
		c.CreateTopic(t, out, 2, nil)
		c.CreateTopic(t, "_weir."+job+".shuffle.count", 4, nil)
		dir := t.TempDir()
		tr := startReplica(ctx, t, "a", twoStageYAML(job, in, out, c.Brokers[0], "file://"+dir+"/checkpoints", dir, "a"))
		select {
		case err := <-tr.done:
			if !errors.Is(err, shuffle.ErrTopicMismatch) || !strings.Contains(err.Error(), "4") || !strings.Contains(err.Error(), "16") {
				t.Fatalf("Run = %v; want a shuffle topic mismatch naming 4 and 16 partitions", err)
			}
			tr.done <- nil // for the cleanup's stop
		case <-ctx.Done():
			t.Fatal("the replica did not stop on a shuffle topic with the wrong partition count")
		}
	})
}
