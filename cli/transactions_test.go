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
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/sink"
)

// cli runs the processor's command line and returns its output.
func cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd(&out, nil)
	root.SetArgs(args)
	root.SetErr(&out)
	err := root.Execute()
	return out.String(), err
}

// processor transactions: a lingering transaction of the job is listed,
// aborted (read_committed consumers see nothing of it), and a second one
// committed at the producer ID and epoch given; IDs of other jobs are
// refused. On kfake and the real broker.
func TestTransactionsCommand(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		clearConfigEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "txcli")
		out := job + "-out"
		c.CreateTopic(t, out, 1, nil)
		dir := t.TempDir()
		file := filepath.Join(dir, "job.yaml")
		yaml := fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s]}
    - aggregate: {op: count}
    - sink: {topic: %s}
kafka: {brokers: [%s]}
state: {dir: "%s/state"}
log: {level: error}
`, job, job+"-in", out, c.Brokers[0], dir) // the input need not exist: transactions reads no input
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		prefix := "_weir." + job + "."
		linger := func(slot int, value string) (*kgo.Client, string) {
			id := sink.TxnID(prefix, "main", 0, slot)
			cl := c.Client(t, kgo.TransactionalID(id), kgo.TransactionTimeout(time.Minute), kgo.DefaultProduceTopic(out))
			if err := cl.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte(value)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			return cl, id
		}
		_, idA := linger(0, "a")

		got, err := cli(t, "transactions", "list", "-c", file)
		if err != nil || !strings.Contains(got, idA) || !strings.Contains(got, "Ongoing") || !strings.Contains(got, out+"[0]") ||
			!regexp.MustCompile(`Ongoing\s+\d+\s+\d+\s+\S+\s+no\s`).MatchString(got) || strings.Contains(got, "warning") {
			t.Fatalf("list: %v\n%s", err, got)
		}
		if got, err := cli(t, "transactions", "abort", "-c", file, idA); err == nil || !strings.Contains(err.Error(), "--yes") {
			t.Fatalf("abort without --yes: %v\n%s", err, got)
		}
		for _, other := range []string{"someone-else.main-0-0", prefix + "v2.main-0-0", prefix + "coordinator"} {
			if got, err := cli(t, "transactions", "abort", "-c", file, other, "--yes"); err == nil {
				t.Fatalf("aborting %s, not a sink transaction of the job, succeeded:\n%s", other, got)
			}
		}
		if got, err := cli(t, "transactions", "abort", "-c", file, idA, "--yes"); err != nil || !strings.Contains(got, "aborted "+idA) {
			t.Fatalf("abort: %v\n%s", err, got)
		}
		// The broker ends it just after answering (PrepareAbort first).
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			got, err := cli(t, "transactions", "list", "-c", file)
			if err == nil && strings.Contains(got, "(none)") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the aborted transaction is still listed as open: %v\n%s", err, got)
			}
		}

		// Commit: at the producer ID and epoch the broker describes, as a
		// checkpoint's manifest would record them.
		clB, idB := linger(1, "b")
		if err := clB.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		pid, epoch, err := clB.ProducerID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The job never completed a checkpoint: nothing may be committed
		// by lookup, and half an override is refused.
		if got, err := cli(t, "transactions", "commit", "-c", file, idB, "--yes"); err == nil || !strings.Contains(err.Error(), "no completed checkpoint") {
			t.Fatalf("commit by lookup without a completed checkpoint: %v\n%s", err, got)
		}
		if got, err := cli(t, "transactions", "commit", "-c", file, idB, "--producer-id", fmt.Sprint(pid), "--yes"); err == nil || !strings.Contains(err.Error(), "both") {
			t.Fatalf("commit with --producer-id only: %v\n%s", err, got)
		}
		// RECORDED: no. The broker describes the open transaction at the
		// producer ID and epoch its producer reports, which is what a
		// checkpoint records and what list matches on.
		got, err = cli(t, "transactions", "list", "-c", file, "--json")
		if err != nil || !strings.Contains(got, `"recorded_by_checkpoint":0`) ||
			!strings.Contains(got, fmt.Sprintf(`"producer_id":%d,"epoch":%d`, pid, epoch)) {
			t.Fatalf("list --json of %s (producer id %d, epoch %d): %v\n%s", idB, pid, epoch, err, got)
		}
		got, err = cli(t, "transactions", "commit", "-c", file, idB, "--producer-id", fmt.Sprint(pid), "--epoch", fmt.Sprint(epoch), "--yes")
		if err != nil || !strings.Contains(got, "committed "+idB) {
			t.Fatalf("commit: %v\n%s", err, got)
		}
		rd := c.Client(t, kgo.ConsumeTopics(out), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		var values []string
		for deadline := time.Now().Add(15 * time.Second); len(values) < 1 && time.Now().Before(deadline); {
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			rd.PollFetches(pctx).EachRecord(func(r *kgo.Record) { values = append(values, string(r.Value)) })
			pcancel()
		}
		if len(values) != 1 || values[0] != "b" {
			t.Fatalf("read_committed saw %q, want only the committed transaction's \"b\"", values)
		}

		got, err = cli(t, "transactions", "list", "-c", file, "--all", "--json")
		if err != nil || strings.Count(got, "\n") != 2 || !strings.Contains(got, `"transactional_id":"`+idB+`"`) {
			t.Fatalf("list --all --json: %v\n%s", err, got)
		}
	})
}

// A transaction that a completed checkpoint recorded but nobody committed
// (the commit failed, and the job is stopped): list shows it RECORDED by
// that checkpoint, commit without --producer-id and --epoch commits it at
// the recorded values and refuses an ID the checkpoint did not record, and
// the job, started again, counts every input exactly once. kfake only: the
// broker must refuse the sinks' commits (request injection), which the real
// broker cannot be made to do.
func TestTransactionsRecordedByCheckpoint(t *testing.T) {
	cfg, file, c := countJob(t, "recorded")
	prefix := cfg.Kafka.TopicPrefix
	var refuse atomic.Bool
	var refused atomic.Int64
	refuse.Store(true)
	c.Fake.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake.KeepControl()
		r := req.(*kmsg.EndTxnRequest)
		if !refuse.Load() || !r.Commit || !sink.IsTxnID(prefix, r.TransactionalID) {
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
		refused.Add(1)
		return resp, nil, true
	})

	// Run until a checkpoint completes (its commits refused), then stop.
	logs := &lockedBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replica log:\n%s", logs.String())
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	completed := make(chan ckpt.ID, 100)
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, nil, logs, func(id ckpt.ID) { completed <- id }) }()
	var newest ckpt.ID
	stuck := time.After(50 * time.Second) // before ctx ends: the stacks of a replica still running
	for newest == 0 || refused.Load() == 0 {
		select {
		case newest = <-completed:
		case err := <-done:
			t.Fatalf("replica stopped: %v", err)
		case <-stuck:
			t.Fatalf("within 50s: newest completed checkpoint %d, commits refused %d; goroutines:\n%s", newest, refused.Load(), goroutines())
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("replica: %v", err)
	}
	// The newest completed checkpoint records the open transactions.
	for len(completed) > 0 {
		newest = max(newest, <-completed)
	}

	got, err := cli(t, "transactions", "list", "-c", file, "--json")
	if err != nil {
		t.Fatalf("list: %v\n%s", err, got)
	}
	var recorded []string
	for _, line := range strings.Split(strings.TrimSpace(got), "\n") {
		var l struct {
			ID         string   `json:"transactional_id"`
			State      string   `json:"state"`
			RecordedBy *ckpt.ID `json:"recorded_by_checkpoint"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("list --json line %q: %v", line, err)
		}
		if l.RecordedBy == nil {
			t.Fatalf("list could not read what the checkpoint recorded:\n%s", got)
		}
		if l.State == "Ongoing" && *l.RecordedBy != newest {
			t.Fatalf("open transaction %s is not recorded by checkpoint %d, the only completed one:\n%s", l.ID, newest, got)
		}
		recorded = append(recorded, l.ID)
	}
	if len(recorded) == 0 {
		t.Fatalf("no open transaction after the refused commits:\n%s", got)
	}
	table, err := cli(t, "transactions", "list", "-c", file)
	t.Logf("after the refused commits:\n%s", table)
	if err != nil || !strings.Contains(table, fmt.Sprintf("checkpoint %d", newest)) {
		t.Fatalf("list does not show RECORDED checkpoint %d: %v\n%s", newest, err, table)
	}

	// The checkpoint's objects unreadable: list says it does not know,
	// and abort refuses rather than guess.
	chk := strings.TrimPrefix(cfg.Checkpoint.Storage, "file://")
	if err := os.Rename(chk, chk+".away"); err != nil {
		t.Fatal(err)
	}
	if got, err := cli(t, "transactions", "list", "-c", file); err != nil || !strings.Contains(got, "warning") ||
		!regexp.MustCompile(`Ongoing\s+\d+\s+\d+\s+\S+\s+\?\s`).MatchString(got) {
		t.Fatalf("list with the checkpoint unreadable: %v\n%s", err, got)
	}
	if got, err := cli(t, "transactions", "abort", "-c", file, recorded[0], "--yes"); err == nil || !strings.Contains(err.Error(), "cannot tell") {
		t.Fatalf("abort with the checkpoint unreadable: %v\n%s", err, got)
	}
	if err := os.RemoveAll(chk); err != nil { // file:// opens create the root again, empty
		t.Fatal(err)
	}
	if err := os.Rename(chk+".away", chk); err != nil {
		t.Fatal(err)
	}

	// Ending a recorded transaction without a commit would lose its
	// output: refused.
	for _, verb := range []string{"abort", "fence"} {
		if got, err := cli(t, "transactions", verb, "-c", file, recorded[0], "--yes"); err == nil || !strings.Contains(err.Error(), "--lose-output") {
			t.Fatalf("%s of %s, which checkpoint %d recorded: %v\n%s", verb, recorded[0], newest, err, got)
		}
	}

	refuse.Store(false)
	pool := sink.PoolName("main", "out")
	unrecorded := sink.TxnID(prefix, pool, 0, 2)
	if slices.Contains(recorded, unrecorded) {
		unrecorded = sink.TxnID(prefix, pool, 1, 2)
	}
	if got, err := cli(t, "transactions", "commit", "-c", file, unrecorded, "--yes"); err == nil || !strings.Contains(err.Error(), "did not record") {
		t.Fatalf("commit of %s, which checkpoint %d did not record: %v\n%s", unrecorded, newest, err, got)
	}
	for _, id := range recorded {
		got, err := cli(t, "transactions", "commit", "-c", file, id, "--yes")
		if err != nil || !strings.Contains(got, fmt.Sprintf("recorded by checkpoint %d", newest)) {
			t.Fatalf("commit %s: %v\n%s", id, err, got)
		}
	}

	// Started again, the job's recovery finds them committed: every input
	// is counted exactly once.
	runUntilCheckpoints(t, 1, func(ctx context.Context, logOut io.Writer, onCommitted func(ckpt.ID)) error {
		return serve(ctx, cfg, nil, logOut, onCommitted)
	}, nil)
	rd := c.Client(t, kgo.ConsumeTopics("out"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	last := map[string]int{}
	seen := 0
	for deadline := time.Now().Add(20 * time.Second); seen < 100 && time.Now().Before(deadline); {
		pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
		rd.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			var v struct {
				Key   string `json:"key"`
				Count int    `json:"count"`
			}
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatalf("output %q: %v", r.Value, err)
			}
			if v.Count != last[v.Key]+1 {
				t.Fatalf("key %s: count %d after %d", v.Key, v.Count, last[v.Key])
			}
			last[v.Key] = v.Count
			seen++
		})
		pcancel()
	}
	if seen != 100 {
		t.Fatalf("read_committed saw %d outputs, want 100", seen)
	}
}
