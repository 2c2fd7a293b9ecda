package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/compat"
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/plan"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

// This file is `processor validate --against`: the compatibility check of
// a replica's restore (package compat), run offline against a checkpoint
// or savepoint in the object store, so that a pipeline can gate a rollout
// on it. It reads the object store only: no Kafka.

// checkAgainst compares job (of cfg) with the checkpoint that against
// names, writes the verdict to out, and returns an error if the job could
// not restore it.
func checkAgainst(ctx context.Context, out io.Writer, cfg *config.Config, job *stream.Job, against string) error {
	store, key, err := openAgainst(ctx, cfg, against)
	if err != nil {
		return err
	}
	defer store.Close()
	if key == "" {
		key, err = checkpoint.Latest(ctx, store)
		if errors.Is(err, checkpoint.ErrNone) {
			return fmt.Errorf("--against latest: %w (checkpoint.storage %s): there is nothing to restore, so any job file starts", err, cfg.Checkpoint.Storage)
		}
		if err != nil {
			return err
		}
	}
	md, err := checkpoint.ReadMetadata(ctx, store, key)
	if err != nil {
		return fmt.Errorf("--against %s: %w", against, err)
	}
	// As a replica plans a generation after the checkpoint's: a
	// downstream stage whose parallelism follows the input keeps its task
	// count (plan.Inputs.Running).
	tasks := make([]control.TaskID, len(md.Tasks))
	for i, ts := range md.Tasks {
		tasks[i] = ts.Task
	}
	running := plan.Count(tasks)
	// The input's partition count is Kafka's, which validate does not
	// ask: the checkpoint's is taken, as if unchanged.
	parts := running[stream.MainStage]
	if md.Schema != nil && len(md.Schema.Sources) > 0 {
		parts = md.Schema.Sources[0].Partitions
	}
	in := plan.Inputs{
		SourcePartitions: parts, Parallelism: cfg.Job.Parallelism, MaxParallelism: cfg.Job.MaxParallelism,
		TopicPrefix: cfg.Kafka.TopicPrefix, Running: running,
	}
	fp, err := jobFingerprint(cfg, job)
	if err != nil {
		return err
	}
	// Compared once under the job's stage names, then, if some stages
	// keep the checkpoint's names (compat.Result.StageNames), again under
	// those, as a replica plans the generation.
	var res compat.Result
	for range 2 {
		p, err := plan.Build(job, in)
		if err != nil {
			return err
		}
		sch := p.Schema(job, fp, sink.TxnIDPrefix(cfg.Kafka.TopicPrefix))
		res = compat.Compare(md.ID, md.Schema, &sch)
		if len(res.StageNames) == 0 {
			break
		}
		in.StageNames = res.StageNames
	}
	where := fmt.Sprintf("%s (checkpoint %d, job %s)", key, md.ID, store.Job())
	fmt.Fprintf(out, "against %s; input partitions taken from the checkpoint (%d): validate asks no Kafka\n", where, parts)
	fmt.Fprint(out, res.Report())
	if err := res.Err(cfg.Process.AllowNonRestoredState); err != nil {
		return err
	}
	switch {
	case res.Unchecked:
		fmt.Fprintln(out, "verdict: unchecked (the checkpoint records no state schema)")
	case len(res.Differences) == 0:
		fmt.Fprintln(out, "verdict: compatible, no difference")
	default:
		fmt.Fprintln(out, "verdict: compatible")
	}
	return nil
}

// openAgainst opens the object store that against names and returns the
// key of its _metadata object ("" for latest). against is "latest", a
// checkpoint (12, chk-12) or savepoint (savepoints/NAME) of the job's
// checkpoint.storage, or a URL in any object store of what `run
// --restore-from` takes (checkpoint.OpenSource): a checkpoint's folder
// <root>/<job>/chk-12, a savepoint's <root>/<job>/savepoints/NAME, or a
// savepoint's folder copied anywhere, each with or without /_metadata.
// A URL's store is read-only.
func openAgainst(ctx context.Context, cfg *config.Config, against string) (*objstore.Store, string, error) {
	if strings.Contains(against, "://") {
		src, err := checkpoint.ParseSource(against)
		if err != nil {
			return nil, "", fmt.Errorf("--against: %w", err)
		}
		p, err := checkpoint.OpenSource(ctx, src.Location, objstore.Options{})
		if err != nil {
			return nil, "", fmt.Errorf("--against: %w", err)
		}
		return p.Store, p.Key, nil
	}
	rel := strings.TrimSuffix(against, "/")
	key := ""
	switch {
	case rel == "latest":
	case strings.HasPrefix(rel, "savepoints/"):
		key = rel + "/_metadata"
	default:
		id, err := strconv.ParseUint(strings.TrimPrefix(rel, "chk-"), 10, 64)
		if err != nil || id == 0 {
			return nil, "", fmt.Errorf("--against %s: want latest, a checkpoint (12 or chk-12), savepoints/NAME, or the URL of one", against)
		}
		key = objstore.MetadataKey(ckpt.ID(id))
	}
	store, err := objstore.Open(ctx, cfg.Checkpoint.Storage, cfg.Job.Name, objstore.Options{})
	if err != nil {
		return nil, "", err
	}
	return store, key, nil
}
