package state

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gocloud.dev/blob"

	"github.com/weir-stream/weir/state/objstore"
)

// slowBucket throttles uploads so that a process can be killed in the middle
// of one, and reports on stdout when the first upload of checkpoint 2's
// files begins.
type slowBucket struct {
	objstore.Bucket
	armed     atomic.Bool
	announced atomic.Bool
}

type slowReader struct{ r io.Reader }

func (s slowReader) Read(p []byte) (int, error) {
	time.Sleep(5 * time.Millisecond)
	return s.r.Read(p[:min(len(p), 1024)])
}

func (s *slowBucket) Upload(ctx context.Context, key string, r io.Reader, opts *blob.WriterOptions) error {
	if s.armed.Load() {
		if !s.announced.Swap(true) {
			os.Stdout.WriteString("UPLOADING\n")
		}
		r = slowReader{r}
	}
	return s.Bucket.Upload(ctx, key, r, opts)
}

const killHelperEnv = "WEIR_STATE_KILL_HELPER_ROOT"

// killHelper runs in the child process: checkpoint 1 completes, then the
// upload of checkpoint 2 is slow until the parent kills the process.
func killHelper(root string) error {
	ctx := context.Background()
	b0, err := blob.OpenBucket(ctx, "file://"+filepath.ToSlash(filepath.Join(root, "bucket"))+"?no_tmp_dir=true")
	if err != nil {
		return err
	}
	sb := &slowBucket{Bucket: objstore.FromBlob("file://", b0)}
	store, err := objstore.New(sb, testJob, objstore.Options{})
	if err != nil {
		return err
	}
	b, err := Open(ctx, Config{Dir: filepath.Join(root, "state"), Task: "t0", Store: store, MemTableSize: 1 << 20})
	if err != nil {
		return err
	}
	kv, err := NewValueState(b, "kv", StringCodec{})
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(41, 42))
	want := model{}
	mutate(&testing.T{}, rng, kv, want, 3000)
	_ = flushDB(b)
	s1, err := b.Snapshot(1, []byte("one"))
	if err != nil {
		return err
	}
	r1, err := s1.Run(ctx)
	if err != nil {
		return err
	}
	if err := b.NotifyComplete(ctx, 1); err != nil {
		return err
	}
	data, _ := json.Marshal(want)
	if err := os.WriteFile(filepath.Join(root, "want1.json"), data, 0o644); err != nil {
		return err
	}
	os.Stdout.WriteString("CHK1 " + r1.Handle + "\n")
	mutate(&testing.T{}, rng, kv, want, 20000)
	_ = flushDB(b)
	s2, err := b.Snapshot(2, []byte("two"))
	if err != nil {
		return err
	}
	sb.armed.Store(true)
	_, err = s2.Run(ctx)
	os.Stdout.WriteString("DONE (not killed)\n")
	return err
}

// A replica killed with SIGKILL in the middle of an upload leaves the last
// completed checkpoint intact, restorable locally and remotely; the
// interrupted checkpoint has no manifest, and garbage collection removes its
// leftovers and nothing else.
func TestKillDuringUpload(t *testing.T) {
	if root := os.Getenv(killHelperEnv); root != "" {
		if err := killHelper(root); err != nil {
			os.Stdout.WriteString("ERROR " + err.Error() + "\n")
			os.Exit(2)
		}
		os.Exit(0)
	}
	if testing.Short() {
		t.Skip("spawns a process")
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bucket"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillDuringUpload$")
	cmd.Env = append(os.Environ(), killHelperEnv+"="+root)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var handle1 string
	sc := bufio.NewScanner(out)
	uploading := false
	for sc.Scan() {
		line := sc.Text()
		if h, ok := strings.CutPrefix(line, "CHK1 "); ok {
			handle1 = h
		}
		if line == "UPLOADING" {
			uploading = true
			break
		}
		if strings.HasPrefix(line, "ERROR") || strings.HasPrefix(line, "DONE") {
			break
		}
	}
	if !uploading {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("helper never started uploading checkpoint 2 (handle1=%q)", handle1)
	}
	time.Sleep(150 * time.Millisecond) // well into the (slow) uploads
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper did not die by SIGKILL: %v", err)
	}

	var want1 model
	data, err := os.ReadFile(filepath.Join(root, "want1.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &want1); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	store, err := objstore.Open(ctx, "file://"+filepath.ToSlash(filepath.Join(root, "bucket")), testJob, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := store.Stat(ctx, objstore.TaskManifestKey(2, "t0")); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("interrupted checkpoint has a manifest: %v", err)
	}
	leftovers := listKeys(t, store, "")
	// Local recovery in the killed process's directory.
	cfg := Config{Dir: filepath.Join(root, "state"), Task: "t0", Store: store}
	r := restoreTest(t, cfg, handle1)
	if !r.RestoreInfo().Local || !maps.Equal(dump(t, r), want1) || string(r.Restored().OperatorState) != "one" {
		t.Fatalf("local restore after kill: local=%v", r.RestoreInfo().Local)
	}
	_ = r.Close(ctx)
	// Garbage collection removes the interrupted upload's objects only.
	reg := NewRegistry(store, nil)
	if err := reg.Register(ctx, 1, []string{handle1}); err != nil {
		t.Fatal(err)
	}
	del, err := reg.CollectGarbage(ctx, time.Now().Add(time.Hour), 0)
	deleted := del.Keys
	if err != nil {
		t.Fatal(err)
	}
	m1, _ := ReadManifest(ctx, store, handle1)
	keep := map[string]bool{handle1: true}
	for _, k := range objectsOf(&SnapshotResult{Manifest: m1, Handle: handle1}) {
		keep[k] = true
	}
	t.Logf("collected after the kill: %q", deleted)
	if len(deleted) == 0 {
		t.Fatalf("nothing to collect after the kill; objects: %q", leftovers)
	}
	for _, k := range deleted {
		if keep[k] {
			t.Fatalf("collected %s, which checkpoint 1 needs", k)
		}
	}
	for _, k := range listKeys(t, store, "") {
		if !keep[k] {
			t.Errorf("leftover %s survived collection", k)
		}
	}
	// Remote restore into a fresh directory.
	r = restoreTest(t, Config{Dir: t.TempDir(), Task: "t0", Store: store}, handle1)
	if r.RestoreInfo().Local || !maps.Equal(dump(t, r), want1) {
		t.Fatal("remote restore after kill wrong")
	}
}
