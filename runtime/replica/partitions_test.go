package replica_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/source"
	"github.com/weir-stream/weir/runtime/replica"
)

// growthYAML is the views-per-page job of twoStageYAML without
// job.parallelism: its downstream stage's parallelism follows the input's
// partition count at the first start, and keeps it when partitions are
// added. The coordinator reads the partition count every 200ms.
func growthYAML(job, in, out, broker, storage, dir, id string, maxParallelism int) string {
	return fmt.Sprintf(`
job:
  name: %s
  max_parallelism: %d
  pipeline:
    - source: {topics: [%s], format: json}
    - key_by: {field: page}
    - aggregate: {op: count}
    - sink: {topic: %s}
kafka: {brokers: [%s], session_timeout: 6s, metadata_max_age: 200ms}
checkpoint: {interval: 100ms, timeout: 20s, purge_interval: 1s, storage: "%s"}
state: {dir: "%s/state-%s"}
http: {address: ""}
process: {replica_id: %s, grace_period: 20s}
`, job, maxParallelism, in, out, broker, storage, dir, id, id)
}

// produceClicksTo writes clicks from..to-1 into in as produceClicks does,
// click i to partition i%partitions.
func produceClicksTo(ctx context.Context, t *testing.T, c *kafkatest.Cluster, in string, partitions, pages, from, to int) {
	t.Helper()
	cl := c.Client(t, kgo.DefaultProduceTopic(in), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	for i := from; i < to; i++ {
		user := fmt.Sprintf("user-%03d", (i*7)%101)
		v, _ := json.Marshal(map[string]any{"i": i, "user": user, "page": fmt.Sprintf("page-%02d", i%pages)})
		cl.Produce(ctx, &kgo.Record{Key: []byte(user), Value: v, Partition: int32(i % partitions),
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte(strconv.Itoa(i))}}}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// addPartitions grows topic to total partitions.
func addPartitions(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string, total int) {
	t.Helper()
	rs, err := c.Admin(t).UpdatePartitions(ctx, total, topic)
	if err == nil {
		err = rs.Error()
	}
	if err != nil {
		t.Fatalf("grow %s to %d partitions: %v", topic, total, err)
	}
}

// lagPartitions returns the partitions of topic that have a series of the
// source lag gauge in tr's registry.
func lagPartitions(t *testing.T, tr *testReplica, topic string) map[string]bool {
	t.Helper()
	mfs, err := tr.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() != source.MetricLag {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "topic") == topic {
				out[label(m, "partition")] = true
			}
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestInputPartitionsAdded grows a running two-stage job's input from 4 to
// 6 partitions, with records in the new partitions before and after the
// coordinator notices, and restarts one of the two replicas afterwards: an
// independent read_committed consumer finds every page's counts exactly
// 1..N (nothing lost, nothing doubled: the new partitions are read from
// their earliest offset, once), the replicas' lag gauge has series for
// partitions 4 and 5, and the downstream stage kept its 4 tasks (it aligns
// on 6 upstream writers). On kfake and on the real broker.
func TestInputPartitionsAdded(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const (
			pages   = 24
			records = 4800
		)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "grow")
		in, out := job+"-in", job+"-out"
		c.CreateTopic(t, in, 4, nil)
		c.CreateTopic(t, out, 4, nil)
		dir := t.TempDir()
		start := func(id string) *testReplica {
			return startReplica(ctx, t, id, growthYAML(job, in, out, c.Brokers[0], "file://"+dir+"/checkpoints", dir, id, 16))
		}
		produceClicksTo(ctx, t, c, in, 4, pages, 0, records/4)
		a, b := start("a"), start("b")
		waitReady(t, a.Replica, b.Replica)
		waitCommitted(ctx, t, c, out, records/8)

		addPartitions(ctx, t, c, in, 6)
		produceClicksTo(ctx, t, c, in, 6, pages, records/4, records/2)
		waitLag(ctx, t, in, []string{"4", "5"}, a, b)
		waitReady(t, a.Replica, b.Replica)
		produceClicksTo(ctx, t, c, in, 6, pages, records/2, 3*records/4)
		waitCommitted(ctx, t, c, out, 5*records/8)

		a.stop()
		produceClicksTo(ctx, t, c, in, 6, pages, 3*records/4, records)
		a = start("a")
		waitReady(t, a.Replica, b.Replica)
		verifyCounts(ctx, t, c, out, pages, records)

		var downstream, upstream int
		for _, m := range []*testReplica{a, b} {
			for p := range lagPartitions(t, m, in) {
				if n, _ := strconv.Atoi(p); n >= upstream {
					upstream = n + 1
				}
			}
			downstream += int(gaugeValue(t, m.reg, "weir_replica_tasks"))
		}
		if upstream != 6 || downstream != 6+4 {
			t.Errorf("after the growth: source partitions with a lag series up to %d, %d tasks running; want 6 and 10 (6 source, 4 downstream)", upstream, downstream)
		}
	})
}

// waitLag waits until the replicas together have lag series for every one
// of partitions of topic.
func waitLag(ctx context.Context, t *testing.T, topic string, partitions []string, rs ...*testReplica) {
	t.Helper()
	for ctx.Err() == nil {
		have := map[string]bool{}
		for _, r := range rs {
			for p := range lagPartitions(t, r, topic) {
				have[p] = true
			}
		}
		missing := 0
		for _, p := range partitions {
			if !have[p] {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no lag series for partitions %v of %s", partitions, topic)
}

// TestRestoreInputPartitions restores a job whose input gained partitions
// while it was stopped (the new ones start empty, at their earliest
// offset: every count exact; its downstream stage keeps its 2 tasks, as
// many as its key groups, which 4 would exceed), then one whose input topic was deleted and
// created again with fewer partitions: the job fails with cause job, the
// reason says so, and no output is written. On kfake and on the real
// broker.
func TestRestoreInputPartitions(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const (
			pages   = 12
			records = 1200
		)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "regrow")
		in, out := job+"-in", job+"-out"
		c.CreateTopic(t, in, 2, nil)
		c.CreateTopic(t, out, 2, nil)
		dir := t.TempDir()
		start := func() *testReplica {
			return startReplica(ctx, t, "a", growthYAML(job, in, out, c.Brokers[0], "file://"+dir+"/checkpoints", dir, "a", 2))
		}
		produceClicksTo(ctx, t, c, in, 2, pages, 0, records/2)
		a := start()
		waitReady(t, a.Replica)
		waitCommitted(ctx, t, c, out, records/2)
		a.stop()

		addPartitions(ctx, t, c, in, 4)
		produceClicksTo(ctx, t, c, in, 4, pages, records/2, records)
		a = start()
		waitReady(t, a.Replica)
		verifyCounts(ctx, t, c, out, pages, records)
		if got := lagPartitions(t, a, in); len(got) != 4 {
			t.Errorf("lag series for partitions %v of %s, want 0-3", got, in)
		}
		a.stop()

		// The input recreated with fewer partitions.
		written := committedRecords(ctx, t, c, out)
		adm := c.Admin(t)
		if _, err := adm.DeleteTopic(ctx, in); err != nil {
			t.Fatal(err)
		}
		waitTopicGone(ctx, t, c, in)
		c.CreateTopic(t, in, 2, nil)
		produceClicksTo(ctx, t, c, in, 2, pages, 0, 100)
		// The compatibility check refuses it before the replica joins:
		// nothing is written, not even a failed record
		// (docs/operations.md, "Upgrading a job").
		a = start()
		var refused *replica.RefusedError
		for ctx.Err() == nil {
			if refused = a.Refused(); refused != nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if refused == nil {
			t.Fatal("the restore was not refused")
		}
		if msg := refused.Error(); !strings.Contains(msg, "the input topics have 2 partitions, the checkpoint's had 4") {
			t.Fatalf("refused: %s; want it to name 2 and 4 partitions", msg)
		}
		time.Sleep(2 * time.Second) // what a replica that joined would have written
		if n := committedRecords(ctx, t, c, out); n != written {
			t.Fatalf("%d records committed after the refused restore, %d before", n, written)
		}
		if a.Failure() != nil {
			t.Fatalf("a failed record was written: %v", a.Failure())
		}
	})
}

// waitTopicGone waits until topic is no longer listed.
func waitTopicGone(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string) {
	t.Helper()
	adm := c.Admin(t)
	for ctx.Err() == nil {
		ds, err := adm.ListTopics(ctx, topic)
		if err == nil {
			if _, ok := ds[topic]; !ok || ds[topic].Err != nil {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("topic %s still listed", topic)
}
