// Package e2e holds Weir's end-to-end exactly-once test: real processor
// processes on the real Kafka broker, killed with SIGKILL at random moments
// and rescaled, checked by an independent read_committed verifier.
package e2e

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

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
	exactlyOnce(t, c, secured{}, countJob, records(), 5)
}

// TestExactlyOnceOverSASLSSL is the same promise on a secured cluster: the
// replicas only know the broker's SASL_SSL listener (SCRAM-SHA-512, the
// password from a file), so every Kafka client they create must use the
// job's TLS and SASL settings, and the independent verifier reads with its
// own credentials through its own franz-go client.
func TestExactlyOnceOverSASLSSL(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	c := kafkatest.NewReal(t)
	s := kafkatest.NewSecure(t)
	caPEM, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate in " + s.CAFile)
	}
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte(kafkatest.SCRAMPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, c, secured{
		brokers: s.SASLSSL,
		kafka: fmt.Sprintf("  tls: {enabled: true, ca_file: %s}\n  sasl: {mechanism: SCRAM-SHA-512, username: %s, password_file: %s}\n",
			s.CAFile, kafkatest.User, pwFile),
		verifier: []kgo.Opt{
			kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
			kgo.SASL(scram.Auth{User: kafkatest.VerifierUser, Pass: kafkatest.VerifierSCRAMPassword}.AsSha512Mechanism()),
		},
	}, countJob, max(records()/4, 1000), 3)
}

// secured is how a run reaches a secured listener; zero: plaintext.
type secured struct {
	brokers  []string  // the job's and the verifier's
	kafka    string    // e2etest.Job.Kafka
	verifier []kgo.Opt // the verifier's TLS and SASL
}

// shape is the job a run counts with: countJob counts per record key in
// one stage; a two-stage job re-keys by a JSON field first (key_by), so
// its records cross a shuffle topic.
type shape struct {
	name        string // the job name's stem
	keyBy       string // e2etest.Job.KeyBy; "" for one stage
	parallelism int    // e2etest.Job.Parallelism
	pages       int    // the input's pages (e2etest.NewClicks); 0: one key per user
	stage       string // the stage after the key_by, which names the shuffle topic
	keyGroups   int    // the shuffle topic's partitions: job.max_parallelism
	// pause is the wait between the 5000-record chunks of the input's
	// second half; default 100ms.
	pause time.Duration
}

var countJob = shape{name: "e2e"}

// exactlyOnce runs the job of the given shape on three replicas over
// total records, with kills kill -9s and a rescale, and checks the
// committed output.
func exactlyOnce(t *testing.T, c *kafkatest.Cluster, sec secured, sh shape, total, kills int) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	began := time.Now()

	bin, err := e2etest.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	job := kafkatest.Name(t, sh.name)
	input, output := job+"-clicks", job+"-counts"
	c.CreateTopic(t, input, partitions, nil)
	c.CreateTopic(t, output, partitions, nil)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "job.yaml")
	brokers := c.Brokers
	if sec.brokers != nil {
		brokers = sec.brokers
	}
	jobFile := e2etest.Job{Name: job, Input: input, Output: output, Brokers: brokers, Kafka: sec.kafka,
		KeyBy: sh.keyBy, Parallelism: sh.parallelism}
	if err := jobFile.Write(cfgFile); err != nil {
		t.Fatal(err)
	}
	commits := e2etest.WatchCommits(t, c.Brokers, job)
	verifier := e2etest.StartVerifier(t, brokers, output, sec.verifier...)

	var in *e2etest.Input
	if sh.pages > 0 {
		in = e2etest.NewClicks(t, c.Brokers, input, keys, sh.pages)
	} else {
		in = e2etest.NewInput(t, c.Brokers, input, keys)
	}
	in.Good(ctx, total/2) // half before the run
	cl := e2etest.NewReplicas(t, bin, cfgFile, dir, e2etest.ReplicaOptions{HTTP: true})
	for range 3 {
		cl.Start()
	}
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		// The second half, spread over the run.
		pause := cmp.Or(sh.pause, 100*time.Millisecond)
		for n := total / 2; n > 0; n -= 5000 {
			in.Good(ctx, min(n, 5000))
			time.Sleep(pause)
		}
	}()

	// Chaos: kill -9 of a random replica, each restarted, and the replica
	// count going 3 → 4 → 2.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	if err := verifier.WaitSeenWhile(total/20, 5*time.Minute, cl.Exited); err != nil {
		t.Fatal(err)
	}
	for i := range kills {
		time.Sleep(time.Duration(2000+rng.IntN(4000)) * time.Millisecond)
		victim := cl.KillRandom(rng)
		t.Logf("chaos %d: kill -9 replica %s (%d output records committed)", i+1, victim, verifier.Seen())
		time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		cl.Restart(victim)
	}
	t.Logf("scale 3 → 4 (%d output records committed)", verifier.Seen())
	cl.Start()
	time.Sleep(8 * time.Second)
	t.Logf("scale 4 → 2 (%d output records committed)", verifier.Seen())
	cl.StopGracefully(2)

	<-producerDone
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
	if sh.keyBy != "" {
		// Barriers cross the shuffle whole: the trigger time a downstream
		// task measures its start delay from came in the barrier records.
		if n := startDelays(cl, sh.stage); n == 0 {
			t.Errorf("no replica's /metrics has a weir_task_checkpoint_start_delay_seconds observation for stage %s", sh.stage)
		}
	}
	cl.StopAll()
	e2etest.CheckCheckpointIDs(t, commits)
	e2etest.CheckNoOpenTransactions(ctx, t, c.Brokers, job)
	if sh.keyBy != "" {
		e2etest.CheckShufflePurged(ctx, t, c.Brokers, job, sh.keyGroups, sh.stage)
	}
	cps, err := e2etest.ReadCheckpoints(ctx, c.Brokers, job)
	if err != nil {
		t.Fatalf("read the control topics: %v", err)
	}
	if sh.keyBy != "" {
		// job.parallelism took effect: the acks name the downstream
		// stage's tasks <stage>/0 .. <stage>/<parallelism-1>.
		var tasks []string
		for task := range cps.Align {
			if strings.HasPrefix(task, sh.stage+"/") {
				tasks = append(tasks, task)
			}
		}
		slices.Sort(tasks)
		var want []string
		for i := range sh.parallelism {
			want = append(want, fmt.Sprintf("%s/%d", sh.stage, i))
		}
		if !slices.Equal(tasks, want) {
			t.Errorf("downstream tasks that acked checkpoints: %v, want %v", tasks, want)
		}
	}
	align := cps.AlignAll("")
	t.Logf("run: %d input records over %d keys, %d kill -9s, %d checkpoints completed (duration p50 %v, p99 %v; alignment p99 %v over %d acks), %v in all",
		sum, len(perKey), kills, len(cps.Durations), e2etest.Quantile(cps.Durations, 0.5), e2etest.Quantile(cps.Durations, 0.99),
		e2etest.Quantile(align, 0.99), len(align), time.Since(began).Round(time.Second))
}

// startDelays sums weir_task_checkpoint_start_delay_seconds_count of stage
// over the running replicas' /metrics: the barriers whose trigger time
// reached that stage's tasks.
func startDelays(cl *e2etest.Replicas, stage string) float64 {
	series := `weir_task_checkpoint_start_delay_seconds_count{stage="` + stage + `"} `
	var n float64
	for _, id := range cl.IDs() {
		p := cl.Proc(id)
		if p == nil {
			continue
		}
		status, body, err := p.Get("/metrics")
		if err != nil || status != 200 {
			continue
		}
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, series); ok {
				var f float64
				if _, err := fmt.Sscan(v, &f); err == nil {
					n += f
				}
			}
		}
	}
	return n
}
