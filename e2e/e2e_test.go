// Package e2e holds Weir's end-to-end exactly-once test: real processor
// processes on the real Kafka broker, killed with SIGKILL at random moments
// and rescaled, checked by an independent read_committed verifier.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// Sizes of the run; WEIR_E2E_RECORDS scales the record count for quick
// local runs.
const (
	partitions = 8
	keys       = 1000
)

func records() int {
	var n int
	if _, err := fmt.Sscanf(os.Getenv("WEIR_E2E_RECORDS"), "%d", &n); err == nil && n > 0 {
		return n
	}
	return 200_000
}

// TestExactlyOnceUnderKillsAndRescaling is the product's promise: every input
// record is counted exactly once in the committed output, whatever happens
// to the replicas.
func TestExactlyOnceUnderKillsAndRescaling(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	c := kafkatest.NewReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	bin := buildProcessor(t)
	job := kafkatest.Name(t, "e2e")
	input, output := job+"-clicks", job+"-counts"
	c.CreateTopic(t, input, partitions, nil)
	c.CreateTopic(t, output, partitions, nil)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "job.yaml")
	writeJob(t, cfgFile, job, input, output, c.Brokers)

	total := records()
	perKey := produce(ctx, t, c, input, 0, total/2) // half before the run
	cl := newCluster(t, bin, cfgFile, dir)
	defer cl.stopAll()
	for range 3 {
		cl.start()
	}
	producerDone := make(chan map[string]int, 1)
	go func() { producerDone <- produce(ctx, t, c, input, total/2, total) }()

	// Chaos: at least five kill -9 of a random replica, each restarted, and
	// the replica count going 3 → 4 → 2.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	waitOutput(ctx, t, c, output, total/20)
	for i := range 5 {
		time.Sleep(time.Duration(2000+rng.IntN(4000)) * time.Millisecond)
		victim := cl.killRandom(rng)
		t.Logf("chaos %d: kill -9 replica %s", i+1, victim)
		time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		cl.restart(victim)
	}
	t.Log("scale 3 → 4")
	cl.start()
	time.Sleep(8 * time.Second)
	t.Log("scale 4 → 2")
	cl.stopGracefully(2)

	for k, n := range <-producerDone {
		perKey[k] += n
	}
	verify(ctx, t, c, output, perKey, total)
	cl.stopAll()
	checkCheckpointIDs(ctx, t, c, job)
	checkNoOpenTransactions(ctx, t, c, job)
}

func buildProcessor(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "processor")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/processor")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("build processor: %v", err)
	}
	return bin
}

func writeJob(t *testing.T, path, job, input, output string, brokers []string) {
	t.Helper()
	yaml := fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s], format: json, start: earliest}
    - aggregate: {op: count}
    - sink: {topic: %s, format: json, delivery: exactly-once}
kafka:
  brokers: [%s]
  session_timeout: 6s
checkpoint:
  interval: 1s
  timeout: 30s
http:
  address: ""
log:
  level: info
`, job, input, output, strings.Join(brokers, ", "))
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
}

// produce writes records [from, to) over `keys` keys, idempotently, and
// returns how many it wrote per key.
func produce(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string, from, to int) map[string]int {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Error(err)
		return nil
	}
	defer cl.Close()
	perKey := map[string]int{}
	var mu sync.Mutex
	var firstErr error
	for i := from; i < to; i++ {
		k := fmt.Sprintf("user-%04d", i%keys)
		perKey[k]++
		v, _ := json.Marshal(map[string]any{"i": i, "user": k})
		cl.Produce(ctx, &kgo.Record{Key: []byte(k), Value: v}, func(_ *kgo.Record, err error) {
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
			}
		})
		if i%5000 == 0 && i > from {
			// Spread the second half over the run.
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := cl.Flush(ctx); err != nil {
		t.Errorf("flush input: %v", err)
	}
	if firstErr != nil {
		t.Errorf("produce input: %v", firstErr)
	}
	return perKey
}

// cluster is the set of processor processes.
type cluster struct {
	t       *testing.T
	bin     string
	cfg     string
	dir     string
	mu      sync.Mutex
	next    int
	running map[string]*exec.Cmd
}

func newCluster(t *testing.T, bin, cfg, dir string) *cluster {
	return &cluster{t: t, bin: bin, cfg: cfg, dir: dir, running: map[string]*exec.Cmd{}}
}

func (c *cluster) start() string {
	c.mu.Lock()
	id := fmt.Sprintf("r%d", c.next)
	c.next++
	c.mu.Unlock()
	c.restart(id)
	return id
}

// restart starts replica id with its own state directory (kept across its
// restarts, so local recovery can reuse it).
func (c *cluster) restart(id string) {
	logf, err := os.OpenFile(filepath.Join(c.dir, id+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(c.bin, "run", "-c", c.cfg,
		"--process.replica_id="+id,
		"--state.dir="+filepath.Join(c.dir, "state-"+id),
		"--checkpoint.storage=file://"+filepath.Join(c.dir, "checkpoints"),
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.running[id] = cmd
	c.mu.Unlock()
}

func (c *cluster) killRandom(rng *rand.Rand) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]string, 0, len(c.running))
	for id := range c.running {
		ids = append(ids, id)
	}
	id := ids[rng.IntN(len(ids))]
	cmd := c.running[id]
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	delete(c.running, id)
	return id
}

// stopGracefully stops replicas with SIGTERM until n remain, and checks that
// each exits 0.
func (c *cluster) stopGracefully(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id, cmd := range c.running {
		if len(c.running) <= n {
			return
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				c.t.Errorf("replica %s after SIGTERM: %v (want exit 0)", id, err)
			}
		case <-time.After(60 * time.Second):
			c.t.Errorf("replica %s did not exit within 60s of SIGTERM", id)
			_ = cmd.Process.Kill()
		}
		delete(c.running, id)
	}
}

func (c *cluster) stopAll() { c.stopGracefully(0) }

// waitOutput waits until the output topic has n committed records.
func waitOutput(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for ctx.Err() == nil {
		ends, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			var sum int64
			ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
			if sum >= int64(n) {
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("output %s never reached %d records", topic, n)
}

// verify reads the whole output read_committed with its own consumer and
// checks, for every key, that its counts are exactly 1, 2, …, N in order.
func verify(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string, perKey map[string]int, total int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	last := map[string]int{}
	seen := 0
	deadline := time.Now().Add(5 * time.Minute)
	for seen < total && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			var v struct {
				Key   string `json:"key"`
				Count int    `json:"count"`
			}
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatalf("output %s[%d]@%d is not the count JSON: %q", r.Topic, r.Partition, r.Offset, r.Value)
			}
			if v.Key != string(r.Key) {
				t.Fatalf("output key %q carries value key %q", r.Key, v.Key)
			}
			if want := last[v.Key] + 1; v.Count != want {
				t.Fatalf("key %s: count %d after %d (want %d): a %s", v.Key, v.Count, last[v.Key], want,
					map[bool]string{true: "repeat", false: "gap"}[v.Count <= last[v.Key]])
			}
			last[v.Key] = v.Count
			seen++
		})
	}
	for k, n := range perKey {
		if last[k] != n {
			t.Errorf("key %s: committed count reached %d, want %d", k, last[k], n)
		}
	}
	if seen != total {
		t.Fatalf("verifier read %d output records, want %d", seen, total)
	}
	t.Logf("verified: %d output records over %d keys, each count 1..N exactly once", seen, len(perKey))
}

// checkCheckpointIDs reads the job's commit topic and checks that the
// completed checkpoint IDs only increased.
func checkCheckpointIDs(ctx context.Context, t *testing.T, c *kafkatest.Cluster, job string) {
	t.Helper()
	var ids []uint64
	for _, r := range c.ReadCommitted(ctx, t, "_weir."+job+".commit") {
		var m struct {
			Type string `json:"type"`
			ID   uint64 `json:"id"`
		}
		if err := json.Unmarshal(r.Value, &m); err == nil && m.Type == "complete" {
			ids = append(ids, m.ID)
		}
	}
	if len(ids) == 0 {
		t.Fatal("no checkpoint completed")
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("completed checkpoint IDs went back: %v", ids)
		}
	}
	t.Logf("%d checkpoints completed, IDs %d..%d strictly increasing", len(ids), ids[0], ids[len(ids)-1])
}

// checkNoOpenTransactions checks that no transaction of the job is left
// open: a lingering one would block read_committed readers.
func checkNoOpenTransactions(ctx context.Context, t *testing.T, c *kafkatest.Cluster, job string) {
	t.Helper()
	adm := c.Admin(t)
	prefix := "_weir." + job + "."
	deadline := time.Now().Add(30 * time.Second)
	for {
		listed, err := adm.ListTransactions(ctx, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var open []string
		for _, tx := range listed.Sorted() {
			if strings.HasPrefix(tx.TxnID, prefix) && !strings.Contains("Empty CompleteCommit CompleteAbort Dead", tx.State) {
				open = append(open, tx.TxnID+"="+tx.State)
			}
		}
		if len(open) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("transactions of the job left open: %v", open)
		}
		time.Sleep(time.Second)
	}
}
