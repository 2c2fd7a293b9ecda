package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// The upgrade matrix (issue 31; docs/operations.md, "Upgrading a job"),
// through the binary on the real broker: a job runs file v1 over the first
// records, stops, and starts again with v2 over more records. Each change
// has its documented outcome:
//
//   - continue: every key's values continue exactly from v1's (read by an
//     independent read_committed consumer);
//   - starts empty: the new part of the state starts at zero and the log
//     says so, the rest continues;
//   - refused: the replica stays up, not ready, /readyz names the
//     difference, no output is committed and no generation is written;
//     `processor validate --against latest` gives the same verdict
//     offline.
//
// Every input record is {"x": 1, "y": 100}, keyed by one of upKeys users.
const (
	upKeys    = 4
	upPhase1  = 5 // records per key before the change
	upPhase2  = 3 // records per key after it
	upSrc     = "    - source: {topics: [%[1]s], format: json}\n"
	upSrcDLQ  = "    - source: {topics: [%[1]s], format: json, on_error: dead-letter, dead_letter_topic: %[3]s}\n"
	upBad     = 2 // undecodable records in phase 1 of a job with a dead-letter topic
	upAggs    = "    - aggregate: {small: {sum: value.x}, big: {sum: value.y}}\n"
	upSink    = "    - sink: {topic: %[2]s, format: json}\n"
	upKeyUser = "    - key_by: {expr: key}\n"
	// upStreamAggs are upAggs and upSink as the steps of a stream of
	// job.streams.
	upStreamAggs = "      - aggregate: {small: {sum: value.x}, big: {sum: value.y}}\n      - sink: {topic: \"%[2]s\", format: json}\n"
)

type upOutcome int

const (
	upContinue upOutcome = iota
	upRefused
)

type upCase struct {
	name   string
	v1, v2 string // pipelines; %[1]s is the input topic, %[2]s the output, %[3]s a dead-letter topic
	flags  []string
	want   upOutcome
	// after is, per field of the output, its value for every key once
	// v2 processed upPhase2 records (continue).
	after map[string]float64
	// firstAfter is, per field, its value in every key's first output
	// after the change.
	firstAfter map[string]float64
	// absent are fields the output no longer has after the change.
	absent []string
	// says is what the v2 replica's log (continue) or /readyz (refused)
	// must contain.
	says []string
}

func TestUpgradeMatrix(t *testing.T) {
	c := kafkatest.NewReal(t)
	bin, err := e2etest.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base := upSrc + upAggs + upSink
	total := float64(upPhase1 + upPhase2)
	cases := []upCase{
		{name: "insert a filter", v1: base, v2: upSrc + "    - filter: {where: \"value.x > 0\"}\n" + upAggs + upSink,
			want: upContinue, after: map[string]float64{"small": total, "big": 100 * total},
			firstAfter: map[string]float64{"small": upPhase1 + 1, "big": 100 * (upPhase1 + 1)}},
		{name: "reorder aggregates", v1: base, v2: upSrc + "    - aggregate: {big: {sum: value.y}, small: {sum: value.x}}\n" + upSink,
			want: upContinue, after: map[string]float64{"small": total, "big": 100 * total},
			firstAfter: map[string]float64{"small": upPhase1 + 1, "big": 100 * (upPhase1 + 1)}},
		{name: "add an aggregate", v1: base, v2: upSrc + "    - aggregate: {small: {sum: value.x}, big: {sum: value.y}, n: {count: true}}\n" + upSink,
			want: upContinue, after: map[string]float64{"small": total, "big": 100 * total, "n": upPhase2},
			firstAfter: map[string]float64{"small": upPhase1 + 1, "n": 1}, says: []string{"count n is new: it starts empty"}},
		{name: "remove an aggregate", v1: base, v2: upSrc + "    - aggregate: {small: {sum: value.x}}\n" + upSink,
			want: upRefused, says: []string{"the checkpoint has state of sum big", "--allow-non-restored-state"}},
		{name: "remove an aggregate with the flag", v1: base, v2: upSrc + "    - aggregate: {small: {sum: value.x}}\n" + upSink,
			flags: []string{"--allow-non-restored-state"},
			want:  upContinue, after: map[string]float64{"small": total}, absent: []string{"big"},
			firstAfter: map[string]float64{"small": upPhase1 + 1}, says: []string{"not restored", "sum big"}},
		{name: "change an aggregate op", v1: base, v2: upSrc + "    - aggregate: {small: {sum: value.x}, big: {max: value.y}}\n" + upSink,
			want: upRefused, says: []string{"big is a max, the checkpoint's big is a sum"}},
		{name: "rename the count form", v1: upSrc + "    - aggregate: {op: count}\n" + upSink, v2: upSrc + "    - aggregate: {count: true}\n" + upSink,
			want: upRefused, says: []string{"count (job.pipeline[1].aggregate): the checkpoint has state of this aggregate"}},
		{name: "change a window size",
			v1:   upSrc + upKeyUser + "    - window: {type: tumbling, size: 10s}\n    - aggregate: {n: {count: true}}\n" + upSink,
			v2:   upSrc + upKeyUser + "    - window: {type: tumbling, size: 20s}\n    - aggregate: {n: {count: true}}\n" + upSink,
			want: upRefused, says: []string{"window tumbling size 20s, the checkpoint's is tumbling size 10s"}},
		{name: "change key_by", v1: upSrc + upKeyUser + upAggs + upSink, v2: upSrc + "    - key_by: {expr: value.x}\n" + upAggs + upSink,
			want: upRefused, says: []string{"is keyed by key_by expr value.x, its state by key_by expr key"}},
		{name: "add a sink", v1: base, v2: upSrcDLQ + upAggs + upSink,
			want: upContinue, after: map[string]float64{"small": total, "big": 100 * total},
			firstAfter: map[string]float64{"small": upPhase1 + 1}, says: []string{"sink %[3]s: new sink"}},
		{name: "remove a sink", v1: upSrcDLQ + upAggs + upSink, v2: base,
			want: upContinue, after: map[string]float64{"small": total, "big": 100 * total},
			firstAfter: map[string]float64{"small": upPhase1 + 1}, says: []string{"sink %[3]s: no longer in the job"}},
		{name: "explicit id matching the derived one", v1: base, v2: upSrc + "    - id: aggregate\n      aggregate: {small: {sum: value.x}, big: {sum: value.y}}\n" + upSink,
			want: upContinue, after: map[string]float64{"small": total, "big": 100 * total},
			firstAfter: map[string]float64{"small": upPhase1 + 1}},
		// A stream added before the one with the aggregate, with an
		// aggregate of its own: the derived ids shift (aggregate →
		// aggregate-2), the state follows the step that defines it.
		{name: "insert an aggregate before another",
			v1:   upSrc + "    - route: [{to: all}]\n  streams:\n    all:\n" + upStreamAggs,
			v2:   upSrc + "    - route: [{to: counts}, {to: all}]\n  streams:\n    counts: [{aggregate: {n: {count: true}}}, {sink: {topic: \"%[3]s\", format: json}}]\n    all:\n" + upStreamAggs,
			want: upContinue, after: map[string]float64{"small": total, "big": 100 * total},
			firstAfter: map[string]float64{"small": upPhase1 + 1, "big": 100 * (upPhase1 + 1)},
			says:       []string{"aggregate-2 (job.streams.all[0].aggregate): continues the state of aggregate", "aggregate (job.streams.counts[0].aggregate): new aggregate: it starts empty"}},
		// An aggregate inserted before the key_by: the aggregate after it
		// is renamed (aggregate → aggregate-2), and with it the stage it
		// names; the stage keeps its name (tasks, shuffle topic, sinks'
		// transactional IDs) and its state. The inserted aggregate passes
		// {x, y} on unchanged (max of constants).
		{name: "insert an aggregate before the key_by",
			v1:   upSrc + upKeyUser + upAggs + upSink,
			v2:   upSrc + "    - aggregate: {x: {max: value.x}, y: {max: value.y}}\n" + upKeyUser + upAggs + upSink,
			want: upContinue, after: map[string]float64{"small": total, "big": 100 * total},
			firstAfter: map[string]float64{"small": upPhase1 + 1, "big": 100 * (upPhase1 + 1)},
			says:       []string{"stage aggregate-2: runs as stage aggregate", "aggregate-2 (job.pipeline[3].aggregate): continues the state of aggregate"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { upgradeCase(t, c, bin, tc) })
	}
}

func upgradeCase(t *testing.T, c *kafkatest.Cluster, bin string, tc upCase) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	job := kafkatest.Name(t, "up")
	input, output, dlq := job+"-in", job+"-out", job+"-dlq"
	c.CreateTopic(t, input, 4, nil)
	c.CreateTopic(t, output, 4, nil)
	c.CreateTopic(t, dlq, 1, nil)
	for i, s := range tc.says {
		tc.says[i] = strings.NewReplacer("%[1]s", input, "%[2]s", output, "%[3]s", dlq).Replace(s)
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "job.yaml")
	write := func(pipeline string) {
		t.Helper()
		body := fmt.Sprintf("job:\n  name: %s\n  pipeline:\n%s", job, fmt.Sprintf(pipeline, input, output, dlq)) +
			fmt.Sprintf("kafka:\n  brokers: [%s]\n  session_timeout: 6s\ncheckpoint:\n  interval: 500ms\n  timeout: 30s\nlog:\n  level: info\n", strings.Join(c.Brokers, ", "))
		if err := os.WriteFile(cfgFile, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := startUpReader(t, c.Brokers, output)
	commits := e2etest.WatchCommits(t, c.Brokers, job)
	produce := func(n int) {
		t.Helper()
		cl := c.Client(t)
		for i := range n * upKeys {
			r := &kgo.Record{Topic: input, Key: fmt.Appendf(nil, "u%d", i%upKeys), Value: []byte(`{"x":1,"y":100}`)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}

	// v1 over the first records, until every result is committed (a
	// window job emits none before its windows close: then until a
	// checkpoint completed after every record was read).
	write(tc.v1)
	reps := e2etest.NewReplicas(t, bin, cfgFile, dir, e2etest.ReplicaOptions{HTTP: true})
	id := reps.Start()
	produce(upPhase1)
	bad := 0
	if strings.Contains(tc.v1, "dead_letter_topic") {
		cl := c.Client(t)
		for range upBad {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: input, Key: []byte("bad"), Value: []byte("not json")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		bad = upBad
	}
	windowed := strings.Contains(tc.v1, "window:")
	if windowed {
		waitCompletes(t, commits, 4, reps)
	} else if err := out.waitCount(upPhase1*upKeys, time.Minute, reps.Exited); err != nil {
		t.Fatal(err)
	}
	reps.StopAll()
	gens := len(commits.Records("generation"))
	before := out.count()

	// v2.
	write(tc.v2)
	validate := exec.CommandContext(ctx, bin, append([]string{"validate", "-c", cfgFile, "--against", "latest",
		"--checkpoint.storage=file://" + filepath.Join(dir, "checkpoints")}, tc.flags...)...)
	vout, verr := validate.CombinedOutput()
	p := reps.Restart(id, tc.flags...)
	produce(upPhase2)
	switch tc.want {
	case upRefused:
		if verr == nil {
			t.Errorf("validate --against latest passed; want refused:\n%s", vout)
		}
		body := waitNotReady(t, p, "cannot restore")
		for _, s := range tc.says {
			if !strings.Contains(body, s) {
				t.Errorf("/readyz does not say %q:\n%s", s, body)
			}
			if !strings.Contains(string(vout), s) {
				t.Errorf("validate --against does not say %q:\n%s", s, vout)
			}
		}
		// Nothing is written: no generation, no output, for a while
		// in which v1 would have processed everything.
		time.Sleep(5 * time.Second)
		if n := len(commits.Records("generation")); n != gens {
			t.Errorf("%d generation records after the refusal, want %d: the refused job wrote to the commit topic", n, gens)
		}
		if n := out.count(); n != before {
			t.Errorf("%d output records committed after the refusal", n-before)
		}
		if err := reps.Exited(); err != nil {
			t.Errorf("the refusing replica exited (it should stay up, not ready): %v", err)
		}
	case upContinue:
		if verr != nil {
			t.Errorf("validate --against latest: %v\n%s", verr, vout)
		}
		if err := out.waitCount((upPhase1+upPhase2)*upKeys, time.Minute, reps.Exited); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // nothing more may come
		if n := out.count(); n != (upPhase1+upPhase2)*upKeys {
			t.Errorf("%d output records, want %d (exactly one per input record)", n, (upPhase1+upPhase2)*upKeys)
		}
		for k := range upKeys {
			key := fmt.Sprintf("u%d", k)
			recs := out.of(key)
			if len(recs) != upPhase1+upPhase2 {
				t.Errorf("key %s: %d outputs, want %d", key, len(recs), upPhase1+upPhase2)
				continue
			}
			first, last := recs[upPhase1], recs[len(recs)-1]
			for f, want := range tc.firstAfter {
				if got, _ := first[f].(float64); got != want {
					t.Errorf("key %s: first output after the change has %s = %v, want %v (%v)", key, f, first[f], want, first)
				}
			}
			for f, want := range tc.after {
				if got, _ := last[f].(float64); got != want {
					t.Errorf("key %s: last output has %s = %v, want %v (%v)", key, f, last[f], want, last)
				}
			}
			for _, f := range tc.absent {
				if _, ok := last[f]; ok {
					t.Errorf("key %s: the output still has %s: %v", key, f, last)
				}
			}
		}
		if bad > 0 {
			// The dead letters of v1 were written exactly once, also when
			// v2 has no dead-letter sink any more.
			letters := 0
			for _, r := range c.ReadCommitted(ctx, t, dlq) {
				if !r.Attrs.IsControl() {
					letters++
				}
			}
			if letters != bad {
				t.Errorf("%d dead letters committed, want %d", letters, bad)
			}
		}
		log := p.Log()
		for _, s := range tc.says {
			if !strings.Contains(log, s) {
				t.Errorf("the v2 replica's log does not say %q", s)
			}
		}
	}
	t.Logf("validate --against latest:\n%s", vout)
	reps.StopAll()
}

// waitCompletes waits until n checkpoints completed.
func waitCompletes(t *testing.T, w *e2etest.CommitWatcher, n int, reps *e2etest.Replicas) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(w.Records("complete")) < n {
		if err := reps.Exited(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d checkpoints completed within a minute, want %d", len(w.Records("complete")), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitNotReady waits until p's /readyz answers 503 with a body containing
// want, and returns the body.
func waitNotReady(t *testing.T, p *e2etest.Proc, want string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var last string
	for time.Now().Before(deadline) {
		code, body, err := p.Get("/readyz")
		if err == nil && code == 503 && strings.Contains(body, want) {
			return body
		}
		last = fmt.Sprintf("%d %s %v", code, body, err)
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("/readyz never said %q; last: %s\nlog:\n%s", want, last, p.Log())
	return ""
}

// upReader reads a topic read_committed from its start and keeps every
// JSON value per key, in order. It shares no code with Weir.
type upReader struct {
	mu   sync.Mutex
	recs map[string][]map[string]any
	n    int
}

func startUpReader(t *testing.T, brokers []string, topic string) *upReader {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &upReader{recs: map[string][]map[string]any{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			cl.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
				var v map[string]any
				if err := json.Unmarshal(rec.Value, &v); err != nil {
					v = map[string]any{"undecodable": string(rec.Value)}
				}
				r.mu.Lock()
				r.recs[string(rec.Key)] = append(r.recs[string(rec.Key)], v)
				r.n++
				r.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return r
}

func (r *upReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

func (r *upReader) of(key string) []map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]map[string]any(nil), r.recs[key]...)
}

func (r *upReader) waitCount(n int, timeout time.Duration, exited func() error) error {
	deadline := time.Now().Add(timeout)
	for r.count() < n {
		if err := exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d output records committed within %v, want %d", r.count(), timeout, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}
