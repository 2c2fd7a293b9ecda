package source_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/source"
)

// BenchmarkSource compares, on the real broker and in one run, the records
// per second of a raw franz-go consumer (PollRecords, read_committed) with
// those of the source reading the same topic, with a barrier every N
// records. Each iteration reads the whole preloaded topic from the start
// once with each, client creation included, and reports both rates and
// their ratio (source / kgo).
//
//	eval $(bash scripts/kafka.sh env)
//	go test ./kafkaio/source/ -run '^$' -bench BenchmarkSource -benchtime 3x
//
// WEIR_SOURCE_BENCH_RECORDS sets the topic's size (default 500000).
func BenchmarkSource(b *testing.B) {
	if os.Getenv(kafkatest.EnvBrokers) == "" {
		b.Skipf("benchmark needs the real broker: %s unset", kafkatest.EnvBrokers)
	}
	c := kafkatest.NewReal(b)
	n := 500_000
	if v := os.Getenv("WEIR_SOURCE_BENCH_RECORDS"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil {
			b.Fatalf("WEIR_SOURCE_BENCH_RECORDS=%q: %v", v, err)
		}
	}
	ctx := context.Background()
	topic := kafkatest.Name(b, "srcbench")
	c.CreateTopic(b, topic, 1, nil)
	b.Cleanup(func() { _, _ = kadm.NewClient(c.Client(b)).DeleteTopic(context.Background(), topic) })

	// Preload n JSON records of about 100 bytes.
	prod := c.Client(b, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))
	pad := strings.Repeat("x", 72)
	start := time.Now()
	errc := make(chan error, 1)
	for i := range n {
		r := &kgo.Record{Key: fmt.Appendf(nil, "k%07d", i), Value: fmt.Appendf(nil, `{"i":%d,"pad":%q}`, i, pad)}
		prod.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
	if err := prod.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case err := <-errc:
		b.Fatal(err)
	default:
	}
	b.Logf("preloaded %d records of ~%d bytes in %v", n, len(pad)+30, time.Since(start).Round(time.Millisecond))

	// One pass of a raw kgo consumer over the topic.
	passKgo := func(b *testing.B) time.Duration {
		t0 := time.Now()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		got := 0
		for got < n {
			fs := cl.PollRecords(ctx, source.DefaultMaxBatchRecords)
			if err := fs.Err0(); err != nil {
				b.Fatal(err)
			}
			fs.EachRecord(func(*kgo.Record) { got++ })
		}
		return time.Since(t0)
	}
	// One pass of a source over the topic, with a barrier every `every`
	// records (none if 0), placed before the next batch.
	passSource := func(b *testing.B, every int, decoder source.Decoder) time.Duration {
		t0 := time.Now()
		src, err := source.New(ctx, source.Config{
			ClientOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
			Topics:     []string{topic}, Decoder: decoder,
		})
		if err != nil {
			b.Fatal(err)
		}
		defer src.Close()
		got, barriers, next := 0, 0, every
		for got < n {
			recs, err := src.Next(ctx)
			if err != nil {
				b.Fatal(err)
			}
			got += len(recs)
			for every > 0 && got >= next {
				barriers++
				if _, err := src.Barrier(ctx, ckpt.ID(barriers)); err != nil {
					b.Fatal(err)
				}
				next += every
			}
		}
		return time.Since(t0)
	}

	// Each iteration runs the kgo pass and the source pass back to back, so
	// that load from elsewhere on the machine hits both alike.
	for _, bc := range []struct {
		name    string
		every   int
		decoder source.Decoder
	}{
		{"no-barriers", 0, nil},
		{"barrier-every-10000", 10_000, nil},
		{"barrier-every-1000", 1_000, nil},
		{"json/barrier-every-10000", 10_000, source.DecodeJSON{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var kgoTime, srcTime time.Duration
			for i := range b.N {
				if i%2 == 0 {
					kgoTime += passKgo(b)
					srcTime += passSource(b, bc.every, bc.decoder)
				} else {
					srcTime += passSource(b, bc.every, bc.decoder)
					kgoTime += passKgo(b)
				}
			}
			total := float64(n) * float64(b.N)
			b.ReportMetric(total/kgoTime.Seconds(), "kgo-records/s")
			b.ReportMetric(total/srcTime.Seconds(), "source-records/s")
			b.ReportMetric(kgoTime.Seconds()/srcTime.Seconds(), "ratio")
			b.ReportMetric(0, "ns/op") // an op is two passes over the topic
		})
	}
}
