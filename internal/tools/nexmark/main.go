// Command nexmark writes Nexmark events (package nexmark: the generator
// and its JSON or Avro) to Kafka, as the input of Weir's Nexmark jobs; it
// is package nexmark/produce behind flags, as `processor nexmark` is with
// a job's Kafka settings:
//
//	go run ./internal/tools/nexmark -brokers localhost:9092 -topic nexmark \
//	    -events 10000000 [-rate 0] [-seed 0] [-partitions 1] [-split] [-event-rate 10000000] \
//	    [-format json|avro -registry http://localhost:8081] [-flush]
//
// All kinds go to -topic, or with -split persons, auctions and bids to
// <topic>-persons, <topic>-auctions and <topic>-bids (the same objects, so
// one source definition reads either layout). Topics missing are created
// with -partitions partitions (replication factor 1); existing ones are
// used as they are.
//
// -rate is wall-clock events per second (0, the default: as fast as the
// producer goes); -event-rate sets the events' own timestamps (events per
// second of event time, nexmark.DefaultEventRate by default), independent
// of how fast they are written. The same -seed, -events and -event-rate
// always write the same records. With -format avro the values are Avro
// under nexmark.AvroSchema, registered with -registry under each topic's
// <topic>-value. -flush writes, after the events, one person an hour later
// to each partition, so that every window and auction closes. On SIGINT
// or SIGTERM it stops generating, waits for what it produced, and
// reports. The summary (events per kind, value bytes, seconds, events/s)
// goes to standard error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/nexmark/produce"
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
	brokers []string
	produce.Options
}

// parseFlags parses and validates args, reporting every bad flag at once.
func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	var brokers string
	fs := flag.NewFlagSet("nexmark", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&brokers, "brokers", "", "Kafka bootstrap brokers, host:port[,host:port...] (required)")
	o.Register(fs)
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
	errs = append(errs, o.Check("-"))
	return o, errors.Join(errs...)
}

func run(ctx context.Context, o options, stderr io.Writer) error {
	return produce.Write(ctx, []kgo.Opt{kgo.SeedBrokers(o.brokers...)}, o.Options, stderr)
}
