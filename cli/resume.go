package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/runtime/replica"
	"github.com/weir-stream/weir/stream"
)

func newResumeCmd(goJob *stream.Job) *cobra.Command {
	var file string
	var skips []string
	cmd := &cobra.Command{
		Use:   "resume -c FILE [--skip TOPIC/PARTITION/OFFSET]...",
		Short: "Resume a job stopped by a permanent failure or by processor stop, optionally skipping records",
		Long: `A permanent failure (a record that does not decode, or on which an
expression of a step fails, under on_error: fail; an object store that
refuses the job, ...) stops the job on every replica: the
coordinator appends a failed record to the job's commit topic, and every
replica, including one started later, runs nothing and reports why on
/readyz and in weir_replica_job_failed.

resume appends a resumed record to the commit topic, under the coordinator's
transactional ID (which fences any coordinator still running). The replicas
then start a new generation restored from the newest completed checkpoint,
so the output stays exactly once. Fix the cause first (for a poison record:
roll the replicas with on_error: skip or dead-letter on the source or on
the step that failed), or name the
records to drop with --skip: every later generation's source skips them
unread. The skip is durable: it is in every later generation record.

A job stopped on purpose (processor stop) is resumed the same way: the
replicas restore from the newest completed checkpoint, which, after
processor stop --savepoint, is the final savepoint.

resume refuses a job that is neither failed nor stopped, and changes
nothing then.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withKafka(cmd, file, goJob, func(ctx context.Context, cfg *config.Config, opts []kgo.Opt) error {
				return resume(ctx, cmd, cfg, goJob, opts, skips)
			})
		},
	}
	cmd.Flags().StringArrayVar(&skips, "skip", nil, "an input record to skip, as TOPIC/PARTITION/OFFSET (repeatable)")
	addConfigFlags(cmd.Flags(), &file)
	return cmd
}

func resume(ctx context.Context, cmd *cobra.Command, cfg *config.Config, goJob *stream.Job, opts []kgo.Opt, skipArgs []string) error {
	job, err := jobOf(cfg, goJob)
	if err != nil {
		return err
	}
	var inputs []string
	for _, src := range job.Sources() {
		inputs = append(inputs, src.Topics...)
	}
	var skip []control.Position
	for _, a := range skipArgs {
		p, err := control.ParsePosition(a)
		if err != nil {
			return fmt.Errorf("--skip %s: %w", a, err)
		}
		if !slices.Contains(inputs, p.Topic) {
			return fmt.Errorf("--skip %s: %s is not an input topic of job %s (%s)", a, p.Topic, cfg.Job.Name, strings.Join(inputs, ", "))
		}
		if !slices.Contains(skip, p) {
			skip = append(skip, p)
		}
	}
	slices.SortFunc(skip, control.Position.Compare)

	topics := controltopic.NewTopics(cfg.Kafka.TopicPrefix)
	failure := func() (*control.Failed, int64, error) {
		hist, err := controltopic.ReadHistory(ctx, opts, topics, control.TopicCommit)
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", topics.Commit, err)
		}
		f, at := replica.JobFailure(hist.Records)
		if f == nil {
			// A job stopped on purpose resumes the same way: as a
			// failure without a cause.
			if s, sat := replica.JobStop(hist.Records); s != nil {
				return &control.Failed{Gen: s.Gen, TS: s.TS, Reason: stopReason(s)}, sat, nil
			}
		}
		return f, at, nil
	}
	// Read first without fencing: a job that runs keeps its coordinator.
	f, at, err := failure()
	if err != nil {
		return err
	}
	if f == nil {
		return fmt.Errorf("job %s is neither failed nor stopped (%s has no failed or stopped record after its newest generation): nothing to resume", cfg.Job.Name, topics.Commit)
	}
	w, err := controltopic.NewWriter(ctx, opts, topics, controltopic.CoordinatorTransactionalID(cfg.Kafka.TopicPrefix))
	if err != nil {
		return fmt.Errorf("take the coordinator's transactional ID: %w", err)
	}
	defer w.Close()
	// Fenced now: nothing else appends to the commit topic until we are
	// done. Check again that the failure is still the newest state.
	f2, at2, err := failure()
	if err != nil {
		return err
	}
	if f2 == nil || at2 != at {
		return fmt.Errorf("job %s: the commit topic changed while resuming; run resume again", cfg.Job.Name)
	}
	rec := control.Resumed{Gen: f.Gen, TS: time.Now().UnixMilli()}
	if len(skip) > 0 {
		rec.Skip = skip
	}
	if err := w.Append(ctx, rec); err != nil {
		return fmt.Errorf("append resumed to %s: %w", topics.Commit, err)
	}
	out := cmd.OutOrStdout()
	if f.Cause == "" {
		fmt.Fprintf(out, "job %s resumed: the stop of generation %d (%s offset %d: %s) is cleared.\n", cfg.Job.Name, f.Gen, topics.Commit, at, f.Reason)
		fmt.Fprintln(out, "the replicas start a new generation from the newest completed checkpoint now")
		return nil
	}
	fmt.Fprintf(out, "job %s resumed: the failure of generation %d (%s offset %d, cause %s", cfg.Job.Name, f.Gen, topics.Commit, at, f.Cause)
	if !f.Record.IsZero() {
		fmt.Fprintf(out, ", record %s", f.Record)
	}
	fmt.Fprintf(out, ": %s) is cleared.\n", f.Reason)
	for _, p := range skip {
		fmt.Fprintf(out, "skipping record %s in every later generation\n", p)
	}
	if !f.Record.IsZero() && !slices.Contains(skip, f.Record) {
		fmt.Fprintf(out, "record %s is not skipped: replicas that still run the job with on_error: fail stop at it again\n", f.Record)
	}
	fmt.Fprintln(out, "the replicas start a new generation from the newest completed checkpoint now")
	return nil
}

// stopReason says how the job was stopped, for resume's message.
func stopReason(s *control.Stopped) string {
	if s.Savepoint > 0 {
		return fmt.Sprintf("stopped with savepoint %d, %s", s.Savepoint, s.Metadata)
	}
	return "stopped without a savepoint"
}
