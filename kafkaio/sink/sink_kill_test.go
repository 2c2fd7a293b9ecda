package sink_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/sink"
)

// The environment of the child process TestSinkProcessKilled starts.
const (
	sinkChildEnv     = "WEIR_SINK_CHILD"
	sinkChildBrokers = "WEIR_SINK_CHILD_BROKERS"
	sinkChildTopic   = "WEIR_SINK_CHILD_TOPIC"
	sinkChildPrefix  = "WEIR_SINK_CHILD_PREFIX"
)

// TestSinkProcessKilled: a real process writes epoch 1, pre-commits it,
// prints the handles its snapshot would hold, writes part of epoch 2, and is
// killed with SIGKILL before any commit. This process recovers from the
// handles: a read_committed consumer sees every record of epoch 1 exactly
// once and nothing of epoch 2. A second recovery changes nothing.
func TestSinkProcessKilled(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 3)

		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSinkChildProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(),
			sinkChildEnv+"=1",
			sinkChildBrokers+"="+strings.Join(c.Brokers, ","),
			sinkChildTopic+"="+e.topic,
			sinkChildPrefix+"="+e.prefix,
		)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var handles []sink.TxnHandle
		sc := bufio.NewScanner(out)
		ready := false
		for !ready && sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "handles: "):
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "handles: ")), &handles); err != nil {
					t.Fatalf("child handles %q: %v", line, err)
				}
			case line == "ready":
				ready = true
			}
		}
		if !ready {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("the child ended before it was ready: %v", sc.Err())
		}
		// Epoch 2's records are on the broker, in their open transaction,
		// before the kill.
		sinkAwaitUncommitted(t, ctx, c, e.topic, sinkSeq("c2", sinkChildRecords))
		if err := cmd.Process.Kill(); err != nil { // SIGKILL
			t.Fatal(err)
		}
		_ = cmd.Wait()
		t.Logf("killed the child (pid %d) after pre-commit; its snapshot handles: %+v", cmd.Process.Pid, handles)
		if len(handles) != 1 || handles[0].Checkpoint != 1 {
			t.Fatalf("child handles %+v, want one of checkpoint 1", handles)
		}

		// Nothing is visible yet: the transaction is pre-committed only.
		sinkWantValues(t, "before recovery", sinkCommitted(t, ctx, c, e.topic, 0, 300*time.Millisecond), nil)

		want := sinkSeq("c1", sinkChildRecords)
		e.sink(t, ctx, handles, nil)
		sinkWantValues(t, "after recovery", sinkCommitted(t, ctx, c, e.topic, len(want), 500*time.Millisecond), want)
		e.sink(t, ctx, handles, nil)
		sinkWantValues(t, "after a second recovery", sinkCommitted(t, ctx, c, e.topic, len(want), 300*time.Millisecond), want)
		sinkEventuallyOpen(t, ctx, e, "after recovery")
	})
}

const sinkChildRecords = 120

func sinkSeq(tag string, n int) []string {
	var vs []string
	for i := range n {
		vs = append(vs, tag+"-"+strconv.Itoa(i))
	}
	slices.Sort(vs)
	return vs
}

// TestSinkChildProcess is the child of TestSinkProcessKilled; run directly,
// it does nothing.
func TestSinkChildProcess(t *testing.T) {
	if os.Getenv(sinkChildEnv) != "1" {
		return
	}
	ctx := context.Background()
	s, err := sink.New(sink.Config{
		ClientOpts:            []kgo.Opt{kgo.SeedBrokers(strings.Split(os.Getenv(sinkChildBrokers), ",")...), kgo.DefaultProduceTopic(os.Getenv(sinkChildTopic))},
		TransactionalIDPrefix: os.Getenv(sinkChildPrefix),
		Stage:                 "out",
		TransactionTimeout:    time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Recover(ctx, nil); err != nil {
		t.Fatal(err)
	}
	sinkWrite(t, ctx, s, "c1", sinkChildRecords, 3)
	hs := sinkPreCommit(t, ctx, s, 1)
	b, err := json.Marshal(hs)
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("handles: " + string(b) + "\n")
	sinkWrite(t, ctx, s, "c2", sinkChildRecords, 3)
	os.Stdout.WriteString("ready\n") // the parent waits until epoch 2's records are on the broker, then kills
	time.Sleep(time.Hour)            // killed here
}
