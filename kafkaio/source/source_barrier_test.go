package source_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/source"
)

// srcStreamRec is a record of a recorded stream.
type srcStreamRec struct {
	topic  string
	offset int64
	value  string
}

// srcStreamBarrier is a barrier of a recorded stream.
type srcStreamBarrier struct {
	checkpoint ckpt.ID
	offsets    source.Offsets
}

// srcStream is a source's output as a test records it: records and, at
// index barrierAt[i], barrier barriers[i].
type srcStream struct {
	recs      []srcStreamRec
	barriers  []srcStreamBarrier
	barrierAt []int // index in recs of the first record after the barrier
}

// TestSourceBarrierRestart is a property test of barrier placement: while
// plain, committed and aborted transactional records are produced to two
// input topics, barriers are triggered at random moments from another
// goroutine, and the reading goroutine places each between two batches
// as soon as it sees it (as a task does; its polls end every few
// milliseconds to look). For every barrier, its offsets must split the
// stream exactly (records before it are below, records after it at or
// above), and a new source restored from its offsets must read exactly the
// records that followed it: no gap, no repeat.
func TestSourceBarrierRestart(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := srcCtx(t)
		seed := time.Now().UnixNano()
		if v := os.Getenv("WEIR_SOURCE_TEST_SEED"); v != "" {
			seed, _ = strconv.ParseInt(v, 10, 64)
		}
		t.Logf("seed %d (rerun with WEIR_SOURCE_TEST_SEED=%d)", seed, seed)
		rng := rand.New(rand.NewPCG(uint64(seed), 1))
		a, b := kafkatest.Name(t, "srca"), kafkatest.Name(t, "srcb")
		c.CreateTopic(t, a, 2, nil)
		c.CreateTopic(t, b, 2, nil)
		topics := []string{a, b}
		const part = 1

		// The producer decides everything up front, so that the test's
		// goroutines do not share the random source.
		type op struct {
			kind   int // 0 plain, 1 committed transaction, 2 aborted transaction, 3 noise on partition 0
			topics []string
		}
		var ops []op
		for range 150 {
			o := op{kind: rng.IntN(4)}
			for range 1 + rng.IntN(4) {
				o.topics = append(o.topics, topics[rng.IntN(2)])
			}
			ops = append(ops, o)
		}
		// Barriers are triggered from the producing goroutine after random
		// operations, and after random pauses, so that they land at random
		// points of the stream whatever the broker's speed.
		const nBarriers = 8
		triggerAfter := map[int]bool{}
		for len(triggerAfter) < nBarriers {
			triggerAfter[rng.IntN(len(ops))] = true
		}
		pauses := make([]time.Duration, len(ops))
		for i := range pauses {
			pauses[i] = time.Duration(rng.IntN(3)) * time.Millisecond
		}
		src := srcOpen(t, ctx, c, source.Config{Topics: topics, Partition: part, MaxBatchRecords: 7})

		prod, txn := srcProducer(t, c), srcTxnClient(t, c)
		triggers := make(chan ckpt.ID, nBarriers)
		// The producer reports with t.Errorf: when the test ends on any
		// path, it is stopped and waited for, before its clients close.
		pctx, stopProducing := context.WithCancel(ctx)
		var produced sync.WaitGroup
		t.Cleanup(func() { stopProducing(); produced.Wait() })
		want := map[string][]string{} // committed values per topic
		var wantN int
		produced.Add(1)
		go func() {
			defer produced.Done()
			next := ckpt.ID(1)
			for i, o := range ops {
				time.Sleep(pauses[i])
				if triggerAfter[i] {
					triggers <- next
					next++
				}
				var recs []*kgo.Record
				for j, tp := range o.topics {
					v := fmt.Sprintf("%d.%d.%d", i, j, o.kind)
					p := int32(part)
					if o.kind == 3 {
						p = 0
					}
					recs = append(recs, srcRec(tp, p, v))
				}
				var err error
				switch o.kind {
				case 0, 3:
					err = prod.ProduceSync(pctx, recs...).FirstErr()
				case 1, 2:
					err = srcTxnErr(pctx, txn, o.kind == 1, recs...)
				}
				if err != nil {
					t.Errorf("produce op %d: %v", i, err)
					return
				}
			}
		}()
		for _, o := range ops {
			if o.kind == 0 || o.kind == 1 {
				wantN += len(o.topics)
			}
		}

		var st srcStream
		place := func(n ckpt.ID) {
			st.barriers = append(st.barriers, srcStreamBarrier{n, srcBarrier(t, ctx, src, n)})
			st.barrierAt = append(st.barrierAt, len(st.recs))
		}
		for len(st.recs) < wantN {
			select {
			case n := <-triggers:
				place(n)
				continue
			default:
			}
			pctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
			recs, err := src.Next(pctx)
			cancel()
			if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
				continue
			}
			if err != nil {
				t.Fatalf("Next after %d of %d records: %v", len(st.recs), wantN, err)
			}
			for _, r := range recs {
				st.recs = append(st.recs, srcStreamRec{r.Topic, r.Offset, string(r.Value)})
			}
		}
		produced.Wait()
		// Place the barriers triggered after the last record.
		for len(st.barriers) < nBarriers {
			place(<-triggers)
		}
		place(nBarriers + 1)
		t.Logf("%d records, barriers after records %v", len(st.recs), st.barrierAt)

		// The stream holds every committed record once, in offset order,
		// and nothing aborted or from another partition.
		got := map[string][]string{}
		last := map[string]int64{}
		for _, r := range st.recs {
			if prev, ok := last[r.topic]; ok && r.offset <= prev {
				t.Fatalf("%s: offset %d after %d", r.topic, r.offset, prev)
			}
			last[r.topic] = r.offset
			got[r.topic] = append(got[r.topic], r.value)
		}
		for i, o := range ops {
			for j, tp := range o.topics {
				if o.kind == 0 || o.kind == 1 {
					want[tp] = append(want[tp], fmt.Sprintf("%d.%d.%d", i, j, o.kind))
				}
			}
		}
		for _, tp := range topics {
			// One producer writes plain records and another transactions,
			// so compare as sets; order is checked by offsets above.
			g, w := slices.Sorted(slices.Values(got[tp])), slices.Sorted(slices.Values(want[tp]))
			if !slices.Equal(g, w) {
				t.Fatalf("%s: read %v, want %v", tp, g, w)
			}
		}

		// Checkpoint IDs are in order and each barrier's offsets split the
		// stream exactly.
		for i, bar := range st.barriers {
			if bar.checkpoint != ckpt.ID(i+1) {
				t.Fatalf("barrier %d is checkpoint %d", i, bar.checkpoint)
			}
			for k, r := range st.recs {
				off, ok := bar.offsets.Lookup(r.topic, part)
				if !ok {
					t.Fatalf("barrier %d has no offset for %s: %v", bar.checkpoint, r.topic, bar.offsets)
				}
				if before := k < st.barrierAt[i]; before != (r.offset < off) {
					t.Fatalf("barrier %d (after %d records) offset %d of %s, but record %d at offset %d is %s it",
						bar.checkpoint, st.barrierAt[i], off, r.topic, k, r.offset, map[bool]string{true: "before", false: "after"}[before])
				}
			}
		}
		// Both the original and every restored source end at the log's end,
		// past the last transaction markers, and read nothing more.
		ends := source.Offsets{}
		for _, tp := range topics {
			ends.Set(tp, part, srcWaitStable(t, ctx, c, tp, part))
		}
		srcWaitPositions(t, ctx, src, ends)

		// A source restored from each barrier reads exactly what followed.
		for i, bar := range st.barriers {
			after := st.recs[st.barrierAt[i]:]
			re := srcOpen(t, ctx, c, source.Config{Topics: topics, Partition: part, Restored: bar.offsets,
				Logger: srcQuietLog()})
			recs := srcRead(t, ctx, re, len(after))
			for _, tp := range topics {
				var w, g []string
				for _, r := range after {
					if r.topic == tp {
						w = append(w, r.value+"@"+strconv.FormatInt(r.offset, 10))
					}
				}
				for _, r := range recs {
					if r.Topic == tp {
						g = append(g, string(r.Value)+"@"+strconv.FormatInt(r.Offset, 10))
					}
				}
				if !slices.Equal(g, w) {
					t.Fatalf("restored from barrier %d %v: %s read %v, want %v", bar.checkpoint, bar.offsets, tp, g, w)
				}
			}
			srcWaitPositions(t, ctx, re, ends)
			re.Close()
		}
	})
}
