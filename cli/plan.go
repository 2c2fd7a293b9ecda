package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/plan"
	"github.com/weir-stream/weir/runtime/replica"
	"github.com/weir-stream/weir/stream"
)

func newPlanCmd(goJob *stream.Job) *cobra.Command {
	var (
		file       string
		partitions int
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "plan -c FILE [--partitions N] [--json]",
		Short: "Print the job's stages, their tasks, shuffle topics and operators",
		Long: `plan prints the physical plan the replicas run: each stage with its
parallelism, its tasks (and the key groups, the shuffle partitions, each
downstream task reads), its input and outputs, its sinks and operators, and
each shuffle topic with its partition count (job.max_parallelism), its
writers and readers and the KeyBy (or key_by step) that made it.

The source stage has one task per partition of the input topics: plan asks
Kafka for that count, with the configuration's kafka settings, as run does,
and a stage after a key_by whose parallelism follows the input keeps the
task count of the job's running generation (its commit topic), as run does
when partitions are added. With --partitions N it uses N instead and
connects to nothing.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("partitions") {
				if partitions < 1 {
					return fmt.Errorf("--partitions %d: must be at least 1", partitions)
				}
				cfg, err := loadOfflineConfig(file, cmd.Flags(), goJob)
				if err != nil {
					return err
				}
				job, err := jobOf(cfg, goJob)
				if err != nil {
					return err
				}
				return printPlan(cmd.OutOrStdout(), cfg, job, partitions, nil, asJSON)
			}
			return withKafka(cmd, file, goJob, func(ctx context.Context, cfg *config.Config, opts []kgo.Opt) error {
				job, err := jobOf(cfg, goJob)
				if err != nil {
					return err
				}
				n, err := inputPartitions(ctx, opts, job)
				if err != nil {
					return err
				}
				// A downstream stage that follows the input keeps the
				// running generation's task count (input partitions
				// added to a running job).
				g, err := replica.LastGeneration(ctx, opts, controltopic.NewTopics(cfg.Kafka.TopicPrefix))
				if err != nil {
					return fmt.Errorf("read the job's commit topic: %w", err)
				}
				var running map[string]int
				if g != nil {
					tasks, err := g.Assignment.Tasks()
					if err != nil {
						return err
					}
					running = plan.Count(tasks)
				}
				return printPlan(cmd.OutOrStdout(), cfg, job, n, running, asJSON)
			})
		},
	}
	addConfigFlags(cmd.Flags(), &file)
	cmd.Flags().IntVar(&partitions, "partitions", 0, "the input topics' partition count (the source stage's parallelism); default: ask Kafka")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the plan as JSON")
	return cmd
}

// inputPartitions asks Kafka for the partition count of job's input topics,
// as a replica does at start.
func inputPartitions(ctx context.Context, opts []kgo.Opt, job *stream.Job) (int, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	return replica.InputPartitions(ctx, kadm.NewClient(cl), job)
}

// printPlan plans job with the input's partition count, the
// configuration's parallelism settings and the running generation's task
// counts (nil: none; plan.Inputs.Running), and prints it.
func printPlan(w io.Writer, cfg *config.Config, job *stream.Job, partitions int, running map[string]int, asJSON bool) error {
	p, err := plan.Build(job, plan.Inputs{
		SourcePartitions: partitions,
		Running:          running,
		Parallelism:      cfg.Job.Parallelism,
		MaxParallelism:   cfg.Job.MaxParallelism,
		TopicPrefix:      cfg.Kafka.TopicPrefix,
	})
	if err != nil {
		return err
	}
	if !asJSON {
		return p.Describe(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(p)
}
