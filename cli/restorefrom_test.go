package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
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
