package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// A rolling update (issue 31, section 3), as the chart's StatefulSet does
// it: three replicas run v1 of a count job under steady input; one at a
// time, from the highest ordinal, each is stopped (SIGTERM) and started
// with v2, a compatible change (a map that adds a field to every output),
// and the next goes once it is ready. Right after v2 gained the majority,
// the coordinator (a replica of v2) is killed with SIGKILL and restarted
// with its file, v2. Then:
//
//   - every key's counts are 1..N exactly once across both versions (an
//     independent read_committed verifier);
//   - every key's output switches from v1's form to v2's once, and ends in
//     v2's: v2's semantics after the switch, never back;
//   - no generation holds both files: every generation record on the
//     commit topic names one fingerprint, every replica run that took tasks
//     in a generation (its log) runs that fingerprint, and the generations
//     run v1, then v2;
//   - the replica started first with v2 answers /readyz with 200 and
//     "waiting: this replica runs job <v2>, the generation runs <v1>".
//
// It prints rolling_update_to_new_job_output_seconds: from the start of
// the first v2 replica to the first committed output of v2.

const (
	rollingPartitions = 4
	rollingKeys       = 100
	rollingRate       = 400 // input records per second
)

func TestRollingUpdate(t *testing.T) {
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
	job := kafkatest.Name(t, "roll")
	input, output := job+"-clicks", job+"-counts"
	c.CreateTopic(t, input, rollingPartitions, nil)
	c.CreateTopic(t, output, rollingPartitions, nil)
	dir := t.TempDir()
	v1File, v2File, v3File := filepath.Join(dir, "v1.yaml"), filepath.Join(dir, "v2.yaml"), filepath.Join(dir, "v3.yaml")
	v1 := e2etest.Job{Name: job, Input: input, Output: output, Brokers: c.Brokers}
	v2 := v1
	v2.Steps = []string{"aggregate: {op: count}", `map: {value: {key: value.key, count: value.count, job: '"v2"'}}`}
	if err := v1.Write(v1File); err != nil {
		t.Fatal(err)
	}
	if err := v2.Write(v2File); err != nil {
		t.Fatal(err)
	}
	// v3 is incompatible: the named form of the count keeps its state
	// under another operator (aggregate, not count), which would drop the
	// counts (docs/operations.md, "Upgrading a job").
	v3 := v1
	v3.Steps = []string{"aggregate: {count: true}"}
	if err := v3.Write(v3File); err != nil {
		t.Fatal(err)
	}

	commits := e2etest.WatchCommits(t, c.Brokers, job)
	verifier := e2etest.StartVerifier(t, c.Brokers, output)
	forms := watchForms(t, c.Brokers, output)
	reps := e2etest.NewReplicas(t, bin, v1File, dir, e2etest.ReplicaOptions{HTTP: true})
	var runs []*e2etest.Proc // every run of every replica, for their logs
	ids := []string{"weir-0", "weir-1", "weir-2"}
	for _, id := range ids {
		runs = append(runs, reps.Restart(id))
	}
	in := e2etest.NewInput(t, c.Brokers, input, rollingKeys)
	stopFlow := in.Flow(ctx, rollingRate)
	defer stopFlow()
	for _, p := range runs {
		waitReadyz(t, p)
	}
	if err := verifier.WaitSeen(2*rollingRate, 2*time.Minute); err != nil {
		t.Fatal(err)
	}

	// The StatefulSet's rolling update: weir-2, weir-1, weir-0.
	var firstV2 time.Time
	var waitingText string
	update := func(id string) {
		t.Helper()
		reps.Stop(id)
		if firstV2.IsZero() {
			firstV2 = time.Now()
		}
		p := reps.Restart(id, "-c", v2File)
		runs = append(runs, p)
		body := waitReadyz(t, p)
		if id == "weir-2" {
			waitingText = body
		}
		t.Logf("%s runs v2, ready: %q", id, strings.TrimSpace(body))
	}
	update("weir-2")
	update("weir-1")
	// v2 has the majority now: the role went to a replica of v2. Kill it.
	coord, err := reps.Coordinator(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if coord == "weir-0" {
		t.Fatalf("weir-0, the last replica of v1, holds the coordinator role while v2 has two of three members")
	}
	before := len(commits.Records("generation"))
	reps.Kill(coord)
	t.Logf("killed %s, the coordinator, with SIGKILL", coord)
	// The two others, one of each file, are tied once the group dropped
	// it (a session timeout): the newest generation's file, v2, must go
	// on, not v1. Only then is it restarted.
	waitGenerationWithout(t, commits, before, coord, 2*time.Minute)
	p := reps.Restart(coord, "-c", v2File)
	runs = append(runs, p)
	waitReadyz(t, p)
	update("weir-0")

	// Input goes on until every key has output of v2.
	forms.waitAllV2(t, rollingKeys, 2*time.Minute)

	// Then v3, incompatible, on weir-2: it refuses, not ready, and the
	// replicas of v2 keep committing output; no generation runs v3
	// (checkGenerations) and weir-2's run of v3 never joins.
	reps.Stop("weir-2")
	gensBefore := len(commits.Records("generation"))
	p3 := reps.Restart("weir-2", "-c", v3File)
	body := waitNotReady(t, p3, "cannot restore")
	if !strings.Contains(body, "count (job.pipeline[1].aggregate): the checkpoint has state of this aggregate") {
		t.Errorf("v3's /readyz does not name the difference:\n%s", body)
	}
	seen := verifier.Seen()
	time.Sleep(5 * time.Second)
	if verifier.Seen() <= seen {
		t.Errorf("no output committed while v3 refused: the replicas of v2 stopped")
	}
	// The stop of weir-2's v2 run starts one generation (of the two
	// others, after a session timeout at most); the refusing v3 run,
	// which never joins, none.
	if n := len(commits.Records("generation")) - gensBefore; n > 1 {
		t.Errorf("%d generations since v3 started, want at most 1 (weir-2 leaving)", n)
	}
	if strings.Contains(p3.Log(), "joining membership group") {
		t.Error("weir-2 joined the group with v3")
	}
	t.Logf("weir-2 runs v3: %s", strings.TrimSpace(body))
	stopFlow()
	if err := in.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	perKey, total := in.Counts()
	verifier.Check(perKey, total, 3*time.Minute)
	if err := reps.Exited(); err != nil {
		t.Error(err)
	}

	fpV1, fpV2 := fingerprintOf(t, runs[0]), fingerprintOf(t, runs[3])
	if fpV1 == fpV2 {
		t.Fatalf("v1 and v2 have the same fingerprint %s", fpV1)
	}
	if want := fmt.Sprintf("waiting: this replica runs job %s, the generation runs %s", fpV2, fpV1); strings.TrimSpace(waitingText) != want {
		t.Errorf("weir-2 with v2 among two replicas of v1 answered /readyz %q, want %q", waitingText, want)
	}
	checkGenerations(t, commits, runs, fpV1, fpV2)
	forms.check(t, perKey)
	if at := forms.firstV2(); at.IsZero() {
		t.Error("no output of v2 was committed")
	} else {
		e2etest.Result(t, "rolling_update_to_new_job_output_seconds", at.Sub(firstV2))
	}
	reps.StopAll()
	e2etest.CheckNoOpenTransactions(ctx, t, c.Brokers, job)
}

// waitGenerationWithout waits up to timeout for a generation record after
// the first n that places no task on replica id.
func waitGenerationWithout(t *testing.T, commits *e2etest.CommitWatcher, n int, id string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, r := range commits.Records("generation")[n:] {
			var g struct {
				Assignment map[string][]string `json:"assignment"`
			}
			if json.Unmarshal([]byte(r.Raw), &g) == nil && len(g.Assignment[id]) == 0 {
				t.Logf("generation %d runs without %s: %s", r.Gen, id, r.Raw)
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no generation without %s within %v", id, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitReadyz waits up to two minutes for run p to answer /readyz with 200
// (as the StatefulSet's readiness probe) and returns the body.
func waitReadyz(t *testing.T, p *e2etest.Proc) string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, body, err := p.Get("/readyz")
		if err == nil && code == http.StatusOK {
			return body
		}
		select {
		case <-p.Done():
			t.Fatalf("replica %s exited before it was ready: %v", p.ID, p.Err())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not ready within 2 minutes: %d %q %v", p.ID, code, body, err)
		}
	}
}

// runLog returns what run p logged: its replica's log file from p's start
// to the start of the replica's next run, which appends to the same file.
func runLog(p *e2etest.Proc) string {
	log := p.Log()
	const start = `msg="replica starting"`
	if i := strings.Index(log, start); i >= 0 {
		if j := strings.Index(log[i+len(start):], start); j >= 0 {
			return log[:i+len(start)+j]
		}
	}
	return log
}

var fingerprintRE = regexp.MustCompile(`msg="replica starting".* fingerprint=(\w+)`)

// fingerprintOf returns the fingerprint run p logged at its start.
func fingerprintOf(t *testing.T, p *e2etest.Proc) string {
	t.Helper()
	m := fingerprintRE.FindStringSubmatch(runLog(p))
	if m == nil {
		t.Fatalf("replica %s logged no fingerprint at its start", p.ID)
	}
	return m[1]
}

var generationLogRE = regexp.MustCompile(`msg=generation .*\bgeneration=(\d+) .*\btasks=(\d+)`)

// checkGenerations checks, from the commit topic (decoded by hand) and the
// replicas' logs, that no generation held both files and that the job
// switched from v1 to v2 once.
func checkGenerations(t *testing.T, commits *e2etest.CommitWatcher, runs []*e2etest.Proc, fpV1, fpV2 string) {
	t.Helper()
	files := map[uint64]string{}
	var seq []string
	for _, r := range commits.Records("generation") {
		var g struct {
			Gen         uint64              `json:"gen"`
			Assignment  map[string][]string `json:"assignment"`
			Fingerprint string              `json:"fingerprint"`
		}
		if err := json.Unmarshal([]byte(r.Raw), &g); err != nil {
			t.Fatalf("generation record %s: %v", r.Raw, err)
		}
		if g.Fingerprint != fpV1 && g.Fingerprint != fpV2 {
			t.Errorf("generation %d names fingerprint %q, neither v1's %s nor v2's %s", g.Gen, g.Fingerprint, fpV1, fpV2)
		}
		files[g.Gen] = g.Fingerprint
		if len(seq) == 0 || seq[len(seq)-1] != g.Fingerprint {
			seq = append(seq, g.Fingerprint)
		}
	}
	if !slices.Equal(seq, []string{fpV1, fpV2}) {
		t.Errorf("the generations ran %v; want v1 (%s), then v2 (%s), once", seq, fpV1, fpV2)
	}
	took := 0
	for _, p := range runs {
		fp := fingerprintOf(t, p)
		for _, m := range generationLogRE.FindAllStringSubmatch(runLog(p), -1) {
			gen, _ := strconv.ParseUint(m[1], 10, 64)
			if m[2] == "0" {
				continue
			}
			took++
			if want, ok := files[gen]; !ok {
				t.Errorf("replica %s ran tasks of generation %d, which is not on the commit topic", p.ID, gen)
			} else if want != fp {
				t.Errorf("replica %s runs %s but ran tasks of generation %d, which runs %s: a generation held both files", p.ID, fp, gen, want)
			}
		}
	}
	if took == 0 {
		t.Error("no replica logged the tasks it took in a generation")
	}
}

// outputForms follows the output topic with its own read_committed
// consumer and records, per key, the form of each count (v1: no "job"
// field; v2: "job":"v2"), in order.
type outputForms struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	forms map[string][]string // key → "v1"/"v2" per output, in order
	first time.Time           // arrival of the first v2 output
}

func watchForms(t *testing.T, brokers []string, topic string) *outputForms {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	o := &outputForms{cancel: cancel, done: make(chan struct{}), forms: map[string][]string{}}
	go func() {
		defer close(o.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			o.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				var v struct {
					Job string `json:"job"`
				}
				form := "undecodable"
				if json.Unmarshal(r.Value, &v) == nil {
					form = map[string]string{"": "v1", "v2": "v2"}[v.Job]
				}
				if form == "v2" && o.first.IsZero() {
					o.first = now
				}
				o.forms[string(r.Key)] = append(o.forms[string(r.Key)], form)
			})
			o.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-o.done })
	return o
}

func (o *outputForms) firstV2() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.first
}

// waitAllV2 waits up to timeout until keys keys have output of v2.
func (o *outputForms) waitAllV2(t *testing.T, keys int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		o.mu.Lock()
		n := 0
		for _, fs := range o.forms {
			if slices.Contains(fs, "v2") {
				n++
			}
		}
		o.mu.Unlock()
		if n >= keys {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d keys have output of v2 after %v", n, keys, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// check requires every key of perKey to have its output switch from v1 to
// v2 at most once and end in v2. The verifier has read all the output.
func (o *outputForms) check(t *testing.T, perKey map[string]int) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	var bad []string
	for k := range perKey {
		fs := o.forms[k]
		i := slices.Index(fs, "v2")
		switch {
		case len(fs) == 0 || fs[len(fs)-1] != "v2":
			bad = append(bad, fmt.Sprintf("key %q: its last output is not of v2 (%d outputs)", k, len(fs)))
		case slices.ContainsFunc(fs[i:], func(f string) bool { return f != "v2" }):
			bad = append(bad, fmt.Sprintf("key %q: output of v1 after output of v2: %v", k, fs))
		case slices.ContainsFunc(fs[:i], func(f string) bool { return f != "v1" }):
			bad = append(bad, fmt.Sprintf("key %q: undecodable output: %v", k, fs))
		}
	}
	slices.Sort(bad)
	if len(bad) > 10 {
		bad = append(bad[:10], fmt.Sprintf("… and %d more", len(bad)-10))
	}
	for _, b := range bad {
		t.Error(b)
	}
}
