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
// job.parallelism 6, then 3, then 8, each change made as the operator
// makes it (every replica stopped, the job file's parallelism changed,
// the replicas started again), with input flowing all the while. One
// replica is killed with SIGKILL while the tasks of the first rescaled
// generation restore, and started again. The independent read_committed
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

	for step, p := range []int{3, 8} {
		from := jobFile.Parallelism
		reps.StopAll()
		jobFile.Parallelism = p
		if err := jobFile.Write(cfgFile); err != nil {
			t.Fatal(err)
		}
		var procs []*e2etest.Proc
		for _, id := range ids {
			procs = append(procs, reps.Restart(id))
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
