package replica_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/runtime/membership"
)

// TestDuplicateReplicaRefused starts a second replica with the replica ID
// of a running one. The second one's Run fails with an error that names
// the ID and says a replica with it is already a member; the running one
// stays ready, no new generation starts, and its output keeps being
// committed. It runs on kfake and on the real broker.
func TestDuplicateReplicaRefused(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const keys, records = 20, 600
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "dup")
		in, out := job+"-in", job+"-out"
		c.CreateTopic(t, in, 2, nil)
		c.CreateTopic(t, out, 2, nil)
		dir := t.TempDir()
		yaml := func(stateDir string) string {
			return jobYAML(job, in, out, c.Brokers[0], "file://"+dir+"/checkpoints", stateDir, "weir-0")
		}
		produceInput(ctx, t, c, in, keys, 0, records/2)
		a := startReplica(ctx, t, "weir-0", yaml(dir+"/a"))
		waitReady(t, a.Replica)
		waitCommitted(ctx, t, c, out, records/4)
		gens := generations(ctx, t, c, job)

		dup := startReplica(ctx, t, "weir-0", yaml(dir+"/dup"))
		var err error
		select {
		case err = <-dup.done:
		case <-time.After(time.Minute):
			t.Fatal("the duplicate replica still runs after a minute")
		}
		dup.done <- nil // for the cleanup's stop, which waits for Run's result
		if !errors.Is(err, membership.ErrDuplicateReplicaID) || !strings.Contains(err.Error(), `"weir-0"`) ||
			!strings.Contains(err.Error(), "already a member") {
			t.Fatalf("the duplicate's Run returned %v, want an error naming weir-0 as already a member", err)
		}
		t.Logf("the duplicate stopped with: %v", err)

		produceInput(ctx, t, c, in, keys, records/2, records)
		waitCommitted(ctx, t, c, out, records)
		stillRunning(t, a, "after the duplicate left")
		if !a.Ready() {
			t.Fatal("the running replica is not ready after the duplicate left")
		}
		if now := generations(ctx, t, c, job); now != gens {
			t.Fatalf("%d generations before the duplicate, %d after: the running replica was disturbed", gens, now)
		}
		verifyCounts(ctx, t, c, out, keys, records)
	})
}

// generations counts the generation records in the job's commit topic.
func generations(ctx context.Context, t *testing.T, c *kafkatest.Cluster, job string) int {
	t.Helper()
	h, err := controltopic.ReadHistory(ctx, []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
		controltopic.NewTopics("_weir."+job+"."), control.TopicCommit)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range h.Records {
		if _, ok := r.Msg.(control.Generation); ok {
			n++
		}
	}
	return n
}
