package main

import (
	"bytes"
	"context"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/nexmark"
	"github.com/weir-stream/weir/nexmark/produce"
)

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-brokers", "a:9092, b:9092", "-events", "100", "-rate", "50", "-seed", "7", "-partitions", "3", "-split"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := options{brokers: []string{"a:9092", "b:9092"}, Options: produce.Options{Topic: "nexmark", Events: 100, Rate: 50, EventRate: nexmark.DefaultEventRate, Seed: 7, Partitions: 3, Split: true, Format: "json"}}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("parsed %+v\nwant   %+v", o, want)
	}
	if got := o.Topics(); !reflect.DeepEqual(got, []string{"nexmark-persons", "nexmark-auctions", "nexmark-bids"}) {
		t.Fatalf("split topics %v", got)
	}
	o.Split = false
	if got := o.TopicOf(nexmark.KindBid); got != "nexmark" {
		t.Fatalf("unsplit bid topic %q", got)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	_, err := parseFlags([]string{"-topic", "", "-events", "0", "-rate", "-1", "-partitions", "0", "-event-rate", "0", "extra"}, io.Discard)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"unexpected arguments", "-brokers is required", "-topic must not be empty", "-events 0", "-rate -1", "-event-rate 0", "-partitions 0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if _, err := parseFlags([]string{"-brokers", "a:1", "-events", "1", "-format", "avro"}, io.Discard); err == nil || !strings.Contains(err.Error(), "-format avro needs -registry") {
		t.Errorf("avro without a registry: %v", err)
	}
	if _, err := parseFlags([]string{"-brokers", "a:1", "-events", "1", "-format", "xml"}, io.Discard); err == nil || !strings.Contains(err.Error(), `-format "xml": must be json or avro`) {
		t.Errorf("xml: %v", err)
	}
	if _, err := parseFlags([]string{"-bogus"}, io.Discard); err == nil {
		t.Error("unknown flag accepted")
	}
}

// TestRunKfake writes events to an in-process kfake cluster and reads them
// back: every record is the generator's, keyed by nexmark.Key, on its
// kind's topic.
func TestRunKfake(t *testing.T) {
	c := kafkatest.NewKfake(t)
	ctx := context.Background()
	o := options{brokers: c.Brokers, Options: produce.Options{Topic: "nm", Events: 5000, EventRate: 1000, Seed: 3, Partitions: 2, Split: true, Format: "json"}}
	var stderr bytes.Buffer
	if err := run(ctx, o, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "5000 events (100 persons, 300 auctions, 4600 bids)") {
		t.Fatalf("summary: %s", stderr.String())
	}

	// Expected records per topic, in order within each key.
	gen, err := nexmark.NewGenerator(nexmark.Config{Seed: 3, Events: 5000, EventRate: 1000})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string][]string{} // topic → key → values
	for e, ok := gen.Next(); ok; e, ok = gen.Next() {
		tp := o.TopicOf(e.Kind)
		if want[tp] == nil {
			want[tp] = map[string][]string{}
		}
		k := string(nexmark.Key(e))
		want[tp][k] = append(want[tp][k], string(nexmark.AppendJSON(nil, e)))
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.ConsumeTopics(o.Topics()...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[string]map[string][]string{}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for n := 0; n < 5000; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("after %d records: %v", n, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if got[r.Topic] == nil {
				got[r.Topic] = map[string][]string{}
			}
			got[r.Topic][string(r.Key)] = append(got[r.Topic][string(r.Key)], string(r.Value))
			n++
		})
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("records read back differ from the generator's (topics %d, want %d)", len(got), len(want))
	}
}

func TestRunRate(t *testing.T) {
	c := kafkatest.NewKfake(t)
	o := options{brokers: c.Brokers, Options: produce.Options{Topic: "nm", Events: 2000, Rate: 10_000, EventRate: nexmark.DefaultEventRate, Partitions: 1, Format: "json"}}
	start := time.Now()
	if err := run(context.Background(), o, io.Discard); err != nil {
		t.Fatal(err)
	}
	// 2000 events at 10 000/s: the last is due at 0.2 s.
	if d := time.Since(start); d < 190*time.Millisecond {
		t.Fatalf("2000 events at -rate 10000 took %v, want >= 0.2 s", d)
	}

	// Again, into the topic now existing, at full speed.
	o.Rate, o.Partitions = 0, 4
	var stderr bytes.Buffer
	if err := run(context.Background(), o, &stderr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr.String(), "topic nm exists with 1 partitions (not partitions 4)") {
		t.Fatalf("no note of the existing topic: %s", stderr.String())
	}
}

// TestRunAvro writes events as Avro (the schema registered under each
// topic's <topic>-value, the Confluent framing) to kfake with franz-go's
// fake registry, and decodes them back with the registered schema.
func TestRunAvro(t *testing.T) {
	c := kafkatest.NewKfake(t)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	ctx := context.Background()
	o := options{brokers: c.Brokers, Options: produce.Options{Topic: "nm", Events: 2000, EventRate: 1000, Seed: 5, Partitions: 1, Format: "avro", Registry: reg.URL()}}
	if err := run(ctx, o, io.Discard); err != nil {
		t.Fatal(err)
	}
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	ss, err := cl.SchemaByVersion(ctx, "nm-value", -1)
	if err != nil {
		t.Fatal(err)
	}
	codec, err := nexmark.NewAvroCodec()
	if err != nil {
		t.Fatal(err)
	}
	gen, err := nexmark.NewGenerator(nexmark.Config{Seed: 5, Events: 2000, EventRate: 1000})
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.ConsumeTopics("nm"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for n := 0; n < 2000; {
		fs := kc.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			t.Fatalf("after %d records: %v", n, err)
		}
		for _, r := range fs.Records() {
			var h sr.ConfluentHeader
			id, payload, err := h.DecodeID(r.Value)
			if err != nil || id != ss.ID {
				t.Fatalf("record %d: schema ID %d (want %d): %v", n, id, ss.ID, err)
			}
			got, err := codec.Decode(payload)
			want, _ := gen.Next()
			if err != nil || got != want {
				t.Fatalf("record %d: %+v, %v; want %+v", n, got, err, want)
			}
			n++
		}
	}
}
