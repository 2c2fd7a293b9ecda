package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/benchutil"
	"github.com/weir-stream/weir/internal/s3test"
	"github.com/weir-stream/weir/keygroup"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
)

// rescaleMaxParallelism is the number of key groups of the rescaling
// benchmark: the default job.max_parallelism.
const rescaleMaxParallelism = keygroup.DefaultMaxParallelism

// rescale measures restores with rescaling (docs/state.md, "Rescaling"):
// the same keyed state (c.size in all, values of c.valueSize random
// bytes) checkpointed by a stage of 6, 3 and 8 tasks, then restored into
// 3 tasks from the 6 tasks' checkpoint and into 8 from the 3 tasks', each
// against the restore of the same state at the same parallelism without
// rescaling (3 from 3, 8 from 8). Every restore downloads (no local
// recovery) from a file:// bucket (the page cache: downloads as fast as
// they can be, the rescaling's own work weighs most) or, with -bucket s3,
// from the S3 server of WEIR_S3_ENDPOINT; the figure is the sum of the new
// tasks' restore durations (the work a rescale costs; on a replica they
// restore in parallel), each new task in a fresh directory.
func rescale(c config, cache *pebble.Cache) error {
	ctx := context.Background()
	root := filepath.Join(c.dir, "rescale")
	if err := os.MkdirAll(filepath.Join(root, "bucket"), 0o755); err != nil {
		return err
	}
	url := "file://" + filepath.Join(root, "bucket")
	if c.bucket == "s3" {
		u, ok := s3test.URLFromEnv()
		if !ok {
			return errors.New("-bucket s3: WEIR_S3_ENDPOINT is not set (make s3-up; eval \"$(bash scripts/s3.sh env)\")")
		}
		// A prefix of its own, deleted at the end.
		url = u + "&prefix=" + fmt.Sprintf("statebench-rescale-%d/", time.Now().UnixNano())
	}
	benchutil.Info("rescaling restores from %s", url)
	store, err := objstore.Open(ctx, url, "bench", objstore.Options{})
	if err != nil {
		return err
	}
	defer store.Close()
	defer func() {
		objs, err := store.List(ctx, "")
		for _, o := range objs {
			err = errors.Join(err, store.Delete(ctx, o.Key))
		}
		if err != nil {
			benchutil.Info("cleaning up the bucket: %v", err)
		}
	}()
	n := int(c.size / int64(c.valueSize+24))
	handles := map[int][]string{}
	for _, p := range []int{3, 6, 8} {
		start := time.Now()
		hs, err := rescaleStage(ctx, c, cache, store, root, p, n)
		if err != nil {
			return err
		}
		handles[p] = hs
		benchutil.Info("stage of %d tasks: %d keys (%s) loaded and checkpointed in %v", p, n, sizeLabel(c.size), time.Since(start).Round(time.Millisecond))
	}
	for _, m := range []struct{ from, to int }{{6, 3}, {3, 8}} {
		plain, err := restoreStage(ctx, c, cache, store, root, handles[m.to], m.to, m.to)
		if err != nil {
			return err
		}
		moved, err := restoreStage(ctx, c, cache, store, root, handles[m.from], m.from, m.to)
		if err != nil {
			return err
		}
		name := fmt.Sprintf("%d_to_%d_%s", m.from, m.to, sizeLabel(c.size))
		benchutil.Result("restore_without_rescaling_"+fmt.Sprintf("%d_%s", m.to, sizeLabel(c.size)), "%.4g", plain.Seconds(), "s")
		benchutil.Result("restore_rescaled_"+name, "%.4g", moved.Seconds(), "s")
		benchutil.Result("restore_rescaled_vs_plain_"+name, "%.3g", moved.Seconds()/plain.Seconds(), "ratio")
	}
	return nil
}

// rescaleStage loads n keys into a stage of p tasks (each task the keys of
// its key groups) and checkpoints it as checkpoint p; it returns the
// tasks' manifest handles, by index.
func rescaleStage(ctx context.Context, c config, cache *pebble.Cache, store *objstore.Store, root string, p, n int) ([]string, error) {
	handles := make([]string, p)
	rng := rand.New(rand.NewPCG(1, uint64(p)))
	val := make([]byte, c.valueSize)
	var key []byte
	for i := range p {
		lo, hi := keygroup.Range(i, p, rescaleMaxParallelism)
		b, err := state.Open(ctx, rescaleConfig(c, cache, store, filepath.Join(root, fmt.Sprintf("load-%d-%d", p, i)), i, lo, hi))
		if err != nil {
			return nil, err
		}
		kv, err := state.NewValueState(b, "kv", state.BytesCodec{})
		if err != nil {
			return nil, err
		}
		for k := range n {
			key = fmt.Appendf(key[:0], "user-%012d", k)
			if g := keygroup.Of(key, rescaleMaxParallelism); g < lo || g >= hi {
				continue
			}
			b.SetCurrentKey(key)
			for j := 0; j+8 <= len(val); j += 8 {
				v := rng.Uint64()
				val[j], val[j+1], val[j+2], val[j+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
				val[j+4], val[j+5], val[j+6], val[j+7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
			}
			if err := kv.Put(val); err != nil {
				return nil, err
			}
		}
		if err := b.Flush(); err != nil {
			return nil, err
		}
		if err := b.DB().Flush(); err != nil {
			return nil, err
		}
		s, err := b.Snapshot(ckpt.ID(p), []byte("{}")) // one checkpoint per stage: their manifests do not collide
		if err != nil {
			return nil, err
		}
		res, err := s.Run(ctx)
		if err != nil {
			return nil, err
		}
		handles[i] = res.Handle
		if err := b.Close(ctx); err != nil {
			return nil, err
		}
		if err := os.RemoveAll(filepath.Join(root, fmt.Sprintf("load-%d-%d", p, i))); err != nil {
			return nil, err
		}
	}
	return handles, nil
}

// restoreStage restores the to tasks of a stage from the checkpoint of
// from tasks at handles (rescaled if from != to) and returns the sum of
// their restore durations.
func restoreStage(ctx context.Context, c config, cache *pebble.Cache, store *objstore.Store, root string, handles []string, from, to int) (time.Duration, error) {
	var total time.Duration
	for i := range to {
		lo, hi := keygroup.Range(i, to, rescaleMaxParallelism)
		dir := filepath.Join(root, fmt.Sprintf("restore-%d-%d-%d", from, to, i))
		cfg := rescaleConfig(c, cache, store, dir, i, lo, hi)
		cfg.DisableLocalRecovery = true
		start := time.Now()
		var b *state.Backend
		var err error
		if from == to {
			b, err = state.Restore(ctx, cfg, handles[i])
		} else {
			var mine []string
			for j, h := range handles {
				if l, h2 := keygroup.Range(j, from, rescaleMaxParallelism); l < hi && h2 > lo {
					mine = append(mine, h)
				}
			}
			b, err = state.RestoreKeyGroups(ctx, cfg, mine)
		}
		d := time.Since(start)
		if err != nil {
			return 0, err
		}
		total += d
		benchutil.Info("restore %d → %d, task %d [%d,%d): %v, %d bytes downloaded", from, to, i, lo, hi, d.Round(time.Millisecond), b.RestoreInfo().DownloadedBytes)
		if err := b.Close(ctx); err != nil {
			return 0, err
		}
		if err := os.RemoveAll(dir); err != nil {
			return 0, err
		}
	}
	return total, nil
}

func rescaleConfig(c config, cache *pebble.Cache, store *objstore.Store, dir string, i, lo, hi int) state.Config {
	cfg := state.Config{
		Dir: dir, Task: fmt.Sprintf("count-%d", i), Store: store, Cache: cache,
		Logger: slog.New(slog.DiscardHandler), RecordCacheBytes: -1,
		MaxParallelism: rescaleMaxParallelism, KeyGroups: [2]int{lo, hi},
	}
	if c.memtableMiB > 0 {
		cfg.MemTableSize = uint64(c.memtableMiB) << 20
	}
	return cfg
}
