package replica_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/internal/promtest"
)

// stillRunning fails the test if the replica's Run returned.
func stillRunning(t *testing.T, r *testReplica, when string) {
	t.Helper()
	select {
	case err := <-r.done:
		t.Fatalf("%s: the replica exited (%v); it must wait and retry", when, err)
	default:
	}
}

// A replica started while Kafka is unreachable does not exit: it retries
// with backoff, is not ready and counts the retries; once the broker is up
// it runs the job exactly once. kfake only: the test starts the broker on a
// port chosen beforehand, which the shared real broker cannot do. The port
// stays the test's throughout (no other process can take it): until kfake
// starts, every connection is accepted and closed at once, and then the
// same listener is handed to kfake.
func TestReplicaWaitsForKafka(t *testing.T) {
	const (
		keys    = 20
		records = 1000
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	lc := net.ListenConfig{}
	raw, err := lc.Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := raw.(*net.TCPListener)
	port := ln.Addr().(*net.TCPAddr).Port
	broker := "127.0.0.1:" + strconv.Itoa(port)
	refusing := make(chan struct{})
	go func() {
		defer close(refusing)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return // the deadline set below: kfake takes over
			}
			_ = conn.Close()
		}
	}()
	dir := t.TempDir()
	job := kafkatest.Name(t, "down")
	in, out := job+"-in", job+"-out"

	r := startReplica(ctx, t, "a", jobYAML(job, in, out, broker, "file://"+dir+"/checkpoints", dir, "a"))
	for deadline := time.Now().Add(time.Minute); promtest.Sum(t, r.reg, "weir_replica_retries_total", "what", "connect") < 2; {
		if time.Now().After(deadline) {
			t.Fatal("fewer than 2 connect retries counted in a minute without Kafka")
		}
		stillRunning(t, r, "Kafka unreachable")
		// Waiting for Kafka with backoff is no stall: /livez stays 200.
		if d := r.Heartbeat().Stalled(time.Now()); d > 5*time.Second {
			t.Fatalf("the loop counts as stalled for %v while it waits for Kafka", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	stillRunning(t, r, "Kafka unreachable")
	if r.Ready() {
		t.Fatal("ready without Kafka")
	}

	if err := ln.SetDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	<-refusing
	if err := ln.SetDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	c := kafkatest.NewKfake(t, kfake.Ports(port), kfake.ListenFn(func(string, string) (net.Listener, error) { return ln, nil }))
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	produceInput(ctx, t, c, in, keys, 0, records)
	waitReady(t, r.Replica)
	verifyCounts(ctx, t, c, out, keys, records)
}

// Object storage that fails, at start and in the middle of a run, stops
// nothing for good: at start the replica retries (not ready, retries
// counted); mid-run checkpoints fail (counted), no output is committed
// while they do, and the replica keeps running; when storage is back,
// checkpoints complete and every key's counts are exactly 1..N. Storage is
// file:// whose root is replaced by a regular file during the outage.
func TestReplicaSurvivesStorageOutage(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const (
			keys    = 20
			records = 1500
		)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "store")
		in, out := job+"-in", job+"-out"
		c.CreateTopic(t, in, 2, nil)
		c.CreateTopic(t, out, 2, nil)
		dir := t.TempDir()
		root := filepath.Join(dir, "bucket")
		block := func() {
			t.Helper()
			if err := os.WriteFile(root, []byte("not a directory"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		block()

		produceInput(ctx, t, c, in, keys, 0, records/3)
		r := startReplica(ctx, t, "a", jobYAML(job, in, out, c.Brokers[0], "file://"+root+"/checkpoints", dir, "a"))
		for deadline := time.Now().Add(30 * time.Second); promtest.Sum(t, r.reg, "weir_replica_retries_total", "what", "connect") < 2; {
			if time.Now().After(deadline) {
				t.Fatal("fewer than 2 retries counted in 30s while object storage was unreachable")
			}
			time.Sleep(50 * time.Millisecond)
		}
		stillRunning(t, r, "storage unreachable at start")
		if r.Ready() {
			t.Fatal("ready without object storage")
		}
		if err := os.Remove(root); err != nil {
			t.Fatal(err)
		}
		waitReady(t, r.Replica)
		// Every output of the first third committed: nothing is left to
		// commit when the outage begins.
		for deadline := time.Now().Add(time.Minute); committedRecords(ctx, t, c, out) < records/3; {
			if time.Now().After(deadline) {
				t.Fatal("the first third of the output was not committed within a minute")
			}
			time.Sleep(100 * time.Millisecond)
		}

		// Mid-run: the bucket's root disappears behind a file.
		failedBefore := promtest.Sum(t, r.reg, "weir_checkpoint_failed_total")
		moved := root + ".away"
		if err := os.Rename(root, moved); err != nil {
			t.Fatal(err)
		}
		block()
		committed := committedRecords(ctx, t, c, out)
		produceInput(ctx, t, c, in, keys, records/3, 2*records/3)
		deadline := time.Now().Add(30 * time.Second)
		for promtest.Sum(t, r.reg, "weir_checkpoint_failed_total") < failedBefore+1 {
			if time.Now().After(deadline) {
				t.Fatal("no checkpoint failed within 30s of the storage outage")
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The failure restarts the job from the last completed checkpoint,
		// which cannot be read now: the tasks wait, and /readyz says so.
		for r.Ready() {
			if time.Now().After(deadline) {
				t.Fatal("still ready 30s into the storage outage")
			}
			time.Sleep(100 * time.Millisecond)
		}
		for promtest.Sum(t, r.reg, "weir_replica_retries_total", "what", "start_task") < 1 {
			if time.Now().After(deadline) {
				t.Fatal("no task start retry counted 30s into the storage outage")
			}
			time.Sleep(100 * time.Millisecond)
		}
		stillRunning(t, r, "storage outage mid-run")
		if now := committedRecords(ctx, t, c, out); now != committed {
			t.Fatalf("output committed while no checkpoint could complete: %d -> %d records", committed, now)
		}

		// Back: the same objects under the same root.
		if err := os.Remove(root); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(moved, root); err != nil {
			t.Fatal(err)
		}
		produceInput(ctx, t, c, in, keys, 2*records/3, records)
		waitReady(t, r.Replica)
		verifyCounts(ctx, t, c, out, keys, records)
		stillRunning(t, r, "after the outage")
	})
}

// A session that fails ends: the replica stops its tasks, leaves the group
// and, after a backoff, joins again in the same process; the new
// generation restores from the last completed checkpoint. The failure here
// is the report that the first generation's tasks run: its Produce to the
// ack topic is refused by the broker, injected with kfake's request control
// (the real broker cannot be made to refuse one request). The replica must
// come back (a second Join once failed for good on its metrics) and every
// key's counts must be exactly 1..N.
func TestReplicaRejoinsAfterSessionFailure(t *testing.T) {
	const (
		keys    = 20
		records = 1500
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := kafkatest.NewKfake(t)
	dir := t.TempDir()
	job := kafkatest.Name(t, "fail")
	in, out := job+"-in", job+"-out"
	c.CreateTopic(t, in, 2, nil)
	c.CreateTopic(t, out, 2, nil)
	produceInput(ctx, t, c, in, keys, 0, records/2)

	// From here on the only non-transactional producer is the replica's
	// ack writer: its first Produce is refused.
	var injected atomic.Bool
	c.Fake.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		p := req.(*kmsg.ProduceRequest)
		if p.TransactionID != nil {
			return nil, nil, false
		}
		resp := p.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range p.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		injected.Store(true)
		return resp, nil, true // handled: the control is dropped, so once
	})

	r := startReplica(ctx, t, "a", jobYAML(job, in, out, c.Brokers[0], "file://"+dir+"/checkpoints", dir, "a"))
	deadline := time.Now().Add(time.Minute)
	for !injected.Load() || promtest.Sum(t, r.reg, "weir_replica_session_restarts_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("within a minute: ack refused %v, session restarts %v", injected.Load(), promtest.Sum(t, r.reg, "weir_replica_session_restarts_total"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	stillRunning(t, r, "after the session failed")
	waitReady(t, r.Replica)
	produceInput(ctx, t, c, in, keys, records/2, records)
	verifyCounts(ctx, t, c, out, keys, records)
	if n := promtest.Sum(t, r.reg, "weir_membership_rebalances_total"); n < 2 {
		t.Errorf("weir_membership_rebalances_total = %v, want at least 2 (joined again)", n)
	}
	stillRunning(t, r, "at the end")
}
