package faults

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// bigValue is the size of the large poison and large good values: several
// MiB, above the broker's and franz-go's 1 MB defaults.
const bigValue = 3 << 20

// poison is one special input record: bad ones are not one JSON document
// (format: json), good ones are and must be counted under their key.
type poison struct {
	what string
	rec  *kgo.Record
	bad  bool
}

func poisonRecords() []poison {
	big := bytes.Repeat([]byte("x"), bigValue)
	return []poison{
		{"invalid JSON", &kgo.Record{Key: []byte("user-0001"), Value: []byte(`{"i": `)}, true},
		{"not JSON at all", &kgo.Record{Key: []byte("user-0002"), Value: []byte("click!")}, true},
		{"empty value", &kgo.Record{Key: []byte("user-0003"), Value: []byte{}}, true},
		{"3 MiB, unterminated JSON", &kgo.Record{Key: []byte("user-0004"), Value: append([]byte(`{"pad":"`), big...)}, true},
		{"key not UTF-8, value not JSON", &kgo.Record{Key: []byte("\xff\xfeuser"), Value: []byte("\xff\xfe")}, true},
		{"3 MiB, valid JSON (good)", &kgo.Record{Key: []byte("user-0005"), Value: append(append([]byte(`{"pad":"`), big...), `"}`...)}, false},
		{"key not UTF-8, valid JSON (good)", &kgo.Record{Key: []byte("\xc3\x28user"), Value: []byte(`{"ok":true}`)}, false},
		{"tombstone (good: a null value is accepted)", &kgo.Record{Key: []byte("user-0006"), Value: nil}, false},
	}
}

// badRecord is where a bad record landed in the input, and what it was.
type badRecord struct {
	partition int32
	offset    int64
	key, val  []byte
	what      string
}

// TestFaultPoisonRecords: records that are not JSON (invalid, empty, several
// MiB, with keys that are not UTF-8) arrive among good ones (one of several
// MiB, one with a non-UTF-8 key, a tombstone), under each source.on_error
// policy. skip: every good record counted exactly once. dead-letter: the
// same, and the dead-letter topic holds exactly the bad records, unchanged.
// fail: the job stops, visibly and stably (a `failed` record on the commit
// topic, /readyz of every replica, a replica started later too, no restart
// loop), with nothing committed twice; fixed (on_error: skip) and
// restarted, it counts every good record exactly once.
func TestFaultPoisonRecords(t *testing.T) {
	for _, policy := range []string{"skip", "dead-letter", "fail"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel() // each has its own job and topics (CI's time budget)
			testPoison(t, policy)
		})
	}
}

func testPoison(t *testing.T, policy string) {
	c := kafkatest.NewReal(t)
	maxBytes := strconv.Itoa(8 << 20)
	var dlq string
	s := newScenario(t, c, "poison_"+strings.ReplaceAll(policy, "-", "_"), scenarioOptions{
		job: func(j *e2etest.Job) {
			j.OnError = policy
			if policy == "dead-letter" {
				dlq = j.Name + "-dlq"
				j.DeadLetterTopic = dlq
			}
		},
		replicas:     e2etest.ReplicaOptions{HTTP: true},
		topicConfigs: map[string]*string{"max.message.bytes": &maxBytes},
		inputOpts:    []kgo.Opt{kgo.ProducerBatchMaxBytes(8 << 20)},
	})
	if dlq != "" {
		c.CreateTopic(t, dlq, 1, map[string]*string{"max.message.bytes": &maxBytes})
	}
	s.startReplicas(2)
	s.waitOutput(rate, 2*time.Minute)

	var mu sync.Mutex
	var bad []badRecord
	for _, p := range poisonRecords() {
		done := func(r *kgo.Record, err error) {
			if err == nil && p.bad {
				mu.Lock()
				bad = append(bad, badRecord{r.Partition, r.Offset, r.Key, r.Value, p.what})
				mu.Unlock()
			}
		}
		s.in.Record(s.ctx, p.rec, !p.bad, done)
		s.in.Good(s.ctx, 20)
	}
	if err := s.in.Flush(s.ctx); err != nil {
		t.Fatal(err)
	}
	end := time.Now() // every poison record is in the input
	for _, b := range bad {
		t.Logf("bad record %s[%d]@%d: %s", s.job.Input, b.partition, b.offset, b.what)
	}

	if policy == "fail" {
		checkStopsForGood(t, s, bad, end)
		return
	}
	s.result("recovery", s.recovered(end, 2*time.Minute))
	s.waitOutput(2*rate, 2*time.Minute)
	s.finish()
	if dlq != "" {
		checkDeadLetters(t, s, dlq, bad)
	}
}

// checkStopsForGood checks the fail policy's stop, then fixes the job and
// checks that it resumes exactly once.
func checkStopsForGood(t *testing.T, s *scenario, bad []badRecord, end time.Time) {
	t.Helper()
	var failed e2etest.ControlRecord
	deadline := time.Now().Add(time.Minute)
	for {
		if rs := s.commits.Records("failed"); len(rs) > 0 {
			failed = rs[0]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("on_error: fail: no `failed` record on the commit topic within a minute of the bad records (%d generations so far): the job does not stop", len(s.commits.Records("generation")))
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("failed record: %s", failed.Raw)
	s.result("stop", failed.Arrived.Sub(end))
	named := false
	for _, b := range bad {
		named = named || strings.Contains(failed.Raw, strconv.FormatInt(b.offset, 10))
	}
	if !strings.Contains(failed.Raw, s.job.Input) || !named {
		t.Errorf("the failed record does not name the input topic %s and a bad record's offset: %s", s.job.Input, failed.Raw)
	}

	// Stable: no new generation, no new output, every replica alive and
	// not ready, saying why.
	gens := len(s.commits.Records("generation"))
	time.Sleep(3 * time.Second)
	seen := s.ver.Seen()
	time.Sleep(12 * time.Second)
	if g := len(s.commits.Records("generation")); g != gens {
		t.Errorf("%d new generations after the job failed: it restarts instead of staying stopped", g-gens)
	}
	if n := s.ver.Seen(); n != seen {
		t.Errorf("committed output went on after the job failed: %d → %d records", seen, n)
	}
	late := s.reps.Start()
	time.Sleep(5 * time.Second)
	for _, id := range s.reps.IDs() {
		checkReportsFailure(t, s, id, s.job.Input)
	}
	t.Logf("replica %s, started after the failure, reports it too", late)
	perKey, _ := s.in.Counts()
	s.ver.CheckPrefix(perKey)

	// The documented way out (docs/operations.md, "Permanent failures"):
	// fix (here: skip), restart the replicas, then processor resume.
	s.reps.StopAll()
	s.job.OnError = "skip"
	s.writeJob()
	for range 2 {
		s.reps.Start()
	}
	if out, err := s.reps.Command(s.ctx, "resume").CombinedOutput(); err != nil {
		t.Fatalf("processor resume: %v\n%s", err, out)
	} else {
		t.Logf("processor resume: %s", strings.TrimSpace(string(out)))
	}
	restarted := time.Now()
	s.result("recovery", s.recovered(restarted, 2*time.Minute))
	s.waitOutput(2*rate, 2*time.Minute)
	s.finish()
}

// checkReportsFailure checks that replica id runs and answers /readyz with
// 503 and a reason naming want.
func checkReportsFailure(t *testing.T, s *scenario, id, want string) {
	t.Helper()
	p := s.reps.Proc(id)
	select {
	case <-p.Done():
		t.Errorf("replica %s exited after the job failed (%v): nothing serves /readyz to say why", id, p.Err())
		return
	default:
	}
	code, body, err := p.Get("/readyz")
	if err != nil {
		t.Errorf("replica %s /readyz: %v", id, err)
		return
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, want) {
		t.Errorf("replica %s /readyz after the job failed: %d %q; want 503 naming %s", id, code, body, want)
	}
}

// checkDeadLetters checks that the dead-letter topic holds exactly the bad
// records, once each, with key and value unchanged and headers naming their
// origin.
func checkDeadLetters(t *testing.T, s *scenario, dlq string, bad []badRecord) {
	t.Helper()
	want := map[string]badRecord{}
	for _, b := range bad {
		want[fmt.Sprintf("%s/%d/%d", s.job.Input, b.partition, b.offset)] = b
	}
	got := map[string]int{}
	for _, r := range s.c.ReadCommitted(s.ctx, t, dlq) {
		h := map[string]string{}
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		origin := h["weir-dlq-topic"] + "/" + h["weir-dlq-partition"] + "/" + h["weir-dlq-offset"]
		got[origin]++
		b, ok := want[origin]
		switch {
		case !ok:
			t.Errorf("dead letter %s@%d from %s is not a bad record (key %q, value %.80q)", dlq, r.Offset, origin, r.Key, r.Value)
		case !bytes.Equal(r.Key, b.key) || !bytes.Equal(r.Value, b.val):
			t.Errorf("dead letter of %s (%s) changed: key %q, %d value bytes; want key %q, %d bytes", origin, b.what, r.Key, len(r.Value), b.key, len(b.val))
		}
	}
	for origin, b := range want {
		if got[origin] != 1 {
			t.Errorf("bad record %s (%s) is %d times in the dead-letter topic, want once", origin, b.what, got[origin])
		}
	}
	if !t.Failed() {
		t.Logf("dead-letter topic %s holds exactly the %d bad records", dlq, len(bad))
	}
}
