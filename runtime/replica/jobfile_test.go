package replica_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/runtime/replica"
)

// TestGenerationsNeverMixJobFiles runs replicas of two job files in one
// group, as a rolling update does: a runs v1; b joins with v2 (a tie:
// the running file, v1, goes on, and b waits, ready, saying why); c joins
// with v2 (v2 has the majority: the coordinator role moves to a replica of
// v2, which starts a generation of v2 restored from the newest completed
// checkpoint, and a waits). Every generation record on the commit topic
// names one file and places tasks only on replicas of that file, and the
// counts are exactly once across the switch. It runs on kfake and on the
// real broker.
func TestGenerationsNeverMixJobFiles(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const partitions, keys, records = 4, 40, 3000
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "files")
		in, out := job+"-in", job+"-out"
		c.CreateTopic(t, in, partitions, nil)
		c.CreateTopic(t, out, partitions, nil)
		dir := t.TempDir()
		files := map[string]string{"a": "v1", "b": "v2", "c": "v2"}
		start := func(id string) *replica.Replica {
			yaml := jobYAML(job, in, out, c.Brokers[0], "file://"+dir+"/checkpoints", dir, id)
			cfg, err := config.Load(config.Source{YAML: []byte(yaml), NoEnv: true})
			if err != nil {
				t.Fatal(err)
			}
			j, err := pipeline.Compile(cfg.Job)
			if err != nil {
				t.Fatal(err)
			}
			return startJobReplica(ctx, t, id, yaml, j, func(o *replica.Options) { o.Fingerprint = files[id] }).Replica
		}
		produce := func(from, to int) { produceInput(ctx, t, c, in, keys, from, to) }

		produce(0, records/3)
		a := start("a")
		waitReady(t, a)
		waitCommitted(ctx, t, c, out, records/6)

		b := start("b")
		waitWaiting(ctx, t, b, "waiting: this replica runs job v2, the generation runs v1")
		if !b.Ready() {
			t.Error("b waits for its file but is not ready: a rolling update would stall")
		}
		produce(records/3, 2*records/3)
		waitCommitted(ctx, t, c, out, records/2)
		if w := a.Waiting(); w != "" {
			t.Errorf("a runs the generation's file but says %q", w)
		}

		cr := start("c")
		waitWaiting(ctx, t, a, "waiting: this replica runs job v1, the generation runs v2")
		waitReady(t, b, cr)
		for id, r := range map[string]*replica.Replica{"b": b, "c": cr} {
			if w := r.Waiting(); w != "" {
				t.Errorf("%s runs the generation's file but says %q", id, w)
			}
		}
		produce(2*records/3, records)
		verifyCounts(ctx, t, c, out, keys, records)

		hist, err := controltopic.ReadHistory(ctx, append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, c.Opts...), controltopic.NewTopics("_weir."+job+"."), control.TopicCommit)
		if err != nil {
			t.Fatal(err)
		}
		var ran []string
		for _, rec := range hist.Records {
			g, ok := rec.Msg.(control.Generation)
			if !ok {
				continue
			}
			for rep, tasks := range g.Assignment {
				if len(tasks) > 0 && files[rep] != g.Fingerprint {
					t.Errorf("generation %d runs %q but places %d tasks on %s, which runs %q", g.Gen, g.Fingerprint, len(tasks), rep, files[rep])
				}
			}
			if len(ran) == 0 || ran[len(ran)-1] != g.Fingerprint {
				ran = append(ran, g.Fingerprint)
			}
		}
		if strings.Join(ran, " ") != "v1 v2" {
			t.Errorf("the generations ran %v; want v1, then v2", ran)
		}
	})
}

// waitWaiting waits up to a minute for r to say want on /readyz
// (Replica.Waiting).
func waitWaiting(ctx context.Context, t *testing.T, r *replica.Replica, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for r.Waiting() != want {
		select {
		case <-ctx.Done():
			t.Fatalf("replica says %q, want %q", r.Waiting(), want)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestGenerationOfAnotherFileWithTasksIsRefused: a generation record that
// names another job file than the replica's and still gives it tasks (no
// coordinator of this version writes one: it places tasks only on replicas
// of its own file) is refused: the replica stops its tasks and starts none
// of the record's. A second record of that file, without tasks for it,
// follows; once the replica waits for it, it has handled the first: it
// must have restored tasks only for its first generation. It runs on kfake
// and on the real broker.
func TestGenerationOfAnotherFileWithTasksIsRefused(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "forged")
		in, out := job+"-in", job+"-out"
		c.CreateTopic(t, in, 2, nil)
		c.CreateTopic(t, out, 2, nil)
		dir := t.TempDir()
		yaml := jobYAML(job, in, out, c.Brokers[0], "file://"+dir+"/checkpoints", dir, "a")
		cfg, err := config.Load(config.Source{YAML: []byte(yaml), NoEnv: true})
		if err != nil {
			t.Fatal(err)
		}
		j, err := pipeline.Compile(cfg.Job)
		if err != nil {
			t.Fatal(err)
		}
		tr := startJobReplica(ctx, t, "a", yaml, j, func(o *replica.Options) { o.Fingerprint = "v1" })
		waitReady(t, tr.Replica)
		if got := gaugeValue(t, tr.reg, "weir_replica_tasks"); got != 2 {
			t.Fatalf("weir_replica_tasks = %v, want 2", got)
		}

		tasks := []control.TaskID{{Stage: "main", Index: 0}, {Stage: "main", Index: 1}}
		var recs []*kgo.Record
		for _, g := range []control.Generation{
			{Gen: 1000, Fingerprint: "v2", Assignment: control.Assignment{"a": tasks}},
			{Gen: 1001, Fingerprint: "v2", Assignment: control.Assignment{"b": tasks}},
		} {
			v, err := control.Encode(g)
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, &kgo.Record{Topic: "_weir." + job + ".commit", Value: v})
		}
		if err := c.Client(t).ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		waitWaiting(ctx, t, tr.Replica, "waiting: this replica runs job v1, the generation runs v2")
		if got := gaugeValue(t, tr.reg, "weir_replica_tasks"); got != 0 {
			t.Errorf("weir_replica_tasks = %v after the refused generation, want 0", got)
		}
		restores := findMetric(t, tr.reg, "weir_replica_restore_duration_seconds")
		if len(restores) != 1 || restores[0].GetHistogram().GetSampleCount() != 1 {
			t.Errorf("weir_replica_restore_duration_seconds: %v, want one restore (the replica's first generation)", restores)
		}
	})
}
