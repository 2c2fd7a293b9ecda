package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/runtime/replica"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

func newSavepointCmd(goJob *stream.Job) *cobra.Command {
	var file, target string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "savepoint -c FILE [--target NAME] [--timeout DURATION]",
		Short: "Take a savepoint of the running job and print where it is",
		Long: `savepoint asks the job's coordinator, through the job's ack topic (no RPC),
for a savepoint: a checkpoint of kind savepoint, triggered at once beside the
periodic ones, whose state is copied whole under savepoints/<NAME>/ in the
job's object store. It is self-contained (it shares no file with checkpoints
or other savepoints), is never released by retention, and its _metadata is
savepoints/<NAME>/_metadata.

savepoint waits until the savepoint completes and prints its _metadata's
location, or says why it failed and exits 1: the job is not running or is
failed, the name is taken, a task declined, or --timeout passed. Sinks
commit the savepoint's transactions like a checkpoint's.

NAME defaults to savepoint-<UTC time> (savepoint-20261207-171500); it must
be one path segment of letters, digits, '.', '_' and '-'.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withKafka(cmd, file, goJob, func(ctx context.Context, cfg *config.Config, opts []kgo.Opt) error {
				return takeSavepoint(ctx, cmd, cfg, opts, ckpt.KindSavepoint, target, timeout)
			})
		},
	}
	cmd.Flags().StringVar(&target, "target", "", "the savepoint's name: its objects go under savepoints/NAME/ (default savepoint-<UTC time>)")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the savepoint to complete")
	addConfigFlags(cmd.Flags(), &file)
	return cmd
}

// takeSavepoint requests a savepoint (kind savepoint) or a
// stop-with-savepoint (kind stop) and waits for it: for a stop, until the
// job's stopped record too.
func takeSavepoint(ctx context.Context, cmd *cobra.Command, cfg *config.Config, opts []kgo.Opt, kind ckpt.Kind, target string, timeout time.Duration) error {
	if target == "" {
		target = "savepoint-" + time.Now().UTC().Format("20060102-150405")
	}
	if err := objstore.ValidName("savepoint", target); err != nil {
		return fmt.Errorf("--target: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	store, err := objstore.Open(ctx, cfg.Checkpoint.Storage, cfg.Job.Name, objstore.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	// Its tasks would write over the objects of a savepoint of that name
	// before its _metadata's conditional put failed.
	if objs, err := store.List(ctx, objstore.SavepointPrefix(target)); err != nil {
		return err
	} else if len(objs) > 0 {
		return fmt.Errorf("savepoint %s exists already (%d objects under %s): choose another --target, or delete it first",
			target, len(objs), objstore.SavepointPrefix(target))
	}

	topics := controltopic.NewTopics(cfg.Kafka.TopicPrefix)
	hist, err := controltopic.ReadHistory(ctx, opts, topics, control.TopicCommit)
	if err != nil {
		return fmt.Errorf("read %s: %w", topics.Commit, err)
	}
	if f, _ := replica.JobFailure(hist.Records); f != nil {
		return fmt.Errorf("job %s is failed (generation %d, cause %s: %s): resume it before taking a savepoint", cfg.Job.Name, f.Gen, f.Cause, f.Reason)
	}
	if s, _ := replica.JobStop(hist.Records); s != nil {
		return fmt.Errorf("job %s is stopped (generation %d): it runs nothing to take a savepoint of; processor resume starts it again", cfg.Job.Name, s.Gen)
	}
	if lastGeneration(hist.Records) == 0 {
		return fmt.Errorf("job %s has never run (%s has no generation): start it before taking a savepoint", cfg.Job.Name, topics.Commit)
	}
	// The tail starts where the topics end now, before the request is
	// sent: the trigger it starts and the outcome come after.
	from := map[control.Topic]kgo.Offset{control.TopicCommit: kgo.NewOffset().At(hist.End)}
	end, err := controltopic.StableEnd(ctx, opts, topics, control.TopicTrigger)
	if err != nil {
		return fmt.Errorf("read %s: %w", topics.Trigger, err)
	}
	from[control.TopicTrigger] = kgo.NewOffset().At(end)
	tail, err := controltopic.NewTail(opts, topics, from, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer tail.Close()

	req := control.SavepointRequest{Request: newRequestID(), Kind: kind, Target: target, TS: time.Now().UnixMilli()}
	w, err := controltopic.NewAckWriter(opts, topics)
	if err != nil {
		return err
	}
	err = w.Send(ctx, req)
	w.Close()
	if err != nil {
		return fmt.Errorf("send the savepoint request to %s: %w", topics.Ack, err)
	}
	out := cmd.ErrOrStderr()
	fmt.Fprintf(out, "savepoint %s requested (request %s); waiting for the coordinator\n", target, req.Request)

	var id ckpt.ID // the savepoint's checkpoint ID, once triggered
	var gen uint64 // and its generation
	for {
		rec, err := tail.Next(ctx)
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				if id == 0 {
					return fmt.Errorf("no coordinator took savepoint request %s within %v: the job's tasks are not all running (a generation is starting), or no replica runs; the coordinator logs \"savepoint request refused\" with the reason", req.Request, timeout)
				}
				return fmt.Errorf("savepoint %d (%s) did not complete within %v; it may still complete: see processor checkpoints list", id, target, timeout)
			}
			return err
		}
		switch m := rec.Msg.(type) {
		case control.Trigger:
			if m.Request == req.Request {
				id, gen = m.ID, m.Gen
				fmt.Fprintf(out, "savepoint %s is checkpoint %d (generation %d); waiting for it to complete\n", target, id, m.Gen)
			}
		case control.Abort:
			if id != 0 && m.ID == id {
				msg := fmt.Sprintf("savepoint %d (%s) failed: %s", id, target, m.Reason)
				if m.Detail != "" {
					msg += ": " + m.Detail
				}
				return errors.New(msg)
			}
		case control.Complete:
			if id != 0 && m.ID == id {
				if kind == ckpt.KindStop {
					fmt.Fprintf(out, "savepoint %d completed; waiting for the job to stop\n", id)
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n", savepointURL(cfg, m.Metadata))
				return nil
			}
		case control.Stopped:
			if id != 0 && m.Savepoint == id {
				fmt.Fprintf(out, "job %s stopped; start it again with processor resume -c FILE\n", cfg.Job.Name)
				fmt.Fprintf(cmd.OutOrStdout(), "%s\n", savepointURL(cfg, m.Metadata))
				return nil
			}
		case control.Failed:
			return fmt.Errorf("job %s failed while the savepoint was taken (cause %s: %s)", cfg.Job.Name, m.Cause, m.Reason)
		case control.Generation:
			// A new generation aborts every pending checkpoint. A new
			// coordinator knows only the newest trigger, so it may write
			// no abort of this one: the generation is the answer.
			if id != 0 && m.Gen > gen {
				return fmt.Errorf("savepoint %d (%s) failed: generation %d started (a replica joined, left or took over the coordinator role); request it again", id, target, m.Gen)
			}
		}
	}
}

// lastGeneration returns the newest generation among a commit topic's
// records, 0 if there is none (the job has never run).
func lastGeneration(recs []controltopic.Record) uint64 {
	var gen uint64
	for _, r := range recs {
		if g, ok := r.Msg.(control.Generation); ok {
			gen = g.Gen
		}
	}
	return gen
}

// savepointURL is where key, relative to the job's root, is: under the
// configured storage URL and the job's name.
func savepointURL(cfg *config.Config, key string) string {
	return objstore.URL(cfg.Checkpoint.Storage, cfg.Job.Name, key)
}

// newRequestID returns a random request ID.
func newRequestID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

func newStopCmd(goJob *stream.Job) *cobra.Command {
	var file, target string
	var withSavepoint bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "stop -c FILE [--savepoint [--target NAME]] [--timeout DURATION]",
		Short: "Stop the job on every replica, with or without a final savepoint",
		Long: `stop stops the job on purpose: a stopped record on the job's commit topic
makes every replica stop its tasks and run none, also a replica started
later, and not ready (/readyz 503, weir_replica_job_stopped 1), until
processor resume -c FILE starts it again. The replicas stay up.

With --savepoint, the coordinator first takes a stop-with-savepoint: a
savepoint under savepoints/NAME/ (see processor savepoint) whose completion
commits every sink's output up to it and writes the stopped record. The
command prints the savepoint's _metadata URL, and resume restores from it.

Without --savepoint, stop appends the stopped record itself, under the
coordinator's transactional ID (which fences the running coordinator): what
the newest completed checkpoint committed stays, and resume restores from
that checkpoint; records processed since are processed again then, exactly
once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if target != "" && !withSavepoint {
				return errors.New("--target names a savepoint: give --savepoint too")
			}
			return withKafka(cmd, file, goJob, func(ctx context.Context, cfg *config.Config, opts []kgo.Opt) error {
				if withSavepoint {
					return takeSavepoint(ctx, cmd, cfg, opts, ckpt.KindStop, target, timeout)
				}
				return stopJob(ctx, cmd, cfg, opts)
			})
		},
	}
	cmd.Flags().BoolVar(&withSavepoint, "savepoint", false, "take a final savepoint, and stop once it completes")
	cmd.Flags().StringVar(&target, "target", "", "the final savepoint's name (default savepoint-<UTC time>)")
	cmd.Flags().DurationVar(&timeout, "timeout", 10*time.Minute, "how long to wait for the final savepoint")
	addConfigFlags(cmd.Flags(), &file)
	return cmd
}

// stopJob appends a stopped record without a savepoint, under the
// coordinator's transactional ID, after checking that the job runs.
func stopJob(ctx context.Context, cmd *cobra.Command, cfg *config.Config, opts []kgo.Opt) error {
	topics := controltopic.NewTopics(cfg.Kafka.TopicPrefix)
	state := func() (gen uint64, end int64, err error) {
		hist, err := controltopic.ReadHistory(ctx, opts, topics, control.TopicCommit)
		if err != nil {
			return 0, 0, fmt.Errorf("read %s: %w", topics.Commit, err)
		}
		if f, _ := replica.JobFailure(hist.Records); f != nil {
			return 0, 0, fmt.Errorf("job %s is failed (generation %d, cause %s): it runs nothing already; processor resume starts it again", cfg.Job.Name, f.Gen, f.Cause)
		}
		if s, _ := replica.JobStop(hist.Records); s != nil {
			return 0, 0, fmt.Errorf("job %s is stopped already (generation %d)", cfg.Job.Name, s.Gen)
		}
		if gen = lastGeneration(hist.Records); gen == 0 {
			return 0, 0, fmt.Errorf("job %s has never run (%s has no generation): nothing to stop", cfg.Job.Name, topics.Commit)
		}
		return gen, hist.End, nil
	}
	gen, end, err := state()
	if err != nil {
		return err
	}
	w, err := controltopic.NewWriter(ctx, opts, topics, controltopic.CoordinatorTransactionalID(cfg.Kafka.TopicPrefix))
	if err != nil {
		return fmt.Errorf("take the coordinator's transactional ID: %w", err)
	}
	defer w.Close()
	// Fenced now: nothing else appends to the commit topic until we are
	// done. Check again that nothing changed meanwhile.
	gen2, end2, err := state()
	if err != nil {
		return err
	}
	if gen2 != gen || end2 != end {
		return fmt.Errorf("job %s: the commit topic changed while stopping; run stop again", cfg.Job.Name)
	}
	if err := w.Append(ctx, control.Stopped{Gen: gen, TS: time.Now().UnixMilli()}); err != nil {
		return fmt.Errorf("append stopped to %s: %w", topics.Commit, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "job %s stopped (generation %d): every replica stops its tasks; start it again with processor resume -c FILE\n", cfg.Job.Name, gen)
	return nil
}
