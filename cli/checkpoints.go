package cli

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

func newCheckpointsCmd(job *stream.Job) *cobra.Command {
	cmd := &cobra.Command{Use: "checkpoints", Short: "Inspect a job's checkpoints"}
	var file string
	list := &cobra.Command{
		Use:   "list -c FILE",
		Short: "List the job's completed checkpoints (ID, time, size, duration)",
		Long: `list reads the job's commit topic — the durable history of its checkpoints —
and each checkpoint's _metadata object, and prints one line per completed
checkpoint, oldest first. Checkpoints released by retention show "released"
when their _metadata is gone.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withKafka(cmd, file, job, func(ctx context.Context, cfg *config.Config, opts []kgo.Opt) error {
				return listCheckpoints(ctx, cmd, cfg, opts)
			})
		},
	}
	addConfigFlags(list.Flags(), &file)
	cmd.AddCommand(list)
	return cmd
}

func listCheckpoints(ctx context.Context, cmd *cobra.Command, cfg *config.Config, opts []kgo.Opt) error {
	topics := controltopic.NewTopics(cfg.Kafka.TopicPrefix)
	hist, err := controltopic.ReadHistory(ctx, opts, topics, control.TopicCommit)
	if err != nil {
		return fmt.Errorf("read %s: %w", topics.Commit, err)
	}
	store, err := objstore.Open(ctx, cfg.Checkpoint.Storage, cfg.Job.Name, objstore.Options{})
	if err != nil {
		return err
	}
	defer store.Close()

	w := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tCOMPLETED\tKIND\tGEN\tTASKS\tSTATE\tUPLOADED\tDURATION\tMETADATA")
	n := 0
	for _, rec := range hist.Records {
		c, ok := rec.Msg.(control.Complete)
		if !ok {
			continue
		}
		n++
		at := time.UnixMilli(c.TS).UTC().Format(time.RFC3339)
		tasks, size, uploaded, dur := "-", "released", "-", "-"
		if md, err := checkpoint.ReadCompleted(ctx, store, c); err == nil {
			{
				var sb, ub int64
				for _, ts := range md.Tasks {
					sb += ts.Metrics.StateBytes
					ub += ts.Metrics.UploadedBytes
				}
				tasks = fmt.Sprint(len(md.Tasks))
				size, uploaded = humanBytes(sb), humanBytes(ub)
				if md.TS > 0 && c.TS >= md.TS {
					dur = (time.Duration(c.TS-md.TS) * time.Millisecond).String()
				}
			}
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", c.ID, at, c.Kind, c.Gen, tasks, size, uploaded, dur, c.Metadata)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "no completed checkpoint in %s\n", topics.Commit)
	}
	return nil
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
