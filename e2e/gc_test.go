package e2e

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/gccheck"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/internal/s3test"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/state/objstore"
)

const (
	// gcTasks is the count job's task count: its input's partitions.
	gcTasks = 4
	// gcRetained is checkpoint.retained, gcMaxConcurrent max_concurrent.
	gcRetained      = 2
	gcMaxConcurrent = 1
	// gcCheckpointDirs bounds the periodic checkpoints whose objects the
	// store holds at any time: the retained ones; one in flight and up to
	// two released whose deletion has not finished (the coordinator
	// triggers nothing while more than max_concurrent discards are
	// queued); after a kill -9, the dead generation's in-flight one, which
	// the collection after the next generation deletes; and one for the
	// listing, which is no snapshot (a checkpoint deleted early in it and
	// one created late in it both show).
	gcCheckpointDirs = gcRetained + 3*gcMaxConcurrent + 1
)

// TestGCKeepsEverythingReferenced is issue 33's garbage-collection proof,
// through the binary on the real broker and the real S3 server: the count
// job on two replicas with checkpoint.retained 2 and a checkpoint every
// second, input flowing all along, four savepoints taken with `processor
// savepoint` while it runs, and the replica holding the coordinator role
// killed with SIGKILL three times, each time started again: once with a
// fifth savepoint half acknowledged, which the new generation aborts. All along, every two seconds, and at the end,
// gccheck lists the job's prefix in the bucket and reads every retained
// checkpoint's and savepoint's _metadata and task manifests:
//
//   - nothing a retained checkpoint or a savepoint refers to is ever
//     missing (DESIGN.md invariant 4), so every savepoint can be restored;
//   - at most gcCheckpointDirs checkpoints have objects under chk-*/ at
//     any sample, while the run completes more than five times as many:
//     a checkpoint that retention or a failover forgets to delete shows;
//   - the objects outside savepoints/ stay under gcCheckpointDirs
//     checkpoints' worth, each at most gcTasks task snapshots of
//     MaxPerSnapshot objects (the largest seen) and a _metadata, plus the
//     collector's clock object, and those no retained checkpoint refers to
//     under the same bound less the retained checkpoints. (A snapshot's
//     size is no constant: every checkpoint adds a piece to a task's live
//     WAL, docs/state.md; the bound follows what is referenced.)
//   - savepoints/ holds exactly the completed savepoints' objects;
//   - at the end, with the job quiet, at most one in-flight checkpoint's
//     objects are unreferenced.
//
// The independent read_committed verifier sees every key's counts exactly
// 1..N over the run.
func TestGCKeepsEverythingReferenced(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	c := kafkatest.NewReal(t)
	_, storage := s3test.Bucket(t)
	job := kafkatest.Name(t, "gc")
	dir := t.TempDir()
	bin, err := e2etest.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	j := e2etest.Job{Name: job, Input: job + "-clicks", Output: job + "-counts", Brokers: c.Brokers}
	c.CreateTopic(t, j.Input, gcTasks, nil)
	c.CreateTopic(t, j.Output, gcTasks, nil)
	cfgFile := filepath.Join(dir, "job.yaml")
	if err := j.Write(cfgFile); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	store, err := objstore.Open(ctx, storage, job, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	history := func(ctx context.Context) ([]control.Message, error) {
		return readTopic(ctx, c.Brokers, job, control.TopicCommit)
	}

	verifier := e2etest.StartVerifier(t, c.Brokers, j.Output)
	in := e2etest.NewInput(t, c.Brokers, j.Input, keys)
	cl := e2etest.NewReplicas(t, bin, cfgFile, dir, e2etest.ReplicaOptions{HTTP: true, Storage: storage,
		Flags: []string{fmt.Sprintf("--checkpoint.retained=%d", gcRetained), fmt.Sprintf("--checkpoint.max_concurrent=%d", gcMaxConcurrent)}})
	r0, r1 := cl.Start(), cl.Start()
	waitReadyz(t, cl.Proc(r0))
	waitReadyz(t, cl.Proc(r1))
	stopInput := in.Flow(ctx, 2000)
	defer stopInput()

	// The sampler: gccheck every two seconds until told to stop.
	var (
		mu      sync.Mutex
		samples []gccheck.Report
		failed  []string
	)
	check := func(what string) gccheck.Report {
		rep, err := gccheck.Check(ctx, store, history, gcRetained)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", what, err))
			return rep
		}
		samples = append(samples, rep)
		for _, m := range rep.Missing {
			failed = append(failed, fmt.Sprintf("%s: %s", what, m))
		}
		return rep
	}
	sampling, stopSampling := context.WithCancel(ctx)
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for n := 1; sampling.Err() == nil; n++ {
			check(fmt.Sprintf("sample %d", n))
			select {
			case <-sampling.Done():
			case <-time.After(2 * time.Second):
			}
		}
	})
	defer func() { stopSampling(); sampler.Wait() }()

	savepoint := func(name string) (string, error) {
		cmd := cl.Command(ctx, "savepoint", "--checkpoint.storage="+storage, "--target", name, "--timeout", "2m")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if err != nil {
			return "", fmt.Errorf("processor savepoint --target %s: %w\n%s", name, err, stderr.String())
		}
		return strings.TrimSpace(stdout.String()), nil
	}
	killCoordinator := func() {
		t.Helper()
		coord, err := cl.Coordinator(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		cl.Kill(coord)
		t.Logf("kill -9 of %s, the coordinator (%d output records committed)", coord, verifier.Seen())
		waitReadyz(t, cl.Restart(coord))
	}
	waitCompletes := func(n int) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			h, err := history(ctx)
			if err != nil {
				t.Fatal(err)
			}
			done := 0
			for _, m := range h {
				if _, ok := m.(control.Complete); ok {
					done++
				}
			}
			if done >= n {
				return
			}
			if err := cl.Exited(); err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d checkpoints completed within 2 minutes, want %d", done, n)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}

	taken := 0
	take := func(name string) {
		t.Helper()
		url, err := savepoint(name)
		if err != nil {
			t.Fatal(err)
		}
		taken++
		t.Logf("savepoint %s at %s", name, url)
	}
	waitCompletes(10)
	take("sp-1")
	killCoordinator()
	waitCompletes(20)
	take("sp-2")
	// A savepoint aborted by the coordinator's death after some of its
	// tasks acknowledged it. The other replica is frozen (SIGSTOP), so its
	// tasks acknowledge neither the periodic checkpoint then pending
	// (max_concurrent 1: no later periodic trigger) nor the savepoint,
	// which stays the newest trigger; once the coordinator's own tasks
	// acknowledged the savepoint, the coordinator is killed and the other
	// replica thawed. The new generation aborts the savepoint, and what
	// the dead replica's tasks wrote under savepoints/sp-aborted/ is
	// deleted: the final check finds under savepoints/ only what completed
	// savepoints refer to.
	coord, err := cl.Coordinator(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	other := r0
	if other == coord {
		other = r1
	}
	cl.Signal(other, syscall.SIGSTOP)
	waitControl(ctx, t, "a periodic checkpoint pending", func(trig, commit []control.Message) bool {
		var done ckpt.ID
		for _, m := range commit {
			if c, ok := m.(control.Complete); ok {
				done = max(done, c.ID)
			}
		}
		last, ok := trig[len(trig)-1].(control.Trigger)
		return ok && last.Kind == ckpt.KindCheckpoint && last.ID > done
	}, readControl(c.Brokers, job))
	aborted := make(chan error, 1)
	go func() { _, err := savepoint("sp-aborted"); aborted <- err }()
	var spID ckpt.ID
	waitControl(ctx, t, "the savepoint acknowledged by the coordinator's tasks", func(trig, _ []control.Message) bool {
		for _, m := range trig {
			if tr, ok := m.(control.Trigger); ok && tr.Target == "sp-aborted" {
				spID = tr.ID
			}
		}
		if spID == 0 {
			return false
		}
		acks, err := readTopic(ctx, c.Brokers, job, control.TopicAck)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range acks {
			if a, ok := m.(control.Ack); ok && a.ID == spID {
				return true
			}
		}
		return false
	}, readControl(c.Brokers, job))
	cl.Kill(coord)
	cl.Signal(other, syscall.SIGCONT)
	t.Logf("kill -9 of %s, the coordinator, with savepoint %d (sp-aborted) half acknowledged", coord, spID)
	if err := <-aborted; err == nil {
		t.Fatal("savepoint sp-aborted completed, with the other replica frozen")
	} else {
		t.Logf("savepoint sp-aborted: %v", err)
	}
	waitReadyz(t, cl.Restart(coord))
	waitCompletes(35)
	take("sp-3")
	killCoordinator()
	waitCompletes(50)
	take("sp-4")
	waitCompletes(60)

	stopInput()
	if err := in.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	perKey, sum := in.Counts()
	if err := verifier.WaitSeenWhile(sum, 2*time.Minute, cl.Exited); err != nil {
		t.Fatal(err)
	}
	verifier.Check(perKey, sum, time.Minute)
	stopSampling()
	sampler.Wait()
	// Quiet now: let a few more checkpoints complete, so that the last
	// generation's collection and the releases are done.
	h, err := history(ctx)
	if err != nil {
		t.Fatal(err)
	}
	completes := 0
	for _, m := range h {
		if _, ok := m.(control.Complete); ok {
			completes++
		}
	}
	waitCompletes(completes + 3)
	final := check("final")
	cl.StopAll()

	mu.Lock()
	defer mu.Unlock()
	for _, f := range failed {
		t.Error(f)
	}
	if len(samples) < 20 {
		t.Errorf("only %d samples", len(samples))
	}
	maxPer := 0
	for _, s := range samples {
		maxPer = max(maxPer, s.MaxPerSnapshot)
	}
	bound := gcCheckpointDirs*(gcTasks*maxPer+1) + 1
	worst := gccheck.Report{}
	for _, s := range samples {
		if n := s.Objects - s.Savepoint; n > worst.Objects-worst.Savepoint {
			worst = s
		}
	}
	t.Logf("%d samples; the most objects outside savepoints/: %d (%s); bound %d = %d checkpoints × (%d tasks × %d objects per task snapshot + 1 _metadata) + 1",
		len(samples), worst.Objects-worst.Savepoint, worst, bound, gcCheckpointDirs, gcTasks, maxPer)
	t.Logf("final: %s", final)
	if completes < 5*gcCheckpointDirs {
		t.Errorf("only %d checkpoints completed: a leak would not show under the bound", completes)
	}
	if n := worst.Objects - worst.Savepoint; n > bound {
		t.Errorf("%d objects outside savepoints/, bound %d: %s", n, bound, worst)
	}
	// What no retained checkpoint refers to is what is in flight, being
	// deleted or left by a dead generation: all but the retained
	// checkpoints of the bound.
	slackBound := (gcCheckpointDirs - gcRetained) * (gcTasks*maxPer + 1)
	mostUnreferenced, mostDirs := 0, gccheck.Report{}
	for _, s := range samples {
		mostUnreferenced = max(mostUnreferenced, len(s.Unreferenced))
		if len(s.CheckpointDirs) > len(mostDirs.CheckpointDirs) {
			mostDirs = s
		}
	}
	// The sharpest test of retention: a checkpoint whose chk-<n>/ is
	// never deleted shows here however few objects it has.
	t.Logf("at most %d checkpoints with objects under chk-*/ (bound %d): %s", len(mostDirs.CheckpointDirs), gcCheckpointDirs, mostDirs)
	if len(mostDirs.CheckpointDirs) > gcCheckpointDirs {
		t.Errorf("%d checkpoints have objects under chk-*/, bound %d: %s", len(mostDirs.CheckpointDirs), gcCheckpointDirs, mostDirs)
	}
	t.Logf("at most %d objects no retained checkpoint referred to (bound %d)", mostUnreferenced, slackBound)
	if mostUnreferenced > slackBound {
		t.Errorf("%d objects no retained checkpoint refers to, bound %d", mostUnreferenced, slackBound)
	}
	if len(final.Savepoints) != taken {
		t.Errorf("final check: savepoints %v, want the %d taken", final.Savepoints, taken)
	}
	if final.Savepoint != final.SavepointReferenced {
		t.Errorf("savepoints/ holds %d objects, the completed savepoints refer to %d",
			final.Savepoint, final.SavepointReferenced)
	}
	if slack := gcMaxConcurrent * gcTasks * maxPer; len(final.Unreferenced) > slack {
		t.Errorf("%d objects no retained checkpoint refers to at the end, want at most %d (one in-flight checkpoint's): %q",
			len(final.Unreferenced), slack, final.Unreferenced[:min(20, len(final.Unreferenced))])
	}
}

// readTopic reads a control topic of job to its end, decoded.
func readTopic(ctx context.Context, brokers []string, job string, topic control.Topic) ([]control.Message, error) {
	h, err := controltopic.ReadHistory(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)},
		controltopic.NewTopics("_weir."+job+"."), topic)
	if err != nil {
		return nil, err
	}
	msgs := make([]control.Message, len(h.Records))
	for i, r := range h.Records {
		msgs[i] = r.Msg
	}
	return msgs, nil
}

// readControl returns a reader of job's trigger and commit topics.
func readControl(brokers []string, job string) func(ctx context.Context) ([]control.Message, []control.Message, error) {
	return func(ctx context.Context) ([]control.Message, []control.Message, error) {
		trig, err := readTopic(ctx, brokers, job, control.TopicTrigger)
		if err != nil {
			return nil, nil, err
		}
		commit, err := readTopic(ctx, brokers, job, control.TopicCommit)
		return trig, commit, err
	}
}

// waitControl polls the control topics until cond holds, for up to 30s.
func waitControl(ctx context.Context, t *testing.T, what string, cond func(trig, commit []control.Message) bool,
	read func(ctx context.Context) ([]control.Message, []control.Message, error)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		trig, commit, err := read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(trig) > 0 && cond(trig, commit) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within 30s: %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
