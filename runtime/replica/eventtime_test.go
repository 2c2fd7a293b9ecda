package replica_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/stream"
)

// The windows of TestEventTimeWindowsExactlyOnce: tumbling, of etWindow
// event time, from etBase.
const etWindow = time.Second

var etBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestEventTimeWindowsExactlyOnce runs a two-stage event-time Go job
// (records of 4 input partitions re-keyed by page, counted per page and
// tumbling window of one second of event time by a stream.Window) on two in-process replicas, with partition 3 idle
// throughout: its task must not hold the windows back. One replica is
// stopped and started again while checkpoints run every 200ms and input
// flows. An
// independent read_committed consumer checks that every (page, window)
// count appears exactly once and equals the input's. On kfake and on the
// real broker.
func TestEventTimeWindowsExactlyOnce(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const (
			partitions = 4 // partition 3 gets nothing
			pages      = 8
			records    = 2000
			perWindow  = 200 // records per window of event time
			rate       = 400 // records per second of wall time
		)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "et")
		in, out := job+"-in", job+"-out"
		c.CreateTopic(t, in, partitions, nil)
		c.CreateTopic(t, out, partitions, nil)
		dir := t.TempDir()
		yaml := func(id string) string {
			return fmt.Sprintf(`
job:
  name: %s
  pipeline: [{source: {topics: [%s]}}, {sink: {topic: %s}}]
kafka: {brokers: [%s], session_timeout: 6s}
checkpoint: {interval: 200ms, timeout: 20s, storage: "file://%s/checkpoints"}
state: {dir: "%s/state-%s"}
http: {address: ""}
process: {replica_id: %s, grace_period: 20s}
`, job, in, out, c.Brokers[0], dir, dir, id, id)
		}
		start := func(id string) *testReplica { return startJobReplica(ctx, t, id, yaml(id), windowJob(t, job, in, out)) }

		// The input flows at a steady rate through the restart, so that no
		// active partition goes idle meanwhile: a partition active again
		// after being idle may have records behind the watermark the
		// others moved on (late, as in Flink).
		want := map[etWindowKey]int{}
		flowed := make(chan struct{})
		cl := c.Client(t, kgo.DefaultProduceTopic(in), kgo.RecordPartitioner(kgo.ManualPartitioner()))
		go func() {
			defer close(flowed)
			for i := 0; i < records && ctx.Err() == nil; i++ {
				// Event times rise 1000/perWindow ms a record, up to 150ms
				// out of order (within the 200ms bound).
				ts := etBase.Add(time.Duration(i)*etWindow/perWindow - time.Duration((i*37)%150)*time.Millisecond)
				page := fmt.Sprintf("page-%d", i%pages)
				want[etWindowKey{page, windowEnd(ts).UnixMilli()}]++
				cl.Produce(ctx, &kgo.Record{Key: []byte(page), Value: []byte(page), Partition: int32(i % (partitions - 1)), Timestamp: ts}, nil)
				if i%(rate/10) == 0 {
					time.Sleep(100 * time.Millisecond)
				}
			}
			if err := cl.Flush(ctx); err != nil {
				t.Error(err)
			}
			// The last windows close only when every active partition's
			// watermark passes them: one record each of a window far
			// later (which itself stays open).
			end := etBase.Add(time.Duration(records)*etWindow/perWindow + time.Minute)
			for p := range int32(partitions - 1) {
				if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("end"), Value: []byte("end"), Partition: p, Timestamp: end}).FirstErr(); err != nil {
					t.Error(err)
				}
			}
		}()
		// The producer reports with t.Error: the test waits for it on
		// every path (on a failure the deferred cancel ends it at once).
		t.Cleanup(func() { <-flowed })
		a, b := start("a"), start("b")
		waitReady(t, a.Replica, b.Replica)
		waitCommitted(ctx, t, c, out, int64(pages))
		a.stop()
		a = start("a")
		waitReady(t, a.Replica, b.Replica)
		select {
		case <-flowed:
		case <-ctx.Done():
			t.Fatal("the input did not flow within the test's time")
		}
		verifyWindows(ctx, t, c, out, want)
	})
}

type etWindowKey struct {
	page string
	end  int64 // Unix ms of the window's last millisecond
}

// windowEnd returns the last millisecond of ts's window.
func windowEnd(ts time.Time) time.Time {
	d := ts.Sub(etBase)
	start := d.Truncate(etWindow)
	if start > d { // before etBase: the window starts below
		start -= etWindow
	}
	return etBase.Add(start + etWindow - time.Millisecond)
}

// verifyWindows reads out read_committed until it holds a count for every
// window of want and checks each appears once with want's count; a
// duplicate or a wrong count fails at once.
func verifyWindows(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string, want map[etWindowKey]int) {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := map[etWindowKey]int{}
	deadline := time.Now().Add(time.Minute)
	for len(got) < len(want) && time.Now().Before(deadline) {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			n, err := strconv.Atoi(string(r.Value))
			if err != nil {
				t.Fatalf("output %q: %v", r.Value, err)
			}
			k := etWindowKey{string(r.Key), r.Timestamp.UnixMilli()}
			if k.page == "end" {
				return // a partition idle before its end record may make it late
			}
			if _, dup := got[k]; dup {
				t.Fatalf("window %v committed twice (%d, then %d)", k, got[k], n)
			}
			if n != want[k] {
				t.Fatalf("window %v: count %d, want %d", k, n, want[k])
			}
			got[k] = n
		})
	}
	if len(got) != len(want) {
		t.Fatalf("%d of %d windows committed after a minute", len(got), len(want))
	}
	t.Logf("%d windows, each exactly once with its count", len(got))
}

// windowJob re-keys the input by its value (a page), and counts per page
// and tumbling window in stage count (stream.Window), each count written as
// decimal text with the window's end − 1 ms as the record's timestamp.
func windowJob(t *testing.T, name, in, out string) *stream.Job {
	t.Helper()
	job := stream.NewJob(name)
	src := stream.KafkaSource{Topics: []string{in}, Start: kafkaio.Start{Kind: kafkaio.StartEarliest},
		Watermark: stream.WatermarkSpec{MaxOutOfOrderness: 200 * time.Millisecond, IdleTimeout: 2 * time.Second, Interval: 50 * time.Millisecond}}
	s := stream.From(job, src, stream.RawCodec{})
	byPage := stream.KeyBy(s, func(v []byte) ([]byte, error) { return v, nil }, stream.Named("count"), stream.Parallelism(2))
	counts := stream.Window(byPage, "per-second", stream.Windowing[[]byte]{Kind: stream.Tumbling, Size: etWindow},
		stream.Int64Codec{}, stream.CountAgg[[]byte]())
	text := stream.Map(counts, func(r stream.WindowResult[int64]) (string, error) { return strconv.FormatInt(r.Value, 10), nil })
	stream.To(text, stream.KafkaSink{Topic: out, Delivery: kafkaio.DeliveryExactlyOnce}, stream.StringCodec{})
	if err := job.Build(); err != nil {
		t.Fatal(err)
	}
	return job
}
