package checkpoint

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/state/objstore"
)

// This file is the restore point that `processor run --restore-from`
// names: a savepoint or a retained checkpoint, of this job or of another
// one, in any object store, read through a read-only store that the job
// never writes nor collects.

// Source is a --restore-from value, parsed.
type Source struct {
	// Request is the value as given. A generation that restores it
	// records it (control.Generation.RestoreRequest), so that it is
	// honoured once: a fragment (#2) makes the same location a new
	// request.
	Request string
	// Location is the URL of the restore point's folder: the value
	// without its fragment and without a trailing /_metadata, a local
	// path made a file:// URL. It is what every replica opens
	// (control.Generation.RestoreLocation).
	Location string
}

// ParseSource parses a --restore-from value: the URL `processor
// savepoint` prints (<storage>/<job>/savepoints/<name>), a checkpoint's
// folder (<storage>/<job>/chk-<n>), or a savepoint's folder copied
// anywhere; each may end in /_metadata, and a local path stands for a
// file:// URL. It does no I/O: OpenSource reads what is there.
func ParseSource(value string) (Source, error) {
	bad := func(why string) (Source, error) {
		return Source{}, fmt.Errorf("--restore-from %q: %s; want the URL of a savepoint's folder (as processor savepoint prints it) or of a checkpoint's (<storage>/<job>/chk-<n>)", value, why)
	}
	raw, _, _ := strings.Cut(value, "#")
	if strings.TrimSpace(raw) == "" {
		return bad("empty")
	}
	if !strings.Contains(raw, "://") {
		abs, err := filepath.Abs(raw)
		if err != nil {
			return bad(err.Error())
		}
		raw = (&neturl.URL{Scheme: "file", Path: filepath.ToSlash(abs)}).String()
	}
	u, err := neturl.Parse(raw)
	if err != nil {
		return bad(err.Error())
	}
	u.Fragment, u.RawFragment = "", ""
	p := strings.TrimSuffix(strings.TrimRight(u.Path, "/"), "/_metadata")
	p = strings.TrimRight(p, "/")
	if dir, last := path.Split(p); last == "" || (u.Scheme == "file" && dir == "") {
		return bad("the URL names no folder")
	}
	u.Path, u.RawPath = p, ""
	return Source{Request: value, Location: u.String()}, nil
}

// Point is a restore point opened for reading.
type Point struct {
	// Store reads it: read-only, rooted so that Key and the handles of
	// Metadata are its keys. The caller closes it.
	Store *objstore.Store
	// Key is the key of its _metadata object in Store.
	Key      string
	Metadata control.Metadata
	// Location is the Source's Location it was opened from.
	Location string
	// folder is the point's folder relative to the job root of the
	// store it lies in when that is a job's (chk-<n>, savepoints/<name>),
	// and root and job that store; see InStorage.
	root, job, folder string
}

// ErrNotRestorePoint reports a --restore-from location that holds no
// savepoint or checkpoint.
var ErrNotRestorePoint = errors.New("checkpoint: not a savepoint's or checkpoint's folder")

// OpenSource opens the restore point at location (Source.Location) and
// reads its _metadata. A checkpoint's folder (…/<job>/chk-<n>) is read in
// its job's store, where its shared files are; any other folder must be
// a savepoint's, which is self-contained: it is read where it is, its
// keys (savepoints/<target>/…) mapped onto the folder, so that a
// savepoint copied to another bucket or path, under any folder name,
// restores. An error names the location and wraps ErrNotRestorePoint
// when no _metadata is there.
func OpenSource(ctx context.Context, location string, opts objstore.Options) (*Point, error) {
	u, err := neturl.Parse(location)
	if err != nil {
		return nil, fmt.Errorf("--restore-from %s: %w", location, err)
	}
	dir, last := path.Split(strings.TrimRight(u.Path, "/"))
	dir = strings.TrimRight(dir, "/")
	at := func(p string) string {
		c := *u
		c.Path = p
		return c.String()
	}
	if id, ok := parseCheckpointFolder(last); ok {
		root, job := path.Split(dir)
		if job == "" {
			return nil, fmt.Errorf("--restore-from %s: a checkpoint's folder must be <storage>/<job>/chk-<n>: %w", location, ErrNotRestorePoint)
		}
		store, err := objstore.OpenReadOnly(ctx, at(strings.TrimRight(root, "/")), job, opts)
		if err != nil {
			return nil, notThere(location, err)
		}
		md, err := ReadID(ctx, store, id)
		if err != nil {
			store.Close()
			return nil, notThere(location, err)
		}
		return &Point{Store: store, Key: objstore.MetadataKey(id), Metadata: md, Location: location,
			root: at(strings.TrimRight(root, "/")), job: job, folder: last}, nil
	}
	store, err := objstore.OpenReadOnly(ctx, at(dir), last, opts)
	if err != nil {
		return nil, notThere(location, err)
	}
	md, err := ReadMetadata(ctx, store, "_metadata")
	if err != nil {
		store.Close()
		return nil, notThere(location, err)
	}
	if !md.Kind.IsSavepoint() || md.Target == "" {
		store.Close()
		return nil, fmt.Errorf("--restore-from %s: its _metadata is checkpoint %d's, whose files are under its job's shared/: give it as <storage>/<job>/chk-%d: %w",
			location, md.ID, md.ID, ErrNotRestorePoint)
	}
	p := &Point{Store: store.Relocated(objstore.SavepointPrefix(md.Target)), Key: objstore.SavepointMetadataKey(md.Target),
		Metadata: md, Location: location}
	if parent, kind := path.Split(dir); kind == "savepoints" {
		root, job := path.Split(strings.TrimRight(parent, "/"))
		if job != "" {
			p.root, p.job, p.folder = at(strings.TrimRight(root, "/")), job, "savepoints/"+last
		}
	}
	return p, nil
}

// notThere says that location holds no restore point, or passes on
// another error (the store unreachable).
func notThere(location string, err error) error {
	if errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("--restore-from %s: no _metadata there (%w): %w", location, err, ErrNotRestorePoint)
	}
	return fmt.Errorf("--restore-from %s: %w", location, err)
}

// parseCheckpointFolder parses chk-<n>.
func parseCheckpointFolder(name string) (ckpt.ID, bool) {
	num, ok := strings.CutPrefix(name, "chk-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != num {
		return 0, false
	}
	return ckpt.ID(n), true
}

// InStorage reports whether the point lies in the checkpoint storage of
// job (checkpoint.storage, job.name): a checkpoint or savepoint of the
// job itself, restored to roll back. Its sinks' recorded transactions are
// then the job's own, and recovered as after any restore.
func (p *Point) InStorage(storage, job string) bool {
	if p.job != job || p.folder == "" {
		return false
	}
	return sameURL(objstore.URL(storage, job, p.folder), objstore.URL(p.root, p.job, p.folder))
}

// sameURL compares two object-store URLs: scheme, host, cleaned path and
// query parameters (fileblob's defaults, which Open adds, ignored).
func sameURL(a, b string) bool {
	ua, err1 := neturl.Parse(a)
	ub, err2 := neturl.Parse(b)
	if err1 != nil || err2 != nil {
		return a == b
	}
	query := func(u *neturl.URL) string {
		q := u.Query()
		if u.Scheme == "file" {
			q.Del("no_tmp_dir")
			q.Del("metadata")
		}
		keys := make([]string, 0, len(q))
		for k := range q {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var sb strings.Builder
		for _, k := range keys {
			sb.WriteString(k + "=" + strings.Join(q[k], ",") + "&")
		}
		return sb.String()
	}
	return ua.Scheme == ub.Scheme && ua.Host == ub.Host && path.Clean("/"+ua.Path) == path.Clean("/"+ub.Path) && query(ua) == query(ub)
}

// OwnKey returns the key of the _metadata of the restore point at
// location (Source.Location) in the checkpoint storage of job, when the
// location is a checkpoint's or savepoint's folder of job itself
// (<storage>/<job>/chk-<n>, <storage>/<job>/savepoints/<name>): a
// rollback, whose point the job's own tools must treat as its restore
// point. It does no I/O.
func OwnKey(location, storage, job string) (string, bool) {
	u, err := neturl.Parse(location)
	if err != nil {
		return "", false
	}
	dir, last := path.Split(strings.TrimRight(u.Path, "/"))
	dir = strings.TrimRight(dir, "/")
	folder, key := "", ""
	if id, ok := parseCheckpointFolder(last); ok {
		folder, key = last, objstore.MetadataKey(id)
	} else if parent, kind := path.Split(dir); kind == "savepoints" && objstore.ValidName("savepoint", last) == nil {
		dir, folder, key = strings.TrimRight(parent, "/"), "savepoints/"+last, objstore.SavepointMetadataKey(last)
	} else {
		return "", false
	}
	root, locJob := path.Split(dir)
	if locJob != job {
		return "", false
	}
	c := *u
	c.Path = strings.TrimRight(root, "/")
	if !sameURL(objstore.URL(storage, job, folder), objstore.URL(c.String(), job, folder)) {
		return "", false
	}
	return key, true
}
