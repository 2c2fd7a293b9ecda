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

// BenchmarkSink compares, on the real broker, the exactly-once sink with a
// checkpoint (pre-commit, then commit on completion) every N records against
// raw kgo transactional producing that commits every N records (flush,
// EndTransaction, BeginTransaction, synchronously: the usual way), and
// against raw producing into one transaction committed at the end (the
// ceiling: no commit cost at all). b.N is the number of records; each is
// 100 bytes, spread over 3 partitions. Run it with:
//
//	eval $(bash scripts/kafka.sh env)
//	go test ./kafkaio/sink/ -run '^$' -bench BenchmarkSink -benchtime 200000x
func BenchmarkSink(b *testing.B) {
	b.Run("raw/one_transaction", func(b *testing.B) { benchRawTxn(b, 0) })
	for _, every := range []int{1000, 10000} {
		b.Run("raw/every_"+strconv.Itoa(every), func(b *testing.B) { benchRawTxn(b, every) })
		b.Run("weir/every_"+strconv.Itoa(every), func(b *testing.B) { benchSinkEOS(b, every) })
	}
}

const benchPartitions = 3

var benchValue = make([]byte, 100)

func benchTopic(b *testing.B) (*kafkatest.Cluster, string) {
	c := kafkatest.NewReal(b)
	topic := kafkatest.Name(b, "bench")
	c.CreateTopic(b, topic, benchPartitions, nil)
	return c, topic
}

func benchRecord(i int) *kgo.Record {
	return &kgo.Record{Value: benchValue, Partition: int32(i % benchPartitions)}
}

// benchRawTxn commits every records; 0 means once, at the end.
func benchRawTxn(b *testing.B, every int) {
	if every == 0 {
		every = b.N
	}
	c, topic := benchTopic(b)
	ctx := context.Background()
	cl := c.Client(b, kgo.DefaultProduceTopic(topic), kgo.TransactionalID(kafkatest.Name(b, "raw")),
		kgo.TransactionTimeout(time.Minute), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	commit := func() {
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			b.Fatal(err)
		}
	}
	var failed error
	promise := func(_ *kgo.Record, err error) {
		if err != nil && failed == nil {
			failed = err
		}
	}
	b.ResetTimer()
	for i := range b.N {
		if i%every == 0 {
			if i > 0 {
				commit()
			}
			if err := cl.BeginTransaction(); err != nil {
				b.Fatal(err)
			}
		}
		cl.Produce(ctx, benchRecord(i), promise)
	}
	commit()
	b.StopTimer()
	if failed != nil {
		b.Fatal(failed)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

func benchSinkEOS(b *testing.B, every int) {
	c, topic := benchTopic(b)
	ctx := context.Background()
	s, err := sink.New(sink.Config{
		ClientOpts:            []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner())},
		TransactionalIDPrefix: kafkatest.Name(b, "weir") + ".",
		Stage:                 "bench",
		TransactionTimeout:    time.Minute,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	if err := s.Recover(ctx, nil); err != nil {
		b.Fatal(err)
	}
	// The task's asynchronous part and the coordinator: wait for the
	// pre-commit's flush, then "complete" the checkpoint.
	pcs := make(chan *sink.PreCommit, 16)
	done := make(chan error, 1)
	go func() {
		for pc := range pcs {
			if _, err := pc.Wait(ctx); err != nil {
				done <- err
				return
			}
			if err := s.NotifyComplete(ctx, pc.Checkpoint()); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	barrier := func(n ckpt.ID) {
		pc, err := s.PreCommit(ctx, n)
		if err != nil {
			b.Fatal(err)
		}
		pcs <- pc
	}
	b.ResetTimer()
	var n ckpt.ID
	for i := range b.N {
		if i > 0 && i%every == 0 {
			n++
			barrier(n)
		}
		if err := s.Write(ctx, benchRecord(i)); err != nil {
			b.Fatal(err)
		}
	}
	barrier(n + 1)
	close(pcs)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}
