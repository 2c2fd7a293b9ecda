package source_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/kafkaio/source"
)

// srcDecodeInput writes the decode tests' input to partition p of topic:
// valid JSON, two undecodable values and a tombstone, with headers.
// It returns the values a JSON source delivers and the undecodable records.
func srcDecodeInput(t *testing.T, ctx context.Context, c *kafkatest.Cluster, topic string, p int32) (good []string, bad []*kgo.Record) {
	t.Helper()
	var recs []*kgo.Record
	for i, v := range []string{`{"a":1}`, `not json`, `{"b":2}`, `{"c":`, ``, `[3]`} {
		r := &kgo.Record{Topic: topic, Partition: p, Key: []byte(fmt.Sprintf("key-%d", i)), Value: []byte(v),
			Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte(fmt.Sprintf("t%d", i))}}}
		switch {
		case v == "":
			r.Value = nil // a tombstone is valid under format: json
			good = append(good, "")
		case v == "not json" || v == `{"c":`:
			bad = append(bad, r)
		default:
			good = append(good, v)
		}
		recs = append(recs, r)
	}
	srcProduce(t, ctx, srcProducer(t, c), recs...)
	return good, bad
}

func TestSourceDecodeFail(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := srcCtx(t)
		topic := kafkatest.Name(t, "src")
		c.CreateTopic(t, topic, 1, nil)
		_, bad := srcDecodeInput(t, ctx, c, topic, 0)
		reg := prometheus.NewRegistry()
		src := srcOpen(t, ctx, c, source.Config{Topics: []string{topic}, Decoder: source.DecodeJSON{},
			OnError: kafkaio.OnErrorFail, Registerer: reg})
		var err error
		for err == nil {
			_, err = src.Next(ctx)
		}
		var de *source.DecodeError
		if !errors.As(err, &de) || de.Topic != topic || de.Partition != 0 || de.Offset != bad[0].Offset ||
			!errors.Is(err, source.ErrDecodeInvalidJSON) {
			t.Fatalf("Next = %v, want a DecodeError at %s/0@%d wrapping ErrDecodeInvalidJSON", err, topic, bad[0].Offset)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("topic %s partition 0 offset %d", topic, bad[0].Offset)) {
			t.Fatalf("error %q does not name the record", err)
		}
		if _, err2 := src.Next(ctx); !errors.Is(err2, err) {
			t.Fatalf("second Next = %v, want the same error", err2)
		}
		if n := srcMetric(t, reg, source.MetricDecodeErrs, map[string]string{"topic": topic, "policy": "fail"}); n != 1 {
			t.Fatalf("decode errors counted %v, want 1", n)
		}
	})
}

func TestSourceDecodeSkip(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := srcCtx(t)
		topic := kafkatest.Name(t, "src")
		c.CreateTopic(t, topic, 1, nil)
		good, _ := srcDecodeInput(t, ctx, c, topic, 0)
		reg := prometheus.NewRegistry()
		src := srcOpen(t, ctx, c, source.Config{Topics: []string{topic}, Decoder: source.DecodeJSON{},
			OnError: kafkaio.OnErrorSkip, Registerer: reg})
		recs := srcRead(t, ctx, src, len(good))
		srcWantValues(t, "skip", recs, good)
		srcWaitCaughtUp(t, ctx, src)
		for name, want := range map[string]float64{
			source.MetricDecodeErrs:  2,
			source.MetricRecordsRead: 6,
			source.MetricLag:         0,
		} {
			if got := srcMetric(t, reg, name, map[string]string{"topic": topic}); got != want {
				t.Errorf("%s = %v, want %v", name, got, want)
			}
		}
	})
}

// TestSourceDeadLetterRouting: undecodable records go to the dead-letter
// topic with their key, value and headers unchanged plus headers naming
// their origin and the error; they are durable before the barrier that
// follows them is emitted; both the errors and the dead letters are counted.
func TestSourceDeadLetterRouting(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := srcCtx(t)
		topic, dlq := kafkatest.Name(t, "src"), kafkatest.Name(t, "dlq")
		c.CreateTopic(t, topic, 2, nil)
		c.CreateTopic(t, dlq, 1, nil)
		good, bad := srcDecodeInput(t, ctx, c, topic, 1)
		reg := prometheus.NewRegistry()
		src := srcOpen(t, ctx, c, source.Config{Topics: []string{topic}, Partition: 1, Decoder: source.DecodeJSON{},
			OnError: kafkaio.OnErrorDeadLetter, DeadLetterTopic: dlq, Registerer: reg})
		recs := srcRead(t, ctx, src, len(good))
		srcWantValues(t, "dead-letter", recs, good)
		bar := srcBarrier(t, ctx, src, 1)
		if off, _ := bar.Lookup(topic, 1); off != 6 {
			t.Fatalf("barrier offsets %v, want %s/1 at 6: dead-lettered records count as read", bar, topic)
		}

		// Flushed before the barrier: the dead letters are in the log now.
		ends, err := c.Admin(t).ListEndOffsets(ctx, dlq)
		if err != nil {
			t.Fatal(err)
		}
		if end, _ := ends.Lookup(dlq, 0); end.Offset != int64(len(bad)) {
			t.Fatalf("dead-letter topic ends at %d right after the barrier, want %d", end.Offset, len(bad))
		}

		cl := c.Client(t, kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{dlq: {0: kgo.NewOffset().AtStart()}}))
		var letters []*kgo.Record
		for len(letters) < len(bad) {
			fs := cl.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				t.Fatalf("consume %s: %v", dlq, err)
			}
			letters = append(letters, fs.Records()...)
		}
		for i, l := range letters {
			b := bad[i]
			h := map[string]string{}
			for _, kv := range l.Headers {
				h[kv.Key] = string(kv.Value)
			}
			want := map[string]string{
				"trace":                          string(b.Headers[0].Value),
				source.DeadLetterHeaderTopic:     topic,
				source.DeadLetterHeaderPartition: "1",
				source.DeadLetterHeaderOffset:    fmt.Sprint(b.Offset),
			}
			for k, v := range want {
				if h[k] != v {
					t.Errorf("dead letter %d: header %s = %q, want %q (headers %v)", i, k, h[k], v, h)
				}
			}
			if !strings.Contains(h[source.DeadLetterHeaderError], "not valid JSON") {
				t.Errorf("dead letter %d: error header %q", i, h[source.DeadLetterHeaderError])
			}
			if string(l.Key) != string(b.Key) || string(l.Value) != string(b.Value) {
				t.Errorf("dead letter %d: key %q value %q, want %q %q", i, l.Key, l.Value, b.Key, b.Value)
			}
		}

		// prometheus/testutil would need a module go.mod does not list
		// (kylelemons/godebug); the registry's Gather reads the same values.
		for _, m := range []struct {
			name   string
			labels map[string]string
			want   float64
		}{
			{source.MetricDeadLetters, map[string]string{"topic": topic}, 2},
			{source.MetricDecodeErrs, map[string]string{"topic": topic, "policy": "dead-letter"}, 2},
			{source.MetricRecordsRead, map[string]string{"topic": topic}, 6},
			{source.MetricLag, map[string]string{"topic": topic, "partition": "1"}, 0},
		} {
			if got := srcMetric(t, reg, m.name, m.labels); got != m.want {
				t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
			}
		}
	})
}

// TestSourceDeadLetterTopicMissing: a missing dead-letter topic is found at
// start, not at the first bad record.
func TestSourceDeadLetterTopicMissing(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := srcCtx(t)
		topic := kafkatest.Name(t, "src")
		c.CreateTopic(t, topic, 1, nil)
		missing := kafkatest.Name(t, "nodlq")
		_, err := source.New(ctx, source.Config{ClientOpts: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
			Topics: []string{topic}, OnError: kafkaio.OnErrorDeadLetter, DeadLetterTopic: missing})
		if err == nil || !strings.Contains(err.Error(), missing) {
			t.Fatalf("New = %v, want an error naming %s", err, missing)
		}
	})
}

// TestSourceDecodeErrorsCountedOnce: the sources a process opens for one
// partition, generation after generation, count each rejected record once,
// although every restore reads again the records after its checkpoint's
// offsets; a rejected record past everything read before is counted.
func TestSourceDecodeErrorsCountedOnce(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := srcCtx(t)
		topic, dlq := kafkatest.Name(t, "src"), kafkatest.Name(t, "dlq")
		c.CreateTopic(t, topic, 1, nil)
		c.CreateTopic(t, dlq, 1, nil)
		good, bad := srcDecodeInput(t, ctx, c, topic, 0)
		reg := prometheus.NewRegistry() // the replica's: shared by its tasks' sources
		open := func(restored source.Offsets) *source.Source {
			return srcOpen(t, ctx, c, source.Config{Topics: []string{topic}, Decoder: source.DecodeJSON{},
				OnError: kafkaio.OnErrorDeadLetter, DeadLetterTopic: dlq, Restored: restored, Registerer: reg})
		}
		want := func(when string, n float64) {
			t.Helper()
			for _, m := range []string{source.MetricDecodeErrs, source.MetricDeadLetters} {
				if got := srcMetric(t, reg, m, map[string]string{"topic": topic}); got != n {
					t.Errorf("%s: %s = %v, want %v", when, m, got, n)
				}
			}
		}
		src := open(nil)
		srcRead(t, ctx, src, len(good))
		srcWaitCaughtUp(t, ctx, src)
		want("first read", float64(len(bad)))
		src.Close()

		// A restore from a checkpoint taken before any of them: all read again.
		src = open(source.Offsets{topic: {0: 0}})
		srcRead(t, ctx, src, len(good))
		srcWaitCaughtUp(t, ctx, src)
		want("after a restore", float64(len(bad)))
		src.Close()

		// Then a new bad record and a good one, after a restore from the
		// middle.
		srcProduce(t, ctx, srcProducer(t, c), &kgo.Record{Topic: topic, Value: []byte("{")}, &kgo.Record{Topic: topic, Value: []byte("{}")})
		src = open(source.Offsets{topic: {0: bad[0].Offset + 1}})
		srcRead(t, ctx, src, 1+len(good)-1) // the good ones after bad[0], and {}
		srcWaitCaughtUp(t, ctx, src)
		want("after new input", float64(len(bad)+1))
	})
}
