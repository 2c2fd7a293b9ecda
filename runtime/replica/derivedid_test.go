package replica_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// TestDerivedIDFollowsTheStep runs a job whose route feeds a stream "all"
// with an aggregate step without id: (derived id "aggregate"), stops it,
// and starts it with a second stream "even", compiled before "all", whose
// own aggregate takes the derived id "aggregate": all's becomes
// "aggregate-2". Its state follows it (compat: no other aggregate is
// defined as it is): every key's count and sum continue exactly, and
// even's aggregate starts empty. A restart of the edited job, and more
// records, show that its checkpoints record where the state is. It runs
// on kfake and on the real broker.
func TestDerivedIDFollowsTheStep(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const partitions, keys, batch = 2, 10, 200
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "derivedid")
		in, out, outEven := job+"-in", job+"-out", job+"-even"
		c.CreateTopic(t, in, partitions, nil)
		c.CreateTopic(t, out, partitions, nil)
		c.CreateTopic(t, outEven, partitions, nil)
		dir := t.TempDir()
		all := fmt.Sprintf(`    all: [{aggregate: {n: {count: true}, s: {sum: value.x}}}, {sink: {topic: %s}}]`, out)
		v1 := fmt.Sprintf(`    - route: [{to: all}]
  streams:
%s`, all)
		v2 := fmt.Sprintf(`    - route: [{when: "value.x %% 2 == 0", to: even}, {to: all}]
  streams:
    even: [{aggregate: {n: {count: true}}}, {sink: {topic: %s}}]
%s`, outEven, all)
		yaml := func(rest string) string {
			return fmt.Sprintf(`
job:
  name: %s
  pipeline:
    - source: {topics: [%s], format: json}
%s
kafka: {brokers: [%s], session_timeout: 6s}
checkpoint: {interval: 300ms, timeout: 20s, storage: "file://%s/checkpoints"}
state: {dir: "%s/state"}
http: {address: ""}
process: {replica_id: a, grace_period: 20s}
`, job, in, rest, c.Brokers[0], dir, dir)
		}
		produce := func(from, to int) {
			cl := c.Client(t, kgo.DefaultProduceTopic(in))
			for i := from; i < to; i++ {
				cl.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%02d", i%keys), Value: fmt.Appendf(nil, `{"x":%d}`, i)}, nil)
			}
			if err := cl.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
		type agg struct{ N, S int }
		last := func(topic string) map[string]agg {
			got := map[string]agg{}
			for _, r := range c.ReadCommitted(ctx, t, topic) {
				var v agg
				if err := json.Unmarshal(r.Value, &v); err != nil {
					t.Fatalf("%s: %q: %v", topic, r.Value, err)
				}
				got[string(r.Key)] = v
			}
			return got
		}
		// check compares every key's last output with the aggregates of
		// the records [from, to) (of even x only if even).
		check := func(what, topic string, from, to int, even bool) {
			t.Helper()
			got := last(topic)
			want := map[string]agg{}
			for i := from; i < to; i++ {
				if even && i%2 != 0 {
					continue
				}
				k := fmt.Sprintf("k%02d", i%keys)
				a := want[k]
				a.N, a.S = a.N+1, a.S+i
				want[k] = a
			}
			if len(got) != len(want) {
				t.Errorf("%s: outputs of %d keys, want %d: %v", what, len(got), len(want), got)
			}
			for k, w := range want {
				if g := got[k]; g.N != w.N || (!even && g.S != w.S) {
					t.Errorf("%s: %s: last output %+v, want %+v", what, k, g, w)
				}
			}
		}
		group := "_weir." + job + ".source"

		produce(0, batch)
		r1 := startReplica(ctx, t, "a", yaml(v1))
		waitReady(t, r1.Replica)
		waitGroupCaughtUp(ctx, t, c, group, in)
		r1.stop()
		check("v1", out, 0, batch, false)

		r2 := startReplica(ctx, t, "a", yaml(v2))
		waitReady(t, r2.Replica)
		produce(batch, 2*batch)
		waitGroupCaughtUp(ctx, t, c, group, in)
		r2.stop()
		check("v2: all's aggregate continues", out, 0, 2*batch, false)
		check("v2: even's aggregate starts empty", outEven, batch, 2*batch, true)

		r3 := startReplica(ctx, t, "a", yaml(v2))
		waitReady(t, r3.Replica)
		produce(2*batch, 3*batch)
		waitGroupCaughtUp(ctx, t, c, group, in)
		r3.stop()
		check("v2 restarted: all's aggregate continues", out, 0, 3*batch, false)
		check("v2 restarted: even's aggregate continues", outEven, batch, 3*batch, true)
	})
}
