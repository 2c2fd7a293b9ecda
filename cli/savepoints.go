package cli

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

func newSavepointsCmd(goJob *stream.Job) *cobra.Command {
	cmd := &cobra.Command{Use: "savepoints", Short: "List or delete a job's savepoints"}
	var listFile, delFile string
	list := &cobra.Command{
		Use:   "list -c FILE",
		Short: "List the job's savepoints in its object store",
		Long: `list reads every savepoints/<name>/_metadata in the job's checkpoint.storage
and prints one line per savepoint, oldest first: its name, checkpoint ID,
kind (savepoint, or stop for a stop-with-savepoint), when it was taken, its
tasks, its size, and whether it is the job's restore point (the newest
completed checkpoint, from which the next generation restores).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withKafka(cmd, listFile, goJob, func(ctx context.Context, cfg *config.Config, opts []kgo.Opt) error {
				return listSavepoints(ctx, cmd, cfg, opts)
			})
		},
	}
	addConfigFlags(list.Flags(), &listFile)
	del := &cobra.Command{
		Use:   "delete -c FILE NAME",
		Short: "Delete a savepoint from the job's object store",
		Long: `delete removes every object under savepoints/NAME/, its _metadata first, so
that a delete cut short never leaves something that looks like a savepoint.

It refuses a savepoint that is the job's restore point (the newest completed
checkpoint on its commit topic: the next generation would restore from it),
and one whose files a retained checkpoint lists (a savepoint is
self-contained, so none should): deleting never removes a file another
checkpoint needs.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return withKafka(cmd, delFile, goJob, func(ctx context.Context, cfg *config.Config, opts []kgo.Opt) error {
				return deleteSavepoint(ctx, cmd, cfg, opts, args[0])
			})
		},
	}
	addConfigFlags(del.Flags(), &delFile)
	cmd.AddCommand(list, del)
	return cmd
}

// restorePoint returns the ID and _metadata of the job's restore point,
// from its commit topic (0 if none): its newest completed checkpoint, or,
// until a checkpoint completes after it, a point of the job's own storage
// that a generation restored with run --restore-from (a rollback).
func restorePoint(ctx context.Context, cfg *config.Config, opts []kgo.Opt) (ckpt.ID, string, error) {
	topics := controltopic.NewTopics(cfg.Kafka.TopicPrefix)
	hist, err := controltopic.ReadHistory(ctx, opts, topics, control.TopicCommit)
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", topics.Commit, err)
	}
	id, md := restorePointOf(hist.Records, cfg.Checkpoint.Storage, cfg.Job.Name)
	return id, md, nil
}

// restorePointOf is restorePoint from the commit topic's records.
func restorePointOf(recs []controltopic.Record, storage, job string) (ckpt.ID, string) {
	var newest, id ckpt.ID
	var md string
	for _, r := range recs {
		switch m := r.Msg.(type) {
		case control.Complete:
			if m.ID > newest {
				newest, id, md = m.ID, m.ID, m.Metadata
			}
		case control.Generation:
			if key, own := checkpoint.OwnKey(m.RestoreLocation, storage, job); own {
				id, md = m.RestoreFrom, key
			}
		}
	}
	return id, md
}

// savepointNames returns the names of the savepoints in store: the folders
// under savepoints/ that hold a _metadata.
func savepointNames(ctx context.Context, store *objstore.Store) ([]string, error) {
	objs, err := store.List(ctx, "savepoints/")
	if err != nil {
		return nil, err
	}
	var names []string
	for _, o := range objs {
		rest := strings.TrimPrefix(o.Key, "savepoints/")
		if name, file, ok := strings.Cut(rest, "/"); ok && file == "_metadata" {
			names = append(names, name)
		}
	}
	return names, nil
}

func listSavepoints(ctx context.Context, cmd *cobra.Command, cfg *config.Config, opts []kgo.Opt) error {
	store, err := objstore.Open(ctx, cfg.Checkpoint.Storage, cfg.Job.Name, objstore.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	restoreID, restoreMD, err := restorePoint(ctx, cfg, opts)
	if err != nil {
		return err
	}
	names, err := savepointNames(ctx, store)
	if err != nil {
		return err
	}
	type row struct {
		name string
		md   control.Metadata
	}
	var rows []row
	for _, name := range names {
		md, err := checkpoint.ReadMetadata(ctx, store, objstore.SavepointMetadataKey(name))
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "savepoint %s: %v\n", name, err)
			continue
		}
		rows = append(rows, row{name, md})
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(a.md.ID, b.md.ID) })
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tID\tKIND\tTAKEN\tTASKS\tSTATE\tRESTORE POINT")
	for _, r := range rows {
		var size int64
		for _, ts := range r.md.Tasks {
			size += ts.Metrics.StateBytes
		}
		rp := ""
		if r.md.ID == restoreID && restoreMD == objstore.SavepointMetadataKey(r.name) {
			rp = "yes"
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%d\t%s\t%s\n", r.name, r.md.ID, r.md.Kind,
			time.UnixMilli(r.md.TS).UTC().Format(time.RFC3339), len(r.md.Tasks), humanBytes(size), rp)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(rows) == 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "(no savepoint in %s)\n", objstore.URL(cfg.Checkpoint.Storage, cfg.Job.Name, "savepoints/"))
	}
	return nil
}

func deleteSavepoint(ctx context.Context, cmd *cobra.Command, cfg *config.Config, opts []kgo.Opt, name string) error {
	if err := objstore.ValidName("savepoint", name); err != nil {
		return err
	}
	store, err := objstore.Open(ctx, cfg.Checkpoint.Storage, cfg.Job.Name, objstore.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	key := objstore.SavepointMetadataKey(name)
	md, err := checkpoint.ReadMetadata(ctx, store, key)
	if err != nil {
		return fmt.Errorf("savepoint %s: %w", name, err)
	}
	restoreID, restoreMD, err := restorePoint(ctx, cfg, opts)
	if err != nil {
		return err
	}
	if md.ID == restoreID && restoreMD == key {
		return fmt.Errorf("savepoint %s (checkpoint %d) is the job's restore point: the next generation restores from it; delete it once a newer checkpoint has completed", name, md.ID)
	}
	// A retained checkpoint must not list a file of the savepoint.
	prefix := objstore.SavepointPrefix(name)
	objs, err := store.List(ctx, "chk-")
	if err != nil {
		return err
	}
	for _, o := range objs {
		id, ok := objstore.ParseCheckpointKey(o.Key)
		if !ok || o.Key != objstore.MetadataKey(id) {
			continue
		}
		chk, err := checkpoint.ReadMetadata(ctx, store, o.Key)
		if err != nil {
			return fmt.Errorf("checkpoint %d: %w", id, err)
		}
		for _, ts := range chk.Tasks {
			m, err := state.ReadManifest(ctx, store, ts.Handle)
			if err != nil {
				return fmt.Errorf("checkpoint %d: task %s: %w", id, ts.Task, err)
			}
			for _, f := range m.Files {
				keys := []string{f.Key}
				for _, p := range f.Parts {
					keys = append(keys, p.Key)
				}
				for _, k := range keys {
					if strings.HasPrefix(k, prefix) {
						return fmt.Errorf("savepoint %s: checkpoint %d (task %s) lists its file %s: not deleted", name, id, ts.Task, k)
					}
				}
			}
		}
	}
	if err := store.DeletePrefix(ctx, prefix, key); err != nil {
		return fmt.Errorf("delete savepoint %s: %w", name, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "savepoint %s (checkpoint %d) deleted: %s\n", name, md.ID, objstore.URL(cfg.Checkpoint.Storage, cfg.Job.Name, prefix))
	return nil
}
