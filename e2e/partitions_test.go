package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// TestInputPartitionsAddedUnderLoad is issue 31's partition growth: the
// two-stage views-per-page job (its downstream parallelism left to follow
// the input) runs on three replicas while clicks keep arriving; the input
// grows from 8 to 12 partitions, a replica is killed with SIGKILL a few
// seconds later and restarted. The independent read_committed verifier
// finds every page's counts exactly 1..N (nothing lost, nothing doubled,
// the clicks written to partitions 8–11 included), /metrics of the
// replicas show weir_source_lag_records series for partitions 8–11, the
// checkpoint IDs only increased and no transaction is left open. The
// coordinator reads the partition count every 5s here
// (kafka.metadata_max_age).
func TestInputPartitionsAddedUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	c := kafkatest.NewReal(t)
	const (
		before = 8
		after  = 12
		pages  = 200
	)
	// A quarter before the run, then a steady flow across the growth,
	// the kill and the restart.
	preload, rate := max(records()/8, 5000), max(records()/100, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := e2etest.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	job := kafkatest.Name(t, "grow")
	input, output := job+"-clicks", job+"-counts"
	c.CreateTopic(t, input, before, nil)
	c.CreateTopic(t, output, before, nil)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "job.yaml")
	if err := (e2etest.Job{Name: job, Input: input, Output: output, Brokers: c.Brokers, KeyBy: "page",
		Kafka: "  metadata_max_age: 5s\n"}).Write(cfgFile); err != nil {
		t.Fatal(err)
	}
	commits := e2etest.WatchCommits(t, c.Brokers, job)
	verifier := e2etest.StartVerifier(t, c.Brokers, output)
	// The input's producer learns of the new partitions within a second,
	// so that its keys spread over all twelve soon after the growth.
	in := e2etest.NewClicks(t, c.Brokers, input, keys, pages, kgo.MetadataMinAge(250*time.Millisecond), kgo.MetadataMaxAge(time.Second))
	in.Good(ctx, preload)
	cl := e2etest.NewReplicas(t, bin, cfgFile, dir, e2etest.ReplicaOptions{HTTP: true})
	for range 3 {
		cl.Start()
	}
	stopFlow := in.Flow(ctx, rate)
	defer stopFlow()
	if err := verifier.WaitSeenWhile(preload/2, 5*time.Minute, cl.Exited); err != nil {
		t.Fatal(err)
	}

	t.Logf("growing %s from %d to %d partitions (%d output records committed)", input, before, after, verifier.Seen())
	adm := c.Admin(t)
	rs, err := adm.UpdatePartitions(ctx, after, input)
	if err == nil {
		err = rs.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 31))
	time.Sleep(time.Duration(3000+rng.IntN(4000)) * time.Millisecond)
	victim := cl.KillRandom(rng)
	t.Logf("kill -9 replica %s (%d output records committed)", victim, verifier.Seen())
	time.Sleep(time.Duration(500+rng.IntN(2000)) * time.Millisecond)
	cl.Restart(victim)

	// Every new partition has a lag series on the replica that reads it,
	// within a reading of the partition count and a restore.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		missing := missingLagSeries(t, cl, input, before, after)
		if len(missing) == 0 {
			break
		}
		if err := cl.Exited(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no weir_source_lag_records series on any replica's /metrics for partitions %v of %s", missing, input)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("lag series for partitions %d-%d on /metrics (%d output records committed)", before, after-1, verifier.Seen())
	time.Sleep(10 * time.Second) // input on all twelve partitions, processed
	stopFlow()
	if err := in.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	perKey, sum := in.Counts()
	if err := verifier.WaitSeenWhile(sum, 5*time.Minute, cl.Exited); err != nil {
		t.Error(err)
		verifier.Check(perKey, sum, 0) // what is missing
		t.FailNow()
	}
	verifier.Check(perKey, sum, 5*time.Minute)

	// The new partitions were written to: their records are among those
	// counted exactly once.
	ends, err := adm.ListEndOffsets(ctx, input)
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Partition >= before && o.Offset == 0 {
			t.Errorf("partition %d of %s received no records: the test proves nothing about it", o.Partition, input)
		}
	})
	cl.StopAll()
	e2etest.CheckCheckpointIDs(t, commits)
	e2etest.CheckNoOpenTransactions(ctx, t, c.Brokers, job)
	t.Logf("run: %d input records over %d pages, partitions %d → %d with a kill -9 of %s", sum, len(perKey), before, after, victim)
}

var lagRE = regexp.MustCompile(`^weir_source_lag_records\{([^}]*)\}`)

// missingLagSeries returns the partitions in [from, to) of topic that no
// running replica's /metrics has a weir_source_lag_records series for.
func missingLagSeries(t *testing.T, cl *e2etest.Replicas, topic string, from, to int) []int {
	t.Helper()
	seen := map[string]bool{}
	for _, id := range cl.IDs() {
		p := cl.Proc(id)
		if p == nil {
			continue
		}
		status, body, err := p.Get("/metrics")
		if err != nil || status != 200 {
			continue
		}
		sc := bufio.NewScanner(strings.NewReader(body))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			m := lagRE.FindStringSubmatch(sc.Text())
			if m == nil || !strings.Contains(m[1], `topic="`+topic+`"`) {
				continue
			}
			for _, kv := range strings.Split(m[1], ",") {
				if v, ok := strings.CutPrefix(kv, `partition="`); ok {
					seen[strings.TrimSuffix(v, `"`)] = true
				}
			}
		}
	}
	var missing []int
	for p := from; p < to; p++ {
		if !seen[fmt.Sprint(p)] {
			missing = append(missing, p)
		}
	}
	return missing
}
