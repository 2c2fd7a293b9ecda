package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/plan"
	"github.com/weir-stream/weir/state/objstore"
)

// TestRunRestoreFromNotARestorePoint: `run --restore-from` with a value
// that names no folder, a folder without _metadata (the job's root, not
// one of its savepoints), or one that does not exist, exits non-zero at
// once with one message naming the value, before the replica writes
// anything to the job's commit topic. On kfake, and on the real broker
// with WEIR_KAFKA_BROKERS.
func TestRunRestoreFromNotARestorePoint(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		clearConfigEnv(t)
		name := kafkatest.Name(t, "restorefrom")
		j := &failJob{t: t, c: c, name: name, in: name + "-in", out: name + "-out", dir: t.TempDir()}
		c.CreateTopic(t, j.in, 1, nil)
		c.CreateTopic(t, j.out, 1, nil)
		file := j.file("fail")
		other := filepath.Join(j.dir, "other-job")
		if err := os.MkdirAll(filepath.Join(other, "chk-3"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ value, want string }{
			{"s3://bucket-only", `--restore-from "s3://bucket-only": the URL names no folder`},
			{"file://" + filepath.ToSlash(other), "--restore-from file://" + filepath.ToSlash(other) + ": no _metadata there"},
			{filepath.Join(other, "chk-3"), "--restore-from file://" + filepath.ToSlash(other) + "/chk-3: no _metadata there"},
			{filepath.Join(j.dir, "nothing", "sp"), "--restore-from file://" + filepath.ToSlash(j.dir) + "/nothing/sp: no _metadata there"},
		} {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			start := time.Now()
			code, _, stderr := runCLI(ctx, nil, "run", "-c", file, "--state.dir="+filepath.Join(j.dir, "state"),
				"--http.address=", "--process.replica_id=r0", "--restore-from", tc.value)
			cancel()
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("run --restore-from %s: exit %d, stderr:\n%s\nwant it to say %q", tc.value, code, stderr, tc.want)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Errorf("run --restore-from %s: exited after %v, not at once", tc.value, d)
			}
		}
		// Nothing was written to the commit topic: no generation started.
		if recs := c.ReadCommitted(context.Background(), t, "_weir."+name+".commit"); len(recs) > 0 {
			t.Fatalf("the commit topic has %d records, the first %s", len(recs), recs[0].Value)
		}
	})
}

// TestValidateAgainstCopiedSavepoint: `validate --against` takes what
// `run --restore-from` takes, a savepoint's folder copied anywhere
// included, and says so when the URL holds no restore point.
func TestValidateAgainstCopiedSavepoint(t *testing.T) {
	clearConfigEnv(t)
	dir := t.TempDir()
	storage := "file://" + filepath.ToSlash(dir) + "/ck"
	store, err := objstore.Open(context.Background(), storage, "old-job", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	md := control.Metadata{ID: 5, Gen: 2, Kind: ckpt.KindSavepoint, Target: "before-v2", TS: 1,
		Tasks: []control.TaskState{{Task: control.TaskID{Stage: "main", Index: 0}, Handle: objstore.SavepointManifestKey("before-v2", "main-0")}}}
	if _, err := checkpoint.WriteMetadata(context.Background(), store, md); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "ck", "old-job", "savepoints", "before-v2", "_metadata"))
	if err != nil {
		t.Fatal(err)
	}
	copied := filepath.Join(dir, "kept", "copy")
	if err := os.MkdirAll(copied, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(copied, "_metadata"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "job.yaml")
	yaml := `job:
  name: new-job
  pipeline:
    - source: {topics: [in], format: json}
    - aggregate: {op: count}
    - sink: {topic: out}
kafka: {brokers: ["127.0.0.1:9"]}
checkpoint: {storage: "` + storage + `"}
`
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	code, out, stderr := runCLI(ctx, nil, "validate", "-c", file, "--against", "file://"+filepath.ToSlash(copied))
	if code != 0 || !strings.Contains(out, "checkpoint 5") || !strings.Contains(out, "verdict: unchecked") {
		t.Fatalf("validate --against the copy: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = runCLI(ctx, nil, "validate", "-c", file, "--against", "file://"+filepath.ToSlash(dir)+"/kept")
	if code == 0 || !strings.Contains(stderr, "no _metadata there") {
		t.Fatalf("validate --against a folder without _metadata: exit %d\n%s%s", code, out, stderr)
	}
}

// TestRunRestoreFromCheckedFirst: a job whose file cannot restore the
// --restore-from point (the point has an aggregate the job dropped) is
// refused before anything is written, as for a checkpoint: the replica
// stays up, not joined, and the commit topic stays empty. With
// --allow-non-restored-state the same start goes on, and the generation
// that honours the value is written. On kfake, and on the real broker
// with WEIR_KAFKA_BROKERS.
func TestRunRestoreFromCheckedFirst(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		clearConfigEnv(t)
		name := kafkatest.Name(t, "restorecheck")
		dir := t.TempDir()
		c.CreateTopic(t, name+"-in", 1, nil)
		c.CreateTopic(t, name+"-out", 1, nil)
		write := func(file, job, aggregate string) string {
			f := filepath.Join(dir, file)
			yaml := fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s-in], format: json}
    - aggregate: %s
    - sink: {topic: %s-out}
kafka: {brokers: [%s], session_timeout: 6s}
checkpoint: {interval: 300ms, storage: "file://%s/chk"}
state: {dir: "%s/state"}
http: {address: ""}
`, job, name, aggregate, name, c.Brokers[0], dir, dir)
			if err := os.WriteFile(f, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			return f
		}
		// The savepoint of another job with two aggregates, as its
		// _metadata records its schema.
		oldFile := write("old.yaml", name+"-old", "{x: {sum: value.x}, y: {sum: value.y}}")
		oldCfg, err := config.Load(config.Source{File: oldFile, NoEnv: true})
		if err != nil {
			t.Fatal(err)
		}
		oldJob, err := jobOf(oldCfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := plan.Build(oldJob, plan.Inputs{SourcePartitions: 1, MaxParallelism: oldCfg.Job.MaxParallelism, TopicPrefix: oldCfg.Kafka.TopicPrefix})
		if err != nil {
			t.Fatal(err)
		}
		fp, err := jobFingerprint(oldCfg, oldJob)
		if err != nil {
			t.Fatal(err)
		}
		sch := p.Schema(oldJob, fp, sink.TxnIDPrefix(oldCfg.Kafka.TopicPrefix))
		store, err := objstore.Open(context.Background(), "file://"+filepath.ToSlash(dir)+"/chk", name+"-old", objstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		md := control.Metadata{ID: 8, Gen: 3, Kind: ckpt.KindSavepoint, Target: "sp", TS: 1, Schema: &sch,
			Tasks: []control.TaskState{{Task: control.TaskID{Stage: "main", Index: 0}, Handle: objstore.SavepointManifestKey("sp", "main-0")}}}
		if _, err := checkpoint.WriteMetadata(context.Background(), store, md); err != nil {
			t.Fatal(err)
		}
		src, err := checkpoint.ParseSource(objstore.URL("file://"+filepath.ToSlash(dir)+"/chk", name+"-old", "savepoints/sp"))
		if err != nil {
			t.Fatal(err)
		}

		newFile := write("new.yaml", name, "{x: {sum: value.x}}")
		start := func(allow bool) (*syncBuffer, context.CancelFunc, chan error) {
			cfg, err := config.Load(config.Source{File: newFile, NoEnv: true})
			if err != nil {
				t.Fatal(err)
			}
			cfg.Process.AllowNonRestoredState = allow
			cfg.Process.ReplicaID = "r0"
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			logs := &syncBuffer{}
			done := make(chan error, 1)
			reg := prometheus.NewRegistry()
			go func() { done <- serveWith(ctx, cfg, nil, logs, nil, reg, reg, &src) }()
			return logs, cancel, done
		}
		waitLog := func(logs *syncBuffer, want string) {
			t.Helper()
			deadline := time.Now().Add(time.Minute)
			for !strings.Contains(logs.String(), want) {
				if time.Now().After(deadline) {
					t.Fatalf("no log line %q:\n%s", want, logs.String())
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		commit := "_weir." + name + ".commit"

		logs, cancel, done := start(false)
		waitLog(logs, "refusing to run this job file")
		if !strings.Contains(logs.String(), "--restore-from "+src.Request) || !strings.Contains(logs.String(), "allow-non-restored-state") {
			t.Errorf("the refusal does not name the restore point and the way out:\n%s", logs.String())
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("a refused replica exits with %v", err)
		}
		if recs := c.ReadCommitted(context.Background(), t, commit); len(recs) > 0 {
			t.Fatalf("a refused restore wrote %d records to the commit topic, the first %s", len(recs), recs[0].Value)
		}

		logs, cancel, done = start(true)
		defer func() { cancel(); <-done }()
		deadline := time.Now().Add(time.Minute)
		for {
			recs := c.ReadCommitted(context.Background(), t, commit)
			if len(recs) > 0 && strings.Contains(string(recs[len(recs)-1].Value), `"restore_request":"`+src.Request+`"`) {
				t.Logf("with --allow-non-restored-state: %s", recs[len(recs)-1].Value)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("with --allow-non-restored-state no generation honoured %s:\n%s", src.Request, logs.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
}

// TestRestorePointOfRollback: after a generation that restored one of the
// job's own savepoints with --restore-from (a rollback), that savepoint
// is the job's restore point (savepoints delete refuses it, savepoints
// list marks it) until a checkpoint completes; another job's point never
// is.
func TestRestorePointOfRollback(t *testing.T) {
	storage := "file:///data/ck"
	rec := func(m control.Message) controltopic.Record {
		return controltopic.Record{Topic: control.TopicCommit, Msg: m}
	}
	a := control.Assignment{"r0": {{Stage: "main", Index: 0}}}
	base := []controltopic.Record{
		rec(control.Generation{Gen: 1, Assignment: a}),
		rec(control.Complete{ID: 3, Gen: 1, Metadata: "savepoints/before-v2/_metadata"}),
		rec(control.Complete{ID: 9, Gen: 1, Metadata: "chk-9/_metadata"}),
	}
	rollback := rec(control.Generation{Gen: 2, Assignment: a, RestoreFrom: 3, RestoreMetadata: "savepoints/before-v2/_metadata",
		RestoreLocation: objstore.URL(storage, "orders", "savepoints/before-v2"), RestoreRequest: "x"})
	foreign := rec(control.Generation{Gen: 2, Assignment: a, RestoreFrom: 3, RestoreMetadata: "savepoints/before-v2/_metadata",
		RestoreLocation: objstore.URL(storage, "other", "savepoints/before-v2"), RestoreRequest: "y"})
	for _, tc := range []struct {
		name string
		recs []controltopic.Record
		id   ckpt.ID
		md   string
	}{
		{"newest checkpoint", base, 9, "chk-9/_metadata"},
		{"rollback", append(slices.Clone(base), rollback), 3, "savepoints/before-v2/_metadata"},
		{"rollback, then a checkpoint", append(slices.Clone(base), rollback, rec(control.Complete{ID: 10, Gen: 2, Metadata: "chk-10/_metadata"})), 10, "chk-10/_metadata"},
		{"another job's savepoint", append(slices.Clone(base), foreign), 9, "chk-9/_metadata"},
	} {
		id, md := restorePointOf(tc.recs, storage, "orders")
		if id != tc.id || md != tc.md {
			t.Errorf("%s: restore point %d %s, want %d %s", tc.name, id, md, tc.id, tc.md)
		}
	}
}
