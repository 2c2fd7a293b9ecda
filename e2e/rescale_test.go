package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// TestRescaleWithState is issue 33's rescaling with state, through the
// binary on the real broker: the two-stage count job (clicks keyed by
// page, counted per page) on two replicas, its downstream stage at
// job.parallelism 6, then 3, then 8, each change made as an operator
// makes it, with input flowing all the while: 6 → 3 by stopping every
// replica, changing the job file's parallelism and starting them again
// (restored from the newest checkpoint), one replica killed with SIGKILL
// while the rescaled tasks restore and started again; 3 → 8 by `processor
// stop --savepoint`, the same change, and `processor resume` (restored
// from the savepoint). The independent read_committed
// verifier sees every page's counts continue 1..N over the whole history,
// no gap, no repeat; every replica logs the compatible change and the
// moved key groups; the last checkpoints are acknowledged by count/0 …
// count/7; no transaction is left open.
func TestRescaleWithState(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	c := kafkatest.NewReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := e2etest.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	job := kafkatest.Name(t, "rescale")
	input, output := job+"-clicks", job+"-counts"
	c.CreateTopic(t, input, partitions, nil)
	c.CreateTopic(t, output, partitions, nil)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "job.yaml")
	jobFile := e2etest.Job{Name: job, Input: input, Output: output, Brokers: c.Brokers, KeyBy: "page", Parallelism: 6}
	if err := jobFile.Write(cfgFile); err != nil {
		t.Fatal(err)
	}
	commits := e2etest.WatchCommits(t, c.Brokers, job)
	verifier := e2etest.StartVerifier(t, c.Brokers, output)
	in := e2etest.NewClicks(t, c.Brokers, input, keys, pages)
	in.Good(ctx, 20000)
	reps := e2etest.NewReplicas(t, bin, cfgFile, dir, e2etest.ReplicaOptions{HTTP: true})
	ids := []string{reps.Start(), reps.Start()}
	stopFlow := in.Flow(ctx, 2000)
	defer stopFlow()

	progress := func(what string) {
		t.Helper()
		seen := verifier.Seen()
		if err := verifier.WaitSeenWhile(seen+3000, 3*time.Minute, reps.Exited); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s: %d output records committed", what, verifier.Seen())
	}
	progress("parallelism 6")

	storage := "--checkpoint.storage=file://" + filepath.Join(dir, "checkpoints")
	cli := func(args ...string) string {
		t.Helper()
		cmd := reps.Command(ctx, args[0], append(args[1:], storage)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("processor %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for step, p := range []int{3, 8} {
		from := jobFile.Parallelism
		if step == 1 {
			// As docs/operations.md ("Rescaling") does it: stop with a
			// savepoint, change job.parallelism, start the replicas
			// (they stay stopped), resume from the savepoint.
			url := cli("stop", "--savepoint", "--target", "to-8")
			t.Logf("stopped with savepoint %s (%d output records committed)", url, verifier.Seen())
		}
		reps.StopAll()
		jobFile.Parallelism = p
		if err := jobFile.Write(cfgFile); err != nil {
			t.Fatal(err)
		}
		var procs []*e2etest.Proc
		for _, id := range ids {
			procs = append(procs, reps.Restart(id))
		}
		if step == 1 {
			waitLog(t, procs, "stopped", time.Minute)
			t.Logf("processor resume: %s", cli("resume"))
			restored := false
			deadline := time.Now().Add(time.Minute)
			for !restored && time.Now().Before(deadline) {
				for _, g := range commits.Records("generation") {
					restored = restored || strings.Contains(g.Raw, `"restore_metadata":"savepoints/to-8/_metadata"`)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if !restored {
				t.Fatalf("no generation restored from savepoint to-8; generations: %v", commits.Records("generation"))
			}
		}
		if step == 0 {
			// kill -9 a replica while the rescaled tasks restore: the
			// first one whose log says a task moved key groups.
			victim := waitLog(t, procs, "stage rescaled, key groups moved", time.Minute)
			reps.Kill(victim)
			t.Logf("kill -9 replica %s during the rescaling restore", victim)
			time.Sleep(time.Second)
			reps.Restart(victim)
		}
		progress(fmt.Sprintf("parallelism %d → %d", from, p))
		says := fmt.Sprintf("stage count: parallelism %d → %d: key groups move", from, p)
		waitLog(t, procs, says, time.Minute)
	}

	stopFlow()
	if err := in.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	perKey, sum := in.Counts()
	if err := verifier.WaitSeenWhile(sum, 5*time.Minute, reps.Exited); err != nil {
		t.Error(err)
		verifier.Check(perKey, sum, 0) // what is missing
		t.FailNow()
	}
	verifier.Check(perKey, sum, 5*time.Minute)
	waitCompletes(t, commits, len(commits.Records("complete"))+2, reps)
	reps.StopAll()
	e2etest.CheckCheckpointIDs(t, commits)
	e2etest.CheckNoOpenTransactions(ctx, t, c.Brokers, job)

	// The last generation ran count/0 … count/7: its tasks acknowledged
	// checkpoints.
	cps, err := e2etest.ReadCheckpoints(ctx, c.Brokers, job)
	if err != nil {
		t.Fatalf("read the control topics: %v", err)
	}
	var tasks []string
	for task := range cps.Align {
		if strings.HasPrefix(task, "count/") {
			tasks = append(tasks, task)
		}
	}
	slices.Sort(tasks)
	want := []string{"count/0", "count/1", "count/2", "count/3", "count/4", "count/5", "count/6", "count/7"}
	if !slices.Equal(tasks, want) {
		t.Errorf("downstream tasks that acknowledged checkpoints: %v, want %v", tasks, want)
	}
	t.Logf("run: %d input records over %d pages, downstream parallelism 6 → 3 → 8 with a kill -9, %d checkpoints completed",
		sum, len(perKey), len(cps.Durations))
}

// waitLog waits until one of procs' logs (this run's) contains s, and
// returns that replica's ID.
func waitLog(t *testing.T, procs []*e2etest.Proc, s string, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, p := range procs {
			if strings.Contains(p.Log(), s) {
				return p.ID
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no replica logged %q within %v", s, timeout)
	return ""
}
