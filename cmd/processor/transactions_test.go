package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio"
)

// cli runs the processor's command line and returns its output.
func cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	root := newRootCmd(&out)
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
`, job, out, out, c.Brokers[0], dir)
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		prefix := "_weir." + job + "."
		linger := func(slot int, value string) (*kgo.Client, string) {
			id := kafkaio.SinkTxnID(prefix, "main", 0, slot)
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
		if err != nil || !strings.Contains(got, idA) || !strings.Contains(got, "Ongoing") || !strings.Contains(got, out+"[0]") {
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
		if _, err := cli(t, "transactions", "commit", "-c", file, idB, "--yes"); err == nil {
			t.Fatal("commit without --producer-id and --epoch was accepted")
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
