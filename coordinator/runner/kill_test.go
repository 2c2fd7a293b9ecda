package runner_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/controltopic"
)

// TestCoordinatorProcessKilled runs the first coordinator in a child process
// and kills it with SIGKILL while a checkpoint is pending, so that nothing of
// it closes cleanly: its Kafka connections, an open transaction, its loop.
// The successor, in this process, must continue with higher IDs and never
// complete the pending checkpoint or any checkpoint twice.
func TestCoordinatorProcessKilled(t *testing.T) {
	if os.Getenv("RUNNER_CHILD") == "1" {
		runChildCoordinator(t)
		return
	}
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		e := newEnv(t, c)
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()

		// The child stops acknowledging after three completions and prints
		// every trigger it sees.
		child := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCoordinatorProcessKilled$")
		child.Env = append(os.Environ(), "RUNNER_CHILD=1",
			"RUNNER_BROKERS="+strings.Join(c.Brokers, ","),
			"RUNNER_PREFIX="+strings.TrimSuffix(e.topics.Trigger, "trigger"))
		out, err := child.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		pendingID := ckpt.ID(0)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var id ckpt.ID
			if _, err := fmt.Sscanf(sc.Text(), "pending %d", &id); err == nil {
				pendingID = id
				break
			}
		}
		if pendingID == 0 {
			t.Fatalf("child printed no pending checkpoint: %v", sc.Err())
		}
		if err := child.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = child.Wait()
		_, doneBefore, _ := e.history(ctx)
		t.Logf("killed the coordinator process with checkpoint %d pending, after completes %v", pendingID, doneBefore)

		f := &fakeTasks{e: e}
		second := e.runner(2)
		f.setRunner(second)
		f.acking.Store(true)
		tasksCtx, stopTasks := context.WithCancel(ctx)
		tasksDone := make(chan error, 1)
		go func() { tasksDone <- f.run(tasksCtx) }()
		defer func() { stopTasks(); <-tasksDone }()
		secondCtx, stopSecond := context.WithCancel(ctx)
		secondDone := make(chan error, 1)
		go func() { secondDone <- second.Run(secondCtx) }()
		assign(ctx, t, second)
		waitFor(t, "two checkpoints completed by the successor", 60*time.Second, func() bool {
			_, done, _ := e.history(ctx)
			return len(done) >= len(doneBefore)+2
		})
		stopSecond()
		if err := <-secondDone; err != nil {
			t.Fatalf("successor: %v", err)
		}
		triggers, completes, gens := e.history(ctx)
		t.Logf("triggers %v, completes %v, generations %v", triggers, completes, gens)
		strictlyIncreasing(t, "trigger IDs", triggers)
		strictlyIncreasing(t, "complete IDs", completes)
		for _, id := range completes[len(doneBefore):] {
			if id <= pendingID {
				t.Errorf("the successor completed %d, not above the pending %d", id, pendingID)
			}
		}
	})
}

// runChildCoordinator is the child process: a coordinator and fake tasks that
// stop acknowledging after three completed checkpoints. It prints "pending N"
// when checkpoint N is triggered after that, then waits to be killed.
func runChildCoordinator(t *testing.T) {
	ctx := context.Background()
	c := &kafkatest.Cluster{Brokers: strings.Split(os.Getenv("RUNNER_BROKERS"), ",")}
	prefix := os.Getenv("RUNNER_PREFIX")
	e := newEnv(t, c)
	e.topics = controltopic.NewTopics(prefix)
	e.txid = controltopic.CoordinatorTransactionalID(prefix)
	e.opts = []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}

	r := e.runner(1)
	f := &fakeTasks{e: e}
	f.setRunner(r)
	f.acking.Store(true)
	go func() { _ = f.run(ctx) }()
	go func() { _ = r.Run(ctx) }()
	assign(ctx, t, r)
	waitFor(t, "three completed checkpoints", 60*time.Second, func() bool {
		_, done, _ := e.history(ctx)
		if len(done) >= 3 {
			f.acking.Store(false)
			return true
		}
		return false
	})
	_, done, _ := e.history(ctx)
	last := done[len(done)-1]
	waitFor(t, "a pending checkpoint", 30*time.Second, func() bool { return ckpt.ID(f.lastTrg.Load()) > last })
	fmt.Printf("pending %d\n", f.lastTrg.Load())
	select {} // until killed
}
