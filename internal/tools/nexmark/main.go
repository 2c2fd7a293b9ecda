// Command nexmark writes Nexmark events (package nexmark: the generator
// and its JSON) to Kafka, as the input of Weir's Nexmark jobs:
//
//	go run ./internal/tools/nexmark -brokers localhost:9092 -topic nexmark \
//	    -events 10000000 [-rate 0] [-seed 0] [-partitions 1] [-split] [-event-rate 10000000] \
//	    [-format json|avro -registry http://localhost:8081]
//
// Every event is one record, its value nexmark.AppendJSON's object (with
// event_type and a top-level date_time in Unix ms), its key nexmark.Key
// (persons by id, auctions by id, bids by auction; franz-go's default
// partitioner hashes it as Kafka's Java client does). All kinds go to
// -topic, or with -split persons, auctions and bids to <topic>-persons,
// <topic>-auctions and <topic>-bids (the same objects, so one source
// definition reads either layout). Topics missing are created with
// -partitions partitions (replication factor 1); existing ones are used as
// they are.
//
// With -format avro the values are Avro under nexmark.AvroSchema instead,
// in the Confluent wire format (a zero byte, the schema ID, the payload):
// the schema is registered with the -registry under each topic's
// TopicNameStrategy subject, <topic>-value, before the first record, and a
// Weir source reads them with format: {type: avro, registry: <url>} as the
// same JSON objects (docs/nexmark.md).
//
// -rate is wall-clock events per second (0, the default: as fast as the
// producer goes); -event-rate sets the events' own timestamps (events per
// second of event time, nexmark.DefaultEventRate by default), independent
// of how fast they are written. The same -seed, -events and -event-rate
// always write the same records. On SIGINT or SIGTERM it stops generating,
// waits for what it produced, and reports. The summary (events per kind,
// value bytes, seconds, events/s) goes to standard error.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/weir-stream/weir/internal/benchutil"
	"github.com/weir-stream/weir/nexmark"
)

func main() {
	opts, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nexmark:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, opts, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "nexmark:", err)
		os.Exit(1)
	}
}

// options are the command's flags, validated.
type options struct {
	brokers    []string
	topic      string
	events     int64
	rate       float64 // wall-clock events/s; 0 is no limit
	eventRate  int64   // events/s of event time
	seed       uint64
	partitions int
	split      bool
	format     string // "json" or "avro"
	registry   string // the schema registry's URL, for avro
}

// parseFlags parses and validates args, reporting every bad flag at once.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var brokers string
	fs := flag.NewFlagSet("nexmark", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&brokers, "brokers", "", "Kafka bootstrap brokers, host:port[,host:port...] (required)")
	fs.StringVar(&o.topic, "topic", "nexmark", "topic to write, or with -split the prefix of <topic>-persons, -auctions, -bids")
	fs.Int64Var(&o.events, "events", 0, "number of events to write (required, > 0)")
	fs.Float64Var(&o.rate, "rate", 0, "wall-clock events per second; 0 = as fast as possible")
	fs.Int64Var(&o.eventRate, "event-rate", nexmark.DefaultEventRate, "events per second of event time, for the events' date_time")
	fs.Uint64Var(&o.seed, "seed", 0, "generator seed: the same seed writes the same events")
	fs.IntVar(&o.partitions, "partitions", 1, "partitions of the topics it creates")
	fs.BoolVar(&o.split, "split", false, "write persons, auctions and bids to three topics")
	fs.StringVar(&o.format, "format", "json", "the values' format: json, or avro (nexmark.AvroSchema, registered with -registry)")
	fs.StringVar(&o.registry, "registry", "", "the schema registry's URL, for -format avro")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	for b := range strings.SplitSeq(brokers, ",") {
		if b = strings.TrimSpace(b); b != "" {
			o.brokers = append(o.brokers, b)
		}
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q: every setting is a flag", fs.Args()))
	}
	if len(o.brokers) == 0 {
		errs = append(errs, errors.New("-brokers is required: host:port[,host:port...]"))
	}
	if o.topic == "" {
		errs = append(errs, errors.New("-topic must not be empty"))
	}
	if o.events <= 0 {
		errs = append(errs, fmt.Errorf("-events %d: must be > 0", o.events))
	}
	if o.rate < 0 {
		errs = append(errs, fmt.Errorf("-rate %v: must be >= 0 events/s (0 = as fast as possible)", o.rate))
	}
	if o.eventRate <= 0 {
		errs = append(errs, fmt.Errorf("-event-rate %d: must be > 0 events/s", o.eventRate))
	}
	if o.partitions < 1 {
		errs = append(errs, fmt.Errorf("-partitions %d: must be >= 1", o.partitions))
	}
	switch {
	case o.format != "json" && o.format != "avro":
		errs = append(errs, fmt.Errorf("-format %q: must be json or avro", o.format))
	case o.format == "avro" && o.registry == "":
		errs = append(errs, errors.New("-format avro needs -registry, the schema registry's URL (scripts/registry.sh up starts one)"))
	case o.format == "json" && o.registry != "":
		errs = append(errs, errors.New("-registry is for -format avro"))
	}
	return o, errors.Join(errs...)
}

// topicOf returns the topic of events of kind k.
func (o options) topicOf(k nexmark.Kind) string {
	if !o.split {
		return o.topic
	}
	return o.topic + "-" + k.String() + "s"
}

// topics returns every topic o writes.
func (o options) topics() []string {
	if !o.split {
		return []string{o.topic}
	}
	return []string{o.topicOf(nexmark.KindPerson), o.topicOf(nexmark.KindAuction), o.topicOf(nexmark.KindBid)}
}

func run(ctx context.Context, o options, stderr io.Writer) error {
	gen, err := nexmark.NewGenerator(nexmark.Config{Seed: o.seed, Events: o.events, EventRate: o.eventRate})
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(o.brokers...))
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	if err := ensureTopics(ctx, kadm.NewClient(cl), o, stderr); err != nil {
		return err
	}
	var avroCodec *nexmark.AvroCodec
	ids := map[string]int{} // topic → the value schema's ID (avro)
	if o.format == "avro" {
		if avroCodec, ids, err = registerAvro(ctx, o); err != nil {
			return err
		}
	}

	// Records are produced with a context the signal does not cancel: on
	// SIGINT the loop stops, and what it produced is still delivered.
	var failed atomic.Pointer[error]
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	var counts [3]int64
	var bytes int64
	var slab []byte                    // record keys and values, never overwritten
	pace := max(1, int64(o.rate/1000)) // with -rate, check the clock about every ms
	start := time.Now()
	for i := int64(0); ; i++ {
		if ctx.Err() != nil || failed.Load() != nil {
			break
		}
		if o.rate > 0 && i%pace == 0 {
			due := start.Add(time.Duration(float64(i) / o.rate * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
			}
		}
		e, ok := gen.Next()
		if !ok {
			break
		}
		if cap(slab)-len(slab) < 4096 {
			slab = make([]byte, 0, 1<<20)
		}
		k0 := len(slab)
		slab = nexmark.AppendKey(slab, e)
		v0 := len(slab)
		if avroCodec != nil {
			payload, err := avroCodec.Encode(e)
			if err != nil {
				return fmt.Errorf("avro: %w", err)
			}
			slab = binary.BigEndian.AppendUint32(append(slab, 0), uint32(ids[o.topicOf(e.Kind)]))
			slab = append(slab, payload...)
		} else {
			slab = nexmark.AppendJSON(slab, e)
		}
		r := &kgo.Record{Topic: o.topicOf(e.Kind), Key: slab[k0:v0:v0], Value: slab[v0:len(slab):len(slab)]}
		cl.Produce(context.Background(), r, promise)
		counts[e.Kind]++
		bytes += int64(len(r.Value))
	}
	if err := cl.Flush(context.Background()); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	secs := time.Since(start).Seconds()
	n := counts[0] + counts[1] + counts[2]
	fmt.Fprintf(stderr, "nexmark: %d events (%d persons, %d auctions, %d bids) to %s: %d value bytes in %.2f s: %.0f events/s, %.1f MB/s\n",
		n, counts[nexmark.KindPerson], counts[nexmark.KindAuction], counts[nexmark.KindBid], strings.Join(o.topics(), ", "),
		bytes, secs, float64(n)/secs, float64(bytes)/secs/1e6)
	if p := failed.Load(); p != nil {
		return fmt.Errorf("produce: %w", *p)
	}
	if ctx.Err() != nil && n < o.events {
		return fmt.Errorf("interrupted after %d of %d events", n, o.events)
	}
	return nil
}

// registerAvro registers nexmark.AvroSchema under <topic>-value for every
// topic of o, and returns the codec and each topic's schema ID.
func registerAvro(ctx context.Context, o options) (*nexmark.AvroCodec, map[string]int, error) {
	c, err := nexmark.NewAvroCodec()
	if err != nil {
		return nil, nil, err
	}
	reg, err := sr.NewClient(sr.URLs(o.registry))
	if err != nil {
		return nil, nil, fmt.Errorf("registry: %w", err)
	}
	ids := map[string]int{}
	for _, t := range o.topics() {
		s, err := reg.CreateSchema(ctx, t+"-value", sr.Schema{Schema: nexmark.AvroSchema, Type: sr.TypeAvro})
		if err != nil {
			return nil, nil, fmt.Errorf("register the schema under %s-value at %s: %w", t, o.registry, err)
		}
		ids[t] = s.ID
	}
	return c, ids, nil
}

// ensureTopics creates the topics of o that do not exist, with
// o.partitions partitions, and notes existing ones whose partition count
// differs. It creates before it looks: a topic listed as missing stays
// missing in the client's metadata cache for seconds after its creation.
func ensureTopics(ctx context.Context, adm *kadm.Client, o options, stderr io.Writer) error {
	var existing []string
	for _, t := range o.topics() {
		err := benchutil.CreateTopic(ctx, adm, t, o.partitions)
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
			existing = append(existing, t)
		case err != nil:
			return err
		}
	}
	if len(existing) == 0 {
		return nil
	}
	details, err := adm.ListTopics(ctx, existing...)
	if err != nil {
		return fmt.Errorf("list topics: %w", err)
	}
	for _, t := range existing {
		d := details[t]
		if d.Err != nil {
			return fmt.Errorf("topic %s: %w", t, d.Err)
		}
		if len(d.Partitions) != o.partitions {
			fmt.Fprintf(stderr, "nexmark: topic %s exists with %d partitions (not -partitions %d): writing to it as it is\n", t, len(d.Partitions), o.partitions)
		}
	}
	return nil
}
