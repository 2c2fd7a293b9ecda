package replica_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// TestAggregatesEditedAcrossRestart runs a job of two running sums on a
// replica, stops it, and starts one with the job file edited: the two
// sums swapped and a max added between them. The state restored from the
// checkpoint is read by the aggregates' names: every key's last committed
// output has both sums over all its records, each under its own name,
// and the max of the records after the edit (the largest of each key).
// It runs on kfake and on the real broker.
func TestAggregatesEditedAcrossRestart(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const partitions, keys, records = 2, 10, 400
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "aggedit")
		in, out := job+"-in", job+"-out"
		c.CreateTopic(t, in, partitions, nil)
		c.CreateTopic(t, out, partitions, nil)
		dir := t.TempDir()
		yaml := func(aggs string) string {
			return fmt.Sprintf(`
job:
  name: %s
  pipeline:
    - source: {topics: [%s], format: json}
    - aggregate: %s
    - sink: {topic: %s}
kafka: {brokers: [%s], session_timeout: 6s}
checkpoint: {interval: 300ms, timeout: 20s, storage: "file://%s/checkpoints"}
state: {dir: "%s/state"}
http: {address: ""}
process: {replica_id: a, grace_period: 20s}
`, job, in, aggs, out, c.Brokers[0], dir, dir)
		}
		produce := func(from, to int) {
			cl := c.Client(t, kgo.DefaultProduceTopic(in))
			for i := from; i < to; i++ {
				cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%02d", i%keys), Value: fmt.Appendf(nil, `{"x":%d,"y":%d}`, i, 1000*i)}, nil)
			}
			if err := cl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}

		produce(0, records/2)
		v1 := startReplica(ctx, t, "a", yaml("{small: {sum: value.x}, big: {sum: value.y}}"))
		waitReady(t, v1.Replica)
		waitGroupCaughtUp(ctx, t, c, "_weir."+job+".source", in)
		v1.stop()

		v2 := startReplica(ctx, t, "a", yaml("{big: {sum: value.y}, biggest: {max: value.x}, small: {sum: value.x}}"))
		waitReady(t, v2.Replica)
		produce(records/2, records)
		waitGroupCaughtUp(ctx, t, c, "_weir."+job+".source", in)

		last := map[string]string{}
		for _, r := range c.ReadCommitted(ctx, t, out) {
			last[string(r.Key)] = string(r.Value)
		}
		if len(last) != keys {
			t.Fatalf("outputs of %d keys, want %d", len(last), keys)
		}
		for k := range keys {
			key := fmt.Sprintf("k%02d", k)
			sum, biggest := 0, 0
			for i := k; i < records; i += keys {
				sum, biggest = sum+i, i
			}
			var v struct{ Small, Big, Biggest int }
			if err := json.Unmarshal([]byte(last[key]), &v); err != nil {
				t.Fatalf("%s: %q: %v", key, last[key], err)
			}
			if v.Small != sum || v.Big != 1000*sum || v.Biggest != biggest || !strings.HasPrefix(last[key], `{"key":"`+key+`","big":`) {
				t.Errorf("%s: last output %s, want small %d, big %d, biggest %d, in the edited job's order", key, last[key], sum, 1000*sum, biggest)
			}
		}
	})
}
