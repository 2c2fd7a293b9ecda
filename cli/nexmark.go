package cli

import (
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/weir-stream/weir/nexmark/produce"
	"github.com/weir-stream/weir/stream"
)

// newNexmarkCmd is `processor nexmark`: the Nexmark generator (package
// nexmark/produce) writing to the Kafka of a job's configuration, with its
// TLS and SASL settings.
func newNexmarkCmd(job *stream.Job) *cobra.Command {
	var file string
	var o produce.Options
	cmd := &cobra.Command{
		Use:   "nexmark",
		Short: "Write generated Nexmark events (persons, auctions, bids) to the job's Kafka",
		Long: `Writes Nexmark events, the input of the queries in examples/nexmark, to the
Kafka of the job's configuration (kafka.brokers, TLS and SASL as the job uses
them): every event to --topic, or with --split persons, auctions and bids to
<topic>-persons, -auctions and -bids, as JSON or as Avro through a schema
registry (--format avro --registry URL). The same --seed, --events and
--event-rate write the same records. --flush ends the input with one person an
hour of event time later on each partition, so that every window and auction
of the input closes. docs/nexmark.md describes the events and the queries.

  processor nexmark -c examples/nexmark/q5.yaml --events 1000000 --partitions 8 --flush`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Check("--"); err != nil {
				return err
			}
			cfg, err := loadConfig(file, cmd.Flags(), job)
			if err != nil {
				return err
			}
			// SIGINT and SIGTERM stop the generation; what was produced is
			// delivered and reported.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			k, err := newCLIKafka(ctx, cfg, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			return k.done(produce.Write(k.ctx, k.opts, o, cmd.ErrOrStderr()))
		},
	}
	addConfigFlags(cmd.Flags(), &file)
	gofs := flag.NewFlagSet("nexmark", flag.ContinueOnError)
	o.Register(gofs)
	cmd.Flags().AddGoFlagSet(gofs)
	return cmd
}
