// Command statebench measures the state backend (package state): the cost
// of incremental checkpoints, the duration of a snapshot's synchronous part,
// restore throughput, keyed get/put throughput against raw Pebble, and
// restore with rescaling against restore without (rescale.go). It
// prints one line per figure:
//
//	result: <name> = <value> <unit>
//
// Run it with `make bench-state` (1 GiB of state, several minutes) or
// `make bench-state-short` (small sizes, well under a minute, for CI). It
// owns nothing but its temporary directory.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/compat"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/benchutil"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
)

type config struct {
	size, smallSize int64
	valueSize       int
	rounds          int
	syncRounds      int
	syncUpdates     int
	opsKeys         int
	ops             int
	dir             string
	keep            bool
	only            string
	l0Threshold     int
	lbaseMiB        int
	memtableMiB     int
	manifestKiB     int
	recordCache     int64
	bucket          string
}

func main() {
	var c config
	var size, small string
	short := flag.Bool("short", false, "small sizes, for CI (overrides -size and -small)")
	flag.StringVar(&size, "size", envOr("WEIR_BENCH_STATE_SIZE", "1GiB"), "state size for the incremental and large synchronous-part benchmarks (env WEIR_BENCH_STATE_SIZE)")
	flag.StringVar(&small, "small", "100MiB", "state size of the small synchronous-part benchmark")
	flag.IntVar(&c.valueSize, "value", 512, "value size in bytes (random, incompressible)")
	flag.IntVar(&c.rounds, "rounds", 100, "incremental checkpoints, each after updating 1% of the keys (enough for several compaction cycles)")
	flag.IntVar(&c.syncRounds, "sync-rounds", 100, "snapshots per synchronous-part measurement")
	flag.IntVar(&c.syncUpdates, "sync-updates", 1000, "keys updated between those snapshots (the same at every state size)")
	flag.IntVar(&c.opsKeys, "ops-keys", 1_000_000, "keys loaded for the get/put comparison")
	flag.IntVar(&c.ops, "ops", 1_000_000, "operations per get/put measurement")
	flag.StringVar(&c.dir, "dir", "", "work directory (default: a new temporary directory, removed at the end)")
	flag.BoolVar(&c.keep, "keep", false, "keep the work directory")
	flag.StringVar(&c.only, "only", "", "run only this benchmark: incremental, sync (after the incremental phase), getput or rescale; for experiments")
	flag.IntVar(&c.l0Threshold, "l0-threshold", 0, "override Pebble's L0CompactionThreshold (experiments)")
	flag.IntVar(&c.lbaseMiB, "lbase-mib", 0, "override Pebble's LBaseMaxBytes in MiB (experiments)")
	flag.IntVar(&c.memtableMiB, "memtable-mib", 0, "override the memtable size in MiB (experiments)")
	flag.IntVar(&c.manifestKiB, "manifest-kib", 0, "override Pebble's MaxManifestFileSize in KiB (experiments)")
	flag.Int64Var(&c.recordCache, "record-cache-bytes", -1, "the backend's record cache (state.Config.RecordCacheBytes); off by default, so that the figures are Pebble's and the snapshot's own: with it on, the synchronous part also flushes up to this many bytes")
	flag.StringVar(&c.bucket, "bucket", "file", "the bucket of the rescale benchmark: file (a local directory) or s3 (the server of WEIR_S3_ENDPOINT)")
	flag.Parse()
	if *short {
		size, small = "32MiB", "8MiB"
		c.rounds, c.syncRounds, c.opsKeys, c.ops = 5, 30, 50_000, 50_000
	}
	var err error
	if c.size, err = parseSize(size); err != nil {
		fatal(err)
	}
	if c.smallSize, err = parseSize(small); err != nil {
		fatal(err)
	}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "statebench-"); err != nil {
			fatal(err)
		}
		if !c.keep {
			defer os.RemoveAll(c.dir)
		}
	}
	if err := run(c); err != nil {
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "statebench:", err)
	os.Exit(1)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return 0, fmt.Errorf("size %q: %w", s, err)
			}
			return int64(f * float64(u.mult)), nil
		}
	}
	return 0, fmt.Errorf("size %q", s)
}

func sizeLabel(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dB", n)
}

// bench is one backend with its store, key space and random values.
type bench struct {
	c      config
	store  *objstore.Store
	cfg    state.Config
	b      *state.Backend
	kv     *state.ValueState[[]byte]
	keys   int
	rng    *rand.Rand
	val    []byte
	key    []byte
	nextID ckpt.ID
}

func newBench(c config, cache *pebble.Cache, name string) (*bench, error) {
	root := filepath.Join(c.dir, name)
	if err := os.MkdirAll(filepath.Join(root, "bucket"), 0o755); err != nil {
		return nil, err
	}
	store, err := objstore.Open(context.Background(), "file://"+filepath.Join(root, "bucket"), "bench", objstore.Options{})
	if err != nil {
		return nil, err
	}
	cfg := state.Config{
		Dir:              filepath.Join(root, "state"),
		Task:             "t0",
		Store:            store,
		Cache:            cache,
		Logger:           slog.New(slog.DiscardHandler),
		RecordCacheBytes: c.recordCache,
		TunePebble: func(o *pebble.Options) {
			if c.l0Threshold > 0 {
				o.L0CompactionThreshold = c.l0Threshold
			}
			if c.manifestKiB > 0 {
				o.MaxManifestFileSize = int64(c.manifestKiB) << 10
			}
			if c.lbaseMiB > 0 {
				o.LBaseMaxBytes = int64(c.lbaseMiB) << 20
			}
		},
	}
	if c.memtableMiB > 0 {
		cfg.MemTableSize = uint64(c.memtableMiB) << 20
	}
	b, err := state.Open(context.Background(), cfg)
	if err != nil {
		return nil, err
	}
	kv, err := state.NewValueState(b, "kv", state.BytesCodec{})
	if err != nil {
		return nil, err
	}
	return &bench{c: c, store: store, cfg: cfg, b: b, kv: kv, rng: rand.New(rand.NewPCG(1, uint64(len(name)))), val: make([]byte, c.valueSize), nextID: 1}, nil
}

func (x *bench) setKey(i int) {
	x.key = fmt.Appendf(x.key[:0], "user-%012d", i)
	x.b.SetCurrentKey(x.key)
}

func (x *bench) putRandom(i int) error {
	x.setKey(i)
	for j := 0; j+8 <= len(x.val); j += 8 {
		v := x.rng.Uint64()
		x.val[j], x.val[j+1], x.val[j+2], x.val[j+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		x.val[j+4], x.val[j+5], x.val[j+6], x.val[j+7] = byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
	}
	return x.kv.Put(x.val)
}

// load writes keys until the state holds about size bytes.
func (x *bench) load(size int64) error {
	n := int(size / int64(x.c.valueSize+24))
	start := time.Now()
	for i := x.keys; i < n; i++ {
		if err := x.putRandom(i); err != nil {
			return err
		}
	}
	x.keys = max(x.keys, n)
	if err := x.b.Flush(); err != nil { // the record cache, if on
		return err
	}
	if err := x.b.DB().Flush(); err != nil {
		return err
	}
	benchutil.Info("loaded %d keys (%s) in %v", n, sizeLabel(size), time.Since(start).Round(time.Millisecond))
	return nil
}

func (x *bench) updateRandom(n int) error {
	for range n {
		if err := x.putRandom(x.rng.IntN(x.keys)); err != nil {
			return err
		}
	}
	return nil
}

// checkpoint takes a snapshot, uploads it and confirms it.
func (x *bench) checkpoint() (*state.SnapshotResult, error) {
	s, err := x.b.Snapshot(x.nextID, []byte("offsets"))
	if err != nil {
		return nil, err
	}
	x.nextID++
	res, err := s.Run(context.Background())
	if err != nil {
		return nil, err
	}
	return res, x.b.NotifyComplete(context.Background(), res.Checkpoint)
}

func (x *bench) close() {
	_ = x.b.Close(context.Background())
	_ = x.store.Close()
}

func run(c config) error {
	cache := pebble.NewCache(256 << 20)
	defer cache.Unref()
	benchutil.Info("work directory %s; state %s, small %s, values %d bytes", c.dir, sizeLabel(c.size), sizeLabel(c.smallSize), c.valueSize)

	if c.only == "getput" {
		return getPut(c, cache)
	}
	if c.only == "rescale" {
		return rescale(c, cache)
	}
	// 1. Incremental checkpoint cost.
	big, err := newBench(c, cache, "big")
	if err != nil {
		return err
	}
	defer big.close()
	if err := big.load(c.size); err != nil {
		return err
	}
	first, err := big.checkpoint()
	if err != nil {
		return err
	}
	benchutil.Info("first (full) checkpoint: %d files, %d bytes, %v", len(first.Manifest.Files), first.StateBytes, first.AsyncDuration.Round(time.Millisecond))
	var ratios []float64
	var last *state.SnapshotResult
	for r := range c.rounds {
		if err := big.updateRandom(big.keys / 100); err != nil {
			return err
		}
		res, err := big.checkpoint()
		if err != nil {
			return err
		}
		ratio := float64(res.UploadedBytes) / float64(res.StateBytes)
		ratios = append(ratios, ratio)
		benchutil.Info("checkpoint %d: state %d bytes, uploaded %d bytes in %d files (ratio %.4f), reused %d files, sync %v, async %v",
			r+1, res.StateBytes, res.UploadedBytes, res.UploadedFiles, ratio, res.ReusedFiles, res.SyncDuration, res.AsyncDuration.Round(time.Millisecond))
		last = res
	}
	benchutil.Result("incremental_upload_ratio", "%.4g", mean(ratios), "ratio")
	benchutil.Result("incremental_upload_ratio_max", "%.4g", slices.Max(ratios), "ratio")
	sp, err := big.b.Savepoint(big.nextID, "full", nil)
	if err != nil {
		return err
	}
	big.nextID++
	spRes, err := sp.Run(context.Background())
	if err != nil {
		return err
	}
	_ = big.b.NotifyAborted(context.Background(), spRes.Checkpoint)
	benchutil.Result("full_upload_ratio", "%.4g", float64(spRes.UploadedBytes)/float64(spRes.StateBytes), "ratio")
	// A savepoint (processor savepoint) copies the whole state into its own
	// folder: its cost against the first, full checkpoint of the same run.
	spDur := spRes.SyncDuration + spRes.AsyncDuration
	benchutil.Result("savepoint_duration_"+sizeLabel(c.size), "%.4g", spDur.Seconds(), "s")
	benchutil.Result("savepoint_size_"+sizeLabel(c.size), "%.4g", float64(spRes.UploadedBytes)/(1<<20), "MiB")
	benchutil.Result("savepoint_vs_first_checkpoint_duration", "%.3g", spDur.Seconds()/(first.SyncDuration+first.AsyncDuration).Seconds(), "ratio")
	benchutil.Result("state_size", "%.4g", float64(last.StateBytes)/(1<<20), "MiB")
	// What the task's directory occupies on disk (the live database and
	// its local snapshot, each file once): before issue 32 a preallocated
	// WAL added 71 MB to it.
	onDisk, err := allocated(big.cfg.Dir)
	if err != nil {
		return err
	}
	benchutil.Result("state_dir_allocated", "%.4g", float64(onDisk)/(1<<20), "MiB")
	if c.only == "incremental" {
		return nil
	}

	// 2. Synchronous part at the large size (this backend) and the small one.
	if c.only == "sync" {
		d, err := syncPart(big)
		if err != nil {
			return err
		}
		benchutil.Result("sync_part_p50_"+sizeLabel(c.size), "%.4g", ms(percentile(d, 50)), "ms")
		benchutil.Result("sync_part_p99_"+sizeLabel(c.size), "%.4g", ms(percentile(d, 99)), "ms")
		return nil
	}
	large, err := syncPart(big)
	if err != nil {
		return err
	}
	small, err := newBench(c, cache, "small")
	if err != nil {
		return err
	}
	if err := small.load(c.smallSize); err != nil {
		small.close()
		return err
	}
	if _, err := small.checkpoint(); err != nil {
		small.close()
		return err
	}
	smallDur, err := syncPart(small)
	small.close()
	if err != nil {
		return err
	}
	for _, m := range []struct {
		size int64
		d    []time.Duration
	}{{c.smallSize, smallDur}, {c.size, large}} {
		benchutil.Result("sync_part_p50_"+sizeLabel(m.size), "%.4g", ms(percentile(m.d, 50)), "ms")
		benchutil.Result("sync_part_p99_"+sizeLabel(m.size), "%.4g", ms(percentile(m.d, 99)), "ms")
	}

	// 3. Restore: download from file://, then local recovery.
	final, err := big.checkpoint()
	if err != nil {
		return err
	}
	big.b.Close(context.Background())
	dl := big.cfg
	dl.Dir = filepath.Join(c.dir, "restored")
	dl.DisableLocalRecovery = true
	r, err := state.Restore(context.Background(), dl, final.Handle)
	if err != nil {
		return err
	}
	ri := r.RestoreInfo()
	_ = r.Close(context.Background())
	if ri.Local {
		return errors.New("download restore used the local copy")
	}
	benchutil.Result("restore_download_throughput", "%.4g", float64(ri.DownloadedBytes)/1e6/ri.Duration.Seconds(), "MB/s")
	// The compatibility check a replica runs before any restore (package
	// compat): its cost does not grow with the state, only with the
	// job's operators and tasks.
	check, err := compatCheck(big.store, final.Checkpoint+1_000_000)
	if err != nil {
		return err
	}
	benchutil.Result("compat_check_duration", "%.4g", ms(check), "ms")
	benchutil.Result("compat_check_share_of_restore_"+sizeLabel(c.size), "%.4g", 100*check.Seconds()/ri.Duration.Seconds(), "%")
	_ = os.RemoveAll(dl.Dir)
	r, err = state.Restore(context.Background(), big.cfg, final.Handle)
	if err != nil {
		return err
	}
	ri = r.RestoreInfo()
	big.b = r
	if !ri.Local {
		return errors.New("local recovery did not happen")
	}
	benchutil.Result("restore_local_duration", "%.4g", ri.Duration.Seconds(), "s")
	big.close()
	_ = os.RemoveAll(filepath.Join(c.dir, "big"))

	// 4. Keyed get/put through the state API versus raw Pebble.
	if err := getPut(c, cache); err != nil {
		return err
	}
	// 5. Restore with rescaling against restore without.
	return rescale(c, cache)
}

// syncPart measures the synchronous part of snapshots taken after a fixed
// number of updates, whatever the state size.
func syncPart(x *bench) ([]time.Duration, error) {
	var out []time.Duration
	for range x.c.syncRounds {
		if err := x.updateRandom(x.c.syncUpdates); err != nil {
			return nil, err
		}
		if os.Getenv("WEIR_BENCH_PRESYNC") != "" {
			_ = x.b.DB().LogData(nil, pebble.Sync)
		}
		start := time.Now()
		s, err := x.b.Snapshot(x.nextID, []byte("offsets"))
		d := time.Since(start)
		if d > 10*time.Millisecond {
			benchutil.Info("slow synchronous part: %v", d)
		}
		if err != nil {
			return nil, err
		}
		x.nextID++
		out = append(out, d)
		res, err := s.Run(context.Background())
		if err != nil {
			return nil, err
		}
		if err := x.b.NotifyComplete(context.Background(), res.Checkpoint); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// getPut compares keyed get/put through the state API with raw Pebble
// get/set of the very same encoded keys in the same database, so that the
// ratio measures the API's own cost (key encoding, codec, TTL check) and
// nothing else.
func getPut(c config, cache *pebble.Cache) error {
	x, err := newBench(c, cache, "getput")
	if err != nil {
		return err
	}
	defer x.close()
	wo := pebble.NoSync
	db := x.b.DB()
	val := make([]byte, c.valueSize)
	for i := range val {
		val[i] = byte(i * 7)
	}
	// The layout of docs/state.md: 0x01 | uvarint(len(state)) | state |
	// uvarint(len(user key)) | user key.
	var raw []byte
	rawKey := func(i int) []byte {
		raw = append(raw[:0], 0x01, byte(len("kv")))
		raw = append(raw, "kv"...)
		raw = append(raw, byte(len("user-000000000000")))
		raw = fmt.Appendf(raw, "user-%012d", i)
		return raw
	}
	for i := range c.opsKeys {
		x.setKey(i)
		if err := x.kv.Put(val); err != nil {
			return err
		}
	}
	_ = db.Flush()
	// Check that the raw keys are the API's keys.
	if v, closer, err := db.Get(rawKey(0)); err != nil {
		return fmt.Errorf("raw key layout does not match the state API: %w", err)
	} else if len(v) != len(val) {
		closer.Close()
		return errors.New("raw key layout does not match the state API")
	} else {
		closer.Close()
	}
	rng := rand.New(rand.NewPCG(9, 9))
	order := make([]int, c.ops)
	for i := range order {
		order[i] = rng.IntN(c.opsKeys)
	}
	apiPut := func() error {
		for _, i := range order {
			x.setKey(i)
			if err := x.kv.Put(val); err != nil {
				return err
			}
		}
		return nil
	}
	rawPut := func() error {
		for _, i := range order {
			if err := db.Set(rawKey(i), val, wo); err != nil {
				return err
			}
		}
		return nil
	}
	var sink int
	apiGet := func() error {
		for _, i := range order {
			x.setKey(i)
			v, ok, err := x.kv.Get()
			if err != nil || !ok {
				return fmt.Errorf("get %d: ok=%v err=%v", i, ok, err)
			}
			sink += len(v)
		}
		return nil
	}
	rawGet := func() error {
		for _, i := range order {
			v, closer, err := db.Get(rawKey(i))
			if err != nil {
				return fmt.Errorf("raw get %d: %w", i, err)
			}
			sink += len(append([]byte(nil), v...)) // the API hands out a copy too
			_ = closer.Close()
		}
		return nil
	}
	// Alternate the two, three times each, and keep the best of each: the
	// machine's noise (compactions, page cache) hits both alike.
	measure := func(f func() error) (float64, error) {
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		return float64(len(order)) / time.Since(start).Seconds(), nil
	}
	best := func(a, b func() error) (float64, float64, error) {
		var ba, bb float64
		for r := range 6 {
			first, second := a, b
			if r%2 == 1 {
				first, second = b, a
			}
			x, err := measure(first)
			if err != nil {
				return 0, 0, err
			}
			y, err := measure(second)
			if err != nil {
				return 0, 0, err
			}
			if r%2 == 1 {
				x, y = y, x
			}
			ba, bb = max(ba, x), max(bb, y)
		}
		return ba, bb, nil
	}
	ap, rp, err := best(apiPut, rawPut)
	if err != nil {
		return err
	}
	ag, rg, err := best(apiGet, rawGet)
	if err != nil {
		return err
	}
	_ = sink
	benchutil.Result("keyed_put_ops", "%.4g", ap, "ops/s")
	benchutil.Result("raw_put_ops", "%.4g", rp, "ops/s")
	benchutil.Result("keyed_put_ratio", "%.4g", ap/rp, "ratio")
	benchutil.Result("keyed_get_ops", "%.4g", ag, "ops/s")
	benchutil.Result("raw_get_ops", "%.4g", rg, "ops/s")
	benchutil.Result("keyed_get_ratio", "%.4g", ag/rg, "ratio")
	return nil
}

// allocated returns the disk blocks the files under dir occupy, each inode
// once (a local snapshot hard-links the database's files).
func allocated(dir string) (int64, error) {
	seen := map[uint64]bool{}
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed by a compaction meanwhile
		}
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && !seen[st.Ino] {
			seen[st.Ino] = true
			total += st.Blocks * 512
		}
		return nil
	})
	return total, err
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func percentile(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Shape of the job whose compatibility check compatCheck measures: larger
// than the jobs of examples/ and Nexmark's.
const (
	compatOperators = 20  // stateful operators
	compatFields    = 8   // named aggregates of each
	compatTasks     = 512 // tasks of the checkpoint (its _metadata lists each)
)

// compatCheck writes the _metadata of checkpoint id of a job of the shape
// above, then measures what a replica does before it restores: read and
// decode it, and compare its schema with the job's (one aggregate added
// to each operator, so that every operator's fields are walked). It
// returns the median of 21 rounds.
func compatCheck(store *objstore.Store, id ckpt.ID) (time.Duration, error) {
	old := compat.Schema{Fingerprint: "a", MaxParallelism: 128,
		Stages:  []compat.Stage{{Name: "main", Parallelism: compatTasks / 2}, {Name: "agg", Parallelism: compatTasks / 2}},
		Sources: []compat.Source{{Topics: []string{"in"}, Partitions: compatTasks / 2}},
		Sinks:   []compat.Sink{{ID: "out", Topic: "out", Stage: "agg", Delivery: "exactly-once", TransactionalIDPrefix: "_weir.bench.agg@out"}}}
	for i := range compatOperators {
		op := compat.Operator{ID: fmt.Sprintf("aggregate-%d", i+1), Kind: "aggregate", Stage: "agg", Key: "key_by field user", Encoding: "aggregate"}
		for f := range compatFields {
			op.Fields = append(op.Fields, compat.Field{Name: fmt.Sprintf("f%d", f), Type: "sum"})
		}
		old.Operators = append(old.Operators, op)
	}
	old.Normalize()
	cur := old
	cur.Fingerprint = "b"
	cur.Operators = nil
	for _, op := range old.Operators {
		op.Fields = append(slices.Clone(op.Fields), compat.Field{Name: "new", Type: "max"})
		cur.Operators = append(cur.Operators, op)
	}
	md := control.Metadata{ID: id, Gen: 1, Kind: ckpt.KindCheckpoint, TS: 1, Schema: &old}
	for i := range compatTasks {
		st := "main"
		if i >= compatTasks/2 {
			st = "agg"
		}
		task := control.TaskID{Stage: st, Index: i % (compatTasks / 2)}
		md.Tasks = append(md.Tasks, control.TaskState{Task: task, Handle: fmt.Sprintf("chk-%d/%s-%d.manifest", id, st, task.Index)})
	}
	slices.SortFunc(md.Tasks, func(a, b control.TaskState) int { return a.Task.Compare(b.Task) })
	if _, err := checkpoint.WriteMetadata(context.Background(), store, md); err != nil {
		return 0, err
	}
	var ds []time.Duration
	for range 21 {
		start := time.Now()
		got, err := checkpoint.ReadID(context.Background(), store, id)
		if err != nil {
			return 0, err
		}
		res := compat.Compare(got.ID, got.Schema, &cur)
		if !res.Allowed(false) || len(res.Differences) != compatOperators {
			return 0, fmt.Errorf("compat check: unexpected verdict:\n%s", res.Report())
		}
		ds = append(ds, time.Since(start))
	}
	return percentile(ds, 50), nil
}
