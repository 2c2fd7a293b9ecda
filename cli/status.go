package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/jobview"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/runtime/observe"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

func newStatusCmd(goJob *stream.Job) *cobra.Command {
	var file string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status -c FILE [--limit N] [--json]",
		Short: "Show the job: its state, replicas, tasks and last checkpoints",
		Long: `status reads the job's control topics (commit, trigger and ack) and the
_metadata of its newest checkpoints, as every replica's REST API does
(/api/v1/job, /api/v1/checkpoints; docs/api.md), and prints the job's state
(running, restoring, failed with its cause and how to resume, stopped), its
generation, the replicas with their tasks and the coordinator (from the
replicas' reports of the last few http.report_interval), each task's
placement and status, and the newest N checkpoints. It needs no running
replica.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 1 {
				return fmt.Errorf("--limit %d: must be at least 1", limit)
			}
			return withKafka(cmd, file, goJob, func(ctx context.Context, cfg *config.Config, opts []kgo.Opt) error {
				st, err := readStatus(ctx, cfg, opts, limit)
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					return enc.Encode(st)
				}
				return printStatus(cmd.OutOrStdout(), st)
			})
		},
	}
	cmd.Flags().IntVar(&limit, "limit", 5, "how many of the newest checkpoints to show")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: the job as GET /api/v1/job shows it, and the checkpoints as GET /api/v1/checkpoints")
	addConfigFlags(cmd.Flags(), &file)
	return cmd
}

// Status is what processor status prints with --json.
type Status struct {
	Job         jobview.Job          `json:"job"`
	Checkpoints []jobview.Checkpoint `json:"checkpoints"`
}

// loadView reads the job's view as the REST API has it: observe.Load.
func loadView(ctx context.Context, cfg *config.Config, opts []kgo.Opt) (*jobview.Fold, *objstore.Store, error) {
	store, err := objstore.Open(ctx, cfg.Checkpoint.Storage, cfg.Job.Name, objstore.Options{})
	if err != nil {
		return nil, nil, err
	}
	f, _, err := observe.Load(ctx, opts, controltopic.NewTopics(cfg.Kafka.TopicPrefix), store, cfg.Job.Name)
	if errors.Is(err, observe.ErrNeverRan) {
		store.Close()
		return nil, nil, fmt.Errorf("job %s: %w", cfg.Job.Name, err)
	}
	if err != nil {
		store.Close()
		return nil, nil, err
	}
	return f, store, nil
}

func readStatus(ctx context.Context, cfg *config.Config, opts []kgo.Opt, limit int) (Status, error) {
	f, store, err := loadView(ctx, cfg, opts)
	if err != nil {
		return Status{}, err
	}
	defer store.Close()
	now := time.Now().UnixMilli()
	ttl := (3*cfg.HTTP.ReportInterval + 2*time.Second).Milliseconds()
	return Status{Job: f.Job(now, ttl), Checkpoints: f.CheckpointsAt(limit, now)}, nil
}

func printStatus(out io.Writer, st Status) error {
	j := st.Job
	var b strings.Builder
	fmt.Fprintf(&b, "job %s: %s", j.Name, j.State)
	if j.Generation > 0 {
		fmt.Fprintf(&b, ", generation %d", j.Generation)
		if j.RestoreFrom > 0 {
			fmt.Fprintf(&b, " (restored from checkpoint %d)", j.RestoreFrom)
		}
	}
	b.WriteString("\n")
	if f := j.Failure; f != nil {
		fmt.Fprintf(&b, "failed: cause %s", f.Cause)
		if f.Task != (control.TaskID{}) {
			fmt.Fprintf(&b, ", task %s", f.Task)
		}
		if !f.Record.IsZero() {
			fmt.Fprintf(&b, ", record %s", f.Record)
		}
		fmt.Fprintf(&b, ": %s\nto resume: %s\n", f.Reason, f.Resume)
	}
	if s := j.Stopped; s != nil {
		if s.Savepoint > 0 {
			fmt.Fprintf(&b, "stopped with savepoint %d (%s); %s\n", s.Savepoint, s.Metadata, s.Resume)
		} else {
			fmt.Fprintf(&b, "stopped; %s\n", s.Resume)
		}
	}
	coord := j.Coordinator
	if coord == "" {
		coord = "- (no replica reported holding it lately)"
	}
	fmt.Fprintf(&b, "coordinator: %s\n", coord)
	if j.LiveReplicas == 0 {
		b.WriteString("no replica reported in the last few http.report_interval: are the job's replicas running?\n")
	}
	w := tabwriter.NewWriter(&b, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nREPLICA\tTASKS\tLAST REPORT")
	for _, r := range j.Replicas {
		ids := make([]string, len(r.Tasks))
		for i, t := range r.Tasks {
			ids[i] = t.String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", r.ID, orDash(strings.Join(ids, ", ")), since(r.ReportedMS))
	}
	fmt.Fprintln(w, "\nTASK\tREPLICA\tSTATUS")
	for _, t := range j.Tasks {
		fmt.Fprintf(w, "%s\t%s\t%s\n", t.ID, t.Replica, t.Status)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\ncheckpoints (newest %d):\n", len(st.Checkpoints))
	if _, err := io.WriteString(out, b.String()); err != nil {
		return err
	}
	return printCheckpoints(out, st.Checkpoints, nil)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func since(ms int64) string {
	if ms == 0 {
		return "never"
	}
	return time.Since(time.UnixMilli(ms)).Round(100*time.Millisecond).String() + " ago"
}

// printCheckpoints prints cs, newest first as given, one line each.
// released, if set, marks completed checkpoints whose _metadata is gone.
func printCheckpoints(out io.Writer, cs []jobview.Checkpoint, released map[uint64]bool) error {
	w := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tTRIGGERED\tKIND\tSTATUS\tGEN\tACKS\tSTATE\tUPLOADED\tDURATION\tDETAIL")
	for _, c := range cs {
		at := "-"
		if c.TriggeredMS > 0 {
			at = time.UnixMilli(c.TriggeredMS).UTC().Format(time.RFC3339)
		} else if c.CompletedMS > 0 {
			at = time.UnixMilli(c.CompletedMS).UTC().Format(time.RFC3339)
		}
		acks := fmt.Sprint(c.Acks)
		if c.Expected > 0 {
			acks += "/" + fmt.Sprint(c.Expected)
		}
		dur := "-"
		if c.DurationMS != nil {
			dur = (time.Duration(*c.DurationMS) * time.Millisecond).String()
		}
		size, uploaded := humanBytes(c.StateBytes), humanBytes(c.UploadedBytes)
		detail := c.Metadata
		switch {
		case c.Status == jobview.CheckpointFailed || c.Status == jobview.CheckpointAborted:
			detail = c.AbortReason
			if c.Failure != "" {
				detail += ": " + c.Failure
			}
		case released[uint64(c.ID)]:
			size, uploaded, detail = "released", "-", c.Metadata+" (gone)"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", c.ID, at, c.Kind, c.Status, c.Gen, acks, size, uploaded, dur, orDash(detail))
	}
	return w.Flush()
}

// listCheckpoints prints the newest limit checkpoints, oldest first, with
// failed and aborted ones, and warns when the storage holds none of the
// checkpoints the commit topic names as retained.
func listCheckpoints(ctx context.Context, cmd *cobra.Command, cfg *config.Config, opts []kgo.Opt, limit int) error {
	f, store, err := loadView(ctx, cfg, opts)
	if err != nil {
		return err
	}
	defer store.Close()
	cs := f.CheckpointsAt(limit, time.Now().UnixMilli())
	// The retained checkpoints: the newest checkpoint.retained completed
	// ones of kind checkpoint, and every savepoint's metadata, looked for
	// in the storage.
	var retained []jobview.Checkpoint
	for _, c := range f.Checkpoints(0) {
		if c.Status == jobview.CheckpointCompleted && c.Kind == "checkpoint" && len(retained) < cfg.Checkpoint.Retained {
			retained = append(retained, c)
		}
	}
	released := map[uint64]bool{}
	present := 0
	check := func(c jobview.Checkpoint) bool {
		_, err := checkpoint.ReadCompleted(ctx, store, control.Complete{ID: c.ID, Metadata: c.Metadata})
		return err == nil
	}
	for _, c := range retained {
		if check(c) {
			present++
		}
	}
	for _, c := range cs {
		if c.Status == jobview.CheckpointCompleted && !slices.ContainsFunc(retained, func(r jobview.Checkpoint) bool { return r.ID == c.ID }) && !check(c) {
			released[uint64(c.ID)] = true
		}
	}
	out := cmd.OutOrStdout()
	if len(cs) == 0 {
		fmt.Fprintf(out, "no checkpoint in the history of job %s\n", cfg.Job.Name)
	} else {
		slices.Reverse(cs) // oldest first, the newest last
		if err := printCheckpoints(out, cs, released); err != nil {
			return err
		}
	}
	if len(retained) > 0 && present == 0 {
		ids := make([]string, len(retained))
		for i, c := range retained {
			ids[i] = c.ID.String()
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: checkpoint.storage %s holds none of the checkpoints the commit topic names as retained (%s): is it the storage the job's replicas use? A restore would find nothing there\n",
			cfg.Checkpoint.Storage, strings.Join(ids, ", "))
	}
	return nil
}
