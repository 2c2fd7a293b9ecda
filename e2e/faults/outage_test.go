package faults

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// The all-down scenario's timing: the least sink.transaction_timeout the
// product accepts for these checkpoint settings (2 × interval + timeout +
// 1m), and a downtime past it.
const (
	allDownCheckpointTimeout = 10 * time.Second
	allDownTxnTimeout        = 2*time.Second + allDownCheckpointTimeout + time.Minute
	allDownFor               = allDownTxnTimeout + 10*time.Second
)

// TestFaultAllDownPastTransactionTimeout: every replica is killed right
// after a `complete` and stays down for longer than the sinks' transaction
// timeout, so the broker aborts every transaction left open, then all are
// restarted. The job must either recover exactly once, or stop loudly and
// truthfully: exit or stop naming the lost checkpoint and
// sink.transaction_timeout, with nothing committed twice.
func TestFaultAllDownPastTransactionTimeout(t *testing.T) {
	c := kafkatest.NewReal(t)
	s := newScenario(t, c, "all_down", scenarioOptions{job: func(j *e2etest.Job) {
		j.CheckpointTimeout = allDownCheckpointTimeout
		j.TransactionTimeout = allDownTxnTimeout
	}})
	s.startReplicas(2)
	s.waitOutput(2*rate, 2*time.Minute)

	completes := s.commits.Subscribe()
	for len(completes) > 0 {
		<-completes
	}
	deadline := time.After(time.Minute)
wait:
	for {
		select {
		case r := <-completes:
			if r.Type == "complete" {
				break wait
			}
		case <-deadline:
			t.Fatal("no checkpoint completed within a minute")
		}
	}
	ids := s.reps.IDs()
	for _, id := range ids {
		s.reps.Kill(id)
	}
	t.Logf("all replicas killed right after a complete; down for %v (sink.transaction_timeout %v)", allDownFor, allDownTxnTimeout)
	time.Sleep(allDownFor)
	for _, id := range ids {
		s.reps.Restart(id)
	}
	restarted := time.Now()

	until := restarted.Add(3 * time.Minute)
	for time.Now().Before(until) {
		if d, err := s.ver.WaitAdvance(restarted, time.Millisecond); err == nil {
			t.Log("outcome: recovered")
			s.result("recovery", d)
			s.waitOutput(2*rate, 2*time.Minute)
			s.finish()
			return
		}
		if stopped := stoppedReplicas(s, restarted); len(stopped) == len(ids) {
			t.Logf("outcome: the job stopped: %v", stopped)
			s.result("stop", time.Since(restarted))
			for id, why := range stopped {
				if !strings.Contains(why, "checkpoint") || !strings.Contains(why, "sink.transaction_timeout") {
					t.Errorf("replica %s stopped without naming the lost checkpoint and sink.transaction_timeout: %s", id, why)
				}
			}
			s.stopFlow()
			perKey, _ := s.in.Counts()
			s.ver.CheckPrefix(perKey)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("after the restart the job neither committed output nor stopped within 3 minutes")
}

// stoppedReplicas returns, for each replica that has stopped since since
// (exited, or a `failed` record for the job), the reason it gave.
func stoppedReplicas(s *scenario, since time.Time) map[string]string {
	out := map[string]string{}
	var failed string
	for _, r := range s.commits.Records("failed") {
		if r.Arrived.After(since) {
			failed = r.Raw
		}
	}
	for _, id := range s.reps.IDs() {
		p := s.reps.Proc(id)
		select {
		case <-p.Done():
			lines := strings.Split(strings.TrimSpace(p.Log()), "\n")
			out[id] = lines[len(lines)-1]
		default:
			if failed != "" {
				out[id] = failed
			}
		}
	}
	return out
}

// diskFullFor is how long the replica's state directory stays full.
const diskFullFor = 25 * time.Second

// TestFaultStateDiskFull: one replica's state directory is a small tmpfs,
// filled to the last byte for 25 seconds and then freed. The replica must
// not crash: the affected tasks stop with a clear error and are retried,
// /readyz says not ready, and once space is back the job goes on exactly
// once.
func TestFaultStateDiskFull(t *testing.T) {
	c := kafkatest.NewReal(t)
	// Without the record cache every record writes Pebble's WAL, so the full
	// disk reaches the commit path (not only the next snapshot's files)
	// within a fraction of a second, every run.
	s := newScenario(t, c, "disk_full", scenarioOptions{replicas: e2etest.ReplicaOptions{
		HTTP: true, Flags: []string{"--state.record_cache_bytes=0"},
	}})
	const victim = "r0" // the first replica started
	dir := s.reps.StateDir(victim)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=128m", "tmpfs", dir).CombinedOutput(); err != nil {
		msg := "cannot mount a tmpfs for the state directory (needs root): " + strings.TrimSpace(string(out))
		if kafkatest.RealRequired() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	// Lazily: the replica may still hold files open when this runs.
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	s.startReplicas(2)
	s.waitOutput(2*rate, 2*time.Minute)

	// The fault must hit tasks: wait until the newest generation gives
	// the victim some.
	deadline := time.Now().Add(time.Minute)
	for {
		gens := s.commits.Records("generation")
		if len(gens) > 0 && strings.Contains(gens[len(gens)-1].Raw, `"`+victim+`":["`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s holds no task after a minute: %v", victim, gens)
		}
		time.Sleep(200 * time.Millisecond)
	}
	p := s.reps.Proc(victim)
	logBefore := len(p.Log())

	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	start := time.Now()
	if err := os.WriteFile(filepath.Join(dir, "probe"), make([]byte, 64<<10), 0o600); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("the state directory is not full: writing 64 KiB as root: %v (want ENOSPC)", err)
	}
	t.Logf("state directory of %s full", victim)
	notReady := false
	for time.Since(start) < diskFullFor {
		select {
		case <-p.Done():
			t.Fatalf("replica %s exited when its state directory filled (%v); its last lines:\n%s", victim, p.Err(), tail(p.Log(), 3000))
		case <-time.After(time.Second):
		}
		if code, _, err := p.Get("/readyz"); err == nil && code != 200 {
			notReady = true
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	t.Logf("state directory freed after %.1f s", freed.Sub(start).Seconds())
	if during := p.Log()[logBefore:]; !strings.Contains(during, "no space left on device") {
		t.Errorf("replica %s logged no 'no space left on device' while its state directory was full: the fault did not reach its tasks, or the error was not reported", victim)
	}
	if !notReady {
		t.Errorf("replica %s answered /readyz 200 all along while its state directory was full", victim)
	}

	s.result("recovery", s.recovered(freed, 3*time.Minute))
	s.waitOutput(2*rate, 2*time.Minute)
	select {
	case <-p.Done():
		t.Fatalf("replica %s exited after its state directory was freed: %v", victim, p.Err())
	default:
	}
	s.finish()
}

// fill writes zeros to path until the filesystem is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", path, err)
			}
			break
		}
	}
	// The last partial page too.
	for _, n := range []int{64 << 10, 4 << 10, 512, 1} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
