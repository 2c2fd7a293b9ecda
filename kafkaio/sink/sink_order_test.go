package sink_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/sink"
)

// TestSinkKeepsOrderAcrossEpochs: the next epoch's records go through
// another transactional producer while the previous epoch may still be
// flushing. A read_committed reader must still see every record in the
// order it was written: if the two producers' batches interleaved in the
// log, a key's newer value (count 10) would come before an older one (9).
func TestSinkKeepsOrderAcrossEpochs(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := sinkCtx(t)
		e := newSinkEnv(t, c, 1)
		// A linger makes the first epoch's last batches leave late, after
		// the barrier: the race the sink must not lose.
		s := e.sink(t, ctx, nil, func(cfg *sink.Config) {
			cfg.ClientOpts = append(cfg.ClientOpts, kgo.ProducerLinger(50*time.Millisecond))
			cfg.PoolSize = 8 // every epoch stays pre-committed until the end
		})
		const epochs, perEpoch = 6, 3000
		seq := 0
		for n := ckpt.ID(1); n <= epochs; n++ {
			for range perEpoch {
				if err := s.Write(ctx, &kgo.Record{Value: []byte(strconv.Itoa(seq))}); err != nil {
					t.Fatal(err)
				}
				seq++
			}
			// The barrier: do not wait for the flush before writing on.
			if _, err := s.PreCommit(ctx, n); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.NotifyComplete(ctx, epochs); err != nil {
			t.Fatal(err)
		}
		cl := c.Client(t, kgo.ConsumeTopics(e.topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		next := 0
		for next < seq {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			fs := cl.PollFetches(pctx)
			cancel()
			if ctx.Err() != nil {
				t.Fatalf("read %d of %d records", next, seq)
			}
			fs.EachRecord(func(r *kgo.Record) {
				if got := string(r.Value); got != strconv.Itoa(next) {
					t.Fatalf("record %d of the log holds %s: the epochs interleaved", next, got)
				}
				next++
			})
		}
	})
}
