package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/runtime/task"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

// newTransactionsCmd is the operator's tool for a lingering transaction of
// the job's sinks (docs/sinks.md, "Lingering transactions").
func newTransactionsCmd(job *stream.Job) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "transactions",
		Short: "List, commit, abort or fence the job's Kafka transactions",
		Long: `A transaction left open blocks every read_committed consumer of the
partitions it wrote to. These commands act on the job's transactional IDs only
(kafka.topic_prefix followed by a sink's stage@topic, partition and slot; never the
coordinator's, never another job's). Which action is right depends on
whether the newest completed checkpoint recorded the transaction, which list
shows (RECORDED): commit only what it recorded, abort the rest. Read
docs/sinks.md, "Lingering transactions", first. Starting the job is always
safe: its recovery commits what the checkpoint recorded and fences the rest.`,
	}
	var file string
	// admin loads the configuration and runs fn with the job's admin.
	var kopts []kgo.Opt // the command's Kafka client options, set by admin
	admin := func(cmd *cobra.Command, fn func(ctx context.Context, a *sink.Admin, cfg *config.Config) error) error {
		return withKafka(cmd, file, job, func(ctx context.Context, cfg *config.Config, opts []kgo.Opt) error {
			kopts = opts
			a, err := sink.NewAdmin(opts, cfg.Kafka.TopicPrefix, newLogger(cfg, cmd.ErrOrStderr()))
			if err != nil {
				return err
			}
			defer a.Close()
			return fn(ctx, a, cfg)
		})
	}
	withConfig := func(c *cobra.Command) *cobra.Command {
		addConfigFlags(c.Flags(), &file)
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
		Short: "List the job's open transactions and whether the newest completed checkpoint recorded them (--all: every transactional ID)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return admin(cmd, func(ctx context.Context, a *sink.Admin, cfg *config.Config) error {
				txns, err := a.ListTxns(ctx, !all)
				if err != nil {
					return err
				}
				rec, err := readRecordedTxns(ctx, cfg, kopts)
				if err != nil {
					// The broker's answer stands on its own: say what is
					// unknown rather than print nothing.
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: cannot tell which transactions the newest completed checkpoint recorded (RECORDED shows ?): %v\n", err)
					rec = nil
				}
				return printTxns(cmd.OutOrStdout(), txns, rec, asJSON)
			})
		},
	})
	list.Flags().BoolVar(&all, "all", false, "list every transactional ID of the job, not only those with an open transaction")
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON, one object per line")

	// Aborting or fencing what the newest completed checkpoint recorded
	// loses its output: refused unless --lose-output.
	var loseOutput bool
	// notRecorded returns the check that refuses a recorded transaction,
	// nil with --lose-output; an error when the checkpoint cannot be read.
	notRecorded := func(ctx context.Context, cfg *config.Config) (func(sink.TxnInfo) error, error) {
		if loseOutput {
			return nil, nil
		}
		rec, err := readRecordedTxns(ctx, cfg, kopts)
		if err != nil {
			return nil, fmt.Errorf("cannot tell whether the newest completed checkpoint recorded the transaction, and ending a recorded one without a commit loses its output: start the job, whose recovery decides, or add --lose-output: %w", err)
		}
		return func(info sink.TxnInfo) error {
			if n := rec.match(info); n > 0 {
				return fmt.Errorf("checkpoint %d, the newest completed, recorded the transaction open on %s (producer id %d, epoch %d): ending it without a commit loses its output; commit it (transactions commit) or start the job, or add --lose-output",
					n, info.TransactionalID, info.ProducerID, info.ProducerEpoch)
			}
			return nil
		}, nil
	}

	abort := guarded(&cobra.Command{
		Use:   "abort -c FILE TRANSACTIONAL_ID --yes",
		Short: "Abort the transaction open on TRANSACTIONAL_ID now",
		Long: `abort ends the transaction open on the ID now with EndTxn(abort), at the
producer ID and epoch the broker describes. If no completed checkpoint
recorded it, its input is replayed when the job restarts: nothing is lost. If
the newest completed checkpoint recorded it, its output would be lost: abort
refuses, unless --lose-output (the next recovery then reports the loss and
the job stops rather than start without that output). It refuses too when
the checkpoint cannot be read. See docs/sinks.md, "Lingering transactions".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return admin(cmd, func(ctx context.Context, a *sink.Admin, cfg *config.Config) error {
				check, err := notRecorded(ctx, cfg)
				if err != nil {
					return err
				}
				info, err := a.AbortTxnIf(ctx, args[0], check)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "aborted %s (producer id %d, epoch %d, open since %s)\n",
					info.TransactionalID, info.ProducerID, info.ProducerEpoch, info.Start.UTC().Format(time.RFC3339))
				return nil
			})
		},
	})
	abort.Flags().BoolVar(&loseOutput, "lose-output", false, "abort even a transaction the newest completed checkpoint recorded, losing its output")

	var pid int64
	var epoch int16
	commit := guarded(&cobra.Command{
		Use:   "commit -c FILE TRANSACTIONAL_ID --yes",
		Short: "Commit the transaction the newest completed checkpoint recorded on TRANSACTIONAL_ID",
		Long: `commit ends a transaction with a raw EndTxn(commit), as the job's recovery
does, at the producer ID and epoch that the task manifests of the newest
completed checkpoint record for the ID. It refuses an ID that checkpoint did
not record: committing such a transaction duplicates its output when the job
replays its input (abort it instead, or start the job).

--producer-id and --epoch override the lookup, for when the checkpoint's
objects cannot be read; take them from a task manifest of the newest
completed checkpoint (its operator_state), never from "transactions list".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pidSet, epochSet := cmd.Flags().Changed("producer-id"), cmd.Flags().Changed("epoch")
			if pidSet != epochSet {
				return fmt.Errorf("give both --producer-id and --epoch, or neither (then they are read from the newest completed checkpoint)")
			}
			return admin(cmd, func(ctx context.Context, a *sink.Admin, cfg *config.Config) error {
				h := sink.TxnHandle{TransactionalID: args[0], ProducerID: pid, ProducerEpoch: epoch}
				from := "as given"
				if !pidSet {
					rec, err := readRecordedTxns(ctx, cfg, kopts)
					if err != nil {
						return fmt.Errorf("read what the newest completed checkpoint recorded (or give --producer-id and --epoch from its task manifest): %w", err)
					}
					got, ok := rec.handles[args[0]]
					if !ok {
						if rec.checkpoint == 0 {
							return fmt.Errorf("the job has no completed checkpoint, so no transaction of it may be committed: abort %s, or start the job", args[0])
						}
						return fmt.Errorf("checkpoint %d, the newest completed, did not record a transaction on %s: committing one would duplicate output; abort it, or start the job", rec.checkpoint, args[0])
					}
					h = got
					from = fmt.Sprintf("recorded by checkpoint %d", rec.checkpoint)
				}
				before, err := a.CommitTxn(ctx, h)
				if err != nil {
					return err
				}
				if before {
					fmt.Fprintf(cmd.OutOrStdout(), "%s (producer id %d, epoch %d, %s) was committed before; the ID has moved on since, and what it holds now was left as it is (see transactions list)\n", h.TransactionalID, h.ProducerID, h.ProducerEpoch, from)
					return nil
				}
				fmt.Fprintf(cmd.OutOrStdout(), "committed %s (producer id %d, epoch %d, %s)\n", h.TransactionalID, h.ProducerID, h.ProducerEpoch, from)
				return nil
			})
		},
	})
	commit.Flags().Int64Var(&pid, "producer-id", 0, "the transaction's producer ID (default: as the newest completed checkpoint recorded it)")
	commit.Flags().Int16Var(&epoch, "epoch", 0, "the transaction's producer epoch (default: as the newest completed checkpoint recorded it)")

	var timeout time.Duration
	fence := guarded(&cobra.Command{
		Use:   "fence -c FILE TRANSACTIONAL_ID --yes",
		Short: "Fence TRANSACTIONAL_ID: abort what is open and stop every older producer of it (prefer abort)",
		Long: `fence calls InitProducerID on the ID, as a new producer of it would. On Apache
Kafka a later recovery cannot tell a transaction fenced this way from a
committed one, so fence refuses an ID whose open transaction the newest
completed checkpoint recorded, or when that checkpoint cannot be read
(--lose-output overrides, silently losing its output). Use it for a
producer you need stopped; otherwise prefer abort.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return admin(cmd, func(ctx context.Context, a *sink.Admin, cfg *config.Config) error {
				check, err := notRecorded(ctx, cfg)
				if err != nil {
					return err
				}
				if err := a.FenceTxnIf(ctx, args[0], timeout, check); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "fenced %s\n", args[0])
				return nil
			})
		},
	})
	fence.Flags().BoolVar(&loseOutput, "lose-output", false, "fence even an ID whose open transaction the newest completed checkpoint recorded, losing its output")
	fence.Flags().DurationVar(&timeout, "timeout", time.Minute, "transaction timeout the fencing producer asks for")

	cmd.AddCommand(list, abort, commit, fence)
	return cmd
}

// recordedTxns is what the newest completed checkpoint of a job recorded as
// pre-committed: the transactions its recovery commits.
type recordedTxns struct {
	checkpoint ckpt.ID // 0: the job has no completed checkpoint
	handles    map[string]sink.TxnHandle
}

// match returns the checkpoint that recorded exactly the open transaction t
// describes (same ID, producer ID and epoch), or 0. Only an open
// (Ongoing) transaction is matched: once ended, the epoch a broker shows
// may have moved on (transactions v2) or not (v1), and the question no
// longer matters. The sink never runs a new transaction at a recorded
// producer ID and epoch while the checkpoint may be restored from
// (docs/sinks.md), so on v1 brokers too the pair names one transaction.
func (r *recordedTxns) match(t sink.TxnInfo) ckpt.ID {
	h, ok := r.handles[t.TransactionalID]
	if ok && t.State == "Ongoing" && h.ProducerID == t.ProducerID && h.ProducerEpoch == t.ProducerEpoch {
		return r.checkpoint
	}
	return 0
}

// readRecordedTxns reads the job's newest completed checkpoint from its
// commit topic, and the sink transactions its task manifests record from
// the object store, as the job's recovery would.
func readRecordedTxns(ctx context.Context, cfg *config.Config, opts []kgo.Opt) (*recordedTxns, error) {
	// Its own budget: an unreachable object store must leave the
	// command's time to act (or to say why not).
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	topics := controltopic.NewTopics(cfg.Kafka.TopicPrefix)
	rec := &recordedTxns{handles: map[string]sink.TxnHandle{}}
	hist, err := controltopic.ReadHistory(ctx, opts, topics, control.TopicCommit)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		// The job never ran, if the topic is really not there (and not
		// only briefly unknown to one broker).
		if absent, aerr := topicAbsent(ctx, opts, topics.Commit); aerr == nil && absent {
			return rec, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", topics.Commit, err)
	}
	var newest *control.Complete
	for _, r := range hist.Records {
		if c, ok := r.Msg.(control.Complete); ok && (newest == nil || c.ID > newest.ID) {
			newest = &c
		}
	}
	if newest == nil {
		return rec, nil
	}
	rec.checkpoint = newest.ID
	store, err := objstore.Open(ctx, cfg.Checkpoint.Storage, cfg.Job.Name, objstore.Options{})
	if err != nil {
		return nil, err
	}
	defer store.Close()
	md, err := checkpoint.ReadCompleted(ctx, store, *newest)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %d: %w", newest.ID, err)
	}
	for _, ts := range md.Tasks {
		man, err := state.ReadManifest(ctx, store, ts.Handle)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %d, task %s: %w", newest.ID, ts.Task, err)
		}
		hs, err := task.RecordedTxns(man)
		if err != nil {
			return nil, fmt.Errorf("checkpoint %d, task %s: %w", newest.ID, ts.Task, err)
		}
		for _, h := range hs {
			rec.handles[h.TransactionalID] = h
		}
	}
	return rec, nil
}

// topicAbsent reports whether the cluster's metadata lists no topic name.
func topicAbsent(ctx context.Context, opts []kgo.Opt, name string) (bool, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return false, err
	}
	defer cl.Close()
	tds, err := kadm.NewClient(cl).ListTopics(ctx, name)
	if err != nil {
		return false, err
	}
	td, ok := tds[name]
	return !ok || errors.Is(td.Err, kerr.UnknownTopicOrPartition), nil
}

// listedTxn is a line of "transactions list --json".
type listedTxn struct {
	sink.TxnInfo
	// RecordedBy is, for an open transaction, the newest completed
	// checkpoint when it recorded this very transaction (ID, producer ID
	// and epoch), 0 when it did not; absent when that could not be read,
	// and for a transaction that is not open.
	RecordedBy *ckpt.ID `json:"recorded_by_checkpoint,omitempty"`
}

// printTxns prints txns; rec, when known, fills the RECORDED column.
func printTxns(out io.Writer, txns []sink.TxnInfo, rec *recordedTxns, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(out)
		for _, t := range txns {
			l := listedTxn{TxnInfo: t}
			if rec != nil && t.State == "Ongoing" {
				n := rec.match(t)
				l.RecordedBy = &n
			}
			if err := enc.Encode(l); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TRANSACTIONAL ID\tSTATE\tPRODUCER ID\tEPOCH\tOPEN FOR\tRECORDED\tPARTITIONS")
	for _, t := range txns {
		age := "-"
		if t.Open() {
			age = t.Age.Round(time.Second).String()
		}
		recorded := "?"
		switch {
		case t.State != "Ongoing":
			recorded = "-"
		case rec != nil:
			recorded = "no"
			if n := rec.match(t); n > 0 {
				recorded = fmt.Sprintf("checkpoint %d", n)
			}
		}
		var parts []string
		for _, p := range t.Partitions {
			parts = append(parts, fmt.Sprintf("%s%v", p.Topic, p.Partitions))
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", t.TransactionalID, t.State, t.ProducerID, t.ProducerEpoch, age, recorded, strings.Join(parts, " "))
	}
	if len(txns) == 0 {
		fmt.Fprintln(w, "(none)\t\t\t\t\t\t")
	}
	return w.Flush()
}
