package replica_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/runtime/replica"
)

// TestReplicasCountExactlyOnce runs the YAML count job on two in-process
// replicas, stops one gracefully and starts it again mid-run, and checks
// with an independent read_committed consumer that every key's counts are
// exactly 1..N. It runs on kfake and on the real broker.
func TestReplicasCountExactlyOnce(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const (
			partitions = 4
			keys       = 50
			records    = 4000
		)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "rep")
		in, out := job+"-in", job+"-out"
		c.CreateTopic(t, in, partitions, nil)
		c.CreateTopic(t, out, partitions, nil)
		dir := t.TempDir()

		produce := func(from, to int) { produceInput(ctx, t, c, in, keys, from, to) }
		produce(0, records/3)

		start := func(id string) (*replica.Replica, func()) {
			tr := startReplica(ctx, t, id, jobYAML(job, in, out, c.Brokers[0], "file://"+dir+"/checkpoints", dir, id))
			return tr.Replica, tr.stop
		}
		a, stopA := start("a")
		b, _ := start("b")
		waitReady(t, a, b)
		waitCommitted(ctx, t, c, out, records/6)
		stopA() // graceful: leaves the group; b takes every task
		produce(records/3, 2*records/3)
		waitCommitted(ctx, t, c, out, records/2)
		a, _ = start("a") // and back: a new generation places tasks on both
		waitReady(t, a, b)
		produce(2*records/3, records)
		verifyCounts(ctx, t, c, out, keys, records)
	})
}

// produceInput writes records from..to-1 into in, keyed round-robin over
// keys keys, each with a "trace" header.
func produceInput(ctx context.Context, t *testing.T, c *kafkatest.Cluster, in string, keys, from, to int) {
	t.Helper()
	cl := c.Client(t, kgo.DefaultProduceTopic(in))
	for i := from; i < to; i++ {
		k := fmt.Sprintf("k%03d", i%keys)
		v, _ := json.Marshal(map[string]int{"i": i})
		cl.Produce(ctx, &kgo.Record{Key: []byte(k), Value: v,
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte(strconv.Itoa(i))}}}, nil)
	}
	if err := cl.Flush(ctx); err != nil {
		t.Error(err)
	}
}

// jobYAML is the YAML count job from in to out, checkpointing every 300ms
// to storage, with replica id's state under dir.
func jobYAML(job, in, out, broker, storage, dir, id string) string {
	return fmt.Sprintf(`
job:
  name: %s
  pipeline:
    - source: {topics: [%s], format: json}
    - aggregate: {op: count}
    - sink: {topic: %s}
kafka: {brokers: [%s], session_timeout: 6s}
checkpoint: {interval: 300ms, timeout: 20s, storage: "%s"}
state: {dir: "%s/state-%s"}
http: {address: ""}
process: {replica_id: %s, grace_period: 20s}
`, job, in, out, broker, storage, dir, id, id)
}

// testReplica is a replica running in this process.
type testReplica struct {
	*replica.Replica
	reg  *prometheus.Registry
	done chan error // Run's result
	stop func()     // cancels Run and checks it returned nil; idempotent
}

func startReplica(ctx context.Context, t *testing.T, id, yaml string) *testReplica {
	t.Helper()
	cfg, err := config.Load(config.Source{YAML: []byte(yaml), NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	j, err := pipeline.Compile(cfg.Job)
	if err != nil {
		t.Fatal(err)
	}
	return startJobReplica(ctx, t, id, yaml, j)
}

// waitReady waits up to a minute for every replica to be ready.
func waitReady(t *testing.T, rs ...*replica.Replica) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for _, r := range rs {
		for !r.Ready() {
			if time.Now().After(deadline) {
				t.Fatal("replica not ready within a minute")
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// waitCommitted waits until out holds n records visible to read_committed.
func waitCommitted(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string, n int64) {
	t.Helper()
	adm := c.Admin(t)
	for ctx.Err() == nil {
		// The last stable offsets count markers too: compare the
		// read_committed record count, read below, only once they pass n.
		lsos, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			var sum int64
			lsos.Each(func(o kadm.ListedOffset) { sum += o.Offset })
			if sum >= n {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never reached %d committed offsets", topic, n)
}

// committedRecords counts the records of topic committed when it is called
// (kafkatest.Cluster.ReadCommitted).
func committedRecords(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string) int {
	t.Helper()
	return len(c.ReadCommitted(ctx, t, topic))
}

// verifyCounts reads out read_committed and checks every key's counts are
// exactly 1..N, with N = records/keys.
func verifyCounts(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string, keys, records int) {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	last := map[string]int{}
	seen := 0
	deadline := time.Now().Add(time.Minute)
	for seen < records && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			var v struct {
				Key   string `json:"key"`
				Count int    `json:"count"`
			}
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatalf("output %q: %v", r.Value, err)
			}
			if len(r.Headers) != 1 || r.Headers[0].Key != "trace" {
				t.Fatalf("output %q lost its input's headers: %v", r.Value, r.Headers)
			}
			if v.Count != last[v.Key]+1 {
				t.Fatalf("key %s: count %d after %d", v.Key, v.Count, last[v.Key])
			}
			last[v.Key] = v.Count
			seen++
		})
	}
	if seen != records || len(last) != keys {
		t.Fatalf("read %d outputs over %d keys, want %d over %d", seen, len(last), records, keys)
	}
	for k, n := range last {
		if n != records/keys {
			t.Errorf("key %s: final count %d, want %d", k, n, records/keys)
		}
	}
}
