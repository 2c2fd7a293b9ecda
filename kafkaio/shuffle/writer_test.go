package shuffle_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/shuffle"
	"github.com/weir-stream/weir/keygroup"
)

// setup returns a context for the test, the cluster's client options and a
// new shuffle topic of m partitions, made by EnsureTopics.
func setup(t *testing.T, c *kafkatest.Cluster, m int) (context.Context, []kgo.Opt, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	topic := kafkatest.Name(t, "shuffle")
	if err := shuffle.EnsureTopics(ctx, c.Admin(t), map[string]int{topic: m}, -1); err != nil {
		t.Fatal(err)
	}
	return ctx, append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, c.Opts...), topic
}

func newWriter(t testing.TB, opts []kgo.Opt, topic string, m int, task control.TaskID, gen uint64) *shuffle.Writer {
	t.Helper()
	w, err := shuffle.NewWriter(shuffle.WriterConfig{ClientOpts: opts, Topic: topic, Partitions: m, Task: task, Gen: gen})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func newReader(t testing.TB, ctx context.Context, opts []kgo.Opt, topic string, lo, hi int32, start map[int32]int64) *shuffle.Reader {
	t.Helper()
	r, err := shuffle.NewReader(ctx, shuffle.ReaderConfig{ClientOpts: opts, Topic: topic, Lo: lo, Hi: hi, Start: start})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// readUntil polls r until done says it has enough, and returns what it read.
func readUntil(t *testing.T, ctx context.Context, r *shuffle.Reader, done func([]*kgo.Record) bool) []*kgo.Record {
	t.Helper()
	var got []*kgo.Record
	for !done(got) {
		recs, err := r.Poll(ctx)
		if err != nil {
			t.Fatalf("poll after %d records: %v", len(got), err)
		}
		got = append(got, recs...)
	}
	return got
}

// barrierOf is the barrier TestWriteBarriers writes in round n: a periodic
// checkpoint, then a savepoint, each with its trigger time.
func barrierOf(n ckpt.ID) ckpt.Barrier {
	b := ckpt.Barrier{ID: n, Kind: ckpt.KindCheckpoint, Timestamp: 1764612345000 + int64(n)}
	if n == 2 {
		b.Kind, b.Target = ckpt.KindSavepoint, "s3://bucket/savepoints/nightly"
	}
	return b
}

// TestWriteBarriers: every record goes to its key's key group with the
// writer's headers; each barrier reaches every partition after every record
// written before it and before every record written after it; and once a
// barrier's Wait returned, everything written before it is in the log.
func TestWriteBarriers(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const m, perRound = 16, 300
		ctx, opts, topic := setup(t, c, m)
		task := control.TaskID{Stage: "up", Index: 2}
		reg := prometheus.NewRegistry()
		metrics, err := shuffle.NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := shuffle.NewMetrics(reg); err != nil || again == nil {
			t.Fatalf("a second NewMetrics on the registry: %v", err) // another task's: adopts the collectors
		}
		w, err := shuffle.NewWriter(shuffle.WriterConfig{ClientOpts: opts, Topic: topic, Partitions: m, Task: task, Gen: 7, Metrics: metrics})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		written := 0
		for round := ckpt.ID(1); round <= 2; round++ {
			for range perRound {
				r := &kgo.Record{Key: []byte("key-" + strconv.Itoa(written%97)), Value: []byte(fmt.Sprintf("%d/%d", round, written)),
					Headers: []kgo.RecordHeader{{Key: "user", Value: []byte("h")}}}
				if err := w.Write(ctx, r); err != nil {
					t.Fatal(err)
				}
				written++
			}
			p, err := w.Barrier(ctx, barrierOf(round))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			// Wait promised: every record so far is acknowledged.
			ends, err := c.Admin(t).ListEndOffsets(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			var sum int64
			ends.Each(func(o kadm.ListedOffset) { sum += o.Offset })
			if want := int64(written) + int64(round)*m; sum != want {
				t.Fatalf("after barrier %d's Wait the topic holds %d records, want %d", round, sum, want)
			}
		}

		rd, err := shuffle.NewReader(ctx, shuffle.ReaderConfig{ClientOpts: opts, Topic: topic, Lo: 0, Hi: m, Metrics: metrics})
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		recs := readUntil(t, ctx, rd, func(got []*kgo.Record) bool { return len(got) == written+2*m })
		for name, want := range map[string]float64{
			shuffle.MetricRecordsWritten:  float64(written),
			shuffle.MetricBarriersWritten: 2,
			shuffle.MetricRecordsRead:     float64(written + 2*m),
		} {
			if got := counterValue(t, reg, name, topic); got != want {
				t.Errorf("%s = %v, want %v", name, got, want)
			}
		}
		parser := shuffle.Parser{Stage: "up"}
		barriers := make([]ckpt.ID, m) // last barrier seen per partition
		for _, r := range recs {
			meta, err := parser.ParseRecord(r)
			if err != nil {
				t.Fatal(err)
			}
			if meta.Upstream != 2 || meta.Gen != 7 {
				t.Fatalf("record %s: meta %+v, want upstream 2, gen 7", r.Value, meta)
			}
			if meta.IsBarrier() {
				if r.Key != nil || len(r.Value) != 0 || meta.Barrier != barrierOf(barriers[r.Partition]+1) {
					t.Fatalf("partition %d: barrier %+v (key %q, value %q) after barrier %d", r.Partition, meta, r.Key, r.Value, barriers[r.Partition])
				}
				barriers[r.Partition] = meta.Barrier.ID
				continue
			}
			if want := int32(keygroup.Of(r.Key, m)); r.Partition != want {
				t.Fatalf("key %q in partition %d, want key group %d", r.Key, r.Partition, want)
			}
			var round, seq int
			if _, err := fmt.Sscanf(string(r.Value), "%d/%d", &round, &seq); err != nil {
				t.Fatal(err)
			}
			if ckpt.ID(round) != barriers[r.Partition]+1 {
				t.Fatalf("partition %d: record %s of round %d after barrier %d", r.Partition, r.Value, round, barriers[r.Partition])
			}
			if hs := shuffle.UserHeaders(r.Headers); len(hs) != 1 || hs[0].Key != "user" {
				t.Fatalf("user headers %v", hs)
			}
		}
		for p, b := range barriers {
			if b != 2 {
				t.Fatalf("partition %d: last barrier %d, want 2", p, b)
			}
		}
	})
}

// counterValue returns the value of the counter name{topic} of reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name, topic string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == topic {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s{topic=%q}", name, topic)
	return 0
}

// TestWriteWatermarks: a watermark goes to every partition, after every
// record written before it and before every record written after it, as a
// record with a nil key, an empty value and exactly the headers weir-task,
// weir-gen, weir-watermark; Watermark does not wait (a later barrier's Wait
// covers it); the watermarks are counted apart from data records.
func TestWriteWatermarks(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const m, perRound = 8, 100
		ctx, opts, topic := setup(t, c, m)
		reg := prometheus.NewRegistry()
		metrics, err := shuffle.NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		w, err := shuffle.NewWriter(shuffle.WriterConfig{ClientOpts: opts, Topic: topic, Partitions: m,
			Task: control.TaskID{Stage: "up", Index: 1}, Gen: 3, Metrics: metrics})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		// Round 1's records, watermark 1000 (a negative one, as a task
		// restored before any record writes MinWatermark, must round-trip
		// too), round 2's records, idle, round 3's, then a barrier.
		marks := []struct {
			ms   int64
			idle bool
		}{{-7, false}, {1000, false}, {0, true}}
		written := 0
		for round, mk := range marks {
			for range perRound {
				r := &kgo.Record{Key: []byte("key-" + strconv.Itoa(written%31)), Value: []byte(fmt.Sprintf("%d/%d", round, written))}
				if err := w.Write(ctx, r); err != nil {
					t.Fatal(err)
				}
				written++
			}
			if err := w.Watermark(ctx, mk.ms, mk.idle); err != nil {
				t.Fatal(err)
			}
		}
		p, err := w.Barrier(ctx, ckpt.Barrier{ID: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		rd := newReader(t, ctx, opts, topic, 0, m, nil)
		total := written + len(marks)*m + m
		recs := readUntil(t, ctx, rd, func(got []*kgo.Record) bool { return len(got) >= total })
		if len(recs) != total {
			t.Fatalf("read %d records, want %d", len(recs), total)
		}
		parser := shuffle.Parser{Stage: "up"}
		seen := make([]int, m) // watermarks seen per partition
		for _, r := range recs {
			meta, err := parser.Parse(r.Headers)
			if err != nil {
				t.Fatal(err)
			}
			if meta.Upstream != 1 || meta.Gen != 3 {
				t.Fatalf("meta %+v, want upstream 1 gen 3", meta)
			}
			switch {
			case meta.IsBarrier():
				if seen[r.Partition] != len(marks) {
					t.Fatalf("partition %d: barrier after %d watermarks, want %d", r.Partition, seen[r.Partition], len(marks))
				}
			case meta.Watermark:
				mk := marks[seen[r.Partition]]
				if r.Key != nil || len(r.Value) != 0 || len(r.Headers) != 3 || meta.Idle != mk.idle || meta.WatermarkMs != mk.ms {
					t.Fatalf("partition %d: watermark record key %q value %q headers %v meta %+v, want %+v",
						r.Partition, r.Key, r.Value, r.Headers, meta, mk)
				}
				seen[r.Partition]++
			default:
				var round, seq int
				if _, err := fmt.Sscanf(string(r.Value), "%d/%d", &round, &seq); err != nil {
					t.Fatal(err)
				}
				if round != seen[r.Partition] {
					t.Fatalf("partition %d: record of round %d after %d watermarks", r.Partition, round, seen[r.Partition])
				}
			}
		}
		for name, want := range map[string]float64{
			shuffle.MetricRecordsWritten:    float64(written),
			shuffle.MetricWatermarksWritten: float64(len(marks)),
			shuffle.MetricBarriersWritten:   1,
		} {
			if got := counterValue(t, reg, name, topic); got != want {
				t.Errorf("%s = %v, want %v", name, got, want)
			}
		}
	})
}

// TestWriterStickyError: a failed produce fails every later call.
func TestWriterStickyError(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const m = 4
		ctx, opts, topic := setup(t, c, m)
		w := newWriter(t, opts, topic, m, control.TaskID{Stage: "up", Index: 0}, 1)
		if err := w.Write(ctx, &kgo.Record{Key: []byte("k"), Value: []byte("fine")}); err != nil {
			t.Fatal(err)
		}
		// Larger than any batch: kgo fails it without sending it.
		if err := w.Write(ctx, &kgo.Record{Key: []byte("k"), Value: make([]byte, 2<<20)}); err != nil {
			t.Fatal(err) // asynchronous: not known yet
		}
		for w.Err() == nil {
			select {
			case <-ctx.Done():
				t.Fatal("the oversized record never failed")
			case <-time.After(5 * time.Millisecond):
			}
		}
		sticky := w.Err()
		if err := w.Write(ctx, &kgo.Record{Key: []byte("k")}); !errors.Is(err, sticky) {
			t.Fatalf("Write after a failure = %v, want %v", err, sticky)
		}
		if _, err := w.Barrier(ctx, ckpt.Barrier{ID: 1}); !errors.Is(err, sticky) {
			t.Fatalf("Barrier after a failure = %v, want %v", err, sticky)
		}
		if err := w.Watermark(ctx, 5, false); !errors.Is(err, sticky) {
			t.Fatalf("Watermark after a failure = %v, want %v", err, sticky)
		}
		w.Close()
		if err := w.Err(); !errors.Is(err, sticky) {
			t.Fatalf("Close replaced the sticky error %v by %v", sticky, err)
		}
	})
}

// TestPendingWaitFailsWithWriter: a barrier whose records fail (the topic
// has fewer partitions than the writer was told) does not report success.
func TestPendingWaitFailsWithWriter(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, opts, topic := setup(t, c, 2)
		w := newWriter(t, opts, topic, 3, control.TaskID{Stage: "up", Index: 0}, 1)
		wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		p, err := w.Barrier(wctx, ckpt.Barrier{ID: 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(ctx); err == nil {
			t.Fatal("Wait succeeded for a barrier to a partition that does not exist")
		}
		if w.Err() == nil {
			t.Fatal("no sticky error after a failed barrier")
		}
	})
}

func TestNewWriterRejects(t *testing.T) {
	ok := shuffle.WriterConfig{Topic: "t", Partitions: 8, Task: control.TaskID{Stage: "up", Index: 0}}
	for name, mod := range map[string]func(*shuffle.WriterConfig){
		"no topic":       func(c *shuffle.WriterConfig) { c.Topic = "" },
		"no partitions":  func(c *shuffle.WriterConfig) { c.Partitions = 0 },
		"too many":       func(c *shuffle.WriterConfig) { c.Partitions = keygroup.Limit + 1 },
		"invalid task":   func(c *shuffle.WriterConfig) { c.Task = control.TaskID{Stage: "a/b"} },
		"negative index": func(c *shuffle.WriterConfig) { c.Task.Index = -1 },
	} {
		cfg := ok
		mod(&cfg)
		if w, err := shuffle.NewWriter(cfg); err == nil {
			w.Close()
			t.Errorf("%s: NewWriter accepted %+v", name, cfg)
		}
	}
}

// TestSharedClient: writers of two upstream tasks on one producer
// (NewClient) keep each task's barriers in order with its own records in
// every partition; one writer's Close and one writer's failure leave the
// other writing, and neither closes the shared client.
func TestSharedClient(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const m, perRound = 8, 200
		ctx, opts, topic := setup(t, c, m)
		cl, err := shuffle.NewClient(opts)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ws := make([]*shuffle.Writer, 2)
		for i := range ws {
			if ws[i], err = shuffle.NewWriter(shuffle.WriterConfig{Client: cl, Topic: topic, Partitions: m,
				Task: control.TaskID{Stage: "up", Index: i}, Gen: 4}); err != nil {
				t.Fatal(err)
			}
		}
		// Round 1: both write, interleaved, then both barrier 1. Round 2:
		// writer 0 fails (an oversized record) and is closed; writer 1
		// writes round 2 and barrier 2, whose Wait must succeed.
		written := make([]int, 2)
		write := func(i, round int) {
			r := &kgo.Record{Key: []byte("key-" + strconv.Itoa(written[i]%53)), Value: []byte(fmt.Sprintf("%d/%d", round, written[i]))}
			if err := ws[i].Write(ctx, r); err != nil {
				t.Fatal(err)
			}
			written[i]++
		}
		for range perRound {
			write(0, 1)
			write(1, 1)
		}
		for i := range ws {
			p, err := ws[i].Barrier(ctx, ckpt.Barrier{ID: 1})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Wait(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if err := ws[0].Write(ctx, &kgo.Record{Key: []byte("k"), Value: make([]byte, 2<<20)}); err != nil {
			t.Fatal(err)
		}
		for ws[0].Err() == nil {
			select {
			case <-ctx.Done():
				t.Fatal("the oversized record never failed")
			case <-time.After(5 * time.Millisecond):
			}
		}
		ws[0].Close()
		for range perRound {
			write(1, 2)
		}
		p, err := ws[1].Barrier(ctx, ckpt.Barrier{ID: 2})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(ctx); err != nil {
			t.Fatalf("writer 1's barrier after writer 0 failed and closed: %v", err)
		}
		ws[1].Close()
		if err := cl.Ping(ctx); err != nil {
			t.Fatalf("the shared client after both writers closed: %v", err)
		}

		rd := newReader(t, ctx, opts, topic, 0, m, nil)
		total := written[0] + written[1] + 2*m + m
		recs := readUntil(t, ctx, rd, func(got []*kgo.Record) bool { return len(got) >= total })
		if len(recs) != total {
			t.Fatalf("read %d records, want %d", len(recs), total)
		}
		parser := shuffle.Parser{Stage: "up"}
		barriers := [2][m]ckpt.ID{} // last barrier per upstream and partition
		count := [2]int{}
		for _, r := range recs {
			meta, err := parser.Parse(r.Headers)
			if err != nil {
				t.Fatal(err)
			}
			u := meta.Upstream
			if meta.IsBarrier() {
				if meta.Barrier.ID != barriers[u][r.Partition]+1 {
					t.Fatalf("upstream %d partition %d: barrier %d after %d", u, r.Partition, meta.Barrier.ID, barriers[u][r.Partition])
				}
				barriers[u][r.Partition] = meta.Barrier.ID
				continue
			}
			var round, seq int
			if _, err := fmt.Sscanf(string(r.Value), "%d/%d", &round, &seq); err != nil {
				t.Fatal(err)
			}
			if ckpt.ID(round) != barriers[u][r.Partition]+1 {
				t.Fatalf("upstream %d partition %d: record %s after barrier %d", u, r.Partition, r.Value, barriers[u][r.Partition])
			}
			count[u]++
		}
		if count[0] != written[0] || count[1] != written[1] {
			t.Fatalf("read %v records per upstream, want %v", count, written)
		}
	})
}
