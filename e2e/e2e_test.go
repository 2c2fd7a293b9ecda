// Package e2e holds Weir's end-to-end exactly-once test: real processor
// processes on the real Kafka broker, killed with SIGKILL at random moments
// and rescaled, checked by an independent read_committed verifier.
package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weir-stream/weir/internal/e2etest"
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

	bin, err := e2etest.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	job := kafkatest.Name(t, "e2e")
	input, output := job+"-clicks", job+"-counts"
	c.CreateTopic(t, input, partitions, nil)
	c.CreateTopic(t, output, partitions, nil)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "job.yaml")
	if err := (e2etest.Job{Name: job, Input: input, Output: output, Brokers: c.Brokers}).Write(cfgFile); err != nil {
		t.Fatal(err)
	}
	commits := e2etest.WatchCommits(t, c.Brokers, job)
	verifier := e2etest.StartVerifier(t, c.Brokers, output)

	total := records()
	in := e2etest.NewInput(t, c.Brokers, input, keys)
	in.Good(ctx, total/2) // half before the run
	cl := e2etest.NewReplicas(t, bin, cfgFile, dir, e2etest.ReplicaOptions{})
	for range 3 {
		cl.Start()
	}
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		// The second half, spread over the run.
		for n := total / 2; n > 0; n -= 5000 {
			in.Good(ctx, min(n, 5000))
			time.Sleep(100 * time.Millisecond)
		}
	}()

	// Chaos: at least five kill -9 of a random replica, each restarted, and
	// the replica count going 3 → 4 → 2.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	if err := verifier.WaitSeen(total/20, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		time.Sleep(time.Duration(2000+rng.IntN(4000)) * time.Millisecond)
		victim := cl.KillRandom(rng)
		t.Logf("chaos %d: kill -9 replica %s", i+1, victim)
		time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		cl.Restart(victim)
	}
	t.Log("scale 3 → 4")
	cl.Start()
	time.Sleep(8 * time.Second)
	t.Log("scale 4 → 2")
	cl.StopGracefully(2)

	<-producerDone
	if err := in.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	perKey, sum := in.Counts()
	verifier.Check(perKey, sum, 5*time.Minute)
	cl.StopAll()
	e2etest.CheckCheckpointIDs(t, commits)
	e2etest.CheckNoOpenTransactions(ctx, t, c.Brokers, job)
}
