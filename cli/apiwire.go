package cli

import (
	"bytes"
	"context"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/plan"
	"github.com/weir-stream/weir/runtime/replica"
	"github.com/weir-stream/weir/stream"
)

// The REST API's parts that the command line provides (package api).

// refusal is api.Local of a replica.
type refusal struct{ rep *replica.Replica }

func (r refusal) Refused() error {
	if e := r.rep.Refused(); e != nil {
		return e
	}
	return nil
}

// generationPlan plans job for a generation's tasks, as the replicas do.
func generationPlan(cfg *config.Config, job *stream.Job) func([]control.TaskID) (*plan.Plan, error) {
	return func(tasks []control.TaskID) (*plan.Plan, error) {
		return plan.ForTasks(job, plan.Inputs{
			Parallelism: cfg.Job.Parallelism, MaxParallelism: cfg.Job.MaxParallelism, TopicPrefix: cfg.Kafka.TopicPrefix,
		}, tasks)
	}
}

// sourceStage is the name of job's stage that reads its Kafka sources.
func sourceStage(job *stream.Job) string {
	for _, d := range job.Stages() {
		if d.Kafka {
			return d.Name
		}
	}
	return ""
}

// adminActions are the REST API's write actions: the code of processor
// savepoint, stop and resume, their output captured.
type adminActions struct {
	cfg   *config.Config
	goJob *stream.Job
	opts  []kgo.Opt
}

// actionTimeout bounds a write action, as the commands' --timeout default.
const actionTimeout = 10 * time.Minute

func (a adminActions) run(fn func(cmd *cobra.Command) error) (string, error) {
	var out bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := fn(cmd)
	return out.String(), err
}

func (a adminActions) Savepoint(ctx context.Context, target string) (string, error) {
	return a.run(func(cmd *cobra.Command) error {
		return takeSavepoint(ctx, cmd, a.cfg, a.opts, ckpt.KindSavepoint, target, actionTimeout)
	})
}

func (a adminActions) Stop(ctx context.Context, savepoint bool, target string) (string, error) {
	return a.run(func(cmd *cobra.Command) error {
		if savepoint {
			return takeSavepoint(ctx, cmd, a.cfg, a.opts, ckpt.KindStop, target, actionTimeout)
		}
		return stopJob(ctx, cmd, a.cfg, a.opts)
	})
}

func (a adminActions) Resume(ctx context.Context, skip []string) (string, error) {
	return a.run(func(cmd *cobra.Command) error {
		return resume(ctx, cmd, a.cfg, a.goJob, a.opts, skip)
	})
}
