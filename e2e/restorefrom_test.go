package e2e

import (
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gocloud.dev/blob"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/s3test"
)

// TestRestoreFromAnotherJob is issue 33's relocation, through the binary on
// the real broker and the real S3 server: job A (two replicas, the count
// job, file:// storage) takes a savepoint under load, then stops with a
// savepoint; the final savepoint's folder is copied into another bucket
// path on S3 under another folder name; job B, a new job name on the same
// topics, starts from the copy with `run --restore-from`. One of B's
// replicas is killed with SIGKILL while the restore runs and started again
// with the same flag: B restores the savepoint again, as long as no
// checkpoint of its own completed. Later a replica restarted with the flag
// still set resumes from B's newest checkpoint and logs that it ignores the
// flag. The count is per user after a key_by (a downstream stage): A runs
// it with 6 tasks, B restores it with 3 (the relocated savepoint's key
// groups move) and is then rescaled to 8 by a stop with a savepoint, a
// changed job.parallelism and resume (docs/operations.md, "Rescaling").
// The independent read_committed verifier sees every key's counts
// continue 1..N over both jobs, no gap and no repeat; A's savepoint is
// never written to by B, and no transaction of either job is left open.
func TestRestoreFromAnotherJob(t *testing.T) {
	r := startSavepointRun(t, "restorefrom", e2etest.Job{KeyBy: "user", Parallelism: 6})
	ctx := t.Context()
	verifier, in := r.verifier, r.in
	stopFlow := in.Flow(ctx, 1000)
	if err := verifier.WaitSeenWhile(10000, 2*time.Minute, r.cl.Exited); err != nil {
		t.Fatal(err)
	}
	if out, stderr, err := r.cli(t, "savepoint", "--target", "under-load", "--timeout", "2m"); err != nil {
		t.Fatalf("processor savepoint under load: %v\n%s", err, stderr)
	} else {
		t.Logf("savepoint under load: %s (%d output records committed)", out, verifier.Seen())
	}
	stopFlow()
	out, stderr, err := r.cli(t, "stop", "--savepoint", "--target", "final", "--timeout", "2m")
	if err != nil {
		t.Fatalf("processor stop --savepoint: %v\n%s", err, stderr)
	}
	t.Logf("job %s stopped with savepoint %s (%d output records committed)", r.job, out, verifier.Seen())
	// Job A's replicas stay up, stopped: the other job may still run.

	// The savepoint's folder, copied to S3 under another folder name.
	bucket, s3url := s3test.Bucket(t)
	from := filepath.Join(r.dir, "checkpoints", r.job, "savepoints", "final")
	copied := copyToBucket(ctx, t, bucket, from, "moved/final-copy/")
	u, err := url.Parse(s3url)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/moved/final-copy"
	restoreFrom := u.String()
	t.Logf("copied %d objects of %s to %s", copied, from, restoreFrom)
	before := countFiles(t, from)

	// Job B: a new job name, the same topics, its own storage.
	jobB := r.job + "-b"
	dirB := t.TempDir()
	cfgB := filepath.Join(dirB, "job.yaml")
	j := e2etest.Job{Name: jobB, Input: r.job + "-clicks", Output: r.job + "-counts", Brokers: r.c.Brokers, KeyBy: "user", Parallelism: 3}
	if err := j.Write(cfgB); err != nil {
		t.Fatal(err)
	}
	commitsB := e2etest.WatchCommits(t, r.c.Brokers, jobB)
	gens := commitsB.Subscribe()
	// The first checkpoint comes 3s or more after a generation runs, so
	// that the kill below lands before B completes one.
	clB := e2etest.NewReplicas(t, r.bin, cfgB, dirB, e2etest.ReplicaOptions{HTTP: true,
		Flags: []string{"--restore-from=" + restoreFrom, "--checkpoint.min_pause=3s"}})
	b0, b1 := clB.Start(), clB.Start()
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range []string{b0, b1} {
				t.Logf("replica %s of %s, the end of its log:\n%s", id, jobB, tail(clB.Proc(id).Log(), 60))
			}
		}
	})
	stopFlow = in.Flow(ctx, 1000)
	for first := true; first; {
		select {
		case rec := <-gens:
			if rec.Type == "generation" && strings.Contains(rec.Raw, `"restore_request"`) {
				first = false
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("no generation of %s honoured --restore-from; records: %v", jobB, commitsB.Records(""))
		}
	}
	clB.Kill(b1)
	t.Logf("kill -9 of %s while the restore runs", b1)
	clB.Restart(b1)
	waitReadyz(t, clB.Proc(b0))
	waitReadyz(t, clB.Proc(b1))
	if _, err := verifier.WaitAdvance(time.Now(), 2*time.Minute); err != nil {
		t.Fatalf("job %s commits no output after its restore: %v", jobB, err)
	}
	waitLog(t, []*e2etest.Proc{clB.Proc(b0), clB.Proc(b1)}, "stage count: parallelism 6 → 3: key groups move", time.Minute)

	// A replica restarted with the flag still set resumes from B's newest
	// checkpoint, and says why it ignores the flag.
	clB.Kill(b0)
	p := clB.Restart(b0)
	waitReadyz(t, p)
	if log := p.Log(); !strings.Contains(log, "--restore-from ignored") {
		t.Fatalf("%s restarted with the flag: no line saying it is ignored:\n%s", b0, tail(log, 40))
	}

	// B rescaled 3 → 8: stop with a savepoint, job.parallelism 8, the
	// replicas started again with the new file (the flag still set, and
	// ignored), resume.
	cliB := func(args ...string) string {
		t.Helper()
		out, err := clB.Command(ctx, args[0], append(args[1:], "--checkpoint.storage=file://"+filepath.Join(dirB, "checkpoints"))...).Output()
		if err != nil {
			t.Fatalf("processor %s (job %s): %v\n%s", strings.Join(args, " "), jobB, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	t.Logf("job %s stopped with savepoint %s (%d output records committed)", jobB, cliB("stop", "--savepoint", "--target", "to-8", "--timeout", "2m"), verifier.Seen())
	clB.StopAll()
	j.Parallelism = 8
	if err := j.Write(cfgB); err != nil {
		t.Fatal(err)
	}
	procs := []*e2etest.Proc{clB.Restart(b0), clB.Restart(b1)}
	waitLog(t, procs, "stopped", time.Minute)
	t.Logf("processor resume: %s", cliB("resume"))
	waitLog(t, procs, "stage count: parallelism 3 → 8: key groups move", 2*time.Minute)
	if _, err := verifier.WaitAdvance(time.Now(), 2*time.Minute); err != nil {
		t.Fatalf("job %s commits no output after it was rescaled: %v", jobB, err)
	}

	stopFlow()
	if err := in.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	perKey, sum := in.Counts()
	if err := verifier.WaitSeenWhile(sum, 3*time.Minute, clB.Exited); err != nil {
		t.Error(err)
		verifier.Check(perKey, sum, 0)
		t.FailNow()
	}
	verifier.Check(perKey, sum, time.Minute)
	checkRestoreGenerations(t, commitsB, restoreFrom)

	if after := countFiles(t, from); after != before {
		t.Fatalf("job %s's savepoint changed: %d files, then %d", r.job, before, after)
	}
	clB.StopAll()
	r.finish(t)
	e2etest.CheckCheckpointIDs(t, commitsB)
	e2etest.CheckNoOpenTransactions(ctx, t, r.c.Brokers, jobB)
}

// checkRestoreGenerations checks job B's generation records: the first
// honours the request; every one before B's first completed checkpoint
// restores the savepoint's location (the kill during the restore) and
// none after; at least one generation after that restores B's own newest
// checkpoint (the restart with the flag still set).
func checkRestoreGenerations(t *testing.T, w *e2etest.CommitWatcher, restoreFrom string) {
	t.Helper()
	type gen struct {
		Gen             uint64 `json:"gen"`
		RestoreFrom     uint64 `json:"restore_from"`
		RestoreLocation string `json:"restore_location"`
		RestoreRequest  string `json:"restore_request"`
	}
	var completed uint64 // the newest completed checkpoint so far
	var requests, again, own, i int
	for _, rec := range w.Records("") {
		switch rec.Type {
		case "complete":
			completed = max(completed, rec.ID)
		case "generation":
			var g gen
			if err := json.Unmarshal([]byte(rec.Raw), &g); err != nil {
				t.Fatal(err)
			}
			switch {
			case i == 0 && g.RestoreRequest != restoreFrom:
				t.Errorf("first generation %s: does not honour %s", rec.Raw, restoreFrom)
			case g.RestoreRequest != "" && i > 0:
				t.Errorf("generation %s honours the request a second time", rec.Raw)
			case completed == 0 && g.RestoreLocation != restoreFrom:
				t.Errorf("generation %s, before any checkpoint of the job completed, does not restore the savepoint at %s", rec.Raw, restoreFrom)
			case completed > 0 && (g.RestoreLocation != "" || g.RestoreFrom != completed):
				t.Errorf("generation %s after checkpoint %d completed does not restore it", rec.Raw, completed)
			}
			i++
			switch {
			case g.RestoreRequest != "":
				requests++
			case completed == 0:
				again++
			default:
				own++
			}
		}
	}
	t.Logf("generations: 1 honoured the request, %d restored the savepoint again, %d the job's own checkpoint", again, own)
	if requests != 1 || own == 0 {
		t.Fatalf("%d generations honoured the request, %d restored the job's own checkpoint; records: %v", requests, own, w.Records(""))
	}
}

// copyToBucket copies every file under dir into bucket under prefix and
// returns how many.
func copyToBucket(ctx context.Context, t *testing.T, bucket *blob.Bucket, dir, prefix string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		n++
		return bucket.WriteAll(ctx, prefix+filepath.ToSlash(rel), b, nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestRestoreFromStartsStoppedJob: a job stopped with a savepoint is
// started again by `run --restore-from` with the URL that `processor stop`
// printed, on the job's own storage, with the replicas killed and started
// with the flag one at a time, as a Helm upgrade that sets restoreFrom
// replaces the pods: the first one waits, ready, while the job is still
// stopped; a coordinator with the value resumes the job (a resumed record)
// and the generation honours the request; the savepoint's transactions are the job's own and
// recovered as after any restore. The independent read_committed verifier
// sees every key's counts exactly 1..N over the whole run.
func TestRestoreFromStartsStoppedJob(t *testing.T) {
	r := startSavepointRun(t, "restorestopped", e2etest.Job{})
	ctx := t.Context()
	verifier, in, cl := r.verifier, r.in, r.cl
	if err := verifier.WaitSeenWhile(5000, 2*time.Minute, cl.Exited); err != nil {
		t.Fatal(err)
	}
	url, stderr, err := r.cli(t, "stop", "--savepoint", "--target", "final", "--timeout", "2m")
	if err != nil {
		t.Fatalf("processor stop --savepoint: %v\n%s", err, stderr)
	}
	t.Logf("stopped with savepoint %s (%d output records committed)", url, verifier.Seen())
	in.Good(ctx, 5000)
	// As a rolling update that sets restoreFrom: one replica at a time.
	// The first one replaced waits, ready, while the job is stopped (the
	// other replica may hold the coordinator role), and nothing is
	// committed; the job starts once a replica with the value coordinates.
	seen := verifier.Seen()
	cl.Kill(r.r1)
	p1 := cl.Restart(r.r1, "--restore-from="+url)
	body := waitReadyz(t, p1)
	if !strings.Contains(body, "waiting: the job is stopped or failed; this replica's --restore-from "+url) {
		if n := len(r.commits.Records("resumed")); n == 0 {
			t.Fatalf("%s, the job stopped: /readyz %q, want it waiting for the coordinator role", r.r1, body)
		}
		t.Logf("%s took the coordinator role at once: /readyz %q", r.r1, body)
	} else if verifier.Seen() != seen {
		t.Fatalf("%d output records committed while the job was stopped", verifier.Seen()-seen)
	}
	cl.Kill(r.r0)
	p0 := cl.Restart(r.r0, "--restore-from="+url)
	waitReadyz(t, p0)
	for _, p := range []*e2etest.Proc{p0, p1} {
		deadline := time.Now().Add(2 * time.Minute)
		for {
			code, body, err := p.Get("/readyz")
			if err == nil && code == 200 && strings.TrimSpace(body) == "ready" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s: /readyz %d %q %v, want ready", p.ID, code, body, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	var resumed, honoured bool
	for _, rec := range r.commits.Records("") {
		switch {
		case rec.Type == "resumed":
			resumed = true
		case rec.Type == "generation" && strings.Contains(rec.Raw, `"restore_request":"`+url+`"`):
			honoured = resumed
		}
	}
	if !honoured {
		t.Fatalf("no generation honoured --restore-from %s after a resumed record; records: %v", url, r.commits.Records(""))
	}
	if err := in.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	perKey, sum := in.Counts()
	if err := verifier.WaitSeenWhile(sum, 2*time.Minute, cl.Exited); err != nil {
		t.Error(err)
		verifier.Check(perKey, sum, 0)
		t.FailNow()
	}
	verifier.Check(perKey, sum, time.Minute)
	r.finish(t)
}
