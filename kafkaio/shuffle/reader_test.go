package shuffle_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// fill produces n records to each partition of ps, in batches of 20 so that
// a fetch limited to one batch per partition leaves the rest for later.
func fill(t *testing.T, ctx context.Context, c *kafkatest.Cluster, topic string, n int, ps ...int32) {
	t.Helper()
	cl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic))
	for i := 0; i < n; i += 20 {
		var batch []*kgo.Record
		for _, p := range ps {
			for j := i; j < min(i+20, n); j++ {
				batch = append(batch, &kgo.Record{Partition: p, Value: []byte(strconv.Itoa(j))})
			}
		}
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// smallFetches makes every fetch return about one batch per partition, so
// that the client has records buffered beyond those a poll returned.
var smallFetches = []kgo.Opt{kgo.FetchMaxPartitionBytes(1), kgo.FetchMaxBytes(1)}

// offsets returns the offsets of p's records in recs, in order.
func offsets(recs []*kgo.Record, p int32) []int64 {
	var os []int64
	for _, r := range recs {
		if r.Partition == p {
			os = append(os, r.Offset)
		}
	}
	return os
}

// wantRun fails unless os is exactly from, from+1, ..., to.
func wantRun(t *testing.T, what string, os []int64, from, to int64) {
	t.Helper()
	if len(os) != int(to-from+1) {
		t.Fatalf("%s: %d offsets %v..., want %d..%d", what, len(os), os[:min(len(os), 5)], from, to)
	}
	for i, o := range os {
		if o != from+int64(i) {
			t.Fatalf("%s: offset %d at position %d, want %d (%v...)", what, o, i, from+int64(i), os[:min(len(os), 10)])
		}
	}
}

// lastOf says whether recs hold offset off of partition p.
func lastOf(p int32, off int64) func([]*kgo.Record) bool {
	return func(recs []*kgo.Record) bool {
		for _, r := range recs {
			if r.Partition == p && r.Offset == off {
				return true
			}
		}
		return false
	}
}

// TestReaderRangeStartAndSeek: the reader reads only its partitions, from
// the restored positions or the log start; a Seek back re-reads exactly from
// the offset and a Seek forward skips exactly to it, though the client had
// records of the partition buffered from before.
func TestReaderRangeStartAndSeek(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const n = 400
		ctx, opts, topic := setup(t, c, 4)
		fill(t, ctx, c, topic, n, 0, 1, 2, 3)
		r := newReader(t, ctx, append(opts, smallFetches...), topic, 1, 3, map[int32]int64{2: 10})
		first := readUntil(t, ctx, r, func(recs []*kgo.Record) bool {
			return len(offsets(recs, 1)) >= 40 && len(offsets(recs, 2)) > 0
		})
		for _, rec := range first {
			if rec.Partition != 1 && rec.Partition != 2 {
				t.Fatalf("record of partition %d, outside [1, 3)", rec.Partition)
			}
		}
		o1, o2 := offsets(first, 1), offsets(first, 2)
		wantRun(t, "partition 1 from its log start", o1, 0, o1[len(o1)-1])
		wantRun(t, "partition 2 from its restored position", o2, 10, o2[len(o2)-1])
		time.Sleep(200 * time.Millisecond) // let the client buffer the next fetches

		r.Seek(1, 5) // back
		second := readUntil(t, ctx, r, func(recs []*kgo.Record) bool {
			return lastOf(1, n-1)(recs) && (o2[len(o2)-1] == n-1 || lastOf(2, n-1)(recs))
		})
		wantRun(t, "partition 1 after seeking back to 5", offsets(second, 1), 5, n-1)
		if o2[len(o2)-1] < n-1 { // the other partition goes on where it was
			wantRun(t, "partition 2 after partition 1's seek", offsets(second, 2), o2[len(o2)-1]+1, n-1)
		}

		r.Seek(1, 0)
		third := readUntil(t, ctx, r, func(recs []*kgo.Record) bool { return len(offsets(recs, 1)) >= 20 })
		o1 = offsets(third, 1)
		wantRun(t, "partition 1 after seeking back to 0", o1, 0, o1[len(o1)-1])
		if o1[len(o1)-1] >= 300 {
			t.Fatalf("partition 1 read to %d already: the fetches are not small", o1[len(o1)-1])
		}
		time.Sleep(200 * time.Millisecond)
		r.Seek(1, 300) // forward, past records buffered
		fourth := readUntil(t, ctx, r, lastOf(1, n-1))
		wantRun(t, "partition 1 after seeking forward to 300", offsets(fourth, 1), 300, n-1)
	})
}

// TestReaderPauseResume: a paused partition's records stop coming, though
// some were buffered, while the others' go on; after Resume it continues
// exactly where it stopped.
func TestReaderPauseResume(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const n = 200
		ctx, opts, topic := setup(t, c, 2)
		fill(t, ctx, c, topic, n, 0, 1)
		r := newReader(t, ctx, append(opts, smallFetches...), topic, 0, 2, nil)
		first := readUntil(t, ctx, r, func(recs []*kgo.Record) bool { return len(offsets(recs, 0)) >= 20 })
		o0 := offsets(first, 0)
		stop := o0[len(o0)-1]
		if stop >= n-1 {
			t.Fatal("partition 0 read to its end already: the fetches are not small")
		}
		time.Sleep(200 * time.Millisecond) // let the client buffer the next fetches

		r.Pause(0)
		r.Pause(0) // twice is once
		// Partition 1 may have been read to its end already: the fetches
		// take one batch each, and which partition's comes first is the
		// client's choice.
		paused := readUntil(t, ctx, r, func(recs []*kgo.Record) bool { return lastOf(1, n-1)(slices.Concat(first, recs)) })
		// Partition 0 has records to fetch: give it time to show.
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if recs, err := r.Poll(pctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("poll with every record of the unpaused partition read = %d records, %v; want the deadline", len(recs), err)
		}
		if os := offsets(paused, 0); len(os) > 0 {
			t.Fatalf("paused partition 0 returned offsets %v", os)
		}

		r.Resume(0)
		began := time.Now()
		resumed := readUntil(t, ctx, r, func(recs []*kgo.Record) bool { return len(offsets(recs, 0)) > 0 })
		if d := time.Since(began); d > 3*time.Second {
			t.Errorf("the resumed partition's first record took %v: the fetch in flight was not cut short", d)
		}
		resumed = append(resumed, readUntil(t, ctx, r, func(recs []*kgo.Record) bool { return lastOf(0, n-1)(append(resumed, recs...)) })...)
		wantRun(t, "partition 0 after resume", offsets(resumed, 0), stop+1, n-1)
		if os := offsets(resumed, 1); len(os) > 0 {
			t.Fatalf("partition 1 read again after resuming partition 0: %v", os)
		}
	})
}

// TestKgoDropsBufferedOnSetOffsetsAndPause pins the franz-go behaviour the
// reader relies on: records fetched but not yet polled are never returned
// after a SetOffsets of their partition, nor while it is paused.
func TestKgoDropsBufferedOnSetOffsetsAndPause(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		const n = 400
		ctx, _, topic := setup(t, c, 1)
		fill(t, ctx, c, topic, n, 0)
		cl := c.Client(t, append(smallFetches, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))...)
		poll := func(ctx context.Context) []*kgo.Record {
			fs := cl.PollFetches(ctx)
			if err := fs.Err0(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatal(err)
			}
			return fs.Records()
		}
		if recs := poll(ctx); len(recs) == 0 || recs[0].Offset != 0 || len(recs) >= 100 {
			t.Fatalf("first poll: %d records", len(recs))
		}
		time.Sleep(200 * time.Millisecond)
		cl.SetOffsets(map[string]map[int32]kgo.EpochOffset{topic: {0: {Epoch: -1, Offset: 300}}})
		recs := poll(ctx)
		if len(recs) == 0 || recs[0].Offset != 300 {
			t.Fatalf("first record after SetOffsets(300): %v", offsets(recs, 0)[:min(len(recs), 3)])
		}
		last := recs[len(recs)-1].Offset
		if last == n-1 {
			t.Fatal("read to the end: no buffered records left to test pause with")
		}
		time.Sleep(200 * time.Millisecond)
		cl.PauseFetchPartitions(map[string][]int32{topic: {0}})
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		if recs := poll(pctx); len(recs) > 0 {
			t.Fatalf("paused partition returned %d records from %d", len(recs), recs[0].Offset)
		}
		cl.ResumeFetchPartitions(map[string][]int32{topic: {0}})
		if recs := poll(ctx); len(recs) == 0 || recs[0].Offset != last+1 {
			t.Fatalf("after resume: %v..., want %d", offsets(recs, 0)[:min(len(recs), 3)], last+1)
		}
	})
}
