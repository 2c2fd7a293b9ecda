package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/stream"
)

func newCheckpointsCmd(job *stream.Job) *cobra.Command {
	cmd := &cobra.Command{Use: "checkpoints", Short: "Inspect a job's checkpoints"}
	var file string
	var limit int
	list := &cobra.Command{
		Use:   "list -c FILE [--limit N]",
		Short: "List the job's newest checkpoints, failed ones too (ID, time, status, size, duration)",
		Long: `list reads the job's control topics — the commit topic, the durable history
of its completed checkpoints, the trigger topic (aborts, with their reason)
and the ack topic (each task's part) — and the newest checkpoints' _metadata
objects, as the REST API does (GET /api/v1/checkpoints, docs/api.md), and
prints the newest N checkpoints, oldest first: completed, failed (expired,
declined by a task, _metadata not written, with the reason), aborted
(subsumed, a new generation) and in progress. Completed checkpoints released
by retention show "released" when their _metadata is gone; when the
storage holds none of the checkpoints the commit topic names as retained,
list warns: checkpoint.storage is not the one the job's replicas use.

The trigger topic is compacted and the ack topic kept a day
(docs/control-topics.md): older failed checkpoints drop out of the list,
completed ones stay.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return fmt.Errorf("--limit %d: must be at least 1", limit)
			}
			return withKafka(cmd, file, job, func(ctx context.Context, cfg *config.Config, opts []kgo.Opt) error {
				return listCheckpoints(ctx, cmd, cfg, opts, limit)
			})
		},
	}
	list.Flags().IntVar(&limit, "limit", 20, "how many of the newest checkpoints to list")
	addConfigFlags(list.Flags(), &file)
	cmd.AddCommand(list)
	return cmd
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
