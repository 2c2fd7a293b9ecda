package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildProcessor builds the binary once per test run.
func buildProcessor(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "processor")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var (
	devOutputLine = regexp.MustCompile(`^\d\d:\d\d:\d\d  \{"key":"user-\d+","count":\d+\}$`)
	devStopped    = regexp.MustCompile(`weir dev: stopped\. Last completed checkpoint: (\d+); clicks-per-user holds (\d+) committed records`)
)

// runDevUntilOutput starts `processor dev`, waits for n committed output
// records and for checkpoint minCheckpoint to be complete (its /metrics),
// sends SIGINT and returns its output once it exited 0.
func runDevUntilOutput(t *testing.T, bin, dir string, n int, minCheckpoint float64) string {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(bin, "dev", "--dir", dir, "--http", addr, "--rate", "100")
	cmd.Env = append(os.Environ(), "WEIR_LOG_LEVEL=warn")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		all bytes.Buffer
	)
	enough := make(chan struct{})
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(stdout)
		seen := 0
		for sc.Scan() {
			mu.Lock()
			all.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if devOutputLine.MatchString(sc.Text()) {
				if seen++; seen == n {
					close(enough)
				}
			}
		}
	}()
	timeout := time.After(60 * time.Second)
	fail := func(what string) {
		_ = cmd.Process.Kill()
		<-eof
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%s in 60s; stdout:\n%s\nstderr:\n%s", what, all.String(), stderr.String())
	}
	select {
	case <-enough:
	case <-timeout:
		fail(fmt.Sprintf("no %d output records", n))
	}
	// Output printed at once may be what an earlier run's checkpoint left
	// for this one's recovery to commit: wait for this run's own.
	for metricSum(addr, "weir_checkpoint_last_completed_id") < minCheckpoint {
		select {
		case <-timeout:
			fail(fmt.Sprintf("checkpoint %.0f not complete", minCheckpoint))
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-eof
	err = cmd.Wait()
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		t.Fatalf("processor dev after SIGINT: %v (want exit 0); stdout:\n%s\nstderr:\n%s", err, all.String(), stderr.String())
	}
	return all.String()
}

// TestDevSaysWhatIsCommittedOnCtrlC runs `processor dev` (what `make run`
// runs) as a user would, stops it with SIGINT once committed output was
// printed, and checks that it exits 0 saying the last completed checkpoint,
// how many output records are committed (at least as many as it printed)
// and how to resume; then runs it again, which resumes from there: its
// next stop names a later checkpoint.
func TestDevSaysWhatIsCommittedOnCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildProcessor(t)
	dir := filepath.Join(t.TempDir(), "dev")

	check := func(out string) (checkpoint, committed int) {
		t.Helper()
		m := devStopped.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no 'stopped. Last completed checkpoint' line after SIGINT:\n%s", out)
		}
		resume := "run `processor dev --dir " + dir + "` again to resume from checkpoint " + m[1]
		if !bytes.Contains([]byte(out), []byte(resume)) {
			t.Fatalf("no %q after SIGINT:\n%s", resume, out)
		}
		checkpoint, _ = strconv.Atoi(m[1])
		committed, _ = strconv.Atoi(m[2])
		printed := 0
		for _, line := range regexp.MustCompile("\n").Split(out, -1) {
			if devOutputLine.MatchString(line) {
				printed++
			}
		}
		if checkpoint < 1 || committed < printed {
			t.Fatalf("checkpoint %d, %d committed records, %d printed:\n%s", checkpoint, committed, printed, out)
		}
		return checkpoint, committed
	}
	first, committed1 := check(runDevUntilOutput(t, bin, dir, 10, 1))
	second, committed2 := check(runDevUntilOutput(t, bin, dir, 10, float64(first+1)))
	if second <= first || committed2 <= committed1 {
		t.Fatalf("second run: checkpoint %d (first %d), %d committed records (first %d): did not resume", second, first, committed2, committed1)
	}
	t.Logf("first run: checkpoint %d, %d records; second: checkpoint %d, %d records", first, committed1, second, committed2)
}
