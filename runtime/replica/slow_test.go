package replica_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/internal/testlog"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/keygroup"
	"github.com/weir-stream/weir/runtime/replica"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// slowStage is the downstream stage of slowViewsJob, named by its keyed
// operator; slowPerRecord is how long its task 0 sleeps per record.
const (
	slowStage     = "slow-count"
	slowPerRecord = 2 * time.Millisecond
)

// TestTwoStageSlowDownstream runs a two-stage Go job (clicks keyed by user
// → KeyBy page → a keyed Process that counts per page → exactly-once sink)
// in which one downstream task, slow-count/0, sleeps 2ms per record (on
// average: in sleeps of 20ms), with a
// backlog behind it at the start and steady input after. Checkpoints must
// keep completing (the slow task's barriers wait behind its records in the
// shuffle partitions; the other tasks are not held up by it beyond their
// own barriers), and the output must be exactly once. It reports the
// checkpoint durations (p50, p99) and the alignment times of the
// downstream tasks (align_ms of their acks) as result lines.
func TestTwoStageSlowDownstream(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const (
			partitions = 4 // input partitions, and so downstream tasks
			users      = 200
			pages      = 40
			backlog    = 4000 // records produced before the job starts
			rate       = 800  // records/s of the steady input after
			steadyFor  = 10 * time.Second
			interval   = 500 * time.Millisecond
		)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "slow")
		in, out := job+"-clicks", job+"-views"
		c.CreateTopic(t, in, partitions, nil)
		c.CreateTopic(t, out, partitions, nil)
		dir := t.TempDir()

		// How much of the input the slow task owns: the pages whose key
		// group falls in task 0's range of the default 128.
		lo, hi := keygroup.Range(0, partitions, keygroup.DefaultMaxParallelism)
		slowPages := 0
		for p := range pages {
			if g := keygroup.Of([]byte(e2etest.Page(p, pages)), keygroup.DefaultMaxParallelism); g >= lo && g < hi {
				slowPages++
			}
		}

		clicks := e2etest.NewClicks(t, c.Brokers, in, users, pages)
		verifier := e2etest.StartVerifier(t, c.Brokers, out)
		commits := e2etest.WatchCommits(t, c.Brokers, job)
		clicks.Good(ctx, backlog)
		if err := clicks.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		yaml := fmt.Sprintf(`
job:
  name: %s
  pipeline: # the Go job below runs; the pipeline only satisfies the configuration's checks
    - source: {topics: [%s]}
    - sink: {topic: %s}
kafka: {brokers: [%s], session_timeout: 6s}
checkpoint: {interval: %s, timeout: 30s, storage: "file://%s/checkpoints"}
state: {dir: "%s/state-a"}
http: {address: ""}
process: {replica_id: a, grace_period: 20s}
`, job, in, out, c.Brokers[0], interval, dir, dir)
		r := startJobReplica(ctx, t, "a", yaml, slowViewsJob(t, job, in, out))
		waitReady(t, r.Replica)
		stop := clicks.Flow(ctx, rate)
		time.Sleep(steadyFor)
		stop()
		if err := clicks.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		perPage, total := clicks.Counts()
		verifier.Check(perPage, total, 2*time.Minute)
		caughtUp := time.Now()

		// Checkpoints kept completing: while the job ran behind the slow
		// task, several completed and no 15s went by without one (the
		// slow task's backlog at the start is about 2s of sleep).
		var completes []time.Time
		for _, rec := range commits.Records("complete") {
			if rec.Arrived.After(start) && rec.Arrived.Before(caughtUp) {
				completes = append(completes, rec.Arrived)
			}
		}
		if len(completes) < 3 {
			t.Fatalf("%d checkpoints completed in the %v the job took, want at least 3", len(completes), caughtUp.Sub(start).Round(time.Millisecond))
		}
		var gap time.Duration
		for i := 1; i < len(completes); i++ {
			gap = max(gap, completes[i].Sub(completes[i-1]))
		}
		if gap > 15*time.Second {
			t.Errorf("no checkpoint completed for %v while the slow task ran behind", gap.Round(time.Millisecond))
		}
		cps, err := e2etest.ReadCheckpoints(ctx, c.Brokers, job)
		if err != nil {
			t.Fatal(err)
		}
		if len(cps.Align[slowStage+"/0"]) == 0 {
			t.Fatalf("no ack of task %s/0 on the ack topic; acks came from %d tasks", slowStage, len(cps.Align))
		}
		align := cps.AlignAll(slowStage)
		slowAlign := append([]time.Duration(nil), cps.Align[slowStage+"/0"]...)
		slices.Sort(slowAlign)
		t.Logf("%s: %d input records (%d before the start, then %d/s for %v), task %s/0 sleeping %v per record owns %d of %d pages; caught up %v after the start; %d checkpoints completed, the longest gap between two %v",
			c.Name, total, backlog, rate, steadyFor, slowStage, slowPerRecord, slowPages, pages, caughtUp.Sub(start).Round(time.Millisecond),
			len(completes), gap.Round(time.Millisecond))
		t.Logf("checkpoint duration p50 %v, p99 %v, max %v over %d; alignment of the downstream tasks p50 %v, p99 %v over %d acks; of the slow task p99 %v, max %v",
			e2etest.Quantile(cps.Durations, 0.5), e2etest.Quantile(cps.Durations, 0.99), e2etest.Quantile(cps.Durations, 1), len(cps.Durations),
			e2etest.Quantile(align, 0.5), e2etest.Quantile(align, 0.99), len(align), e2etest.Quantile(slowAlign, 0.99), e2etest.Quantile(slowAlign, 1))
		if c.Kind == kafkatest.Real {
			e2etest.ResultMS(t, "slow_downstream_checkpoint_duration_p50", e2etest.Quantile(cps.Durations, 0.5))
			e2etest.ResultMS(t, "slow_downstream_checkpoint_duration_p99", e2etest.Quantile(cps.Durations, 0.99))
			e2etest.ResultMS(t, "slow_downstream_alignment_p99", e2etest.Quantile(align, 0.99))
		}
	})
}

// slowViewsJob is the job of TestTwoStageSlowDownstream: JSON clicks from
// in, keyed by their page, counted per page by a keyed Process whose task 0
// sleeps slowPerRecord per record, each count written to out as
// {"key":"<page>","count":<n>}, exactly once.
func slowViewsJob(t *testing.T, name, in, out string) *stream.Job {
	t.Helper()
	job := stream.NewJob(name)
	clicks := stream.From(job, stream.KafkaSource{Topics: []string{in}, Format: stream.FormatJSON,
		Start: kafkaio.Start{Kind: kafkaio.StartEarliest}}, stream.RawCodec{})
	byPage := stream.KeyBy(clicks, func(v []byte) ([]byte, error) {
		var c struct {
			Page string `json:"page"`
		}
		if err := json.Unmarshal(v, &c); err != nil {
			return nil, err
		}
		return []byte(c.Page), nil
	})
	counts := stream.Process(byPage, slowStage, func() stream.KeyedProcessFunction[[]byte, []byte] { return &slowCount{} })
	stream.To(counts, stream.KafkaSink{Topic: out, Delivery: kafkaio.DeliveryExactlyOnce}, stream.RawCodec{})
	if err := job.Build(); err != nil {
		t.Fatal(err)
	}
	return job
}

// slowCount counts per key and emits each count as the count job's JSON;
// in task 0 it sleeps slowPerRecord per record on average first.
type slowCount struct {
	n    *state.ValueState[int64]
	slow bool
	// debt is sleep owed: slowPerRecord per record, paid in sleeps of at
	// least slowSleepMin, minus what the sleeps overran. A sleep of 2ms
	// per record on a loaded machine (CI runs the suite with -race on two
	// cores) oversleeps by the scheduler's latency, several times its
	// length: the task then cannot keep up with its input at all, and an
	// aligned checkpoint waits behind an ever longer backlog (a run read
	// 77 records/s where 500 were meant). Paying the debt in larger sleeps
	// keeps the average at slowPerRecord.
	debt time.Duration
}

// slowSleepMin is the shortest sleep slowCount takes.
const slowSleepMin = 20 * time.Millisecond

func (s *slowCount) Open(oc stream.OpenContext) error {
	s.slow = oc.Index == 0
	var err error
	s.n, err = state.NewValueState(oc.Backend, oc.StateName("n"), stream.Int64Codec{})
	return err
}

func (s *slowCount) ProcessElement(ctx *stream.Context[[]byte], _ []byte) error {
	if s.slow {
		if s.debt += slowPerRecord; s.debt >= slowSleepMin {
			start := time.Now()
			time.Sleep(s.debt)
			s.debt = max(s.debt-time.Since(start), -slowSleepMin)
		}
	}
	n, _, err := s.n.Get()
	if err != nil {
		return err
	}
	n++
	if err := s.n.Put(n); err != nil {
		return err
	}
	key, _ := json.Marshal(string(ctx.Key()))
	v := append(append([]byte(`{"key":`), key...), `,"count":`...)
	return ctx.Emit(append(strconv.AppendInt(v, n, 10), '}'))
}

// startJobReplica starts an in-process replica of the Go job j with the
// configuration yaml (whose pipeline is not run), stopped when the test
// ends; adjust, if any, change its options.
func startJobReplica(ctx context.Context, t *testing.T, id, yaml string, j *stream.Job, adjust ...func(*replica.Options)) *testReplica {
	t.Helper()
	cfg, err := config.Load(config.Source{YAML: []byte(yaml), NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testlog.New(t, id), &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	tr := &testReplica{reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	opts := replica.Options{Config: cfg, Job: j, ReplicaID: id, Logger: log, Registerer: tr.reg}
	for _, f := range adjust {
		f(&opts)
	}
	tr.Replica, err = replica.New(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	go func() { tr.done <- tr.Run(rctx) }()
	var once sync.Once
	tr.stop = func() {
		once.Do(func() {
			rcancel()
			if err := <-tr.done; err != nil {
				t.Errorf("replica %s: %v", id, err)
			}
		})
	}
	t.Cleanup(tr.stop)
	return tr
}
