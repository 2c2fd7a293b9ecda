package replica_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/runtime/replica"
)

// joinYAML is a YAML job that enriches orders from the table customers
// (a stream–table join, left) into out.
func joinYAML(job, orders, customers, out, broker, storage, dir string) string {
	return fmt.Sprintf(`
job:
  name: %s
  pipeline:
    - source: {topics: [%s]}
    - join: {table: {topic: %s}, as: customer}
    - sink: {topic: %s}
kafka: {brokers: [%s], session_timeout: 6s}
checkpoint: {interval: 300ms, timeout: 20s, storage: "%s"}
state: {dir: "%s/state"}
http: {address: ""}
process: {replica_id: a, grace_period: 20s}
`, job, orders, customers, out, broker, storage, dir)
}

// TestTableJoinThroughRuntime runs a YAML stream–table join on one
// replica: the table topic is read by the source stage's tasks with the
// orders (partition i of both), a tombstone deletes a key, no table record
// reaches the sink, and each committed output has its key's table value.
// The orders are produced once the table's offsets are committed (read
// whole and checkpointed), so that every join is determined. It runs on
// kfake and on the real broker.
func TestTableJoinThroughRuntime(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const partitions, keys, orders = 3, 12, 120
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "join")
		in, table, out := job+"-orders", job+"-customers", job+"-out"
		for _, topic := range []string{in, table, out} {
			c.CreateTopic(t, topic, partitions, nil)
		}
		cl := c.Client(t)
		var tableRecs []*kgo.Record
		for k := range keys {
			key := fmt.Sprintf("c%02d", k)
			tableRecs = append(tableRecs, &kgo.Record{Topic: table, Key: []byte(key), Value: fmt.Appendf(nil, `{"name":"old-%d"}`, k)})
			tableRecs = append(tableRecs, &kgo.Record{Topic: table, Key: []byte(key), Value: fmt.Appendf(nil, `{"name":"n%d"}`, k)})
		}
		tableRecs = append(tableRecs, &kgo.Record{Topic: table, Key: []byte("c00")}) // a tombstone
		if err := cl.ProduceSync(ctx, tableRecs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		tr := startReplica(ctx, t, "a", joinYAML(job, in, table, out, c.Brokers[0], "file://"+dir+"/checkpoints", dir))
		waitReady(t, tr.Replica)
		waitGroupCaughtUp(ctx, t, c, "_weir."+job+".source", table)

		var orderRecs []*kgo.Record
		for i := range orders {
			orderRecs = append(orderRecs, &kgo.Record{Topic: in, Key: fmt.Appendf(nil, "c%02d", i%keys), Value: fmt.Appendf(nil, `{"i":%d}`, i)})
		}
		if err := cl.ProduceSync(ctx, orderRecs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		waitCommitted(ctx, t, c, out, orders)
		seen := map[int]bool{}
		for _, r := range c.ReadCommitted(ctx, t, out) {
			var v struct {
				I        *int `json:"i"`
				Customer *struct {
					Name string `json:"name"`
				} `json:"customer"`
			}
			if err := json.Unmarshal(r.Value, &v); err != nil || v.I == nil {
				t.Fatalf("output %s %q: not an order (%v)", r.Key, r.Value, err)
			}
			k := *v.I % keys
			switch {
			case string(r.Key) != fmt.Sprintf("c%02d", k):
				t.Errorf("output %q has key %s", r.Value, r.Key)
			case k == 0 && v.Customer != nil:
				t.Errorf("order %d of the deleted key c00 joined %+v", *v.I, *v.Customer)
			case k != 0 && (v.Customer == nil || v.Customer.Name != fmt.Sprintf("n%d", k)):
				t.Errorf("order %d: customer %q, want n%d (the table's latest)", *v.I, r.Value, k)
			}
			if seen[*v.I] {
				t.Errorf("order %d written twice", *v.I)
			}
			seen[*v.I] = true
		}
		if len(seen) != orders {
			t.Errorf("%d orders in the output, want %d", len(seen), orders)
		}
	})
}

// waitGroupCaughtUp waits until group's committed offsets of topic (the
// source's, committed when a checkpoint completes) reach its end.
func waitGroupCaughtUp(ctx context.Context, t *testing.T, c *kafkatest.Cluster, group, topic string) {
	t.Helper()
	adm := c.Admin(t)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for ctx.Err() == nil {
		offs, err := adm.FetchOffsets(ctx, group)
		if err == nil {
			caught := true
			ends.Each(func(e kadm.ListedOffset) {
				o, ok := offs.Lookup(topic, e.Partition)
				if e.Offset > 0 && (!ok || o.At < e.Offset) {
					caught = false
				}
			})
			if caught {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("group %s never committed the end of %s", group, topic)
}

// TestTableJoinCopartitioning: a table topic with another partition count
// than the stream's is refused at start, naming the topic.
func TestTableJoinCopartitioning(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "joincp")
		in, table, out := job+"-orders", job+"-customers", job+"-out"
		c.CreateTopic(t, in, 2, nil)
		c.CreateTopic(t, table, 3, nil)
		c.CreateTopic(t, out, 2, nil)
		cfg, err := config.Load(config.Source{YAML: []byte(joinYAML(job, in, table, out, c.Brokers[0], "file:///unused", t.TempDir())),
			NoEnv: true})
		if err != nil {
			t.Fatal(err)
		}
		j, err := pipeline.Compile(cfg.Job)
		if err != nil {
			t.Fatal(err)
		}
		_, err = replica.InputPartitions(ctx, c.Admin(t), j)
		if err == nil || !strings.Contains(err.Error(), "co-partitioning") || !strings.Contains(err.Error(), table) {
			t.Fatalf("InputPartitions: %v, want a co-partitioning error naming %s", err, table)
		}
	})
}
