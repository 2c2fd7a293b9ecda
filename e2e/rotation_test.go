package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/sink"
)

// Producer-ID rotation (issue 10, defect 2). With transactions v2 every end
// of a transaction bumps the producer epoch, and Apache Kafka 4.4 moves a
// transactional ID whose transaction ends at epoch 32766 to a new producer
// ID at epoch 0. The job's sink transactional IDs are aged to just below the
// limit before it starts; each time one rotates, its replica is killed
// (SIGKILL) while the newest completed checkpoint still names the
// transaction committed at the old producer ID, restarted, killed again
// once the restart's recovery has fenced the ID (the coordinator then no
// longer knows the old producer ID), and restarted. The job must go on, and
// an independent read_committed verifier must find every count exactly
// once.

const (
	rotationPartitions = 2
	rotationPoolSlots  = 3    // checkpoint.max_concurrent 1 + 2 (sink.DefaultPoolSize)
	rotationMargin     = 12   // epochs left before the limit when the job starts
	rotationKills      = 3    // rotations to kill around
	rotationRate       = 1600 // input records per second (500 every 300 ms)
)

func TestProducerIDRotationUnderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	c := kafkatest.NewReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	bin, err := e2etest.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	job := kafkatest.Name(t, "rot")
	input, output := job+"-clicks", job+"-counts"
	c.CreateTopic(t, input, rotationPartitions, nil)
	c.CreateTopic(t, output, rotationPartitions, nil)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "job.yaml")
	if err := (e2etest.Job{Name: job, Input: input, Output: output, Brokers: c.Brokers}).Write(cfgFile); err != nil {
		t.Fatal(err)
	}

	// The sink's transactional IDs: <prefix><stage>@<topic>-<partition>-<slot>
	// (sink.PoolName), the stage of a YAML pipeline being "main". Those of partition 0 are
	// aged (aging costs about 3 ms a bump on the test broker, sequential
	// per ID); partition 1's task runs beside them as usual.
	var ids []string
	for p := range 1 {
		for s := range rotationPoolSlots {
			ids = append(ids, sink.TxnID("_weir."+job+".", sink.PoolName("main", output), int32(p), s))
		}
	}
	raw := c.Client(t)
	start := time.Now()
	aged := ageIDs(ctx, t, raw, 32766-rotationMargin, ids)
	t.Logf("aged %d transactional IDs to epoch %d in %v", len(ids), 32766-rotationMargin, time.Since(start).Round(time.Millisecond))

	// The verifier counts the data records a read_committed consumer of
	// the output has seen, as they arrive: committed output (an abort
	// marker moves the last stable offset too, so offsets would not do).
	verifier := e2etest.StartVerifier(t, c.Brokers, output)
	in := e2etest.NewInput(t, c.Brokers, input, keys)
	stopInput := in.Flow(ctx, rotationRate)

	cl := e2etest.NewReplicas(t, bin, cfgFile, dir, e2etest.ReplicaOptions{})
	replica := cl.Start()
	if err := verifier.WaitSeen(1, 3*time.Minute); err != nil {
		t.Fatal(err)
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	rotated := map[string]bool{}
	var recovery time.Duration
	for kill := 0; kill < rotationKills; kill++ {
		id, pid := waitRotation(ctx, t, raw, ids, aged, rotated)
		rotated[id] = true
		cl.Kill(replica)
		t.Logf("rotation %d: %s moved from producer id %d to %d; kill -9 %s", kill+1, id, aged[id], pid, replica)
		cl.Restart(replica)
		// Kill again once the restart's recovery has fenced the ID: the
		// coordinator has forgotten the old producer ID, and the newest
		// completed checkpoint still names the transaction.
		waitFenced(ctx, t, raw, id, pid)
		time.Sleep(time.Duration(rng.IntN(150)) * time.Millisecond)
		cl.Kill(replica)
		t.Logf("rotation %d: %s fenced by the recovery; kill -9 %s again", kill+1, id, replica)
		cl.Restart(replica)
		recovery = waitAdvance(t, verifier, time.Now(), cl.LogPath(replica))
		t.Logf("rotation %d: committed output advances %.1fs after the restart", kill+1, recovery.Seconds())
	}
	t.Logf("recovery: %.1fs from the last restart until committed output advanced", recovery.Seconds())
	e2etest.Result(t, "fault_rotation_recovery", recovery)

	stopInput()
	if err := in.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	perKey, total := in.Counts()
	verifier.Check(perKey, total, 5*time.Minute)
	cl.StopAll()
	e2etest.CheckNoOpenTransactions(ctx, t, c.Brokers, job)

	// The path of the defect was taken: a recovery found a transaction
	// at an old producer ID committed from its record in the log.
	logs, err := os.ReadFile(cl.LogPath(replica))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(logs), "its record is visible to read_committed readers"); n == 0 {
		t.Fatalf("no recovery had to decide a rotated transaction from the log: the scenario was not exercised")
	} else {
		t.Logf("%d recoveries decided a transaction of a rotated ID from the log", n)
	}
}

// ageIDs bumps each ID's producer epoch with raw InitProducerID requests,
// all IDs in parallel, until it is epoch, and returns each ID's producer ID.
// It shares no code with Weir.
func ageIDs(ctx context.Context, t *testing.T, cl *kgo.Client, epoch int16, ids []string) map[string]int64 {
	t.Helper()
	pids := make([]int64, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			for {
				req := kmsg.NewPtrInitProducerIDRequest()
				req.TransactionalID = &id
				req.TransactionTimeoutMillis = 60_000
				req.ProducerID, req.ProducerEpoch = -1, -1
				resp, err := req.RequestWith(ctx, cl)
				if err == nil {
					err = kerr.ErrorForCode(resp.ErrorCode)
				}
				switch {
				case err == nil && resp.ProducerEpoch >= epoch:
					pids[i] = resp.ProducerID
					return
				case err == nil, kerr.IsRetriable(err), err == kerr.ConcurrentTransactions:
				default:
					errs[i] = fmt.Errorf("%s: %w", id, err)
					return
				}
			}
		})
	}
	wg.Wait()
	out := map[string]int64{}
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("age transactional IDs: %v", errs[i])
		}
		out[id] = pids[i]
	}
	return out
}

// waitRotation polls the transaction coordinator until one of ids not yet
// in done runs under another producer ID than it was aged under, and
// returns it with its new producer ID.
func waitRotation(ctx context.Context, t *testing.T, cl *kgo.Client, ids []string, aged map[string]int64, done map[string]bool) (string, int64) {
	t.Helper()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ds, err := adm.DescribeTransactions(ctx, ids...)
		if err == nil {
			for _, id := range ids {
				if d, ok := ds[id]; ok && d.Err == nil && !done[id] && d.ProducerID != aged[id] {
					return id, d.ProducerID
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no sink transactional ID rotated to a new producer ID within 3 minutes")
	return "", 0
}

// waitFenced waits until id, rotated to producer ID pid, is past epoch 0
// of it (an InitProducerID of the restarted replica's recovery).
func waitFenced(ctx context.Context, t *testing.T, cl *kgo.Client, id string, pid int64) {
	t.Helper()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ds, err := adm.DescribeTransactions(ctx, id)
		if err == nil {
			if d := ds[id]; d.Err == nil && (d.ProducerID != pid || d.ProducerEpoch > 0) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s was not fenced by the restarted replica within 2 minutes", id)
}

// waitAdvance waits until committed output arrives after since (the
// restart) and returns how long that took; if that does not happen within
// two minutes the job is stuck, and the replica's log says why.
func waitAdvance(t *testing.T, v *e2etest.Verifier, since time.Time, logFile string) time.Duration {
	t.Helper()
	d, err := v.WaitAdvance(since, 2*time.Minute)
	if err != nil {
		b, _ := os.ReadFile(logFile)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Fatalf("the job is stuck: %v after the restart; last log lines:\n%s",
			err, strings.Join(lines[max(0, len(lines)-8):], "\n"))
	}
	return d
}
