package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weir-stream/weir/api"
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/jobview"
)

// apiReplica is one replica of a test, run by serve until stop.
type apiReplica struct {
	cfg  *config.Config
	logs *lockedBuffer
	stop context.CancelFunc
	done chan error
}

func startAPIReplica(t *testing.T, cfg *config.Config) *apiReplica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &apiReplica{cfg: cfg, logs: &lockedBuffer{}, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- serve(ctx, cfg, nil, r.logs, nil) }()
	t.Cleanup(func() {
		r.halt(t)
		if t.Failed() {
			t.Logf("replica %s log:\n%s", cfg.Process.ReplicaID, r.logs.String())
		}
	})
	return r
}

// halt stops the replica and waits for it.
func (r *apiReplica) halt(t *testing.T) {
	if r.stop == nil {
		return
	}
	r.stop()
	r.stop = nil
	if err := <-r.done; err != nil {
		t.Errorf("replica %s: %v", r.cfg.Process.ReplicaID, err)
	}
}

func (r *apiReplica) url(path string) string { return "http://" + r.cfg.HTTP.Address + path }

// getJSON GETs url and decodes its JSON answer into v; it returns the
// status, or -1 while nothing listens there yet.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Logf("GET %s: %v", url, err)
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("GET %s: Content-Type %q, body %s", url, ct, b)
	}
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v in %s", url, err, b)
		}
	}
	return resp.StatusCode
}

// post POSTs body to url with the bearer token (none if "").
func post(t *testing.T, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventually calls cond every 200ms until it returns "" (done) or the
// timeout passes; then the test fails with cond's last answer.
func eventually(t *testing.T, timeout time.Duration, cond func() string) {
	t.Helper()
	var last string
	for end := time.Now().Add(timeout); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if last = cond(); last == "" {
			return
		}
	}
	t.Fatalf("not within %v: %s", timeout, last)
}

// TestAPIAnswersForTheWholeJob runs two replicas of the count job, on
// kfake and on the real broker, and reads the REST API of each: both show
// the whole job (the other replica's tasks and figures too), its
// checkpoints, and refuse the write actions without the token (403); the
// first, with admin actions on, takes a savepoint with it. When the second
// replica goes, the first one's API shows its tasks moved. The token is
// in no log line.
func TestAPIAnswersForTheWholeJob(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		job := kafkatest.Name(t, "api")
		cfgA, _ := countJobOn(t, c, job, job+"-in", job+"-out")
		cfgA.HTTP.ReportInterval = 200 * time.Millisecond
		cfgA.Kafka.SessionTimeout = 6 * time.Second
		cfgB := *cfgA
		cfgA.Process.ReplicaID, cfgB.Process.ReplicaID = "a", "b"
		cfgA.HTTP.Address, cfgB.HTTP.Address = freeAddr(t), freeAddr(t)
		cfgB.State.Dir = t.TempDir()
		const token = "s3cr3t-t0ken-for-the-api-test"
		tokenFile := filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfgA.HTTP.Admin = config.HTTPAdmin{Enabled: true, TokenFile: tokenFile}

		a := startAPIReplica(t, cfgA)
		b := startAPIReplica(t, &cfgB)

		// Both replicas show the same job: running, two replicas with a
		// task each, one coordinator, the plan with placements.
		var j api.JobResponse
		for _, r := range []*apiReplica{a, b} {
			eventually(t, 60*time.Second, func() string {
				j = api.JobResponse{}
				if code := getJSON(t, r.url("/api/v1/job"), &j); code != http.StatusOK {
					return fmt.Sprintf("status %d", code)
				}
				placed := map[string]int{}
				for _, task := range j.Tasks {
					placed[task.Replica]++
				}
				if j.State != jobview.StateRunning || placed["a"] == 0 || placed["b"] == 0 || j.Coordinator == "" || j.LastCheckpoint == nil {
					return fmt.Sprintf("job %+v", j.Job)
				}
				return ""
			})
			if j.Name != job || j.Generation == 0 || len(j.Replicas) != 2 || j.Plan == nil || len(j.Plan.Stages) == 0 || len(j.Plan.Sinks) != 1 {
				t.Fatalf("%s: job %+v, plan %+v", r.cfg.Process.ReplicaID, j.Job, j.Plan)
			}
			for _, st := range j.Plan.Stages {
				if len(st.Tasks) != st.Parallelism {
					t.Fatalf("stage %s: %d tasks placed, parallelism %d", st.Name, len(st.Tasks), st.Parallelism)
				}
			}
		}

		// Every task's figures, on both replicas: each reads the other's
		// from its reports.
		for _, r := range []*apiReplica{a, b} {
			eventually(t, 30*time.Second, func() string {
				var m api.MetricsResponse
				if code := getJSON(t, r.url("/api/v1/job/metrics"), &m); code != http.StatusOK {
					return fmt.Sprintf("status %d", code)
				}
				n := 0
				for _, st := range m.Stages {
					for _, tm := range st.Tasks {
						if tm.ReportedMS == 0 || tm.Replica == "" {
							return fmt.Sprintf("task %s without figures: %+v", tm.Task, m)
						}
						// The task's time accounting (http.busy_time, on by
						// default) reaches the other replica too.
						if tm.BusyMSPerSecond+tm.BackpressuredMSPerSecond+tm.IdleMSPerSecond == 0 {
							return fmt.Sprintf("task %s without busy, backpressured or idle time: %+v", tm.Task, tm)
						}
						n++
					}
				}
				if n != len(j.Tasks) {
					return fmt.Sprintf("%d tasks in the metrics, the job has %d", n, len(j.Tasks))
				}
				return ""
			})
		}

		// The checkpoint history, its limit, one checkpoint.
		var cs api.CheckpointsResponse
		if code := getJSON(t, a.url("/api/v1/checkpoints?limit=2"), &cs); code != http.StatusOK || len(cs.Checkpoints) != 2 || cs.Checkpoints[0].ID <= cs.Checkpoints[1].ID {
			t.Fatalf("checkpoints?limit=2: %d %+v", code, cs)
		}
		if code := getJSON(t, a.url("/api/v1/checkpoints"), &cs); code != http.StatusOK || len(cs.Checkpoints) == 0 || len(cs.Checkpoints) > api.DefaultLimit {
			t.Fatalf("checkpoints: %d, %d of them", code, len(cs.Checkpoints))
		}
		last := j.LastCheckpoint
		var one jobview.Checkpoint
		if code := getJSON(t, a.url(fmt.Sprintf("/api/v1/checkpoints/%d", last.ID)), &one); code != http.StatusOK ||
			one.ID != last.ID || one.Status != jobview.CheckpointCompleted || one.Acks != len(j.Tasks) || len(one.Tasks) != len(j.Tasks) || one.DurationMS == nil || one.Metadata == "" {
			t.Fatalf("checkpoint %d: %d %+v", last.ID, code, one)
		}
		for _, bad := range []string{"/api/v1/checkpoints?limit=0", "/api/v1/checkpoints?limit=x", "/api/v1/checkpoints/x"} {
			if code := getJSON(t, a.url(bad), nil); code != http.StatusBadRequest {
				t.Errorf("GET %s: %d, want 400", bad, code)
			}
		}
		if code := getJSON(t, a.url("/api/v1/checkpoints/99999999"), nil); code != http.StatusNotFound {
			t.Errorf("an unknown checkpoint: %d, want 404", code)
		}
		if code := getJSON(t, a.url("/api/v1/nothing"), nil); code != http.StatusNotFound {
			t.Errorf("an unknown endpoint: %d, want 404", code)
		}

		// Write actions: off on b, token-guarded on a.
		for _, tc := range []struct {
			r     *apiReplica
			token string
		}{{b, token}, {a, ""}, {a, "wrong"}} {
			if code, body := post(t, tc.r.url("/api/v1/job/savepoint"), tc.token, `{"target":"no"}`); code != http.StatusForbidden {
				t.Fatalf("savepoint on %s with token %q: %d %s, want 403", tc.r.cfg.Process.ReplicaID, tc.token, code, body)
			}
		}
		code, body := post(t, a.url("/api/v1/job/savepoint"), token, `{"target":"api-sp"}`)
		if code != http.StatusOK || !strings.Contains(body, "savepoints/api-sp") {
			t.Fatalf("savepoint with the token: %d %s", code, body)
		}
		eventually(t, 10*time.Second, func() string {
			var cs api.CheckpointsResponse
			getJSON(t, a.url("/api/v1/checkpoints?limit=100"), &cs)
			if !slices.ContainsFunc(cs.Checkpoints, func(c jobview.Checkpoint) bool {
				return c.Kind == "savepoint" && c.Target == "api-sp" && c.Status == jobview.CheckpointCompleted
			}) {
				return "no completed savepoint api-sp in the history"
			}
			return ""
		})

		// b goes: its task moves to a, and a's API says so.
		b.halt(t)
		eventually(t, 60*time.Second, func() string {
			var j2 api.JobResponse
			getJSON(t, a.url("/api/v1/job"), &j2)
			for _, task := range j2.Tasks {
				if task.Replica != "a" {
					return fmt.Sprintf("task %s on %s", task.ID, task.Replica)
				}
			}
			if j2.Generation <= j.Generation || j2.State != jobview.StateRunning || len(j2.Tasks) != len(j.Tasks) {
				return fmt.Sprintf("job %+v", j2.Job)
			}
			return ""
		})

		a.halt(t)
		for _, r := range []*apiReplica{a, b} {
			if strings.Contains(r.logs.String(), token) {
				t.Fatalf("the token is in replica %s's log", r.cfg.Process.ReplicaID)
			}
			if r == a && !strings.Contains(r.logs.String(), "write action refused") {
				t.Fatalf("a's log does not say it refused a write action:\n%s", r.logs.String())
			}
		}
	})
}

// TestAPIShowsFailedCheckpoints runs the count job with a checkpoint
// timeout no checkpoint can meet: the API lists its checkpoints as failed,
// with the reason.
func TestAPIShowsFailedCheckpoints(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		job := kafkatest.Name(t, "apif")
		cfg, _ := countJobOn(t, c, job, job+"-in", job+"-out")
		cfg.HTTP.Address = freeAddr(t)
		cfg.Checkpoint.Timeout = time.Millisecond
		cfg.Checkpoint.TolerableFailures = 1000
		r := startAPIReplica(t, cfg)
		eventually(t, 60*time.Second, func() string {
			var cs api.CheckpointsResponse
			if code := getJSON(t, r.url("/api/v1/checkpoints"), &cs); code != http.StatusOK {
				return fmt.Sprintf("status %d", code)
			}
			for _, ck := range cs.Checkpoints {
				if ck.Status == jobview.CheckpointFailed && ck.AbortReason == "expired" && strings.Contains(ck.Failure, "not complete after 1ms") {
					return ""
				}
			}
			return fmt.Sprintf("no failed checkpoint with its reason: %+v", cs.Checkpoints)
		})
	})
}

// TestStatusThroughTheBinary runs the built processor on the count job
// and reads `processor status` (text and --json) beside it, on kfake and
// on the real broker: the same job, tasks and coordinator as the running
// replica's REST API shows.
func TestStatusThroughTheBinary(t *testing.T) {
	bin := buildProcessor(t)
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		job := kafkatest.Name(t, "st")
		_, file := countJobOn(t, c, job, job+"-in", job+"-out")
		addr := freeAddr(t)
		run := exec.Command(bin, "run", "-c", file, "--http.address", addr, "--http.report_interval", "200ms", "--process.replica_id", "solo")
		var runLog lockedBuffer
		run.Stdout, run.Stderr = &runLog, &runLog
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		runDone := make(chan error, 1)
		go func() { runDone <- run.Wait() }()
		defer func() {
			_ = run.Process.Signal(syscall.SIGTERM)
			if err := <-runDone; err != nil {
				t.Errorf("run: %v\n%s", err, runLog.String())
			}
			if t.Failed() {
				t.Logf("run's log:\n%s", runLog.String())
			}
		}()
		var j api.JobResponse
		eventually(t, 60*time.Second, func() string {
			j = api.JobResponse{}
			if code := getJSON(t, "http://"+addr+"/api/v1/job", &j); code != http.StatusOK {
				return fmt.Sprintf("status %d", code)
			}
			if j.State != jobview.StateRunning || j.Coordinator != "solo" || j.LastCheckpoint == nil {
				return fmt.Sprintf("job %+v", j.Job)
			}
			return ""
		})

		out, err := exec.Command(bin, "status", "-c", file).CombinedOutput()
		if err != nil {
			t.Fatalf("status: %v\n%s", err, out)
		}
		text := string(out)
		for _, want := range []string{"job " + job + ": running, generation ", "coordinator: solo", "TASK", "completed"} {
			if !strings.Contains(text, want) {
				t.Fatalf("status does not say %q:\n%s", want, text)
			}
		}
		for _, task := range j.Tasks {
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(task.ID.String()) + `\s+solo\s+running$`).MatchString(text) {
				t.Fatalf("status does not show task %s on solo, running:\n%s", task.ID, text)
			}
		}
		out, err = exec.Command(bin, "status", "-c", file, "--json").Output()
		if err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		var st Status
		if err := json.Unmarshal(out, &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		if st.Job.Name != job || st.Job.Generation != j.Generation || len(st.Job.Tasks) != len(j.Tasks) || st.Job.Coordinator != "solo" ||
			len(st.Checkpoints) == 0 || st.Checkpoints[0].ID < j.LastCheckpoint.ID {
			t.Fatalf("status --json %+v, the API's job %+v", st, j.Job)
		}
		t.Logf("\n%s", text)
	})
}

// TestAPIAfterAReplicaIsKilled runs two replicas of the built processor
// and kills one with SIGKILL: once the group's session timeout has passed,
// the survivor's API shows every task on it, in a new generation, running,
// and the killed replica without tasks or a recent report. On kfake and
// the real broker.
func TestAPIAfterAReplicaIsKilled(t *testing.T) {
	bin := buildProcessor(t)
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		job := kafkatest.Name(t, "kill")
		_, file := countJobOn(t, c, job, job+"-in", job+"-out")
		start := func(id string) (*exec.Cmd, string, *lockedBuffer, chan struct{}) {
			addr := freeAddr(t)
			cmd := exec.Command(bin, "run", "-c", file, "--http.address", addr, "--http.report_interval", "200ms",
				"--process.replica_id", id, "--state.dir", t.TempDir(), "--kafka.session_timeout", "6s")
			log := &lockedBuffer{}
			cmd.Stdout, cmd.Stderr = log, log
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{}) // closed when the process has exited
			go func() { _ = cmd.Wait(); close(done) }()
			t.Cleanup(func() {
				_ = cmd.Process.Signal(syscall.SIGTERM)
				<-done
				if t.Failed() {
					t.Logf("replica %s's log:\n%s", id, log.String())
				}
			})
			return cmd, addr, log, done
		}
		_, addrA, _, _ := start("a")
		cmdB, _, _, doneB := start("b")
		var before api.JobResponse
		eventually(t, 60*time.Second, func() string {
			before = api.JobResponse{}
			getJSON(t, "http://"+addrA+"/api/v1/job", &before)
			placed := map[string]int{}
			for _, task := range before.Tasks {
				placed[task.Replica]++
			}
			if before.State != jobview.StateRunning || placed["a"] == 0 || placed["b"] == 0 || before.LiveReplicas != 2 {
				return fmt.Sprintf("job %+v", before.Job)
			}
			return ""
		})
		if err := cmdB.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-doneB
		eventually(t, 60*time.Second, func() string {
			var j api.JobResponse
			getJSON(t, "http://"+addrA+"/api/v1/job", &j)
			for _, task := range j.Tasks {
				if task.Replica != "a" || task.Status != jobview.TaskRunning {
					return fmt.Sprintf("task %s on %s, %s", task.ID, task.Replica, task.Status)
				}
			}
			if j.Generation <= before.Generation || j.State != jobview.StateRunning || len(j.Tasks) != len(before.Tasks) || j.LiveReplicas != 1 {
				return fmt.Sprintf("job %+v", j.Job)
			}
			for _, r := range j.Replicas {
				if r.ID == "b" {
					return fmt.Sprintf("the killed replica still listed: %+v", r)
				}
			}
			return ""
		})
	})
}
