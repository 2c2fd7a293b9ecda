package cli

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/source"
)

// TestDeadLetterJobFromYAML runs a YAML job with `on_error: dead-letter`
// through `processor run`, on kfake and on the real broker, over a mix of
// good records and bad ones (invalid JSON, empty values), and checks with
// read_committed that the dead-letter topic holds exactly the bad records,
// each once, and the output exactly the counts of the good ones (a key that
// is not UTF-8 is good: the json format checks values only).
//
// The job runs twice. The first run lasts until the source has handed every
// bad record to the dead-letter writer but before any checkpoint completed
// (min_pause delays the first one); it is stopped, and the second run
// restores from nothing and reads every record again. An at-least-once
// dead-letter writer would leave the first run's dead letters behind; the
// job's exactly-once dead-letter sink aborts them.
func TestDeadLetterJobFromYAML(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		clearConfigEnv(t)
		job := kafkatest.Name(t, "dlq")
		in, out, dlq := job+"-in", job+"-out", job+"-dlq"
		c.CreateTopic(t, in, 2, nil)
		c.CreateTopic(t, out, 2, nil)
		c.CreateTopic(t, dlq, 1, nil)

		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		type rec struct {
			key, value []byte
		}
		var input []rec
		good := map[string]int{} // key -> records
		bad := 0
		for i := range 60 {
			key := fmt.Appendf(nil, "k%d", i%5)
			switch i % 6 {
			case 1:
				input = append(input, rec{key, []byte(`{"broken":`)})
				bad++
			case 3:
				input = append(input, rec{key, []byte{}})
				bad++
			case 5:
				key = []byte{0xff, 0xfe, byte(i % 2)}
				fallthrough
			default:
				input = append(input, rec{key, fmt.Appendf(nil, `{"n":%d}`, i)})
				good[string(key)]++
			}
		}
		prod := c.Client(t, kgo.DefaultProduceTopic(in))
		for _, r := range input {
			prod.Produce(ctx, &kgo.Record{Key: r.key, Value: r.value}, nil)
		}
		if err := prod.Flush(ctx); err != nil {
			t.Fatal(err)
		}

		dir := t.TempDir()
		file := filepath.Join(dir, "job.yaml")
		writeJob := func(checkpoint, httpAddr string) {
			yaml := fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s], format: json, on_error: dead-letter, dead_letter_topic: %s}
    - aggregate: {op: count}
    - sink: {topic: %s}
kafka: {brokers: [%s]}
checkpoint: {%s, storage: "file://%s/chk"}
state: {dir: "%s/state"}
http: {address: "%s"}
process: {replica_id: r0}
`, job, in, dlq, out, strings.Join(c.Brokers, ","), checkpoint, dir, dir, httpAddr)
			if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
		}

		// Run 1: no checkpoint completes (the first trigger comes after
		// min_pause, at least 90s); stopped once every bad record was
		// dead-lettered.
		addr := freeAddr(t)
		writeJob("interval: 2m, min_pause: 90s, timeout: 1m", addr)
		stop, done, logs := startRun(t, ctx, file)
		deadline := time.Now().Add(60 * time.Second)
		for metricSum(addr, source.MetricDeadLetters) < float64(bad) {
			select {
			case err := <-done:
				t.Fatalf("processor run exited: %v\n%s", err, logs.String())
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d dead letters not handed over within 60s\n%s", bad, logs.String())
			}
		}
		stop()
		if err := <-done; err != nil {
			t.Fatalf("processor run: %v\n%s", err, logs.String())
		}

		// Run 2: checkpoints every 200ms, until the output and the dead
		// letters are committed.
		writeJob("interval: 200ms", "")
		stop, done, logs = startRun(t, ctx, file)
		nGood := len(input) - bad
		var outRecs, dlqRecs []*kgo.Record
		deadline = time.Now().Add(90 * time.Second)
		for {
			outRecs, dlqRecs = c.ReadCommitted(ctx, t, out), c.ReadCommitted(ctx, t, dlq)
			if len(outRecs) >= nGood && len(dlqRecs) >= bad {
				break
			}
			select {
			case err := <-done:
				t.Fatalf("processor run exited: %v\n%s", err, logs.String())
			case <-time.After(200 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 90s: %d of %d outputs, %d of %d dead letters committed\n%s", len(outRecs), nGood, len(dlqRecs), bad, logs.String())
			}
		}
		time.Sleep(time.Second) // a few more checkpoints: nothing more may appear
		outRecs, dlqRecs = c.ReadCommitted(ctx, t, out), c.ReadCommitted(ctx, t, dlq)
		stop()
		if err := <-done; err != nil {
			t.Fatalf("processor run: %v\n%s", err, logs.String())
		}

		// The dead letters: exactly the bad records, each once.
		seen := map[string]bool{}
		for _, r := range dlqRecs {
			h := map[string]string{}
			for _, kv := range r.Headers {
				h[kv.Key] = string(kv.Value)
			}
			origin := h[source.DeadLetterHeaderTopic] + "/" + h[source.DeadLetterHeaderPartition] + "/" + h[source.DeadLetterHeaderOffset]
			if seen[origin] {
				t.Errorf("dead letter of %s written twice", origin)
			}
			seen[origin] = true
			if len(r.Value) > 0 && string(r.Value) != `{"broken":` {
				t.Errorf("dead letter %s has value %q: not a bad record", origin, r.Value)
			}
			if h[source.DeadLetterHeaderError] == "" {
				t.Errorf("dead letter %s has no error header", origin)
			}
		}
		if len(seen) != bad || len(dlqRecs) != bad {
			t.Errorf("dead-letter topic holds %d records of %d origins, want the %d bad records", len(dlqRecs), len(seen), bad)
		}

		// The output: one count per good record, the last per key its total.
		last := map[string]int{}
		for _, r := range outRecs {
			v := string(r.Value)
			i := strings.LastIndex(v, `"count":`)
			n, err := strconv.Atoi(strings.TrimSuffix(v[i+len(`"count":`):], "}"))
			if i < 0 || err != nil {
				t.Fatalf("output %q", v)
			}
			if n > last[string(r.Key)] {
				last[string(r.Key)] = n
			}
		}
		if len(outRecs) != nGood {
			t.Errorf("%d output records, want one per good record (%d)", len(outRecs), nGood)
		}
		for k, n := range good {
			if last[k] != n {
				t.Errorf("key %q: count %d, want %d", k, last[k], n)
			}
		}
		if len(last) != len(good) {
			t.Errorf("output keys %d, want %d", len(last), len(good))
		}
	})
}

// startRun runs `processor run -c file` until stop is called; done receives
// its result, logs its stderr.
func startRun(t *testing.T, ctx context.Context, file string) (stop func(), done chan error, logs *lockedBuffer) {
	t.Helper()
	rctx, stop := context.WithCancel(ctx)
	logs = &lockedBuffer{}
	var outBuf bytes.Buffer
	root := newRootCmd(&outBuf, nil)
	root.SetErr(logs)
	root.SetArgs([]string{"run", "-c", file})
	done = make(chan error, 1)
	go func() { done <- root.ExecuteContext(rctx) }()
	t.Cleanup(stop)
	return stop, done, logs
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// metricSum scrapes http://addr/metrics and sums the samples of name; -1
// if /metrics does not answer.
func metricSum(addr, name string) float64 {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum += v
		}
	}
	return sum
}
