package runner_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/coordinator/runner"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// recordingPurger passes purges on to next, records each, and fails the
// first fail of them.
type recordingPurger struct {
	next  runner.Purger
	mu    sync.Mutex
	calls [][]control.Position
	fail  int
}

func (p *recordingPurger) Purge(ctx context.Context, below []control.Position) error {
	p.mu.Lock()
	p.calls = append(p.calls, slices.Clone(below))
	fail := p.fail > 0
	if fail {
		p.fail--
	}
	p.mu.Unlock()
	if fail {
		return errors.New("injected: broker unreachable")
	}
	return p.next.Purge(ctx, below)
}

func (p *recordingPurger) recorded() [][]control.Position {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

const (
	shufflePartitions = 4
	shuffleRecords    = 200 // per partition
)

// shufflePositions plays downstream tasks: task count/i reads partitions
// 2i and 2i+1 of topic, and at checkpoint id it has read id records of
// each.
func shufflePositions(topic string) func(ckpt.ID, control.TaskID) []control.Position {
	return func(id ckpt.ID, task control.TaskID) []control.Position {
		off := min(int64(id), shuffleRecords)
		p := int32(2 * task.Index)
		return []control.Position{{Topic: topic, Partition: p, Offset: off}, {Topic: topic, Partition: p + 1, Offset: off}}
	}
}

func startOffsets(ctx context.Context, t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	listed, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("start offset of %s/%d: %v", topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out
}

func allAt(offsets map[int32]int64, want int64) bool {
	if len(offsets) != shufflePartitions {
		return false
	}
	for _, o := range offsets {
		if o != want {
			return false
		}
	}
	return true
}

func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestShufflePurge: tasks acknowledge with their positions in a real
// shuffle topic; after each completion the runner deletes the records below
// the oldest retained checkpoint's positions, so the topic's log start
// offsets advance to exactly those positions and no further. Purges that
// fail are counted and retried with the next. A coordinator that takes over
// reads the retained checkpoints' _metadata, so its very first completion
// purges below the predecessor's newest checkpoint.
func TestShufflePurge(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		e := newEnv(t, c)
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		topic := kafkatest.Name(t, "shuffle")
		c.CreateTopic(t, topic, shufflePartitions, nil)
		adm := c.Admin(t)
		// Apache Kafka answers CreateTopics before every broker serves the
		// new partitions.
		waitFor(t, "the shuffle topic's partitions", 30*time.Second, func() bool {
			ends, err := adm.ListEndOffsets(ctx, topic)
			n := 0
			ends.Each(func(o kadm.ListedOffset) {
				if o.Err == nil {
					n++
				}
			})
			return err == nil && n == shufflePartitions
		})
		cl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		var recs []*kgo.Record
		for p := range int32(shufflePartitions) {
			for range shuffleRecords {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Value: []byte("x")})
			}
		}
		if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}

		reg := prometheus.NewRegistry()
		firstPurger := &recordingPurger{next: runner.KafkaPurger{Admin: adm}, fail: 2}
		first := e.runnerWith(1, func(o *runner.Options) { o.Purger, o.Registerer = firstPurger, reg })
		f := &fakeTasks{e: e, shuffle: shufflePositions(topic)}
		f.setRunner(first)
		f.acking.Store(true)
		tasksCtx, stopTasks := context.WithCancel(ctx)
		tasksDone := make(chan error, 1)
		go func() { tasksDone <- f.run(tasksCtx) }()
		defer func() { stopTasks(); <-tasksDone }()
		firstCtx, stopFirst := context.WithCancel(ctx)
		firstDone := make(chan error, 1)
		go func() { firstDone <- first.Run(firstCtx) }()
		assign(ctx, t, first)

		waitFor(t, "five completed checkpoints", 60*time.Second, func() bool {
			_, done, _ := e.history(ctx)
			return len(done) >= 5
		})
		// The tasks stop acknowledging: the checkpoint pending then cannot
		// complete, and with max_concurrent 1 none after it is triggered.
		f.acking.Store(false)
		waitFor(t, "a checkpoint that cannot complete", 10*time.Second, func() bool { return f.skipped.Load() > 0 })
		e.c.WaitStable(t, e.topics.Commit)
		_, done, _ := e.history(ctx)
		oldestRetained := int64(done[len(done)-2]) // retained: 2
		waitFor(t, "log start offsets at the oldest retained checkpoint's positions", 20*time.Second, func() bool {
			return allAt(startOffsets(ctx, t, adm, topic), oldestRetained)
		})
		// Nothing purges further: once the coordinator has stopped, no purge
		// can still be on its way, and none went past the oldest retained
		// checkpoint's positions.
		stopFirst()
		if err := <-firstDone; err != nil {
			t.Fatalf("first coordinator: %v", err)
		}
		if got := startOffsets(ctx, t, adm, topic); !allAt(got, oldestRetained) {
			t.Fatalf("start offsets %v, want %d (completed %v)", got, oldestRetained, done)
		}
		calls := firstPurger.recorded()
		t.Logf("completed %v; purges %v", done, calls)
		last := map[int32]int64{}
		for _, call := range calls {
			for _, p := range call {
				if p.Topic != topic || p.Offset < last[p.Partition] || p.Offset > oldestRetained {
					t.Errorf("purge %s after %d, oldest retained at %d", p, last[p.Partition], oldestRetained)
				}
				last[p.Partition] = p.Offset
			}
		}
		if n := counterValue(t, reg, "weir_shuffle_purge_errors_total"); n != 2 {
			t.Errorf("weir_shuffle_purge_errors_total = %v, want 2 (the injected failures)", n)
		}
		if n := counterValue(t, reg, "weir_shuffle_purge_total"); n < shufflePartitions {
			t.Errorf("weir_shuffle_purge_total = %v, want at least %d", n, shufflePartitions)
		}

		// The successor knows the positions of the retained checkpoints
		// only from their _metadata: its first completion releases the
		// older one and purges below the newer one, the predecessor's last.
		secondPurger := &recordingPurger{next: runner.KafkaPurger{Admin: adm}}
		second := e.runnerWith(2, func(o *runner.Options) { o.Purger = secondPurger })
		f.setRunner(second)
		f.skipped.Store(0)
		f.acking.Store(true)
		secondCtx, stopSecond := context.WithCancel(ctx)
		secondDone := make(chan error, 1)
		go func() { secondDone <- second.Run(secondCtx) }()
		assign(ctx, t, second)
		waitFor(t, "the successor's first purge", 30*time.Second, func() bool { return len(secondPurger.recorded()) > 0 })
		newest := int64(done[len(done)-1])
		for _, p := range secondPurger.recorded()[0] {
			if p.Offset != newest {
				t.Errorf("the successor's first purge %v, want every partition at %d (completed before: %v)",
					secondPurger.recorded()[0], newest, done)
				break
			}
		}
		waitFor(t, "log start offsets above the predecessor's", 20*time.Second, func() bool {
			return allAt(startOffsets(ctx, t, adm, topic), newest)
		})
		stopSecond()
		if err := <-secondDone; err != nil {
			t.Fatalf("second coordinator: %v", err)
		}
	})
}
