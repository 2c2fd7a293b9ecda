package shuffle_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/shuffle"
	"github.com/weir-stream/weir/keygroup"
)

// benchWrite writes b.N records of 100 bytes over 1000 keys to a topic of
// m partitions, then a barrier, and waits for it: the writer's throughput,
// acknowledgements included. Records are made before the timer starts, with
// room for the writer's two headers, so allocs/op is the writer's and kgo's.
func benchWrite(b *testing.B, c *kafkatest.Cluster, m int, opts ...kgo.Opt) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	topic := kafkatest.Name(b, "bench")
	if err := shuffle.EnsureTopics(ctx, c.Admin(b), map[string]int{topic: m}, -1); err != nil {
		b.Fatal(err)
	}
	adm := c.Admin(b)
	b.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) }) // 128 partitions each
	base := append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, c.Opts...)
	w := newWriter(b, append(base, opts...), topic, m, control.TaskID{Stage: "up", Index: 0}, 1)
	value := make([]byte, 100)
	recs := make([]kgo.Record, b.N)
	for i := range recs {
		recs[i] = kgo.Record{Key: []byte("key-" + strconv.Itoa(i%1000)), Value: value, Headers: make([]kgo.RecordHeader, 0, 2)}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range recs {
		if err := w.Write(ctx, &recs[i]); err != nil {
			b.Fatal(err)
		}
	}
	p, err := w.Barrier(ctx, ckpt.Barrier{ID: 1})
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkWrite measures the writer's hot path on kfake (allocations per
// record: the writer adds none of its own).
func BenchmarkWrite(b *testing.B) {
	benchWrite(b, kafkatest.NewKfake(b), keygroup.DefaultMaxParallelism)
}

// BenchmarkWriteLinger measures throughput on the real broker with M = 128
// partitions at several lingers (run with -benchtime=200000x): the evidence
// for the writer's Linger.
func BenchmarkWriteLinger(b *testing.B) {
	c := kafkatest.NewReal(b)
	for _, linger := range []time.Duration{0, time.Millisecond, shuffle.Linger, 10 * time.Millisecond, 50 * time.Millisecond} {
		b.Run(fmt.Sprintf("linger%v", linger), func(b *testing.B) {
			benchWrite(b, c, keygroup.DefaultMaxParallelism, kgo.ProducerLinger(linger))
		})
	}
	// The baseline: a plain franz-go producer with its defaults (murmur2
	// partitioning of the same keys, 10ms linger), no headers, same topic
	// shape.
	b.Run("plain-kgo", func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		topic := kafkatest.Name(b, "bench")
		if err := shuffle.EnsureTopics(ctx, c.Admin(b), map[string]int{topic: keygroup.DefaultMaxParallelism}, -1); err != nil {
			b.Fatal(err)
		}
		adm := c.Admin(b)
		b.Cleanup(func() { _, _ = adm.DeleteTopics(context.Background(), topic) })
		cl := c.Client(b, kgo.DefaultProduceTopic(topic))
		value := make([]byte, 100)
		recs := make([]kgo.Record, b.N)
		for i := range recs {
			recs[i] = kgo.Record{Key: []byte("key-" + strconv.Itoa(i%1000)), Value: value}
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range recs {
			cl.Produce(ctx, &recs[i], nil)
		}
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	})
}
