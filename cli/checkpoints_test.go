package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// countJob writes the YAML count job `name` (kfake topics in and out, 2
// partitions each, 100 input records over 7 keys, a checkpoint every 200ms)
// and loads it. It returns the configuration, the file's path and the
// kfake cluster.
func countJob(t *testing.T, name string) (*config.Config, string, *kafkatest.Cluster) {
	t.Helper()
	clearConfigEnv(t)
	c := kafkatest.NewKfake(t)
	cfg, file := countJobOn(t, c, name, "in", "out")
	return cfg, file, c
}

// countJobOn is countJob on cluster c, with input topic in and output out.
func countJobOn(t *testing.T, c *kafkatest.Cluster, name, in, out string) (*config.Config, string) {
	t.Helper()
	clearConfigEnv(t)
	dir := t.TempDir()
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	file := filepath.Join(dir, "job.yaml")
	yaml := fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s]}
    - aggregate: {op: count}
    - sink: {topic: %s}
kafka: {brokers: [%s]}
checkpoint: {interval: 200ms, storage: "file://%s/chk"}
state: {dir: "%s/state"}
http: {address: ""}
log: {level: error}
`, name, in, out, strings.Join(c.Brokers, ", "), dir, dir)
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(config.Source{File: file})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Log.Level = "debug" // the replica's log, printed if a test fails; the file's level is the CLI's
	prod := c.Client(t, kgo.DefaultProduceTopic(in))
	for i := range 100 {
		// A page field, for the tests that count per page after a key_by.
		prod.Produce(context.Background(), &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%7), Value: fmt.Appendf(nil, `{"page":"p%d"}`, i%5)}, nil)
	}
	if err := prod.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return cfg, file
}

// runUntilCheckpoints runs serve (as run calls it, with onCommitted and a
// log writer) until n checkpoints completed, calls atEnd while it still
// runs, then stops it. If the test fails, the replica's log is printed.
func runUntilCheckpoints(t *testing.T, n int, serve func(ctx context.Context, logOut io.Writer, onCommitted func(ckpt.ID)) error, atEnd func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	logs := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("WEIR_TEST_LOG") != "" {
			t.Logf("replica log:\n%s", logs.String())
		}
	})
	completed := make(chan ckpt.ID, 100)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, logs, func(id ckpt.ID) { completed <- id }) }()
	stuck := time.After(50 * time.Second) // before ctx ends: the stacks of a replica still running
	for seen := 0; seen < n; {
		select {
		case <-completed:
			seen++
		case err := <-done:
			t.Fatalf("replica stopped: %v", err)
		case <-stuck:
			t.Fatalf("no %d completed checkpoints within 50s; goroutines:\n%s", n, goroutines())
		}
	}
	if atEnd != nil {
		atEnd()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("replica: %v", err)
	}
}

// TestRunThenListCheckpoints runs one replica of the count job on kfake
// until a few checkpoints completed, stops it, and lists them: all, the
// newest 2 (--limit), and with another checkpoint.storage, which holds
// none of the retained checkpoints (a warning). processor status shows the
// job, its tasks and its newest checkpoints, as text and JSON.
func TestRunThenListCheckpoints(t *testing.T) {
	cfg, file, _ := countJob(t, "listing")
	runUntilCheckpoints(t, 4, func(ctx context.Context, logOut io.Writer, onCommitted func(ckpt.ID)) error {
		return serve(ctx, cfg, nil, logOut, onCommitted)
	}, nil)

	list := func(args ...string) (string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		root := newRootCmd(&out, nil)
		root.SetErr(&errOut)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errOut.String())
		}
		return out.String(), errOut.String()
	}
	row := regexp.MustCompile(`(?m)^\d+\s+\S+Z\s+checkpoint\s+completed\s+\d+\s+2/2\s+(\d|released)[^\n]*chk-\d+/_metadata( \(gone\))?$`)
	out, errOut := list("checkpoints", "list", "-c", file)
	if n := len(row.FindAllString(out, -1)); n < 4 || errOut != "" {
		t.Fatalf("want at least 4 completed checkpoint rows with 2 tasks, no warning:\n%s%s", out, errOut)
	}
	t.Logf("\n%s", out)
	if out, _ := list("checkpoints", "list", "-c", file, "--limit", "2"); strings.Count(strings.TrimSpace(out), "\n") != 2 {
		t.Fatalf("--limit 2: want a header and 2 rows:\n%s", out)
	}
	_, errOut = list("checkpoints", "list", "-c", file, "--checkpoint.storage", "file://"+t.TempDir())
	if !strings.Contains(errOut, "warning: checkpoint.storage") || !strings.Contains(errOut, "holds none of the checkpoints the commit topic names as retained") {
		t.Fatalf("no warning for a storage without the retained checkpoints:\n%s", errOut)
	}

	out, _ = list("status", "-c", file)
	if !regexp.MustCompile(`(?m)^job listing: (restoring|running), generation \d+`).MatchString(out) || !row.MatchString(out) ||
		!regexp.MustCompile(`(?m)^main/0\s+\S+\s+(running|restoring)$`).MatchString(out) {
		t.Fatalf("status:\n%s", out)
	}
	t.Logf("\n%s", out)
	out, _ = list("status", "-c", file, "--json", "--limit", "3")
	var st Status
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Job.Name != "listing" || len(st.Checkpoints) != 3 || len(st.Job.Tasks) != 2 {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
}

// clearConfigEnv unsets, for the test, every WEIR_ variable the
// configuration reads: `make test` exports WEIR_KAFKA_BROKERS (the real
// broker), which would override the test's own YAML.
func clearConfigEnv(t *testing.T) {
	for _, k := range config.Keys() {
		name := config.EnvName(k)
		t.Setenv(name, "") // restores the old value after the test
		if err := os.Unsetenv(name); err != nil {
			t.Fatal(err)
		}
	}
}

// goroutines returns every goroutine's stack, for a test that waited in
// vain: where the replica is stuck.
func goroutines() string {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return b.String()
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
