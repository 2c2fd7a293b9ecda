package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/internal/s3test"
	"github.com/weir-stream/weir/kafkaio/controltopic"
)

// syncBuffer is a log sink shared by a replica's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// failJob is a count job from in to out whose source checks JSON, with
// on_error as given; replica id serves HTTP on its own port.
type failJob struct {
	t             *testing.T
	c             *kafkatest.Cluster
	name, in, out string
	dir           string
}

func (j *failJob) file(onError string) string {
	f := filepath.Join(j.dir, "job-"+onError+".yaml")
	yaml := fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s], format: json, on_error: %s}
    - aggregate: {op: count}
    - sink: {topic: %s}
kafka: {brokers: [%s], session_timeout: 6s}
checkpoint: {interval: 300ms, timeout: 20s, storage: "file://%s/chk"}
log: {level: info}
`, j.name, j.in, onError, j.out, j.c.Brokers[0], j.dir)
	if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
		j.t.Fatal(err)
	}
	return f
}

// proc is one replica run as `processor run` runs it.
type proc struct {
	id   string
	addr string
	log  *syncBuffer
	stop func()
}

func (j *failJob) start(ctx context.Context, id, file string) *proc {
	t := j.t
	t.Helper()
	p := &proc{id: id, addr: freeAddr(t), log: &syncBuffer{}}
	cfg, err := config.Load(config.Source{File: file, NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Process.ReplicaID = id
	cfg.State.Dir = filepath.Join(j.dir, "state-"+id)
	cfg.HTTP.Address = p.addr
	cfg.Process.GracePeriod = 20 * time.Second
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- serve(rctx, cfg, nil, p.log, nil) }()
	var once sync.Once
	p.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("replica %s: %v", id, err)
			}
		})
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("replica %s log:\n%s", id, p.log)
		}
	})
	return p
}

func (p *proc) get(path string) (int, string) {
	resp, err := http.Get("http://" + p.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the value of the sample whose line starts with series.
func (p *proc) metric(t *testing.T, series string) string {
	_, body := p.get("/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	t.Fatalf("replica %s: no sample %s", p.id, series)
	return ""
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// produce writes records from..to-1 to partition (i % partitions), keyed
// by partition and i, with JSON values; poison, if not nil, is written to
// the partition instead of its record and returns its position.
func (j *failJob) produce(ctx context.Context, cl *kgo.Client, from, to int, poison map[int]bool) []control.Position {
	j.t.Helper()
	var bad []control.Position
	for i := from; i < to; i++ {
		part := int32(i % 2)
		r := &kgo.Record{Topic: j.in, Partition: part, Key: fmt.Appendf(nil, "k%d-%d", part, i%10), Value: fmt.Appendf(nil, `{"i":%d}`, i)}
		if poison[i] {
			r.Value = []byte("this is not JSON")
		}
		res := cl.ProduceSync(ctx, r)
		if err := res.FirstErr(); err != nil {
			j.t.Fatal(err)
		}
		if poison[i] {
			bad = append(bad, control.Position{Topic: j.in, Partition: part, Offset: res[0].Record.Offset})
		}
	}
	return bad
}

// verifyExactlyOnce reads out read_committed from the start until it has
// want records, then a little longer, and checks that every key's counts
// are 1..n without gap or repeat and that there are exactly want outputs.
func (j *failJob) verifyExactlyOnce(ctx context.Context, want int) {
	t := j.t
	t.Helper()
	cl := j.c.Client(t, kgo.ConsumeTopics(j.out), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	final := map[string]int{}
	seen := 0
	deadline := time.Now().Add(time.Minute)
	var settle time.Time // once want are seen, read 1 s more for extras
	for time.Now().Before(deadline) && (settle.IsZero() || time.Now().Before(settle)) {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			var v struct {
				Key   string `json:"key"`
				Count int    `json:"count"`
			}
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatalf("output %q: %v", r.Value, err)
			}
			if v.Count != final[v.Key]+1 {
				t.Fatalf("key %s: count %d after %d: not exactly once", v.Key, v.Count, final[v.Key])
			}
			final[v.Key] = v.Count
			seen++
		})
		if seen >= want && settle.IsZero() {
			settle = time.Now().Add(time.Second)
		}
	}
	if seen != want {
		t.Fatalf("%d outputs committed, want %d", seen, want)
	}
}

var jobFailedLine = regexp.MustCompile(`level=ERROR msg="job failed permanently[^\n]*`)

// TestPoisonRecordStopsTheJob: under on_error: fail, a record that is not
// JSON stops the job on every replica, stably: a failed record on the
// commit topic, /readyz and weir_replica_job_failed say why, the log says
// it once per replica with the record's topic, partition and offset, no
// session restarts, and a replica started later runs nothing. Then
// `processor resume --skip` resumes it, and later, after a second poison
// record, fixing the job (on_error: skip) and `processor resume` does; the
// output is exactly once throughout. Also: a job's first start logs no
// ERROR. On kfake and on the real broker.
func TestPoisonRecordStopsTheJob(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		clearConfigEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		name := kafkatest.Name(t, "poison")
		j := &failJob{t: t, c: c, name: name, in: name + "-in", out: name + "-out", dir: t.TempDir()}
		c.CreateTopic(t, j.in, 2, nil)
		c.CreateTopic(t, j.out, 2, nil)
		prod := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		failFile := j.file("fail")

		j.produce(ctx, prod, 0, 40, nil)
		a := j.start(ctx, "a", failFile)
		b := j.start(ctx, "b", failFile)
		ready := func(ps ...*proc) func() bool {
			return func() bool {
				for _, p := range ps {
					if code, _ := p.get("/readyz"); code != http.StatusOK {
						return false
					}
				}
				return true
			}
		}
		waitFor(t, "both replicas ready", time.Minute, ready(a, b))
		j.verifyExactlyOnce(ctx, 40)
		for _, p := range []*proc{a, b} {
			if strings.Contains(p.log.String(), "level=ERROR") {
				t.Fatalf("replica %s: the first start of a job logged an ERROR:\n%s", p.id, p.log)
			}
		}

		bad := j.produce(ctx, prod, 40, 60, map[int]bool{45: true})[0]
		failedOn := func(p *proc) bool {
			code, body := p.get("/readyz")
			return code == http.StatusServiceUnavailable && strings.Contains(body, "job failed") &&
				strings.Contains(body, "record "+bad.String()) && strings.Contains(body, "processor resume")
		}
		waitFor(t, "both replicas report the failure on /readyz", time.Minute, func() bool { return failedOn(a) && failedOn(b) })

		// Durable: a failed record on the commit topic names the record.
		topics := controltopic.NewTopics("_weir." + name + ".")
		hist, err := controltopic.ReadHistory(ctx, []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, topics, control.TopicCommit)
		if err != nil {
			t.Fatal(err)
		}
		var failed []control.Failed
		for _, r := range hist.Records {
			if f, ok := r.Msg.(control.Failed); ok {
				failed = append(failed, f)
			}
		}
		if len(failed) != 1 || failed[0].Record != bad || failed[0].Cause != control.CauseRecord {
			t.Fatalf("failed records on %s: %+v, want one for %s", topics.Commit, failed, bad)
		}

		// Stable: nothing restarts for 10 s; the metric says why.
		time.Sleep(10 * time.Second)

		// Monitoring does not go blind: every replica exports the lag of
		// every input partition (its sources are closed), as the offsets
		// of the newest completed checkpoint leave it; the alerts' inputs
		// are there, and the chart's WeirJobFailed fires on them, alone.
		lags := inputLag(ctx, t, c, j.in, "_weir."+name+".source")
		for _, p := range []*proc{a, b} {
			for part, lag := range lags {
				series := fmt.Sprintf(`weir_source_lag_records{partition="%d",topic="%s"}`, part, j.in)
				if v := p.metric(t, series); v != fmt.Sprint(lag) {
					t.Errorf("replica %s: %s = %s while the job is failed, want %d", p.id, series, v, lag)
				}
			}
			if v := p.metric(t, "weir_replica_ready"); v != "0" {
				t.Errorf("replica %s: weir_replica_ready = %s while the job is failed", p.id, v)
			}
			if v := p.metric(t, "weir_checkpoint_last_completed_timestamp_seconds"); v == "0" {
				t.Errorf("replica %s: no last completed checkpoint time while the job is failed", p.id)
			}
		}
		if lags[int32(bad.Partition)] == 0 {
			t.Errorf("lag %v: the poison record's partition %d is not behind", lags, bad.Partition)
		}
		_, scraped := a.get("/metrics")
		checkAlerts(t, "weir-poison", scraped, map[string][]firing{
			"WeirJobFailed": {{
				labels: map[string]string{"severity": "critical", "job": "weir-poison", "cause": "record"},
				annotations: map[string]string{
					"summary":     "Weir job weir-poison failed permanently (cause record)",
					"description": "No replica runs the job's tasks until `processor resume`. /readyz and the replicas' log say why and how to resume; runbook: docs/operations.md, WeirJobFailed.",
				},
			}},
		})
		later := j.start(ctx, "c", failFile)
		waitFor(t, "a replica started later reports the failure", time.Minute, func() bool { return failedOn(later) })
		time.Sleep(2 * time.Second)
		for _, p := range []*proc{a, b, later} {
			if !failedOn(p) {
				t.Fatalf("replica %s no longer reports the failure", p.id)
			}
			if v := p.metric(t, "weir_replica_session_restarts_total"); v != "0" {
				t.Errorf("replica %s: %s session restarts: a restart loop", p.id, v)
			}
			if v := p.metric(t, `weir_replica_job_failed{cause="record"}`); v != "1" {
				t.Errorf("replica %s: weir_replica_job_failed{cause=record} = %s", p.id, v)
			}
			if v := p.metric(t, "weir_replica_tasks"); v != "0" {
				t.Errorf("replica %s runs %s tasks while the job is failed", p.id, v)
			}
			lines := jobFailedLine.FindAllString(p.log.String(), -1)
			if len(lines) != 1 {
				t.Fatalf("replica %s logged the failure %d times, want once: %q", p.id, len(lines), lines)
			}
			want := fmt.Sprintf("record_topic=%s record_partition=%d record_offset=%d", bad.Topic, bad.Partition, bad.Offset)
			if !strings.Contains(lines[0], want) {
				t.Errorf("replica %s: failure log %q lacks %q", p.id, lines[0], want)
			}
		}
		if strings.Contains(later.log.String(), "state restored") {
			t.Errorf("the replica started later restored tasks of a failed job")
		}

		// A job that is not failed is not resumed; a skip must name an input.
		command := func(name string) func(args ...string) (string, error) {
			return func(args ...string) (string, error) {
				var out bytes.Buffer
				root := newRootCmd(&out, nil)
				root.SetErr(io.Discard)
				root.SetArgs(append([]string{name}, args...))
				err := root.Execute()
				return out.String(), err
			}
		}
		resumeCmd, savepointCmd := command("resume"), command("savepoint")
		// A failed job takes no savepoint; a name must be one path segment.
		if _, err := savepointCmd("-c", failFile, "--target", "sp"); err == nil || !strings.Contains(err.Error(), "is failed") {
			t.Fatalf("savepoint of a failed job: %v", err)
		}
		if _, err := savepointCmd("-c", failFile, "--target", "a/b"); err == nil || !strings.Contains(err.Error(), "--target") {
			t.Fatalf("savepoint --target a/b: %v", err)
		}
		if _, err := resumeCmd("-c", failFile, "--skip", "other/0/1"); err == nil || !strings.Contains(err.Error(), "not an input topic") {
			t.Fatalf("resume --skip of another topic: %v", err)
		}

		// Resume by skipping the record.
		out, err := resumeCmd("-c", failFile, "--skip", bad.String())
		if err != nil || !strings.Contains(out, "resumed") {
			t.Fatalf("resume --skip: %v\n%s", err, out)
		}
		waitFor(t, "every replica ready after resume --skip", 2*time.Minute, ready(a, b, later))
		// The running job takes a savepoint; the command prints where.
		if out, err := savepointCmd("-c", failFile, "--target", "after-resume", "--timeout", "1m"); err != nil ||
			!strings.HasSuffix(strings.TrimSpace(out), "/savepoints/after-resume/_metadata") {
			t.Fatalf("savepoint of the running job: %v\n%s", err, out)
		}
		if _, err := resumeCmd("-c", failFile); err == nil || !strings.Contains(err.Error(), "is neither failed nor stopped") {
			t.Fatalf("resume of a running job: %v", err)
		}
		j.produce(ctx, prod, 60, 80, nil)
		j.verifyExactlyOnce(ctx, 79) // 80 records, one skipped

		// A second poison record; then fix and restart: every replica runs
		// on_error: skip, and resume clears the failure.
		bad2 := j.produce(ctx, prod, 80, 100, map[int]bool{90: true})[0]
		bad = bad2
		waitFor(t, "the second failure on every replica", time.Minute, func() bool { return failedOn(a) && failedOn(b) && failedOn(later) })
		a.stop()
		b.stop()
		later.stop()
		skipFile := j.file("skip")
		a = j.start(ctx, "a", skipFile)
		b = j.start(ctx, "b", skipFile)
		waitFor(t, "restarted replicas still report the failure", time.Minute, func() bool { return failedOn(a) && failedOn(b) })
		if out, err := resumeCmd("-c", skipFile); err != nil {
			t.Fatalf("resume: %v\n%s", err, out)
		}
		waitFor(t, "replicas ready after fix and resume", 2*time.Minute, ready(a, b))
		j.produce(ctx, prod, 100, 110, nil)
		j.verifyExactlyOnce(ctx, 108) // 110 records, two not counted
	})
}

// TestMissingTopicsStopAtStart: a missing input or output topic is an error
// at start with one clear message, not a retry loop nor a ready replica.
func TestMissingTopicsStopAtStart(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		clearConfigEnv(t)
		for _, missing := range []string{"input", "output"} {
			t.Run(missing, func(t *testing.T) {
				// Each waits topicSettleTime (15s) for the topic to appear
				// before it counts as missing: run them together.
				t.Parallel()
				name := kafkatest.Name(t, "missing")
				j := &failJob{t: t, c: c, name: name, in: name + "-in", out: name + "-out", dir: t.TempDir()}
				if missing == "input" {
					c.CreateTopic(t, j.out, 1, nil)
				} else {
					c.CreateTopic(t, j.in, 1, nil)
				}
				cfg, err := config.Load(config.Source{File: j.file("fail"), NoEnv: true})
				if err != nil {
					t.Fatal(err)
				}
				cfg.State.Dir = j.dir
				cfg.HTTP.Address = ""
				var log syncBuffer
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				err = serve(ctx, cfg, nil, &log, nil)
				topic := map[string]string{"input": j.in, "output": j.out}[missing]
				want := fmt.Sprintf("%s topic %s does not exist", missing, topic)
				if err == nil || !strings.Contains(err.Error(), want) || ctx.Err() != nil {
					t.Fatalf("serve = %v (ctx %v), want %q at once", err, ctx.Err(), want)
				}
				if strings.Contains(log.String(), "retrying") || strings.Contains(log.String(), "level=ERROR") {
					t.Errorf("a missing topic was retried or logged as an error besides the exit:\n%s", log.String())
				}
			})
		}
	})
}

// TestMissingBucketStopsAtStart: `run` with checkpoint.storage naming an S3
// bucket that does not exist exits at once with one clear message, instead
// of retrying a permanent error as if it were transient. On the real S3
// server.
func TestMissingBucketStopsAtStart(t *testing.T) {
	s3test.Bucket(t) // skips without the server (fails under WEIR_REQUIRE_S3=1)
	s3cfg, _ := s3test.ConfigFromEnv()
	s3cfg.Bucket = "weir-no-such-bucket-run"
	clearConfigEnv(t)
	c := kafkatest.NewKfake(t)
	name := kafkatest.Name(t, "nobucket")
	j := &failJob{t: t, c: c, name: name, in: name + "-in", out: name + "-out", dir: t.TempDir()}
	c.CreateTopic(t, j.in, 1, nil)
	c.CreateTopic(t, j.out, 1, nil)
	cfg, err := config.Load(config.Source{File: j.file("fail"), NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Checkpoint.Storage = s3cfg.URL("")
	cfg.State.Dir = j.dir
	cfg.HTTP.Address = ""
	var log syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = serve(ctx, cfg, nil, &log, nil)
	if err == nil || !strings.Contains(err.Error(), "the bucket does not exist") || ctx.Err() != nil {
		t.Fatalf("serve = %v (ctx %v), want 'the bucket does not exist' at once", err, ctx.Err())
	}
	if strings.Contains(log.String(), "retrying") {
		t.Errorf("a missing bucket was retried:\n%s", log.String())
	}
}

// TestFirstStartWaitsForControlTopics: right after the replica creates the
// control topics, a broker may not know them yet for a moment
// (UNKNOWN_TOPIC_OR_PARTITION from ListOffsets, which Apache Kafka answers
// while the metadata travels). That resolves itself: the job's first start
// logs no ERROR and restarts no session. kfake only: the fault is injected.
func TestFirstStartWaitsForControlTopics(t *testing.T) {
	clearConfigEnv(t)
	c := kafkatest.NewKfake(t)
	name := kafkatest.Name(t, "fresh")
	j := &failJob{t: t, c: c, name: name, in: name + "-in", out: name + "-out", dir: t.TempDir()}
	c.CreateTopic(t, j.in, 2, nil)
	c.CreateTopic(t, j.out, 2, nil)
	unknownUntil := time.Now().Add(2 * time.Second)
	c.Fake.ControlKey(int16(kmsg.ListOffsets), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake.KeepControl()
		req := kreq.(*kmsg.ListOffsetsRequest)
		if time.Now().After(unknownUntil) {
			return nil, nil, false
		}
		for _, rt := range req.Topics {
			if !strings.HasPrefix(rt.Topic, "_weir.") {
				return nil, nil, false
			}
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a := j.start(ctx, "a", j.file("fail"))
	waitFor(t, "ready", time.Minute, func() bool { code, _ := a.get("/readyz"); return code == http.StatusOK })
	if i := strings.Index(a.log.String(), "level=ERROR"); i >= 0 {
		t.Fatalf("the job's first start logged an ERROR: %s", a.log.String()[i:min(len(a.log.String()), i+300)])
	}
	if v := a.metric(t, "weir_replica_session_restarts_total"); v != "0" {
		t.Fatalf("%s session restarts at the first start", v)
	}
}
