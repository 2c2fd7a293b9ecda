// Package e2e holds Weir's end-to-end exactly-once test: real processor
// processes on the real Kafka broker, killed with SIGKILL at random moments
// and rescaled, checked by an independent read_committed verifier.
package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
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
	exactlyOnce(t, c, secured{}, records(), 5)
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
	}, max(records()/4, 1000), 3)
}

// secured is how a run reaches a secured listener; zero: plaintext.
type secured struct {
	brokers  []string  // the job's and the verifier's
	kafka    string    // e2etest.Job.Kafka
	verifier []kgo.Opt // the verifier's TLS and SASL
}

// exactlyOnce runs the count job on three replicas over total records,
// with kills kill -9s and a rescale, and checks the committed output.
func exactlyOnce(t *testing.T, c *kafkatest.Cluster, sec secured, total, kills int) {
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
	brokers := c.Brokers
	if sec.brokers != nil {
		brokers = sec.brokers
	}
	if err := (e2etest.Job{Name: job, Input: input, Output: output, Brokers: brokers, Kafka: sec.kafka}).Write(cfgFile); err != nil {
		t.Fatal(err)
	}
	commits := e2etest.WatchCommits(t, c.Brokers, job)
	verifier := e2etest.StartVerifier(t, brokers, output, sec.verifier...)

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

	// Chaos: kill -9 of a random replica, each restarted, and the replica
	// count going 3 → 4 → 2.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	if err := verifier.WaitSeen(total/20, 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	for i := range kills {
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
