package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/kafkaio"
)

// newTransactionsCmd is the operator's tool for a lingering transaction of
// the job's sinks (docs/sinks.md, "Lingering transactions").
func newTransactionsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "transactions",
		Short: "List, commit, abort or fence the job's Kafka transactions",
		Long: `A transaction left open blocks every read_committed consumer of the
partitions it wrote to. These commands act on the job's transactional IDs only
(kafka.topic_prefix followed by a sink's stage, partition and slot; never the
coordinator's, never another job's). Which action is right depends on
whether the newest completed checkpoint recorded the transaction: read
docs/sinks.md, "Lingering transactions", first. Starting the job is always
safe: its recovery commits what the checkpoint recorded and fences the rest.`,
	}
	var file string
	// admin loads the configuration and runs fn with the job's admin.
	admin := func(cmd *cobra.Command, fn func(ctx context.Context, a *kafkaio.TxnAdmin) error) error {
		cfg, err := config.Load(config.Source{File: file, Flags: cmd.Flags()})
		if err != nil {
			return fmt.Errorf("configuration:\n%w", err)
		}
		a, err := kafkaio.NewTxnAdmin([]kgo.Opt{kgo.SeedBrokers(cfg.Kafka.Brokers...)}, cfg.Kafka.TopicPrefix, newLogger(cfg, cmd.ErrOrStderr()))
		if err != nil {
			return err
		}
		defer a.Close()
		ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
		defer cancel()
		return fn(ctx, a)
	}
	withConfig := func(c *cobra.Command) *cobra.Command {
		c.Flags().StringVarP(&file, "config", "c", "", "the job's YAML configuration file")
		addConfigFlags(c.Flags())
		return c
	}
	// The actions change what consumers of the output see, and none can be
	// undone: each needs --yes.
	var yes bool
	guarded := func(c *cobra.Command) *cobra.Command {
		withConfig(c).Flags().BoolVar(&yes, "yes", false, "confirm: you checked, as docs/sinks.md says, whether the newest completed checkpoint recorded the transaction")
		run := c.RunE
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if !yes {
				return fmt.Errorf("%s cannot be undone: read docs/sinks.md, \"Lingering transactions\" (or start the job, whose recovery decides safely), then run it again with --yes", cmd.CommandPath())
			}
			return run(cmd, args)
		}
		return c
	}

	var all, asJSON bool
	list := withConfig(&cobra.Command{
		Use:   "list -c FILE",
		Short: "List the job's open transactions (--all: every transactional ID)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return admin(cmd, func(ctx context.Context, a *kafkaio.TxnAdmin) error {
				txns, err := a.ListTxns(ctx, !all)
				if err != nil {
					return err
				}
				return printTxns(cmd.OutOrStdout(), txns, asJSON)
			})
		},
	})
	list.Flags().BoolVar(&all, "all", false, "list every transactional ID of the job, not only those with an open transaction")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON, one object per line")

	abort := guarded(&cobra.Command{
		Use:   "abort -c FILE TRANSACTIONAL_ID --yes",
		Short: "Abort the transaction open on TRANSACTIONAL_ID now",
		Long: `abort ends the transaction open on the ID now with EndTxn(abort), at the
producer ID and epoch the broker describes. If no completed checkpoint
recorded it, its input is replayed when the job restarts: nothing is lost. If
the newest completed checkpoint recorded it, its output is lost (the next
recovery reports it). See docs/sinks.md, "Lingering transactions".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return admin(cmd, func(ctx context.Context, a *kafkaio.TxnAdmin) error {
				info, err := a.AbortTxn(ctx, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "aborted %s (producer id %d, epoch %d, open since %s)\n",
					info.TransactionalID, info.ProducerID, info.ProducerEpoch, info.Start.UTC().Format(time.RFC3339))
				return nil
			})
		},
	})

	var pid int64
	var epoch int16
	commit := guarded(&cobra.Command{
		Use:   "commit -c FILE TRANSACTIONAL_ID --producer-id N --epoch E --yes",
		Short: "Commit the transaction with this producer ID and epoch (as recorded by the newest completed checkpoint)",
		Long: `commit ends the transaction with a raw EndTxn(commit) at the given producer ID
and epoch, as the job's recovery does. Take them from the task manifest of the
newest completed checkpoint: committing a transaction that no completed
checkpoint recorded duplicates its output when the job replays its input.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("producer-id") || !cmd.Flags().Changed("epoch") {
				return fmt.Errorf("commit needs --producer-id and --epoch (from the checkpoint's task manifest)")
			}
			return admin(cmd, func(ctx context.Context, a *kafkaio.TxnAdmin) error {
				h := kafkaio.SinkTxnHandle{TransactionalID: args[0], ProducerID: pid, ProducerEpoch: epoch}
				if err := a.CommitTxn(ctx, h); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "committed %s (producer id %d, epoch %d)\n", h.TransactionalID, pid, epoch)
				return nil
			})
		},
	})
	commit.Flags().Int64Var(&pid, "producer-id", 0, "the transaction's producer ID")
	commit.Flags().Int16Var(&epoch, "epoch", 0, "the transaction's producer epoch")

	var timeout time.Duration
	fence := guarded(&cobra.Command{
		Use:   "fence -c FILE TRANSACTIONAL_ID --yes",
		Short: "Fence TRANSACTIONAL_ID: abort what is open and stop every older producer of it (prefer abort)",
		Long: `fence calls InitProducerID on the ID, as a new producer of it would. On Apache
Kafka a later recovery cannot tell a transaction fenced this way from a
committed one: fence only IDs whose transactions no completed checkpoint
recorded, or a producer you need stopped; otherwise use abort.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return admin(cmd, func(ctx context.Context, a *kafkaio.TxnAdmin) error {
				if err := a.FenceTxn(ctx, args[0], timeout); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "fenced %s\n", args[0])
				return nil
			})
		},
	})
	fence.Flags().DurationVar(&timeout, "timeout", time.Minute, "transaction timeout the fencing producer asks for")

	cmd.AddCommand(list, abort, commit, fence)
	return cmd
}

func printTxns(out io.Writer, txns []kafkaio.TxnInfo, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		for _, t := range txns {
			if err := enc.Encode(t); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TRANSACTIONAL ID\tSTATE\tPRODUCER ID\tEPOCH\tOPEN FOR\tPARTITIONS")
	for _, t := range txns {
		age := "-"
		if t.Open() {
			age = t.Age.Round(time.Second).String()
		}
		var parts []string
		for _, p := range t.Partitions {
			parts = append(parts, fmt.Sprintf("%s%v", p.Topic, p.Partitions))
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\n", t.TransactionalID, t.State, t.ProducerID, t.ProducerEpoch, age, strings.Join(parts, " "))
	}
	if len(txns) == 0 {
		fmt.Fprintln(w, "(none)\t\t\t\t\t")
	}
	return w.Flush()
}
