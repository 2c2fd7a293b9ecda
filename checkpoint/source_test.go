package checkpoint_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/state/objstore"
)

// TestParseSource: the forms of --restore-from, and the values refused
// before anything is read.
func TestParseSource(t *testing.T) {
	for _, tc := range []struct{ in, location, err string }{
		{in: "s3://b/job/savepoints/sp?region=r", location: "s3://b/job/savepoints/sp?region=r"},
		{in: "s3://b/job/savepoints/sp/_metadata?region=r", location: "s3://b/job/savepoints/sp?region=r"},
		{in: "s3://b/job/savepoints/sp/?region=r#again", location: "s3://b/job/savepoints/sp?region=r"},
		{in: "file:///data/ck/job/chk-12", location: "file:///data/ck/job/chk-12"},
		{in: "/data/ck/job/chk-12/_metadata", location: "file:///data/ck/job/chk-12"},
		{in: "", err: "empty"},
		{in: "#2", err: "empty"},
		{in: "s3://b", err: "names no folder"},
		{in: "file:///", err: "names no folder"},
		{in: "s3://b/%zz", err: "invalid URL escape"},
	} {
		s, err := checkpoint.ParseSource(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "--restore-from") {
				t.Errorf("ParseSource(%q): %v, want an error saying %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || s.Location != tc.location || s.Request != tc.in {
			t.Errorf("ParseSource(%q) = %+v, %v; want location %q", tc.in, s, err, tc.location)
		}
	}
}

// TestOpenSource: a savepoint restores from where it was taken and from a
// copy of its folder anywhere (another root, another folder name); a
// checkpoint from its job's folder; a folder without _metadata, a
// checkpoint given as a bare folder and a missing folder are clear errors
// naming the location; the store is read-only.
func TestOpenSource(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	storage := "file://" + filepath.ToSlash(root) + "/ck"
	store, err := objstore.Open(ctx, storage, "old-job", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	sp := metadata(7)
	sp.Kind, sp.Target = ckpt.KindSavepoint, "before-v2"
	sp.Tasks[0].Handle = objstore.SavepointManifestKey("before-v2", "main-0")
	if _, err := checkpoint.WriteMetadata(ctx, store, sp); err != nil {
		t.Fatal(err)
	}
	if err := store.Put(ctx, objstore.SavepointManifestKey("before-v2", "main-0"), []byte("manifest")); err != nil {
		t.Fatal(err)
	}
	if _, err := checkpoint.WriteMetadata(ctx, store, metadata(9)); err != nil {
		t.Fatal(err)
	}
	// The savepoint's folder copied elsewhere, under another name.
	from := filepath.Join(root, "ck", "old-job", "savepoints", "before-v2")
	moved := filepath.Join(root, "elsewhere", "kept", "sp-copy")
	copyDir(t, from, moved)

	for _, tc := range []struct {
		name, value string
		id          ckpt.ID
		own         bool
	}{
		{"savepoint in place", objstore.URL(storage, "old-job", "savepoints/before-v2"), 7, true},
		{"savepoint copied", "file://" + filepath.ToSlash(moved) + "/_metadata", 7, false},
		{"savepoint copied, a path", moved, 7, false},
		{"checkpoint", objstore.URL(storage, "old-job", "chk-9"), 9, true},
	} {
		src, err := checkpoint.ParseSource(tc.value)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		p, err := checkpoint.OpenSource(ctx, src.Location, objstore.Options{})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if p.Metadata.ID != tc.id {
			t.Errorf("%s: checkpoint %d, want %d", tc.name, p.Metadata.ID, tc.id)
		}
		if md, err := checkpoint.ReadMetadata(ctx, p.Store, p.Key); err != nil || md.ID != tc.id {
			t.Errorf("%s: read %s again: %v", tc.name, p.Key, err)
		}
		if tc.id == 7 {
			if b, err := p.Store.Get(ctx, p.Metadata.Tasks[0].Handle); err != nil || string(b) != "manifest" {
				t.Errorf("%s: the manifest at the handle: %q %v", tc.name, b, err)
			}
		}
		if got := p.InStorage(storage, "old-job"); got != tc.own {
			t.Errorf("%s: InStorage(own storage, old-job) = %v, want %v", tc.name, got, tc.own)
		}
		if p.InStorage(storage, "new-job") {
			t.Errorf("%s: in the storage of new-job", tc.name)
		}
		if err := p.Store.Put(ctx, "x", nil); !errors.Is(err, objstore.ErrReadOnly) {
			t.Errorf("%s: a put went through: %v", tc.name, err)
		}
		if err := p.Store.Delete(ctx, p.Key); !errors.Is(err, objstore.ErrReadOnly) {
			t.Errorf("%s: a delete went through: %v", tc.name, err)
		}
		p.Store.Close()
	}

	for _, tc := range []struct{ name, value, want string }{
		{"the job's folder", objstore.URL(storage, "old-job", ""), "no _metadata there"},
		{"a checkpoint not there", objstore.URL(storage, "old-job", "chk-10"), "no _metadata there"},
		{"a missing folder", "file://" + filepath.ToSlash(root) + "/nothing/here", "no _metadata there"},
	} {
		src, err := checkpoint.ParseSource(tc.value)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		_, err = checkpoint.OpenSource(ctx, src.Location, objstore.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), src.Location) {
			t.Errorf("%s: %v, want an error naming %s and saying %q", tc.name, err, src.Location, tc.want)
		}
		if tc.want == "no _metadata there" && !errors.Is(err, checkpoint.ErrNotRestorePoint) {
			t.Errorf("%s: %v is no ErrNotRestorePoint", tc.name, err)
		}
	}
	// A checkpoint's _metadata in a folder of its own: its files are
	// under its job's shared/, so it must be given as <job>/chk-<n>.
	copyDir(t, filepath.Join(root, "ck", "old-job", "chk-9"), filepath.Join(root, "ck", "old-job", "chk-9-copy"))
	_, err = checkpoint.OpenSource(ctx, "file://"+filepath.ToSlash(root)+"/ck/old-job/chk-9-copy", objstore.Options{})
	if err == nil || !strings.Contains(err.Error(), "give it as <storage>/<job>/chk-9") {
		t.Errorf("a checkpoint's folder copied: %v", err)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.Walk(from, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOwnKey: a restore location in the job's own storage names the key
// of its _metadata there; anything else is not the job's.
func TestOwnKey(t *testing.T) {
	storage := "s3://b?prefix=p%2F&region=r"
	for _, tc := range []struct {
		location, job, key string
	}{
		{objstore.URL(storage, "orders", "savepoints/before-v2"), "orders", "savepoints/before-v2/_metadata"},
		{objstore.URL(storage, "orders", "chk-12"), "orders", "chk-12/_metadata"},
		{objstore.URL(storage, "orders", "savepoints/before-v2"), "other", ""},
		{objstore.URL("s3://c?prefix=p%2F&region=r", "orders", "chk-12"), "orders", ""},
		{"s3://b/moved/sp?prefix=p%2F&region=r", "orders", ""},
		{objstore.URL("file:///data/ck", "orders", "chk-3"), "orders", ""},
	} {
		key, ok := checkpoint.OwnKey(tc.location, storage, tc.job)
		if key != tc.key || ok != (tc.key != "") {
			t.Errorf("OwnKey(%s, %s) = %q %v, want %q", tc.location, tc.job, key, ok, tc.key)
		}
	}
	if key, ok := checkpoint.OwnKey(objstore.URL("file:///data/ck", "orders", "chk-3"), "file:///data/ck", "orders"); !ok || key != "chk-3/_metadata" {
		t.Errorf("file storage: %q %v", key, ok)
	}
}
