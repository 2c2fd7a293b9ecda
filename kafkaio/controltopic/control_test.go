package controltopic_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/controltopic"
)

func controlSetup(t *testing.T, c *kafkatest.Cluster) (context.Context, []kgo.Opt, controltopic.Topics) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	ts := controltopic.NewTopics(kafkatest.Name(t, "_weir") + ".")
	if err := controltopic.EnsureTopics(ctx, c.Admin(t), ts, -1); err != nil {
		t.Fatal(err)
	}
	// A second call finds them and changes nothing.
	if err := controltopic.EnsureTopics(ctx, c.Admin(t), ts, -1); err != nil {
		t.Fatalf("second EnsureTopics: %v", err)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	// A topic just created may answer UNKNOWN_TOPIC_OR_PARTITION for a
	// moment, until its partition's leader has loaded it (the replica
	// waits for that: awaitControlTopics); so do the tests.
	for _, topic := range []control.Topic{control.TopicTrigger, control.TopicAck, control.TopicCommit} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			_, err := controltopic.StableEnd(ctx, opts, ts, topic)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("control topic %s not readable 30s after its creation: %v", topic, err)
			}
		}
	}
	return ctx, opts, ts
}

func TestControlTopicsCreated(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, _, ts := controlSetup(t, c)
		adm := c.Admin(t)
		// A topic just created may be listed for a moment without its
		// partition (UNKNOWN_TOPIC_OR_PARTITION), until the broker has made
		// it; the replica waits for that too (awaitControlTopics).
		var details kadm.TopicDetails
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var err error
			if details, err = adm.ListTopics(ctx, ts.Trigger, ts.Ack, ts.Commit); err != nil {
				t.Fatal(err)
			}
			ready := true
			for _, d := range details {
				ready = ready && d.Err == nil && len(d.Partitions) > 0
			}
			if ready && len(details) == 3 || time.Now().After(deadline) {
				break
			}
		}
		for _, name := range []string{ts.Trigger, ts.Ack, ts.Commit} {
			d, ok := details[name]
			if !ok || d.Err != nil || len(d.Partitions) != 1 {
				t.Fatalf("topic %s: present=%v err=%v partitions=%d", name, ok, d.Err, len(d.Partitions))
			}
		}
		cfgs, err := adm.DescribeTopicConfigs(ctx, ts.Commit, ts.Trigger)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]map[string]string{
			ts.Commit:  {"retention.ms": "-1", "cleanup.policy": "delete"},
			ts.Trigger: {"cleanup.policy": "compact"},
		}
		for _, rc := range cfgs {
			for _, kv := range rc.Configs {
				if w, ok := want[rc.Name][kv.Key]; ok && (kv.Value == nil || *kv.Value != w) {
					t.Errorf("%s %s = %v, want %s", rc.Name, kv.Key, kv.MaybeValue(), w)
				}
			}
		}
	})
}

func TestControlWriterAppendAndHistory(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, opts, ts := controlSetup(t, c)
		txid := controltopic.CoordinatorTransactionalID(kafkatest.Name(t, "job") + ".")
		w, err := controltopic.NewWriter(ctx, opts, ts, txid)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()

		// Empty history first.
		h, err := controltopic.ReadHistory(ctx, opts, ts, control.TopicCommit)
		if err != nil || len(h.Records) != 0 || h.End != 0 {
			t.Fatalf("empty history: %+v, %v", h, err)
		}

		gen := control.Generation{Gen: 1, Assignment: control.Assignment{"r0": {{Stage: "s", Index: 0}}}}
		trig := control.Trigger{ID: 1, TS: 1000, Kind: ckpt.KindCheckpoint, Gen: 1}
		if err := w.Append(ctx, gen, trig); err != nil {
			t.Fatal(err)
		}
		done := control.Complete{ID: 1, Gen: 1, TS: 2000, Kind: ckpt.KindCheckpoint, Metadata: "chk-1/_metadata"}
		if err := w.Append(ctx, done); err != nil {
			t.Fatal(err)
		}
		// A ack record cannot go through the coordinator's writer.
		if err := w.Append(ctx, control.Decline{ID: 1, Gen: 1, Task: control.TaskID{Stage: "s"}, Reason: "x"}); err == nil {
			t.Fatal("writer accepted an ack-topic record")
		}

		// Another producer leaves a transaction open on the commit topic:
		// history must end before it, at the last stable offset. First the
		// markers of the two commits are in (Apache Kafka writes them
		// after answering EndTxn), so that the open one comes after them.
		c.WaitStable(t, ts.Commit)
		open := c.Client(t, kgo.TransactionalID(kafkatest.Name(t, "open")), kgo.TransactionTimeout(60*time.Second))
		if err := open.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		junk, _ := control.Encode(control.Complete{ID: 99, Gen: 1, TS: 1, Kind: ckpt.KindCheckpoint, Metadata: "x"})
		if err := open.ProduceSync(ctx, &kgo.Record{Topic: ts.Commit, Value: junk}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = open.EndTransaction(context.Background(), kgo.TryAbort) })

		h, err = controltopic.ReadHistory(ctx, opts, ts, control.TopicCommit)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Records) != 2 {
			t.Fatalf("commit history has %d records, want 2: %+v", len(h.Records), h.Records)
		}
		if g, ok := h.Records[0].Msg.(control.Generation); !ok || g.Gen != 1 {
			t.Fatalf("first record %+v, want generation 1", h.Records[0].Msg)
		}
		if d, ok := h.Records[1].Msg.(control.Complete); !ok || d.ID != 1 {
			t.Fatalf("second record %+v, want complete 1", h.Records[1].Msg)
		}
		// Two committed transactions: gen, marker, complete, marker.
		if h.End != 4 {
			t.Fatalf("history end %d, want 4 (two records, two commit markers)", h.End)
		}
		th, err := controltopic.ReadHistory(ctx, opts, ts, control.TopicTrigger)
		if err != nil || len(th.Records) != 1 {
			t.Fatalf("trigger history %+v, %v", th, err)
		}
	})
}

func TestControlWriterFenced(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, opts, ts := controlSetup(t, c)
		txid := controltopic.CoordinatorTransactionalID(kafkatest.Name(t, "job") + ".")
		old, err := controltopic.NewWriter(ctx, opts, ts, txid)
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		trig := func(id ckpt.ID) control.Trigger {
			return control.Trigger{ID: id, TS: int64(id), Kind: ckpt.KindCheckpoint, Gen: 1}
		}
		if err := old.Append(ctx, trig(1)); err != nil {
			t.Fatal(err)
		}
		// A newly elected coordinator takes over the transactional ID.
		cur, err := controltopic.NewWriter(ctx, opts, ts, txid)
		if err != nil {
			t.Fatal(err)
		}
		defer cur.Close()
		err = old.Append(ctx, trig(2))
		if !errors.Is(err, controltopic.ErrFenced) {
			t.Fatalf("zombie coordinator's append: %v, want ErrFenced", err)
		}
		if err := cur.Append(ctx, trig(3)); err != nil {
			t.Fatalf("current coordinator's append: %v", err)
		}
		c.WaitStable(t, ts.Trigger) // the commit marker is in
		h, err := controltopic.ReadHistory(ctx, opts, ts, control.TopicTrigger)
		if err != nil {
			t.Fatal(err)
		}
		var ids []ckpt.ID
		for _, r := range h.Records {
			ids = append(ids, r.Msg.(control.Trigger).ID)
		}
		if len(ids) != 2 || ids[0] != 1 || ids[1] != 3 {
			t.Fatalf("trigger history IDs %v, want [1 3]: the zombie's write must not be visible", ids)
		}
	})
}

func TestControlTailAndAcks(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, opts, ts := controlSetup(t, c)
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		tail, err := controltopic.NewTail(opts, ts, map[control.Topic]kgo.Offset{
			control.TopicAck: kgo.NewOffset().AtStart(),
		}, log)
		if err != nil {
			t.Fatal(err)
		}
		defer tail.Close()
		acks, err := controltopic.NewAckWriter(opts, ts)
		if err != nil {
			t.Fatal(err)
		}
		defer acks.Close()
		task := control.TaskID{Stage: "count", Index: 3}
		if err := acks.Send(ctx, control.Ack{ID: 7, Gen: 2, Task: task, Handle: "chk-7/count-3.manifest"}); err != nil {
			t.Fatal(err)
		}
		// A stray record that is no control message is skipped by the tail.
		raw := c.Client(t)
		if err := raw.ProduceSync(ctx, &kgo.Record{Topic: ts.Ack, Value: []byte("not json")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := acks.Send(ctx, control.Decline{ID: 8, Gen: 2, Task: task, Reason: "upload failed"}); err != nil {
			t.Fatal(err)
		}
		if err := acks.Send(ctx, control.Trigger{ID: 1, Gen: 1, Kind: ckpt.KindCheckpoint}); err == nil {
			t.Fatal("ack writer accepted a trigger")
		}
		r1, err := tail.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := tail.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if a, ok := r1.Msg.(control.Ack); !ok || a.ID != 7 || a.Task != task || r1.Topic != control.TopicAck {
			t.Fatalf("first tail record %+v", r1)
		}
		if d, ok := r2.Msg.(control.Decline); !ok || d.ID != 8 || r2.Offset != 2 {
			t.Fatalf("second tail record %+v (offset %d), want decline 8 at offset 2", r2.Msg, r2.Offset)
		}
	})
}

// A tail started at StableEnd sees exactly what is committed after the call,
// including a transaction that was open during it, however late its client
// first fetches; SendAll writes a batch of acks in order.
func TestStableEndTail(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, opts, ts := controlSetup(t, c)
		acks, err := controltopic.NewAckWriter(opts, ts)
		if err != nil {
			t.Fatal(err)
		}
		defer acks.Close()
		task := control.TaskID{Stage: "main", Index: 0}
		if err := acks.SendAll(ctx, control.Running{Gen: 1, Task: task}, control.Running{Gen: 1, Task: control.TaskID{Stage: "main", Index: 1}}); err != nil {
			t.Fatal(err)
		}
		if err := acks.SendAll(ctx); err != nil {
			t.Fatalf("empty SendAll: %v", err)
		}

		// A transaction left open on the trigger topic: StableEnd stops
		// before it.
		open := c.Client(t, kgo.TransactionalID(kafkatest.Name(t, "open")), kgo.TransactionTimeout(60*time.Second))
		if err := open.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		pending, _ := control.Encode(control.Trigger{ID: 5, Gen: 1, TS: 1, Kind: ckpt.KindCheckpoint})
		if err := open.ProduceSync(ctx, &kgo.Record{Topic: ts.Trigger, Key: []byte("trigger"), Value: pending}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		ackEnd, err := controltopic.StableEnd(ctx, opts, ts, control.TopicAck)
		if err != nil || ackEnd != 2 {
			t.Fatalf("ack StableEnd = %d, %v; want 2", ackEnd, err)
		}
		trigEnd, err := controltopic.StableEnd(ctx, opts, ts, control.TopicTrigger)
		if err != nil || trigEnd != 0 {
			t.Fatalf("trigger StableEnd = %d, %v; want 0 (a transaction is open)", trigEnd, err)
		}
		// Written after the call, before the tail exists.
		if err := acks.Send(ctx, control.Running{Gen: 2, Task: task}); err != nil {
			t.Fatal(err)
		}
		if err := open.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
		log := slog.New(slog.NewTextHandler(io.Discard, nil))
		tail, err := controltopic.NewTail(opts, ts, map[control.Topic]kgo.Offset{
			control.TopicAck:     kgo.NewOffset().At(ackEnd),
			control.TopicTrigger: kgo.NewOffset().At(trigEnd),
		}, log)
		if err != nil {
			t.Fatal(err)
		}
		defer tail.Close()
		seen := map[string]bool{}
		for range 2 {
			r, err := tail.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			switch m := r.Msg.(type) {
			case control.Running:
				if m.Gen != 2 || r.Offset != 2 {
					t.Fatalf("ack tail: %+v at %d, want running of generation 2 at offset 2", m, r.Offset)
				}
				seen["running"] = true
			case control.Trigger:
				if m.ID != 5 {
					t.Fatalf("trigger tail: %+v", m)
				}
				seen["trigger"] = true
			default:
				t.Fatalf("unexpected %+v", r.Msg)
			}
		}
		if !seen["running"] || !seen["trigger"] {
			t.Fatalf("tail saw %v", seen)
		}
	})
}

// The first transaction of a writer that writes to a topic must commit.
// franz-go can abort it and return nil (internal/txnwatch): the coordinator's
// first trigger then never reached a source. Each round is a new writer
// on new topics; every append must be visible to read_committed readers.
// The gap is narrow: without the watch, about one round in a hundred
// failed under the race detector on two loaded cores.
func TestControlWriterFirstWriteToEachTopicCommits(t *testing.T) {
	c := kafkatest.NewKfake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	for round := range 60 {
		ts := controltopic.NewTopics(kafkatest.Name(t, fmt.Sprintf("_weir%d", round)) + ".")
		if err := controltopic.EnsureTopics(ctx, c.Admin(t), ts, -1); err != nil {
			t.Fatal(err)
		}
		w, err := controltopic.NewWriter(ctx, opts, ts, controltopic.CoordinatorTransactionalID(ts.Commit+"."))
		if err != nil {
			t.Fatal(err)
		}
		gen := control.Generation{Gen: 1, Assignment: control.Assignment{"r0": {{Stage: "s", Index: 0}}}}
		if err := w.Append(ctx, gen); err != nil {
			t.Fatal(err)
		}
		if err := w.Append(ctx, control.Trigger{ID: 1, TS: 1000, Kind: ckpt.KindCheckpoint, Gen: 1}); err != nil {
			t.Fatal(err)
		}
		w.Close()
		for _, topic := range []control.Topic{control.TopicCommit, control.TopicTrigger} {
			h, err := controltopic.ReadHistory(ctx, opts, ts, topic)
			if err != nil {
				t.Fatal(err)
			}
			if len(h.Records) != 1 {
				t.Fatalf("round %d: %s has %d committed records, want 1 (end %d)", round, topic, len(h.Records), h.End)
			}
		}
	}
}

// ReadRecent reads only the newest n offsets of a topic: the acks of the
// recent past of a long ack topic.
func TestReadRecent(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, opts, ts := controlSetup(t, c)
		acks, err := controltopic.NewAckWriter(opts, ts)
		if err != nil {
			t.Fatal(err)
		}
		defer acks.Close()
		task := control.TaskID{Stage: "count", Index: 0}
		for id := ckpt.ID(1); id <= 5; id++ {
			if err := acks.Send(ctx, control.Ack{ID: id, Gen: 1, Task: task, Handle: "h"}); err != nil {
				t.Fatal(err)
			}
		}
		h, err := controltopic.ReadRecent(ctx, opts, ts, control.TopicAck, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(h.Records) != 2 || h.Records[0].Msg.(control.Ack).ID != 4 || h.Records[1].Msg.(control.Ack).ID != 5 || h.End != 5 {
			t.Fatalf("newest 2: %+v, end %d", h.Records, h.End)
		}
		if h, err = controltopic.ReadRecent(ctx, opts, ts, control.TopicAck, 100); err != nil || len(h.Records) != 5 {
			t.Fatalf("newest 100 of 5: %d records, %v", len(h.Records), err)
		}
		if _, err := controltopic.ReadRecent(ctx, opts, ts, control.TopicAck, 0); err == nil {
			t.Fatal("ReadRecent of 0 offsets accepted")
		}
	})
}
