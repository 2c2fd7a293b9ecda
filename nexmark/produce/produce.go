// Package produce writes generated Nexmark events (package nexmark) to
// Kafka: the input of the Nexmark jobs, written by `processor nexmark` and
// by internal/tools/nexmark. It owns the topics' layout (one topic, or
// <topic>-persons, -auctions and -bids), their creation, the pacing, the
// JSON or Avro values (the Avro schema registered under <topic>-value)
// and the closing flush. It keeps no state between calls.
//
// Every event is one record, its value nexmark.AppendJSON's object (or
// its Avro encoding under nexmark.AvroSchema, in the Confluent wire
// format), its key nexmark.Key (persons by id, auctions by id, bids by
// auction; franz-go's default partitioner hashes it as Kafka's Java client
// does). Records carry their write time as the Kafka timestamp: the jobs
// read the event time from date_time.
package produce

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/weir-stream/weir/nexmark"
)

// Options say what Write writes.
type Options struct {
	// Topic is written, or with Split is the prefix of <Topic>-persons,
	// -auctions and -bids.
	Topic  string
	Events int64
	// Rate is wall-clock events per second; 0 is as fast as the producer
	// goes. EventRate is events per second of event time (the events'
	// date_time), independent of Rate.
	Rate      float64
	EventRate int64
	// Seed: the same Seed, Events and EventRate write the same records.
	Seed uint64
	// Partitions of the topics Write creates (existing ones are used as
	// they are).
	Partitions int
	Split      bool
	// Format is "json" or "avro"; Registry the schema registry's URL, for
	// avro.
	Format   string
	Registry string
	// Flush writes nexmark.Flush to each partition after the events, so
	// that every window and auction of the input closes.
	Flush bool
}

// Register defines o's flags in fs (Go's flag package; a cobra command
// adds them with pflag's AddGoFlagSet), with their defaults.
func (o *Options) Register(fs *flag.FlagSet) {
	fs.StringVar(&o.Topic, "topic", "nexmark", "topic to write, or when split the prefix of <topic>-persons, -auctions and -bids")
	fs.Int64Var(&o.Events, "events", 0, "number of events to write (required, > 0)")
	fs.Float64Var(&o.Rate, "rate", 0, "wall-clock events per second; 0 = as fast as possible")
	fs.Int64Var(&o.EventRate, "event-rate", nexmark.DefaultEventRate, "events per second of event time, for the events' date_time")
	fs.Uint64Var(&o.Seed, "seed", 0, "generator seed: the same seed writes the same events")
	fs.IntVar(&o.Partitions, "partitions", 1, "partitions of the topics it creates")
	fs.BoolVar(&o.Split, "split", false, "write persons, auctions and bids to three topics")
	fs.StringVar(&o.Format, "format", "json", "the values' format: json, or avro (nexmark.AvroSchema, registered with the registry)")
	fs.StringVar(&o.Registry, "registry", "", "the schema registry's URL, for the avro format")
	fs.BoolVar(&o.Flush, "flush", false, "after the events, one person an hour later to each partition, so that every window and auction closes")
}

// Check reports every bad option at once, naming each as a flag with
// prefix ("-" or "--").
func (o Options) Check(prefix string) error {
	var errs []error
	bad := func(format string, v ...any) {
		errs = append(errs, fmt.Errorf(strings.ReplaceAll(format, "@", prefix), v...))
	}
	if o.Topic == "" {
		bad("@topic must not be empty")
	}
	if o.Events <= 0 {
		bad("@events %d: must be > 0", o.Events)
	}
	if o.Rate < 0 {
		bad("@rate %v: must be >= 0 events/s (0 = as fast as possible)", o.Rate)
	}
	if o.EventRate <= 0 {
		bad("@event-rate %d: must be > 0 events/s", o.EventRate)
	}
	if o.Partitions < 1 {
		bad("@partitions %d: must be >= 1", o.Partitions)
	}
	switch {
	case o.Format != "json" && o.Format != "avro":
		bad("@format %q: must be json or avro", o.Format)
	case o.Format == "avro" && o.Registry == "":
		bad("@format avro needs @registry, the schema registry's URL (scripts/registry.sh up starts one)")
	case o.Format == "json" && o.Registry != "":
		bad("@registry is for @format avro")
	}
	return errors.Join(errs...)
}

// TopicOf returns the topic of events of kind k.
func (o Options) TopicOf(k nexmark.Kind) string {
	if !o.Split {
		return o.Topic
	}
	return o.Topic + "-" + k.String() + "s"
}

// Topics returns every topic o writes.
func (o Options) Topics() []string {
	if !o.Split {
		return []string{o.Topic}
	}
	return []string{o.TopicOf(nexmark.KindPerson), o.TopicOf(nexmark.KindAuction), o.TopicOf(nexmark.KindBid)}
}

// Write writes o.Events generated events to Kafka with a client of kopts
// (seed brokers, TLS, SASL: the caller's), creating the topics that are
// missing, and reports a summary to report. With o.Flush it then writes
// nexmark.Flush to each partition of every topic. Cancelling ctx stops the
// generation; what was produced is still delivered, and the summary says
// how far it got.
func Write(ctx context.Context, kopts []kgo.Opt, o Options, report io.Writer) error {
	if err := o.Check("-"); err != nil {
		return err
	}
	stderr := report
	gen, err := nexmark.NewGenerator(nexmark.Config{Seed: o.Seed, Events: o.Events, EventRate: o.EventRate})
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return fmt.Errorf("kafka client: %w", err)
	}
	defer cl.Close()
	if err := ensureTopics(ctx, kadm.NewClient(cl), o, stderr); err != nil {
		return err
	}
	var avroCodec *nexmark.AvroCodec
	ids := map[string]int{} // topic → the value schema's ID (avro)
	if o.Format == "avro" {
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
	// appendValue appends e's value: JSON, or Avro framed with its
	// topic's schema ID.
	appendValue := func(dst []byte, e nexmark.Event) ([]byte, error) {
		if avroCodec == nil {
			return nexmark.AppendJSON(dst, e), nil
		}
		payload, err := avroCodec.Encode(e)
		if err != nil {
			return nil, fmt.Errorf("avro: %w", err)
		}
		dst = binary.BigEndian.AppendUint32(append(dst, 0), uint32(ids[o.TopicOf(e.Kind)]))
		return append(dst, payload...), nil
	}
	var counts [3]int64
	var bytes, last int64
	var slab []byte                    // record keys and values, never overwritten
	pace := max(1, int64(o.Rate/1000)) // with -rate, check the clock about every ms
	start := time.Now()
	for i := int64(0); ; i++ {
		if ctx.Err() != nil || failed.Load() != nil {
			break
		}
		if o.Rate > 0 && i%pace == 0 {
			due := start.Add(time.Duration(float64(i) / o.Rate * float64(time.Second)))
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
		if slab, err = appendValue(slab, e); err != nil {
			return err
		}
		last = e.DateTime()
		r := &kgo.Record{Topic: o.TopicOf(e.Kind), Key: slab[k0:v0:v0], Value: slab[v0:len(slab):len(slab)]}
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
		n, counts[nexmark.KindPerson], counts[nexmark.KindAuction], counts[nexmark.KindBid], strings.Join(o.Topics(), ", "),
		bytes, secs, float64(n)/secs, float64(bytes)/secs/1e6)
	if p := failed.Load(); p != nil {
		return fmt.Errorf("produce: %w", *p)
	}
	if ctx.Err() != nil && n < o.Events {
		return fmt.Errorf("interrupted after %d of %d events", n, o.Events)
	}
	if !o.Flush {
		return nil
	}
	return flush(ctx, kopts, kadm.NewClient(cl), o, nexmark.Flush(last), appendValue, stderr)
}

// flush writes e to each partition of every topic of o, with a client of
// kopts that writes each record to the partition it names.
func flush(ctx context.Context, kopts []kgo.Opt, adm *kadm.Client, o Options, e nexmark.Event, appendValue func([]byte, nexmark.Event) ([]byte, error), stderr io.Writer) error {
	cl, err := kgo.NewClient(append(kopts[:len(kopts):len(kopts)], kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	if err != nil {
		return fmt.Errorf("flush: kafka client: %w", err)
	}
	defer cl.Close()
	details, err := adm.ListTopics(ctx, o.Topics()...)
	if err == nil {
		err = details.Error()
	}
	if err != nil {
		return fmt.Errorf("flush: list topics: %w", err)
	}
	n := 0
	for _, t := range o.Topics() {
		for p := range details[t].Partitions {
			// A person, which no query outputs (Avro: under the schema's
			// ID, the same in every topic's subject).
			v, err := appendValue(nil, e)
			if err != nil {
				return err
			}
			r := &kgo.Record{Topic: t, Partition: p, Key: nexmark.Key(e), Value: v}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				return fmt.Errorf("flush %s[%d]: %w", t, p, err)
			}
			n++
		}
	}
	fmt.Fprintf(stderr, "nexmark: flushed %d partitions with a person at %s\n", n, time.UnixMilli(e.DateTime()).UTC().Format(time.RFC3339Nano))
	return nil
}

// awaitLeaders waits, up to 30 s, until every partition of topics has a
// leader in the brokers' metadata (not kadm's cache: asking for the
// authorized operations is its way around it).
func awaitLeaders(ctx context.Context, adm *kadm.Client, topics []string) error {
	deadline := time.Now().Add(30 * time.Second)
	for backoff := 10 * time.Millisecond; len(topics) > 0; backoff = min(2*backoff, time.Second) {
		details, err := adm.ListTopics(kadm.WithAuthorizedOps(ctx), topics...)
		if err == nil {
			topics = slices.DeleteFunc(topics, func(t string) bool {
				d, ok := details[t]
				if !ok || d.Err != nil || len(d.Partitions) == 0 {
					return false
				}
				for _, p := range d.Partitions {
					if p.Err != nil || p.Leader < 0 {
						return false
					}
				}
				return true
			})
		}
		if len(topics) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topics %v have no leaders 30 s after their creation (%v)", topics, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
	}
	return nil
}

// registerAvro registers nexmark.AvroSchema under <topic>-value for every
// topic of o, and returns the codec and each topic's schema ID.
func registerAvro(ctx context.Context, o Options) (*nexmark.AvroCodec, map[string]int, error) {
	c, err := nexmark.NewAvroCodec()
	if err != nil {
		return nil, nil, err
	}
	reg, err := sr.NewClient(sr.URLs(o.Registry))
	if err != nil {
		return nil, nil, fmt.Errorf("registry: %w", err)
	}
	ids := map[string]int{}
	for _, t := range o.Topics() {
		s, err := reg.CreateSchema(ctx, t+"-value", sr.Schema{Schema: nexmark.AvroSchema, Type: sr.TypeAvro})
		if err != nil {
			return nil, nil, fmt.Errorf("register the schema under %s-value at %s: %w", t, o.Registry, err)
		}
		ids[t] = s.ID
	}
	return c, ids, nil
}

// ensureTopics creates the topics of o that do not exist, with
// o.Partitions partitions and the brokers' default replication factor,
// waits until they have leaders, and notes existing ones whose partition
// count differs. It creates before it looks: a topic listed as missing
// stays missing in the client's metadata cache for seconds after its
// creation.
func ensureTopics(ctx context.Context, adm *kadm.Client, o Options, stderr io.Writer) error {
	var existing, created []string
	for _, t := range o.Topics() {
		resp, err := adm.CreateTopic(ctx, int32(o.Partitions), -1, nil, t)
		if err == nil {
			err = resp.Err
		}
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
			existing = append(existing, t)
		case err != nil:
			return fmt.Errorf("create topic %s: %w", t, err)
		default:
			created = append(created, t)
		}
	}
	if err := awaitLeaders(ctx, adm, created); err != nil {
		return err
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
		if len(d.Partitions) != o.Partitions {
			fmt.Fprintf(stderr, "nexmark: topic %s exists with %d partitions (not partitions %d): writing to it as it is\n", t, len(d.Partitions), o.Partitions)
		}
	}
	return nil
}
