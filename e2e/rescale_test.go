package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/internal/s3test"
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

// TestRescaleWindowsWithState is TestRescaleWithState for the windowed
// job of TestEventTimeWindowsUnderKills (tumbling 5 s windows of event
// time per page, counted), with in-bound input only (no record is late):
// the downstream stage at job.parallelism 6, then 3 (every replica
// stopped and started again with the new file, one killed with SIGKILL
// during the rescaling restore), then 8 under another job name: the job
// stops with a savepoint, whose folder is copied to another bucket path
// on S3, and job B restores it there with `run --restore-from`, while
// rounds of input arrive. Its open windows, their timers and each key
// group's watermark move with the key groups. The independent reader
// finds every (page, window) result exactly once, with the count of the
// window's input records.
func TestRescaleWindowsWithState(t *testing.T) {
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
	job := kafkatest.Name(t, "rescalewin")
	input, output, late := job+"-clicks", job+"-counts", job+"-late"
	for _, topic := range []string{input, output, late} {
		c.CreateTopic(t, topic, partitions, nil)
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "job.yaml")
	jobFile := e2etest.Job{Name: job, Input: input, Output: output, Brokers: c.Brokers, KeyBy: "page", Parallelism: 6,
		Source: fmt.Sprintf("timestamp: {field: ts, format: unix_ms}, watermark: {max_out_of_orderness: %s, idle_timeout: %s}", etBound, etIdleTimeout),
		Steps: []string{
			fmt.Sprintf("window: {type: tumbling, size: %s, allowed_lateness: %s, late_topic: %s}", etSize, etLateness, late),
			"aggregate: {op: count}",
		}}
	if err := jobFile.Write(cfgFile); err != nil {
		t.Fatal(err)
	}
	commits := e2etest.WatchCommits(t, c.Brokers, job)
	reader := e2etest.StartWindowReader(t, c.Brokers, output, late, "count")
	t0 := windowOf(time.Now().Add(-3 * time.Minute).UnixMilli())
	in := newETInput(t, c.Brokers, input, t0)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 33))
	const preload = 50
	for r := range preload {
		in.round(ctx, rng, r, false)
	}
	reps := e2etest.NewReplicas(t, bin, cfgFile, dir, e2etest.ReplicaOptions{})
	ids := []string{reps.Start(), reps.Start()}

	// Rounds of in-bound input until the rescales are done (at most up
	// to the idle partition's last round: every partition stays active).
	var stop atomic.Bool
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		for r := preload; r <= etIdleRound && !stop.Load() && ctx.Err() == nil; r++ {
			in.round(ctx, rng, r, false)
			time.Sleep(etRoundPause)
		}
	}()
	defer func() { stop.Store(true); <-producerDone }()
	waitFor := func(what string, timeout time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !cond() {
			if err := reps.Exited(); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, timeout)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("a committed result", 3*time.Minute, func() bool { n, _ := reader.Counts(); return n > 0 })
	since := time.Now()
	completedSince := func() bool {
		cs := commits.Records("complete")
		return len(cs) > 0 && cs[len(cs)-1].Arrived.After(since)
	}
	for step, p := range []int{3, 8} {
		waitFor("a checkpoint completed since the last restart", 2*time.Minute, completedSince)
		var procs []*e2etest.Proc
		if step == 1 {
			// Moved: the job stops with a savepoint, the savepoint's
			// folder goes to another bucket path, job B restores it.
			stopCmd := reps.Command(ctx, "stop", "--savepoint", "--target", "moved", "--timeout", "2m",
				"--checkpoint.storage=file://"+filepath.Join(dir, "checkpoints"))
			if out, err := stopCmd.CombinedOutput(); err != nil {
				t.Fatalf("processor stop --savepoint: %v\n%s", err, out)
			}
			reps.StopAll()
			bucket, s3url := s3test.Bucket(t)
			from := filepath.Join(dir, "checkpoints", job, "savepoints", "moved")
			n := copyToBucket(ctx, t, bucket, from, "moved/windows/")
			u, err := url.Parse(s3url)
			if err != nil {
				t.Fatal(err)
			}
			u.Path = "/moved/windows"
			jobFile.Name = job + "-b"
			jobFile.Parallelism = p
			dirB := t.TempDir()
			cfgB := filepath.Join(dirB, "job.yaml")
			if err := jobFile.Write(cfgB); err != nil {
				t.Fatal(err)
			}
			commits = e2etest.WatchCommits(t, c.Brokers, jobFile.Name)
			reps = e2etest.NewReplicas(t, bin, cfgB, dirB, e2etest.ReplicaOptions{Flags: []string{"--restore-from=" + u.String()}})
			ids = []string{reps.Start(), reps.Start()}
			for _, id := range ids {
				procs = append(procs, reps.Proc(id))
			}
			t.Logf("job %s stopped with savepoint moved (%d objects copied to %s); job %s restores it with parallelism %d",
				job, n, u.String(), jobFile.Name, p)
			waitLog(t, procs, "parallelism 3 → 8: key groups move", time.Minute)
		} else {
			reps.StopAll()
			jobFile.Parallelism = p
			if err := jobFile.Write(cfgFile); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				procs = append(procs, reps.Restart(id))
			}
		}
		if step == 0 {
			victim := waitLog(t, procs, "stage rescaled, key groups moved", time.Minute)
			reps.Kill(victim)
			t.Logf("kill -9 replica %s during the rescaling restore", victim)
			time.Sleep(time.Second)
			reps.Restart(victim)
		}
		since = time.Now()
		n, _ := reader.Counts()
		t.Logf("parallelism %d: %d window results committed", p, n)
	}
	waitFor("a checkpoint completed after the last rescale", 2*time.Minute, completedSince)
	stop.Store(true)
	<-producerDone
	in.flush(ctx)
	recs, err := in.wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	every := func(string) bool { return true }
	waitFor("every window accounted for", 3*time.Minute, func() bool {
		ts, _, _ := tally(recs, reader.Results(), reader.Late())
		_, open := settled(ts, every)
		return open == 0
	})
	time.Sleep(time.Second) // a result too many shows itself
	reps.StopAll()

	ts, _, bad := tally(recs, reader.Results(), reader.Late())
	bad = append(bad, reader.Violations()...)
	windows := 0
	for k, v := range ts {
		switch {
		case len(v.results) != 1:
			bad = append(bad, fmt.Sprintf("window %s@%d: %d results, want exactly one", k.Key, k.Start, len(v.results)))
		case v.late > 0:
			bad = append(bad, fmt.Sprintf("window %s@%d: %d late records, but every input record is in bound", k.Key, k.Start, v.late))
		case v.results[0].Count != int64(v.in):
			bad = append(bad, fmt.Sprintf("window %s@%d: count %d, the input has %d", k.Key, k.Start, v.results[0].Count, v.in))
		}
		windows++
	}
	slices.Sort(bad)
	if len(bad) > 20 {
		bad = append(bad[:20], fmt.Sprintf("… and %d more", len(bad)-20))
	}
	for _, b := range bad {
		t.Error(b)
	}
	e2etest.CheckCheckpointIDs(t, commits)
	e2etest.CheckNoOpenTransactions(ctx, t, c.Brokers, job)
	t.Logf("%d input records, %d windows, each result exactly once, downstream parallelism 6 → 3 → 8 with a kill -9", len(recs), windows)
}
