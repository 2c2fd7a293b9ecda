package replica_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/internal/s3test"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
)

// TestRetentionKeepsStorageBounded runs the count job on two replicas for a
// few hundred checkpoints (checkpoint.interval 20ms, retained 3), stops the
// replica that holds the coordinator role halfway (the other takes over and
// rebuilds the shared-file registry from the commit topic), and then checks
// the object store. All along, the checkpoints with objects under chk-*/
// stay bounded (sampled every 200ms): an object store that deletes slower
// than checkpoints complete holds periodic checkpoints back, rather than
// fall behind. At the end, only the retained checkpoints (plus what
// in-flight ones may leave) have objects under chk-*/, the object count
// stays under a bound derived from retained × tasks × files per task
// snapshot, every object every retained manifest refers to exists, and the
// leftovers of a killed task planted before the failover were collected
// after the new generation.
// On file:// with kfake, and on the real S3 server with the real broker.
func TestRetentionKeepsStorageBounded(t *testing.T) {
	run := func(storage string) func(t *testing.T, c *kafkatest.Cluster) {
		return func(t *testing.T, c *kafkatest.Cluster) {
			url := ""
			if storage == "s3" {
				_, url = s3test.Bucket(t)
			} else {
				url = "file://" + t.TempDir() + "/checkpoints"
			}
			testRetention(t, c, url)
		}
	}
	// Deleting behind does not depend on the broker, nor the failover on
	// the store: the file store runs on kfake, S3 (where deletes are
	// slowest) on the real broker, the production pairing. (S3 ran on
	// kfake too, until CI's time budget needed its 50 seconds.)
	t.Run("file", func(t *testing.T) {
		t.Run(string(kafkatest.Kfake), func(t *testing.T) { run("file")(t, kafkatest.NewKfake(t)) })
	})
	t.Run("s3", func(t *testing.T) {
		t.Run(string(kafkatest.Real), func(t *testing.T) { run("s3")(t, kafkatest.NewReal(t)) })
	})
}

const (
	gcPartitions    = 4 // tasks
	gcRetained      = 3
	gcMaxConcurrent = 1
	// gcCheckpoints is how many checkpoints each half of the run completes:
	// many times gcRetained, so that storage unbounded by retention or
	// deletes falling behind shows: 8 times. (It was 100, then 40: the test
	// took 342s, then 200s of CI's 30 minutes, with the other packages'
	// tests on the same cores.)
	gcCheckpoints = 25
	// gcBacklogBound bounds weir_checkpoint_gc_backlog, the discards
	// queued or running: the coordinator triggers no periodic checkpoint
	// while more than max_concurrent are, and each checkpoint in flight at
	// a trigger adds at most one when it completes.
	gcBacklogBound = 2 * gcMaxConcurrent
	// gcSampledBound bounds the checkpoints with objects under chk-*/ at
	// any time of the run: the retained ones; those in flight and those
	// released whose deletion has not finished (together at most
	// gcBacklogBound, as above); around the failover, the old generation's
	// in-flight ones, which the collection after the new generation
	// deletes; and one for the listing, which is no snapshot (a checkpoint
	// deleted early in it and one created late in it both show).
	// gcPlantedID is the checkpoint of the planted leftover.
	gcPlantedID    = 1 << 40
	gcSampledBound = gcRetained + gcBacklogBound + gcMaxConcurrent + 1
)

func testRetention(t *testing.T, c *kafkatest.Cluster, storageURL string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	job := kafkatest.Name(t, "gc")
	in, out := job+"-in", job+"-out"
	c.CreateTopic(t, in, gcPartitions, nil)
	c.CreateTopic(t, out, gcPartitions, nil)
	dir := t.TempDir()
	store, err := objstore.Open(ctx, storageURL, job, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	// Input flows all the time, so that every checkpoint has new state.
	prodCtx, stopProducing := context.WithCancel(ctx)
	var produced sync.WaitGroup
	cl := c.Client(t, kgo.DefaultProduceTopic(in))
	produced.Go(func() {
		for i := 0; prodCtx.Err() == nil; i++ {
			cl.Produce(prodCtx, &kgo.Record{Key: fmt.Appendf(nil, "k%03d", i%50), Value: fmt.Appendf(nil, `{"i":%d}`, i)}, nil)
			if i%20 == 19 {
				time.Sleep(10 * time.Millisecond)
			}
		}
	})
	defer func() { stopProducing(); produced.Wait() }()

	yaml := func(id string) string {
		return fmt.Sprintf(`
job:
  name: %s
  pipeline:
    - source: {topics: [%s], format: json}
    - aggregate: {op: count}
    - sink: {topic: %s}
kafka: {brokers: [%s], session_timeout: 6s}
checkpoint: {interval: 20ms, timeout: 10s, retained: %d, max_concurrent: %d, storage: "%s"}
state: {dir: "%s/state-%s"}
http: {address: ""}
process: {replica_id: %s, grace_period: 10s}
`, job, in, out, c.Brokers[0], gcRetained, gcMaxConcurrent, storageURL, dir, id, id)
	}
	a := startReplica(ctx, t, "a", yaml("a"))
	b := startReplica(ctx, t, "b", yaml("b"))
	replicas := []*testReplica{a, b}
	waitReady(t, a.Replica, b.Replica)
	sampleCtx, stopSampling := context.WithCancel(ctx)
	samples := make(chan chkSamples, 1)
	go func() { samples <- sampleChkDirs(sampleCtx, store, replicas) }()
	defer stopSampling()
	waitCompleted(ctx, t, gcCheckpoints, a, b)

	// What a task killed mid-upload leaves: a shared file and a manifest of
	// a checkpoint that never completes. No retained checkpoint refers to
	// them, so the collection after the next generation must delete them.
	planted := []string{objstore.SharedKey("main-0", "999999.sst"), objstore.TaskManifestKey(gcPlantedID, "main-0")}
	for _, k := range planted {
		if err := store.Put(ctx, k, []byte("left behind by a killed task")); err != nil {
			t.Fatal(err)
		}
	}

	// Object stores may keep modification times in whole seconds: the
	// leftovers must be older than the failover's generation in them too,
	// so the store's clock (state.StoreTime, what the collection compares
	// with) must have moved past the newest of them.
	var plantedAt time.Time
	for _, k := range planted {
		o, err := store.Stat(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if o.ModTime.After(plantedAt) {
			plantedAt = o.ModTime
		}
	}
	for {
		now, err := state.StoreTime(ctx, store)
		if err != nil {
			t.Fatal(err)
		}
		if now.After(plantedAt) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the object store's clock stayed at %v, the leftovers' time", now)
		case <-time.After(50 * time.Millisecond):
		}
	}

	coord, survivor := a, b
	if isCoordinator(t, b) {
		coord, survivor = b, a
	}
	if !isCoordinator(t, coord) {
		t.Fatal("neither replica holds the coordinator role")
	}
	before := lastCompleted(t, survivor)
	t.Logf("stopping the coordinator's replica after checkpoint %.0f", before)
	coord.stop()
	waitCompleted(ctx, t, before+gcCheckpoints, survivor)
	if !isCoordinator(t, survivor) {
		t.Fatal("the surviving replica did not take the coordinator role")
	}
	stopProducing()
	stopSampling()
	sampled := <-samples
	t.Logf("sampled %d times while the job ran (%d listings failed, last: %v): at most %d checkpoints with objects under chk-*/ (bound %d), gc backlog at most %.0f (bound %d); %s",
		sampled.n, sampled.listErrs, sampled.lastListErr, sampled.maxDirs, gcSampledBound, sampled.maxBacklog, gcBacklogBound, sampled.histogram())
	if sampled.err != nil {
		t.Fatal(sampled.err)
	}
	if sampled.maxBacklog > gcBacklogBound {
		t.Errorf("deletion fell behind: weir_checkpoint_gc_backlog reached %.0f, want at most %d (2 × max_concurrent)",
			sampled.maxBacklog, gcBacklogBound)
	}
	if sampled.maxDirs > gcSampledBound {
		t.Errorf("deletion fell behind: %d checkpoints had objects under chk-*/ at once (%v), want at most %d (retained %d + in flight or being deleted %d + the old generation's %d + 1 for the listing)",
			sampled.maxDirs, sampled.maxAt, gcSampledBound, gcRetained, gcBacklogBound, gcMaxConcurrent)
	}
	if sampled.n < 20 || sampled.n < 3*sampled.listErrs {
		t.Errorf("only %d samples of chk-*/; %d listings failed", sampled.n, sampled.listErrs)
	}
	survivor.stop()

	checkStorage(ctx, t, c, store, job, planted)
	var released float64
	for _, r := range replicas {
		released += counterValue(t, r.reg, "weir_checkpoint_gc_deleted_objects_total", "released")
	}
	if released == 0 {
		t.Error("weir_checkpoint_gc_deleted_objects_total{what=released} is 0")
	}
	t.Logf("objects deleted by releases: %.0f; collected after the failover: %.0f", released,
		counterValue(t, survivor.reg, "weir_checkpoint_gc_deleted_objects_total", "collected"))
}

// chkSamples is what sampleChkDirs saw.
type chkSamples struct {
	n, maxDirs int
	maxAt      []ckpt.ID // the checkpoints of the sample with maxDirs
	counts     map[int]int
	maxBacklog float64 // weir_checkpoint_gc_backlog, the highest of any replica
	err        error
	// listErrs counts listings that failed (and were skipped).
	listErrs    int
	lastListErr error
}

func (s chkSamples) histogram() string {
	var b strings.Builder
	b.WriteString("checkpoints with objects: samples")
	for d := 0; d <= s.maxDirs; d++ {
		if s.counts[d] > 0 {
			fmt.Fprintf(&b, " %d:%d", d, s.counts[d])
		}
	}
	return b.String()
}

// sampleChkDirs counts, every 50ms until ctx ends, the checkpoints with
// objects under chk-*/ (the planted leftover's aside) and reads the
// replicas' gc backlog gauges.
func sampleChkDirs(ctx context.Context, store *objstore.Store, rs []*testReplica) chkSamples {
	s := chkSamples{counts: map[int]int{}}
	tick := time.NewTicker(50 * time.Millisecond) // a fast run (kfake, a file store) lasts a few seconds
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return s
		case <-tick.C:
		}
		objs, err := store.List(ctx, "chk-")
		if ctx.Err() != nil {
			return s
		}
		if err != nil {
			// Store.List retries what a listing beside deletes meets
			// (objstore's file:// listing); should one fail after all,
			// skip the sample (counted, and the count is bounded).
			s.listErrs++
			s.lastListErr = err
			continue
		}
		dirs := map[ckpt.ID]bool{}
		for _, o := range objs {
			if id, ok := objstore.ParseCheckpointKey(o.Key); ok && id != gcPlantedID {
				dirs[id] = true
			}
		}
		s.n++
		s.counts[len(dirs)]++
		if len(dirs) > s.maxDirs {
			s.maxDirs, s.maxAt = len(dirs), slices.Sorted(maps.Keys(dirs))
		}
		for _, r := range rs {
			mfs, err := r.reg.Gather()
			if err != nil {
				s.err = err
				return s
			}
			for _, mf := range mfs {
				if mf.GetName() == "weir_checkpoint_gc_backlog" {
					for _, m := range mf.GetMetric() {
						s.maxBacklog = max(s.maxBacklog, m.GetGauge().GetValue())
					}
				}
			}
		}
	}
}

// checkStorage checks the job's objects against its commit history.
func checkStorage(ctx context.Context, t *testing.T, c *kafkatest.Cluster, store *objstore.Store, job string, planted []string) {
	t.Helper()
	hist, err := controltopic.ReadHistory(ctx, []kgo.Opt{kgo.SeedBrokers(c.Brokers...)},
		controltopic.NewTopics("_weir."+job+"."), control.TopicCommit)
	if err != nil {
		t.Fatal(err)
	}
	var completes []control.Complete
	for _, rec := range hist.Records {
		if cm, ok := rec.Msg.(control.Complete); ok {
			completes = append(completes, cm)
		}
	}
	if len(completes) < gcRetained || completes[len(completes)-1].ID < 2*gcCheckpoints {
		t.Fatalf("only %d checkpoints completed", len(completes))
	}
	retained := completes[len(completes)-gcRetained:]

	objs, err := store.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	exists := map[string]bool{}
	chkDirs := map[ckpt.ID]bool{}
	for _, o := range objs {
		exists[o.Key] = true
		if id, ok := objstore.ParseCheckpointKey(o.Key); ok {
			chkDirs[id] = true
		}
	}
	for _, k := range planted {
		if exists[k] {
			t.Errorf("leftover %s was not collected after the failover", k)
		}
	}

	// Every object every retained checkpoint refers to exists.
	referenced := map[string]bool{}
	maxPerTask := 0 // objects one task snapshot refers to: manifest and files
	for _, cm := range retained {
		if !exists[cm.Metadata] {
			t.Errorf("retained checkpoint %d: %s is gone", cm.ID, cm.Metadata)
			continue
		}
		referenced[cm.Metadata] = true
		b, err := store.Get(ctx, cm.Metadata)
		if err != nil {
			t.Fatal(err)
		}
		md, err := control.DecodeMetadata(b)
		if err != nil {
			t.Fatal(err)
		}
		if len(md.Tasks) != gcPartitions {
			t.Fatalf("checkpoint %d has %d tasks, want %d", cm.ID, len(md.Tasks), gcPartitions)
		}
		for _, ts := range md.Tasks {
			m, err := state.ReadManifest(ctx, store, ts.Handle)
			if err != nil {
				t.Errorf("retained checkpoint %d: %v", cm.ID, err)
				continue
			}
			keys := []string{ts.Handle}
			for _, f := range m.Files {
				if len(f.Parts) == 0 && !f.Inline { // inline: in the manifest
					keys = append(keys, m.ObjectKey(f))
				}
				for _, p := range f.Parts {
					keys = append(keys, p.Key)
				}
			}
			maxPerTask = max(maxPerTask, len(keys))
			for _, k := range keys {
				referenced[k] = true
				if !exists[k] {
					t.Errorf("retained checkpoint %d, task %s: object %s is gone", cm.ID, ts.Task, k)
				}
			}
		}
	}

	// Bounds. chk-*/ holds the retained checkpoints and at most the
	// in-flight ones; the whole store at most their objects, each task
	// snapshot no more than the largest retained one, plus one _metadata per
	// checkpoint and the collector's clock object.
	const kept = gcRetained + gcMaxConcurrent
	bound := kept*gcPartitions*maxPerTask + kept + 1
	t.Logf("%d checkpoints completed; %d objects (%d referenced by the %d retained), %d chk-* directories; bound %d = (%d retained + %d in flight) × %d tasks × %d objects per task snapshot + %d _metadata + 1",
		len(completes), len(objs), len(referenced), gcRetained, len(chkDirs), bound, gcRetained, gcMaxConcurrent, gcPartitions, maxPerTask, kept)
	if len(chkDirs) > kept {
		var extra []string
		for _, o := range objs {
			if id, ok := objstore.ParseCheckpointKey(o.Key); ok && id < retained[0].ID {
				extra = append(extra, o.Key)
			}
		}
		t.Errorf("%d checkpoints have objects under chk-*/, want at most %d (retained + max_concurrent); retained %d..%d; older: %q",
			len(chkDirs), kept, retained[0].ID, retained[len(retained)-1].ID, extra)
	}
	if len(objs) > bound {
		t.Errorf("%d objects in the store, want at most %d", len(objs), bound)
	}
	var unreferenced []string
	for _, o := range objs {
		if !referenced[o.Key] && !strings.HasPrefix(o.Key, "_") {
			unreferenced = append(unreferenced, o.Key)
		}
	}
	if slack := gcMaxConcurrent * gcPartitions * maxPerTask; len(unreferenced) > slack {
		t.Errorf("%d objects no retained checkpoint refers to, want at most %d (one in-flight checkpoint's): %q",
			len(unreferenced), slack, unreferenced[:min(len(unreferenced), 20)])
	}
}

// waitCompleted waits until a replica has seen checkpoint n complete.
func waitCompleted(ctx context.Context, t *testing.T, n float64, rs ...*testReplica) {
	t.Helper()
	for ctx.Err() == nil {
		for _, r := range rs {
			if lastCompleted(t, r) >= n {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("checkpoint %.0f never completed", n)
}

func lastCompleted(t *testing.T, r *testReplica) float64 {
	return gaugeValue(t, r.reg, "weir_replica_last_completed_checkpoint_id")
}

func isCoordinator(t *testing.T, r *testReplica) bool {
	return gaugeValue(t, r.reg, "weir_replica_is_coordinator") == 1
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	for _, m := range findMetric(t, reg, name) {
		return m.GetGauge().GetValue()
	}
	return 0
}

// counterValue returns the counter name{what=what}.
func counterValue(t *testing.T, reg *prometheus.Registry, name, what string) float64 {
	t.Helper()
	for _, m := range findMetric(t, reg, name) {
		for _, l := range m.GetLabel() {
			if l.GetName() == "what" && l.GetValue() == what {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func findMetric(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}
