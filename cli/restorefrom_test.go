package cli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/internal/kafkatest"
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
