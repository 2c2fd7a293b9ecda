// Package faults is Weir's fault suite (`make test-faults`): one scenario
// per fault, each on the real Kafka broker with separate `bin/processor`
// processes, each ending in an exactly-once check of every key by an
// independent read_committed verifier (internal/e2etest), and each printing
// its recovery time as
//
//	result: fault_<scenario>_recovery = <seconds> s
//
// Scenarios that restart the broker or stop the S3 server start their own
// on ports of their own (services_test.go), never the shared ones.
//
// The suite runs only with WEIR_FAULTS=1 (the make target sets it), so that
// `go test ./...` in `make test` builds and vets it but does not run it
// a second time.
package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// Sizes shared by the scenarios: small enough that the suite fits in a few
// minutes on two cores, large enough that every task has work.
const (
	partitions = 4
	keys       = 200
	rate       = 400 // input records per second while input flows
)

// processorBin is built once for all scenarios by TestMain.
var processorBin string

func TestMain(m *testing.M) {
	if os.Getenv("WEIR_FAULTS") != "1" {
		fmt.Println("fault suite not run: set WEIR_FAULTS=1 (make test-faults)")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "weir-faults-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	processorBin, err = e2etest.BuildProcessor(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// scenario is one fault scenario's job: topics, configuration, input, the
// verifier and commit watcher, and its replicas.
type scenario struct {
	t       *testing.T
	ctx     context.Context
	name    string // the result line's <scenario>
	started time.Time
	c       *kafkatest.Cluster
	job     e2etest.Job
	dir     string
	cfgFile string

	in      *e2etest.Input
	ver     *e2etest.Verifier
	commits *e2etest.CommitWatcher
	reps    *e2etest.Replicas
	stopIn  func()
}

// scenarioOptions adjust a scenario's job and replicas.
type scenarioOptions struct {
	job      func(*e2etest.Job)
	replicas e2etest.ReplicaOptions
	// topicConfigs are set on the input and output topics.
	topicConfigs map[string]*string
	// inputOpts are added to the input producer's client.
	inputOpts []kgo.Opt
}

// newScenario creates the job's topics on c, writes its configuration and
// starts the verifier and the commit watcher. Nothing runs yet.
func newScenario(t *testing.T, c *kafkatest.Cluster, name string, opts scenarioOptions) *scenario {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	// Not t.TempDir: a failed scenario's logs and state stay for a look.
	dir, err := os.MkdirTemp("", "weir-faults-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	s := &scenario{t: t, ctx: ctx, name: name, started: time.Now(), c: c, dir: dir}
	jobName := kafkatest.Name(t, "faults")
	s.job = e2etest.Job{Name: jobName, Input: jobName + "-in", Output: jobName + "-out", Brokers: c.Brokers}
	if opts.job != nil {
		opts.job(&s.job)
	}
	c.CreateTopic(t, s.job.Input, partitions, opts.topicConfigs)
	c.CreateTopic(t, s.job.Output, partitions, opts.topicConfigs)
	s.cfgFile = filepath.Join(s.dir, "job.yaml")
	s.writeJob()
	s.in = e2etest.NewInput(t, c.Brokers, s.job.Input, keys, opts.inputOpts...)
	s.ver = e2etest.StartVerifier(t, c.Brokers, s.job.Output)
	s.commits = e2etest.WatchCommits(t, c.Brokers, s.job.Name)
	// Registered before the replicas, so it runs after they were killed.
	t.Cleanup(func() {
		if t.Failed() {
			s.dumpLogs()
			t.Logf("replica logs and state of the failed scenario kept in %s", s.dir)
			// Last, so that the tail of a CI log, which is often all one
			// sees, tells what happened when.
			s.dumpTimeline()
			return
		}
		if os.Getenv("WEIR_FAULTS_KEEP") != "1" {
			_ = os.RemoveAll(s.dir)
		}
	})
	s.reps = e2etest.NewReplicas(t, processorBin, s.cfgFile, s.dir, opts.replicas)
	return s
}

// writeJob writes s.job to the configuration file (again, after a change).
func (s *scenario) writeJob() {
	s.t.Helper()
	if err := s.job.Write(s.cfgFile); err != nil {
		s.t.Fatal(err)
	}
}

// dumpLogs prints the tail of every replica's log.
func (s *scenario) dumpLogs() {
	matches, _ := filepath.Glob(filepath.Join(s.dir, "*.log"))
	for _, m := range matches {
		b, _ := os.ReadFile(m)
		const tail = 6000
		if len(b) > tail {
			b = b[len(b)-tail:]
		}
		s.t.Logf("--- last lines of %s:\n%s", filepath.Base(m), b)
	}
}

// dumpTimeline prints the commit topic's records other than triggers,
// with when the test saw each, and the committed output's progress.
func (s *scenario) dumpTimeline() {
	var b strings.Builder
	for _, r := range s.commits.Records("") {
		if r.Type == "trigger" {
			continue
		}
		fmt.Fprintf(&b, "  %s +%5.1fs %-10s id=%d gen=%d\n", r.Arrived.Format("15:04:05.000"), r.Arrived.Sub(s.started).Seconds(), r.Type, r.ID, r.Gen)
	}
	s.t.Logf("timeline of the failed scenario (started %s): commit topic records (triggers left out):\n%s  committed output records seen by the verifier: %d",
		s.started.Format("15:04:05.000"), b.String(), s.ver.Seen())
}

// startReplicas starts n replicas and the input flow, and waits until
// committed output flows.
func (s *scenario) startReplicas(n int) {
	s.t.Helper()
	for range n {
		s.reps.Start()
	}
	s.flow()
	s.waitOutput(200, 3*time.Minute)
}

// flow starts the input flow (if not flowing).
func (s *scenario) flow() {
	if s.stopIn == nil {
		s.stopIn = s.in.Flow(s.ctx, rate)
	}
}

// stopFlow stops the input flow and waits until the broker has
// acknowledged all of it.
func (s *scenario) stopFlow() {
	s.t.Helper()
	if s.stopIn != nil {
		s.stopIn()
		s.stopIn = nil
	}
	if err := s.in.Flush(s.ctx); err != nil {
		s.t.Fatal(err)
	}
}

// waitOutput waits until n more committed output records than now were read.
func (s *scenario) waitOutput(n int, timeout time.Duration) {
	s.t.Helper()
	want := s.ver.Seen() + n
	deadline := time.Now().Add(timeout)
	for s.ver.Seen() < want {
		s.failOnExit()
		if time.Now().After(deadline) {
			s.t.Fatalf("output %s: %d committed records after %v, want at least %d", s.job.Output, s.ver.Seen(), timeout, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.failOnViolations()
}

// failOnExit fails the scenario when a replica it did not stop has exited.
func (s *scenario) failOnExit() {
	s.t.Helper()
	for _, id := range s.reps.IDs() {
		p := s.reps.Proc(id)
		select {
		case <-p.Done():
			s.t.Fatalf("replica %s exited (%v); its last lines:\n%s", id, p.Err(), tail(p.Log(), 3000))
		default:
		}
	}
}

// failOnViolations stops the scenario as soon as the verifier found
// duplicated or lost output.
func (s *scenario) failOnViolations() {
	s.t.Helper()
	if v := s.ver.Violations(); len(v) > 0 {
		s.t.Fatalf("exactly-once violated: %v", v[:min(len(v), 10)])
	}
}

// waitGeneration waits until a `generation` record arrives after since.
func (s *scenario) waitGeneration(since time.Time, timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, r := range s.commits.Records("generation") {
			if r.Arrived.After(since) {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.t.Fatalf("no new generation within %v", timeout)
}

// checkStalled fails the test if committed output advanced during the
// fault, from its start plus grace (commits already under way may land)
// to its end: a fault that stops nothing proves nothing.
func (s *scenario) checkStalled(start, end time.Time, grace time.Duration) {
	s.t.Helper()
	if n := s.ver.ArrivedBetween(start.Add(grace), end); n > 0 {
		s.t.Fatalf("committed output advanced %d times during the fault (from %v after its start): the fault was not effective", n, grace)
	}
}

// recovered waits until committed output advances after the fault's end,
// and prints the scenario's recovery time in the house format.
func (s *scenario) recovered(faultEnd time.Time, timeout time.Duration) time.Duration {
	s.t.Helper()
	d, err := s.ver.WaitAdvance(faultEnd, timeout)
	if err != nil {
		s.t.Fatalf("no recovery: %v", err)
	}
	s.failOnViolations()
	return d
}

// result prints a measurement line.
func (s *scenario) result(what string, d time.Duration) {
	s.t.Helper()
	e2etest.Result(s.t, "fault_"+s.name+"_"+what, d)
}

// finish stops the input, checks every key exactly once in the committed
// output, stops the replicas, and checks the checkpoint IDs and that no
// transaction is left open; it prints the scenario's duration.
func (s *scenario) finish() {
	s.t.Helper()
	s.stopFlow()
	perKey, total := s.in.Counts()
	s.ver.Check(perKey, total, 3*time.Minute)
	s.reps.StopAll()
	e2etest.CheckCheckpointIDs(s.t, s.commits)
	e2etest.CheckNoOpenTransactions(s.ctx, s.t, s.c.Brokers, s.job.Name)
	s.result("duration", time.Since(s.started))
}
