package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// devProc is a `processor dev` process started by a test, its stdout
// collected line by line.
type devProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	http   string // its --http address
	mu     sync.Mutex
	lines  []string
	stderr bytes.Buffer
	grew   chan struct{} // closed and replaced when a line is added
	eof    chan struct{}
}

// startDevProc starts `bin dev --dir dir --http <free address>` with args.
func startDevProc(t *testing.T, bin, dir string, args ...string) *devProc {
	t.Helper()
	p := &devProc{t: t, http: freeAddr(t), grew: make(chan struct{}), eof: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"dev", "--dir", dir, "--http", p.http}, args...)...)
	p.cmd.Env = append(os.Environ(), "WEIR_LOG_LEVEL=warn")
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.eof)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.grew)
			p.grew = make(chan struct{})
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.eof
			_ = p.cmd.Wait()
		}
	})
	return p
}

// output returns the lines printed so far.
func (p *devProc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.lines)
}

// fail ends the test, killing the process and showing its output.
func (p *devProc) fail(format string, args ...any) {
	p.t.Helper()
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		<-p.eof
		_ = p.cmd.Wait()
	}
	p.t.Fatalf("%s; stdout:\n%s\nstderr:\n%s", fmt.Sprintf(format, args...), strings.Join(p.output(), "\n"), p.stderr.String())
}

// waitLine waits up to 60s until ok holds for the lines printed so far.
func (p *devProc) waitLines(what string, ok func(lines []string) bool) {
	p.t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		p.mu.Lock()
		lines, grew := slices.Clone(p.lines), p.grew
		p.mu.Unlock()
		if ok(lines) {
			return
		}
		select {
		case <-grew:
		case <-p.eof:
			if !ok(p.output()) {
				p.fail("exited before %s", what)
			}
			return
		case <-timeout:
			p.fail("no %s in 60s", what)
		}
	}
}

// waitMatchesOrExit waits until n printed lines match re, and reports
// whether they did (false: the process exited before).
func (p *devProc) waitMatchesOrExit(re *regexp.Regexp, n int) bool {
	p.t.Helper()
	enough := func(lines []string) bool { return len(matching(lines, re)) >= n }
	timeout := time.After(60 * time.Second)
	for {
		p.mu.Lock()
		lines, grew := slices.Clone(p.lines), p.grew
		p.mu.Unlock()
		if enough(lines) {
			return true
		}
		select {
		case <-grew:
		case <-p.eof:
			_ = p.cmd.Wait()
			return enough(p.output())
		case <-timeout:
			p.fail("no %d lines matching %s in 60s", n, re)
		}
	}
}

// waitMatches waits until n printed lines match re.
func (p *devProc) waitMatches(re *regexp.Regexp, n int) {
	p.t.Helper()
	p.waitLines(fmt.Sprintf("%d lines matching %s", n, re), func(lines []string) bool {
		return len(matching(lines, re)) >= n
	})
}

// waitCheckpoint waits up to 60s until the process's /metrics say that
// checkpoint id is complete.
func (p *devProc) waitCheckpoint(id float64) {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for metricSum(p.http, "weir_checkpoint_last_completed_id") < id {
		if time.Now().After(deadline) {
			p.fail("checkpoint %.0f not complete in 60s", id)
		}
		time.Sleep(100 * time.Millisecond) // polls /metrics: no event to wait on across processes
	}
}

// stop sends SIGINT and waits for exit 0.
func (p *devProc) stop() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		p.t.Fatal(err)
	}
	<-p.eof
	if err := p.cmd.Wait(); err != nil {
		p.fail("after SIGINT: %v (want exit 0)", err)
	}
}

// kill9 kills the process with SIGKILL and waits for it to be gone.
func (p *devProc) kill9() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	<-p.eof
	_ = p.cmd.Wait()
}

// broker returns the embedded Kafka's address, from dev's banner.
func (p *devProc) broker() string {
	p.t.Helper()
	re := regexp.MustCompile(`^weir dev: Kafka \(embedded\) at (\S+),`)
	p.waitMatches(re, 1)
	return re.FindStringSubmatch(matching(p.output(), re)[0])[1]
}

// matching returns the lines that match re.
func matching(lines []string, re *regexp.Regexp) []string {
	var out []string
	for _, l := range lines {
		if re.MatchString(l) {
			out = append(out, l)
		}
	}
	return out
}

// readCommitted reads every record of topic that read_committed consumers
// of the cluster at broker see (up to each partition's last stable offset)
// and returns their values.
func readCommitted(t *testing.T, broker, topic string) [][]byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	remaining := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})
	rd, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var values [][]byte
	for len(remaining) > 0 {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %s: %v; partitions not read to their end: %v", topic, ctx.Err(), remaining)
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				values = append(values, r.Value)
			}
			if r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
	}
	return values
}

// userCount is one output record of the clicks-per-user example.
type userCount struct {
	Key   string `json:"key"`
	Count int    `json:"count"`
}

// printedCounts parses the clicks-per-user lines dev printed.
func printedCounts(t *testing.T, lines []string) []userCount {
	t.Helper()
	var out []userCount
	for _, l := range matching(lines, devOutputLine) {
		var c userCount
		if err := json.Unmarshal([]byte(l[len("15:04:05  "):]), &c); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		out = append(out, c)
	}
	return out
}

// devDir is a fresh --dir for dev.
func devDir(t *testing.T) string {
	return filepath.Join(t.TempDir(), "dev")
}
