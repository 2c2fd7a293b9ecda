package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// TestSavepointTakenAndRestored is issue 33's first step, through the binary
// on the real broker: `processor savepoint` on a running job (two replicas,
// the count job, no periodic checkpoint in the test's window, so that only
// savepoints commit output) prints the savepoint's _metadata URL; the
// savepoint is self-contained (every task manifest and every file it lists
// is under savepoints/<name>/); a second savepoint of the same name is
// refused before anything is written. Then both replicas are killed with
// SIGKILL and started again: the new generation restores from the savepoint
// (its record names the savepoint's _metadata), and further savepoints
// commit the rest. The independent read_committed verifier sees every key's
// counts exactly 1..N over the whole run.
func TestSavepointTakenAndRestored(t *testing.T) {
	// The first periodic checkpoint is due 3m50s to 4m after each
	// generation starts: within the test only savepoints complete.
	r := startSavepointRun(t, "savepoint", e2etest.Job{Interval: 4 * time.Minute, TransactionTimeout: 10 * time.Minute},
		"--checkpoint.min_pause=3m50s")
	job, storage, commits, verifier, in, cl := r.job, r.storage, r.commits, r.verifier, r.in, r.cl
	ctx := t.Context()
	savepoint := func(name string) (string, string, error) {
		t.Helper()
		return r.cli(t, "savepoint", "--target", name, "--timeout", "2m")
	}
	url, stderr, err := savepoint("sp-1")
	if err != nil {
		t.Fatalf("processor savepoint: %v\n%s", err, stderr)
	}
	root := filepath.Join(r.dir, "checkpoints", job)
	if want := storage + "/" + job + "/savepoints/sp-1/_metadata"; !strings.HasPrefix(url, want) {
		t.Fatalf("processor savepoint printed %q, want %s", url, want)
	}
	t.Logf("savepoint sp-1 at %s (%d output records committed)", url, verifier.Seen())
	checkSelfContained(t, root, "sp-1")

	// The name is taken: refused, nothing written.
	before := countFiles(t, filepath.Join(root, "savepoints", "sp-1"))
	if _, stderr, err := savepoint("sp-1"); err == nil || !strings.Contains(stderr, "exists already") {
		t.Fatalf("a second savepoint sp-1: %v\n%s", err, stderr)
	}
	if after := countFiles(t, filepath.Join(root, "savepoints", "sp-1")); after != before {
		t.Fatalf("the refused savepoint wrote: %d files under savepoints/sp-1, then %d", before, after)
	}

	// More input, then both replicas die: the restart restores from the
	// savepoint, the only completed checkpoint.
	in.Good(ctx, 20000)
	time.Sleep(2 * time.Second)
	cl.Kill(r.r0)
	cl.Kill(r.r1)
	t.Logf("kill -9 of both replicas (%d output records committed)", verifier.Seen())
	waitReadyz(t, cl.Restart(r.r0))
	waitReadyz(t, cl.Restart(r.r1))
	if !r.restoredFrom("savepoints/sp-1/_metadata") {
		t.Fatalf("no generation restored from savepoint sp-1; generations: %v", commits.Records("generation"))
	}

	// Savepoints commit the rest: everything read before each one's barrier.
	if err := in.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	perKey, sum := in.Counts()
	for i := 2; verifier.Seen() < sum; i++ {
		if i > 10 {
			t.Fatalf("after %d savepoints %d of %d output records are committed", i-1, verifier.Seen(), sum)
		}
		name := "sp-" + string(rune('0'+i))
		if _, stderr, err := savepoint(name); err != nil {
			t.Fatalf("processor savepoint %s: %v\n%s", name, err, stderr)
		}
		_ = verifier.WaitSeenWhile(sum, 3*time.Second, cl.Exited)
	}
	verifier.Check(perKey, sum, time.Minute)

	// savepoints list shows them all, the newest as the restore point;
	// delete refuses the restore point and removes another whole.
	run := func(args ...string) (string, string, error) {
		return r.cli(t, "savepoints "+args[0], args[1:]...)
	}
	out, stderr, err := run("list")
	if err != nil {
		t.Fatalf("savepoints list: %v\n%s", err, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	newest := strings.Fields(lines[len(lines)-1])
	if len(lines) < 3 || !strings.HasPrefix(lines[1], "sp-1 ") || newest[len(newest)-1] != "yes" {
		t.Fatalf("savepoints list:\n%s", out)
	}
	t.Logf("savepoints list:\n%s", out)
	if _, stderr, err := run("delete", newest[0]); err == nil || !strings.Contains(stderr, "restore point") {
		t.Fatalf("savepoints delete of the restore point %s: %v\n%s", newest[0], err, stderr)
	}
	if out, stderr, err := run("delete", "sp-1"); err != nil || !strings.Contains(out, "deleted") {
		t.Fatalf("savepoints delete sp-1: %v\n%s%s", err, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(root, "savepoints", "sp-1")); err == nil {
		if n := countFiles(t, filepath.Join(root, "savepoints", "sp-1")); n > 0 {
			t.Fatalf("%d files left under savepoints/sp-1 after its delete", n)
		}
	}
	if out, _, _ := run("list"); strings.Contains(out, "sp-1 ") {
		t.Fatalf("savepoints list after deleting sp-1:\n%s", out)
	}
	r.finish(t)
}

// checkSelfContained checks that savepoint name under the job's root refers
// to nothing outside its folder: its _metadata's task manifests and every
// file they list. Read with encoding/json from the documented layout.
func checkSelfContained(t *testing.T, root, name string) {
	t.Helper()
	prefix := "savepoints/" + name + "/"
	b, err := os.ReadFile(filepath.Join(root, "savepoints", name, "_metadata"))
	if err != nil {
		t.Fatal(err)
	}
	var md struct {
		Kind   string `json:"kind"`
		Target string `json:"target"`
		Tasks  []struct {
			Handle string `json:"handle"`
		} `json:"tasks"`
	}
	if err := json.Unmarshal(b, &md); err != nil {
		t.Fatal(err)
	}
	if md.Kind != "savepoint" || md.Target != name || len(md.Tasks) == 0 {
		t.Fatalf("_metadata of %s: kind %q target %q, %d tasks", name, md.Kind, md.Target, len(md.Tasks))
	}
	files := 0
	for _, ts := range md.Tasks {
		if !strings.HasPrefix(ts.Handle, prefix) {
			t.Errorf("task manifest %s is outside %s", ts.Handle, prefix)
			continue
		}
		mb, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(ts.Handle)))
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Files []struct {
				Key   string `json:"key"`
				Parts []struct {
					Key string `json:"key"`
				} `json:"parts"`
			} `json:"files"`
		}
		if err := json.Unmarshal(mb, &m); err != nil {
			t.Fatalf("manifest %s: %v", ts.Handle, err)
		}
		for _, f := range m.Files {
			if len(f.Parts) > 0 {
				t.Errorf("manifest %s: file in parts (shared pieces of the job's WAL), not copied whole", ts.Handle)
			}
			if f.Key == "" {
				continue // inline in the manifest
			}
			// A savepoint's file keys are relative to its folder (so that
			// the folder can be moved), and the file is there.
			files++
			if _, err := os.Stat(filepath.Join(root, "savepoints", name, filepath.FromSlash(f.Key))); err != nil {
				t.Errorf("manifest %s lists %s, not in the savepoint's folder: %v", ts.Handle, f.Key, err)
			}
		}
	}
	t.Logf("savepoint %s: %d task manifests, %d files, all under %s", name, len(md.Tasks), files, prefix)
}

// countFiles counts the regular files under dir.
func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStopAndResume is issue 33's stop, through the binary on the real
// broker: `processor stop --savepoint` on a running job (two replicas)
// prints the final savepoint, after which every replica is stopped and not
// ready, a replica started later too, and no output is committed however
// much input arrives; `processor resume` starts the job from the savepoint.
// Then `processor stop` without a savepoint and `resume` again. The
// independent read_committed verifier sees every key's counts exactly
// 1..N over the whole run.
func TestStopAndResume(t *testing.T) {
	r := startSavepointRun(t, "stop", e2etest.Job{})
	commits, verifier, in, cl := r.commits, r.verifier, r.in, r.cl
	r0, r1 := r.r0, r.r1
	ctx := t.Context()
	if err := verifier.WaitSeenWhile(5000, 2*time.Minute, cl.Exited); err != nil {
		t.Fatal(err)
	}
	run := func(command string, args ...string) (string, string, error) {
		t.Helper()
		return r.cli(t, command, args...)
	}
	stopped := func(want string, ps ...*e2etest.Proc) {
		t.Helper()
		for _, p := range ps {
			deadline := time.Now().Add(time.Minute)
			for {
				code, body, err := p.Get("/readyz")
				if err == nil && code == 503 && strings.Contains(body, want) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("replica %s: /readyz %d %q, want 503 saying %q", p.ID, code, body, want)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	}
	// While stopped, no output is committed, whatever arrives.
	quiet := func(what string) {
		t.Helper()
		time.Sleep(2 * time.Second) // what was committed before the stop arrives
		before := verifier.Seen()
		in.Good(ctx, 5000)
		time.Sleep(5 * time.Second)
		if after := verifier.Seen(); after != before {
			t.Fatalf("%s: %d output records committed while the job was stopped", what, after-before)
		}
	}

	url, stderr, err := run("stop", "--savepoint", "--target", "final")
	if err != nil || !strings.HasSuffix(url, "/savepoints/final/_metadata") {
		t.Fatalf("processor stop --savepoint: %v, printed %q\n%s", err, url, stderr)
	}
	t.Logf("stopped with savepoint %s (%d output records committed)", url, verifier.Seen())
	stopped("job stopped with savepoint", cl.Proc(r0), cl.Proc(r1))
	r2 := cl.Start() // a replica started later stays stopped
	stopped("job stopped with savepoint", cl.Proc(r2))
	quiet("after stop --savepoint")
	if _, stderr, err := run("savepoint", "--target", "while-stopped"); err == nil || !strings.Contains(stderr+err.Error(), "stopped") {
		t.Fatalf("a savepoint of a stopped job: %v\n%s", err, stderr)
	}

	out, stderr, err := run("resume")
	if err != nil || !strings.Contains(out, "the stop of generation") {
		t.Fatalf("processor resume: %v, printed %q\n%s", err, out, stderr)
	}
	for _, id := range []string{r0, r1, r2} {
		waitReadyz(t, cl.Proc(id))
	}
	if !r.restoredFrom("savepoints/final/_metadata") {
		t.Fatalf("no generation restored from the final savepoint; generations: %v", commits.Records("generation"))
	}
	_, sum := in.Counts()
	if err := verifier.WaitSeenWhile(sum, 2*time.Minute, cl.Exited); err != nil {
		t.Fatal(err)
	}
	t.Logf("resumed: %d output records committed", verifier.Seen())

	// Stop without a savepoint, then resume from the newest checkpoint.
	out, stderr, err = run("stop")
	if err != nil || !strings.Contains(out, "stopped") {
		t.Fatalf("processor stop: %v, printed %q\n%s", err, out, stderr)
	}
	stopped("job stopped (generation", cl.Proc(r0), cl.Proc(r1), cl.Proc(r2))
	quiet("after stop")
	if _, stderr, err := run("stop"); err == nil || !strings.Contains(stderr+err.Error(), "stopped already") {
		t.Fatalf("a second stop: %v\n%s", err, stderr)
	}
	if _, _, err := run("resume"); err != nil {
		t.Fatalf("processor resume: %v", err)
	}
	for _, id := range []string{r0, r1, r2} {
		waitReadyz(t, cl.Proc(id))
	}
	in.Good(ctx, 5000)
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

// savepointRun is the count job of the savepoint and stop tests on two
// replicas (the binary, the real broker), 20 000 records of input already
// written, both replicas ready.
type savepointRun struct {
	c                 *kafkatest.Cluster
	job, dir, storage string
	bin               string
	cfgFile           string
	commits           *e2etest.CommitWatcher
	verifier          *e2etest.Verifier
	in                *e2etest.Input
	cl                *e2etest.Replicas
	r0, r1            string
}

// startSavepointRun starts it: j's name, topics and brokers are set here,
// flags go to every replica's run.
func startSavepointRun(t *testing.T, stem string, j e2etest.Job, flags ...string) *savepointRun {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	r := &savepointRun{c: kafkatest.NewReal(t), job: kafkatest.Name(t, stem), dir: t.TempDir()}
	bin, err := e2etest.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	j.Name, j.Input, j.Output, j.Brokers = r.job, r.job+"-clicks", r.job+"-counts", r.c.Brokers
	r.c.CreateTopic(t, j.Input, 4, nil)
	r.c.CreateTopic(t, j.Output, 4, nil)
	r.bin = bin
	r.cfgFile = filepath.Join(r.dir, "job.yaml")
	if err := j.Write(r.cfgFile); err != nil {
		t.Fatal(err)
	}
	r.storage = "file://" + filepath.Join(r.dir, "checkpoints")
	r.commits = e2etest.WatchCommits(t, r.c.Brokers, r.job)
	r.verifier = e2etest.StartVerifier(t, r.c.Brokers, j.Output)
	r.in = e2etest.NewInput(t, r.c.Brokers, j.Input, keys)
	r.in.Good(t.Context(), 20000)
	r.cl = e2etest.NewReplicas(t, bin, r.cfgFile, r.dir, e2etest.ReplicaOptions{HTTP: true, Storage: r.storage, Flags: flags})
	r.r0, r.r1 = r.cl.Start(), r.cl.Start()
	waitReadyz(t, r.cl.Proc(r.r0))
	waitReadyz(t, r.cl.Proc(r.r1))
	return r
}

// cli runs `processor <command> -c FILE --checkpoint.storage=S args...`
// (command may name a subcommand: "savepoints list") and returns its
// trimmed stdout and its stderr.
func (r *savepointRun) cli(t *testing.T, command string, args ...string) (string, string, error) {
	t.Helper()
	words := strings.Fields(command)
	cmd := r.cl.Command(t.Context(), words[0])
	cmd.Args = append(append(append([]string{cmd.Args[0]}, words...), "-c", r.cfgFile, "--checkpoint.storage="+r.storage), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return strings.TrimSpace(stdout.String()), stderr.String(), err
}

// restoredFrom reports whether a generation record of the job restored from
// the _metadata at key (a savepoint's).
func (r *savepointRun) restoredFrom(key string) bool {
	for _, g := range r.commits.Records("generation") {
		if strings.Contains(g.Raw, `"restore_metadata":"`+key+`"`) {
			return true
		}
	}
	return false
}

// finish stops the replicas and checks the commit topic's IDs and that no
// transaction is left open.
func (r *savepointRun) finish(t *testing.T) {
	t.Helper()
	r.cl.StopAll()
	e2etest.CheckCheckpointIDs(t, r.commits)
	e2etest.CheckNoOpenTransactions(t.Context(), t, r.c.Brokers, r.job)
}
