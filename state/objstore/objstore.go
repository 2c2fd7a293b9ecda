// Package objstore owns Weir's access to object storage for one job: opening
// a gocloud.dev/blob bucket from a URL, the key layout of DESIGN.md section 7,
// retries with backoff for transient errors, and conditional puts.
//
// It knows nothing about Pebble or about what a checkpoint contains; package
// state decides what to write and in which order. Keys handed to a Store are
// relative to the job's root (<root>/<job>/); the layout helpers (SharedKey,
// TaskManifestKey, MetadataKey, …) build them.
//
// A Store is safe for concurrent use.
package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/azureblob" // azblob:// URLs (Azure Blob Storage, Azurite)
	_ "gocloud.dev/blob/fileblob"  // file:// URLs, the default checkpoint.storage
	_ "gocloud.dev/blob/gcsblob"   // gs:// URLs (Google Cloud Storage)
	_ "gocloud.dev/blob/memblob"   // mem:// URLs, for tests
	_ "gocloud.dev/blob/s3blob"    // s3:// URLs (AWS S3 and S3-compatible servers)
	"gocloud.dev/gcerrors"
	"golang.org/x/sync/errgroup"

	"github.com/weir-stream/weir/internal/retry"
)

// Sentinel errors, for errors.Is.
var (
	// ErrNotFound reports that an object does not exist.
	ErrNotFound = errors.New("state/objstore: object not found")
	// ErrExists reports that a conditional put found the object already there.
	ErrExists = errors.New("state/objstore: object already exists")
	// ErrReadOnly reports a write or delete through a read-only Store
	// (OpenReadOnly): another job's restore point, which this job never
	// changes.
	ErrReadOnly = errors.New("state/objstore: read-only store")
	// ErrPermanent is matched by a *StorageError: the object store refuses
	// the job's requests in a way no retry can fix (the bucket does not
	// exist, access denied, invalid parameters). The job must stop and say
	// so rather than retry.
	ErrPermanent = errors.New("state/objstore: permanent error")
)

// StorageError is an error of the object store that no retry fixes, with
// what an operator should check. It matches ErrPermanent.
type StorageError struct {
	// Op is the operation, for example "put chk-3/main-0.manifest".
	Op string
	// Problem says what is wrong, for people: "the bucket does not exist".
	Problem string
	Err     error
}

func (e *StorageError) Error() string {
	return fmt.Sprintf("state/objstore: %s: %s (fix checkpoint.storage or the store's permissions; retrying cannot help): %v", e.Op, e.Problem, e.Err)
}

// Unwrap returns the driver's error.
func (e *StorageError) Unwrap() error { return e.Err }

// Is matches ErrPermanent.
func (e *StorageError) Is(target error) bool { return target == ErrPermanent }

// permanentProblem classifies a driver error of op: a *StorageError for
// the errors no retry can fix, nil otherwise. bucketOp says that op names
// no single object (a put or a list), so that "not found" can only mean
// the bucket (S3's NoSuchBucket, a missing directory).
func permanentProblem(op string, err error, bucketOp bool) *StorageError {
	var se *StorageError
	if errors.As(err, &se) {
		return se
	}
	var problem string
	switch gcerrors.Code(err) {
	case gcerrors.PermissionDenied:
		problem = "access denied"
	case gcerrors.InvalidArgument:
		problem = "the store rejects the request's parameters"
	case gcerrors.Unimplemented:
		problem = "the store does not support the request"
	case gcerrors.NotFound:
		if !bucketOp {
			return nil
		}
		problem = "the bucket does not exist"
	default:
		return nil
	}
	return &StorageError{Op: op, Problem: problem, Err: err}
}

// Object describes one stored object.
type Object struct {
	Key     string // relative to the job root
	Size    int64
	ModTime time.Time
}

// Bucket is the part of an object store that a Store uses. *blob.Bucket is
// adapted by FromBlob; tests wrap a Bucket to inject failures. Every method
// must be safe for concurrent use. Upload must be atomic: after an error no
// object (or the previous one) is visible under key.
type Bucket interface {
	Upload(ctx context.Context, key string, r io.Reader, opts *blob.WriterOptions) error
	NewReader(ctx context.Context, key string) (io.ReadCloser, error)
	Attributes(ctx context.Context, key string) (Object, error)
	Delete(ctx context.Context, key string) error
	// List returns every object whose key starts with prefix.
	List(ctx context.Context, prefix string) ([]Object, error)
	Close() error
}

// FromBlob adapts a gocloud.dev bucket opened from url. Closing the Bucket
// closes b.
func FromBlob(url string, b *blob.Bucket) Bucket {
	u, err := neturl.Parse(url)
	return blobBucket{b: b, smallCopy: err == nil && (u.Scheme == "file" || u.Scheme == "mem"),
		file: err == nil && u.Scheme == "file"}
}

type blobBucket struct {
	b *blob.Bucket
	// smallCopy uploads through a 64 KiB buffer: for drivers without an
	// uploader of their own (file://, mem://), blob.Bucket.Upload copies
	// through a fresh 1 MiB buffer per object. The cloud drivers stream
	// through their own uploaders, which blob.Bucket.Upload uses.
	smallCopy bool
	// file: fileblob reads a directory, then stats each entry, so a file
	// deleted in between fails the listing with NotFound: List starts over.
	file bool
}

func (b blobBucket) Upload(ctx context.Context, key string, r io.Reader, opts *blob.WriterOptions) error {
	o := blob.WriterOptions{}
	if opts != nil {
		o = *opts
	}
	if o.ContentType == "" {
		// blob.Bucket.Upload requires a content type; state objects are
		// opaque bytes.
		o.ContentType = "application/octet-stream"
	}
	if !b.smallCopy {
		// A reader error must abort the upload: blob.Bucket.Upload closes
		// the writer even then, which for drivers without an uploader of
		// their own (gcsblob) commits what was written so far. Cancelling
		// the writer's context first makes Close abort instead.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		return b.b.Upload(ctx, key, &cancelOnError{r: r, cancel: cancel}, &o)
	}
	// blob.Bucket.Upload would copy through a fresh 1 MiB buffer per
	// object, which for the many small files of every checkpoint was most
	// of the garbage a replica made outside its records.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := b.b.NewWriter(ctx, key, &o)
	if err != nil {
		return err
	}
	// The wrappers hide ReadFrom and WriteTo, which would bring the 1 MiB
	// buffer back.
	if _, err := io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{r}, make([]byte, uploadBufferSize)); err != nil {
		cancel() // aborts the write: nothing is stored
		_ = w.Close()
		return err
	}
	return w.Close()
}

// cancelOnError cancels an upload's context when its reader fails.
type cancelOnError struct {
	r      io.Reader
	cancel context.CancelFunc
}

func (c *cancelOnError) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		c.cancel()
	}
	return n, err
}

// uploadBufferSize is the copy buffer of one upload.
const uploadBufferSize = 64 << 10

func (b blobBucket) NewReader(ctx context.Context, key string) (io.ReadCloser, error) {
	return b.b.NewReader(ctx, key, nil)
}

func (b blobBucket) Attributes(ctx context.Context, key string) (Object, error) {
	a, err := b.b.Attributes(ctx, key)
	if err != nil {
		return Object{}, err
	}
	return Object{Key: key, Size: a.Size, ModTime: a.ModTime}, nil
}

func (b blobBucket) Delete(ctx context.Context, key string) error { return b.b.Delete(ctx, key) }

// fileListAttempts bounds how often List starts over at once on file://
// when a file vanished during the listing.
const fileListAttempts = 3

func (b blobBucket) List(ctx context.Context, prefix string) ([]Object, error) {
	for attempt := 1; ; attempt++ {
		out, err := b.list(ctx, prefix)
		if err == nil || !b.file || gcerrors.Code(err) != gcerrors.NotFound {
			return out, err
		}
		if attempt == fileListAttempts {
			// Deletes go on under the prefix: a transient error (not
			// NotFound, which would say the bucket is missing), which
			// Store.List retries with backoff.
			return nil, fmt.Errorf("files vanished during the listing: %v", err)
		}
	}
}

func (b blobBucket) list(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	it := b.b.List(&blob.ListOptions{Prefix: prefix})
	for {
		o, err := it.Next(ctx)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if o.IsDir {
			continue
		}
		out = append(out, Object{Key: o.Key, Size: o.Size, ModTime: o.ModTime})
	}
}

func (b blobBucket) Close() error { return b.b.Close() }

// RetryPolicy says how often and how patiently a Store retries an operation
// that failed with a transient error (see IsTransient).
type RetryPolicy struct {
	// MaxAttempts is the number of tries including the first; 1 disables
	// retries. Default 5.
	MaxAttempts int
	// InitialBackoff is the wait before the second try; it doubles per try,
	// up to MaxBackoff, with ±50 % jitter. Defaults 100ms and 5s.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

func (p *RetryPolicy) ensureDefaults() {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 5
	}
	if p.InitialBackoff <= 0 {
		p.InitialBackoff = 100 * time.Millisecond
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 5 * time.Second
	}
}

// Options configure a Store. The zero value is usable.
type Options struct {
	Retry  RetryPolicy
	Logger *slog.Logger // nil: discard
}

// Store is one job's view of the object store: every key is relative to
// <root>/<job>/.
type Store struct {
	b      Bucket
	job    string
	prefix string
	retry  RetryPolicy
	log    *slog.Logger
	// dir is the job's directory of a file:// store (Open), "" for other
	// stores: fileblob deletes files but not the directories they leave
	// empty, which Delete removes for checkpoints.
	dir string
	// readOnly refuses every write and delete (OpenReadOnly).
	readOnly bool
	// as, if set, is a key prefix read at the job root itself (Relocated).
	as string
}

// path is the bucket key of key.
func (s *Store) path(key string) string {
	if s.as != "" {
		key = strings.TrimPrefix(key, s.as)
	}
	return s.prefix + key
}

// writable fails with ErrReadOnly for a read-only Store.
func (s *Store) writable(op string) error {
	if s.readOnly {
		return fmt.Errorf("%w: %s (of job %s)", ErrReadOnly, op, s.job)
	}
	return nil
}

// Open opens the bucket named by url (file:///dir, mem://, s3://bucket?…,
// any scheme registered with gocloud.dev/blob) and returns the Store of job.
// The Store owns the bucket: Close closes it. For s3:// the AWS SDK logs
// through opts.Logger, and a credential chain that finds no credentials is a
// permanent error (a *StorageError), as is a bucket that does not exist or
// refuses access.
func Open(ctx context.Context, url, job string, opts Options) (*Store, error) {
	shown := url
	url = fileURLDefaults(url)
	if err := makeFileRoot(url); err != nil {
		// Retried: a volume not mounted yet, or a storage outage as the
		// replica tests model it (the root replaced by a regular file).
		return nil, fmt.Errorf("state/objstore: open %s: %w", shown, err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	b, err := openBucket(ctx, url, opts.Logger)
	var se *StorageError
	switch {
	case errors.As(err, &se):
		// No credentials (s3Opener).
		return nil, fmt.Errorf("checkpoint.storage %s: %w", shown, se)
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("state/objstore: open %s: %w", shown, err)
	case err != nil:
		// An unknown scheme or parameter: the URL is wrong.
		return nil, &StorageError{Op: "open " + shown, Problem: "the URL cannot be opened", Err: err}
	}
	s, err := New(FromBlob(url, b), job, opts)
	if err != nil {
		_ = b.Close()
		return nil, err
	}
	if u, err := neturl.Parse(url); err == nil && u.Scheme == "file" && u.Path != "" {
		s.dir = filepath.Join(filepath.FromSlash(u.Path), job)
	}
	// Opening a bucket sends no request: ask once, so that a bucket that
	// does not exist, or refuses this job, is an error at start, not a
	// checkpoint failing forever.
	if err := s.probe(ctx); err != nil {
		_ = b.Close()
		if errors.Is(err, ErrPermanent) {
			return nil, fmt.Errorf("checkpoint.storage %s: %w", shown, err)
		}
		return nil, fmt.Errorf("state/objstore: open %s: %w", shown, err)
	}
	return s, nil
}

// OpenReadOnly opens the Store of job at url as Open does, for reading
// only: every write and delete fails with ErrReadOnly. It is how a job
// reads a restore point it does not own (`processor run --restore-from`):
// another job's, or a savepoint copied elsewhere. Unlike Open, it takes
// the path of a URL of another scheme than file:// as part of the key
// prefix (gocloud's drivers ignore it), so that the URL of a folder in a
// bucket, as objstore.URL prints it or as a person copied one, opens that
// folder: s3://bucket/moved?region=r opens the keys under moved/ (after
// the URL's own prefix parameter, if any).
func OpenReadOnly(ctx context.Context, url, job string, opts Options) (*Store, error) {
	if u, err := neturl.Parse(url); err == nil && u.Scheme != "" && u.Scheme != "file" {
		if p := strings.Trim(u.Path, "/"); p != "" {
			q := u.Query()
			q.Set("prefix", q.Get("prefix")+p+"/")
			u.Path, u.RawPath, u.RawQuery = "", "", q.Encode()
			url = u.String()
		}
	}
	if u, err := neturl.Parse(url); err == nil && u.Scheme == "file" {
		// Open would create the directory; a folder that is not there is
		// a wrong path.
		dir := filepath.Join(filepath.FromSlash(u.Path), job)
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("state/objstore: open %s: %w: %v", dir, ErrNotFound, err)
		}
	}
	s, err := Open(ctx, url, job, opts)
	if err != nil {
		return nil, err
	}
	s.readOnly, s.dir = true, ""
	return s, nil
}

// Relocated returns a view of s (sharing its bucket: close only one) in
// which the keys under as are read at the job root itself: the objects
// of a savepoint, keyed savepoints/<name>/… by its _metadata and
// manifests, read from the folder it was copied to, opened as the job
// root. Keys outside as are read at the job root unchanged.
func (s *Store) Relocated(as string) *Store {
	v := *s
	v.as = as
	return &v
}

// ReadOnly reports whether s refuses writes (OpenReadOnly).
func (s *Store) ReadOnly() bool { return s.readOnly }

// probe lists a prefix that holds no object (checkpoint IDs start at 1):
// one cheap request that fails if the bucket is missing or refuses access.
func (s *Store) probe(ctx context.Context) error {
	_, err := s.List(ctx, CheckpointPrefix(0))
	return err
}

// fileURLDefaults sets two fileblob options unless the URL sets them:
// no_tmp_dir, so that fileblob writes its temporary files next to their
// final names (by default it writes them to os.TempDir, from which the final
// rename fails when the bucket directory is on another filesystem, a mounted
// volume); and metadata=skip, so that it writes no ".attrs" sidecar per
// object. Weir reads only an object's size and modification time, which
// fileblob takes from the file itself; a sidecar was one more file created
// per upload, and creating files was a tenth of a replica's CPU with a
// checkpoint a second (profiled on the -two-stage benchmark). Objects
// written with sidecars read and delete as before.
func fileURLDefaults(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil || u.Scheme != "file" {
		return raw
	}
	q := u.Query()
	changed := false
	for k, v := range map[string]string{"no_tmp_dir": "true", "metadata": "skip"} {
		if !q.Has(k) {
			q.Set(k, v)
			changed = true
		}
	}
	if !changed {
		return raw
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// makeFileRoot creates the directory of a file:// URL: fileblob needs it to
// exist, and a fresh replica's default storage (under state.dir) does not.
func makeFileRoot(raw string) error {
	u, err := neturl.Parse(raw)
	if err != nil || u.Scheme != "file" || u.Path == "" {
		return nil
	}
	return os.MkdirAll(filepath.FromSlash(u.Path), 0o755)
}

// New returns the Store of job on b. The Store owns b: Close closes it.
func New(b Bucket, job string, opts Options) (*Store, error) {
	if err := ValidName("job", job); err != nil {
		return nil, err
	}
	opts.Retry.ensureDefaults()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Store{b: b, job: job, prefix: job + "/", retry: opts.Retry, log: opts.Logger}, nil
}

// ValidName checks that a job, task or savepoint name can be one path
// segment of an object key.
func ValidName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("state/objstore: empty %s name", what)
	case name == "." || name == "..":
		return fmt.Errorf("state/objstore: %s name %q is not allowed", what, name)
	case strings.ContainsAny(name, "/\\\x00"):
		return fmt.Errorf("state/objstore: %s name %q contains a path separator or NUL", what, name)
	}
	return nil
}

// Job returns the job name.
func (s *Store) Job() string { return s.job }

// Close closes the bucket.
func (s *Store) Close() error { return s.b.Close() }

// Put writes data under key, retrying transient errors.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	return s.PutFrom(ctx, key, func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
}

// PutFrom writes the bytes that open returns under key. open is called once
// per try, so a retry sends the whole object again.
func (s *Store) PutFrom(ctx context.Context, key string, open func() (io.ReadCloser, error)) error {
	if err := s.writable("put " + key); err != nil {
		return err
	}
	return s.Do(ctx, "put "+key, func(ctx context.Context) error {
		r, err := open()
		if err != nil {
			return Permanent(err)
		}
		defer r.Close()
		return bucketErr("put "+key, s.b.Upload(ctx, s.path(key), r, nil))
	})
}

// bucketErr marks the errors of an operation on no single object (a put,
// a list) that no retry can fix.
func bucketErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if se := permanentProblem(op, err, true); se != nil {
		return se
	}
	return err
}

// PutIfAbsent writes data under key only if nothing is there yet, and returns
// ErrExists otherwise. A try whose response was lost may have written the
// object: when a retry then finds it, PutIfAbsent reads it back and succeeds
// if it holds exactly data.
func (s *Store) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	if err := s.writable("conditional put " + key); err != nil {
		return err
	}
	tries := 0
	err := s.Do(ctx, "conditional put "+key, func(ctx context.Context) error {
		tries++
		err := s.b.Upload(ctx, s.path(key), bytes.NewReader(data), &blob.WriterOptions{IfNotExist: true})
		if err != nil && gcerrors.Code(err) == gcerrors.FailedPrecondition {
			return Permanent(ErrExists)
		}
		return bucketErr("conditional put "+key, err)
	})
	if errors.Is(err, ErrExists) && tries > 1 {
		got, gerr := s.Get(ctx, key)
		if gerr == nil && bytes.Equal(got, data) {
			return nil
		}
	}
	return err
}

// Get reads the whole object under key.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	var out []byte
	err := s.Do(ctx, "get "+key, func(ctx context.Context) error {
		r, err := s.b.NewReader(ctx, s.path(key))
		if err != nil {
			return err
		}
		defer r.Close()
		out, err = io.ReadAll(r)
		return err
	})
	return out, err
}

// Download streams the object under key into the writer that begin returns.
// begin is called once per try and must discard what an earlier try wrote.
func (s *Store) Download(ctx context.Context, key string, begin func() (io.Writer, error)) error {
	return s.Do(ctx, "get "+key, func(ctx context.Context) error {
		w, err := begin()
		if err != nil {
			return Permanent(err)
		}
		r, err := s.b.NewReader(ctx, s.path(key))
		if err != nil {
			return err
		}
		defer r.Close()
		_, err = io.Copy(w, r)
		return err
	})
}

// Stat returns the size and modification time of the object under key.
func (s *Store) Stat(ctx context.Context, key string) (Object, error) {
	var o Object
	err := s.Do(ctx, "stat "+key, func(ctx context.Context) error {
		var err error
		o, err = s.b.Attributes(ctx, s.path(key))
		return err
	})
	o.Key = key
	return o, err
}

// Delete removes the object under key. A missing object is not an error.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.writable("delete " + key); err != nil {
		return err
	}
	err := s.Do(ctx, "delete "+key, func(ctx context.Context) error {
		return s.b.Delete(ctx, s.path(key))
	})
	if errors.Is(err, ErrNotFound) {
		err = nil
	}
	if err == nil {
		s.removeEmptyCheckpointDir(key)
	}
	return err
}

// removeEmptyCheckpointDir removes, in a file:// store, the directory
// chk-<n>/ of key if deleting key left it empty, so that garbage
// collection leaves no empty chk-<n>/ behind. Objects of a checkpoint are
// deleted only once it is released or dead, when nothing writes to its
// directory any more. Other directories (shared/<task>/, which the next
// snapshot may write to at once) are kept. A directory that is not empty,
// or already gone, is left as it is.
func (s *Store) removeEmptyCheckpointDir(key string) {
	if _, ok := ParseCheckpointKey(key); !ok || s.dir == "" {
		return
	}
	dir, _, _ := strings.Cut(key, "/")
	_ = os.Remove(filepath.Join(s.dir, dir)) // fails unless empty
}

// List returns every object whose key (relative to the job root) starts
// with prefix.
func (s *Store) List(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	err := s.Do(ctx, "list "+prefix, func(ctx context.Context) error {
		objs, err := s.b.List(ctx, s.path(prefix))
		if err != nil {
			return bucketErr("list "+prefix, err)
		}
		out = out[:0]
		for _, o := range objs {
			o.Key = strings.TrimPrefix(o.Key, s.prefix)
			if s.as != "" {
				o.Key = s.as + o.Key
			}
			out = append(out, o)
		}
		return nil
	})
	return out, err
}

// DeleteConcurrency is how many deletes DeleteEach runs at once. Deleting
// is one request per object; one at a time, a store with tens of
// milliseconds per request falls behind a short checkpoint interval.
const DeleteConcurrency = 16

// DeleteEach deletes every key, DeleteConcurrency at a time, and returns
// each one's error (nil for a missing object), in the order of keys. A
// failure stops nothing.
func (s *Store) DeleteEach(ctx context.Context, keys []string) []error {
	errs := make([]error, len(keys))
	var g errgroup.Group
	g.SetLimit(DeleteConcurrency)
	for i, k := range keys {
		g.Go(func() error {
			errs[i] = s.Delete(ctx, k)
			return nil
		})
	}
	_ = g.Wait() // every error is in errs
	return errs
}

// DeletePrefix removes every object whose key starts with prefix, first
// those named first (for example a _metadata object that makes the rest a
// checkpoint), then the others. It stops at the first error.
func (s *Store) DeletePrefix(ctx context.Context, prefix string, first ...string) error {
	objs, err := s.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, k := range first {
		for _, o := range objs {
			if o.Key == k {
				if err := s.Delete(ctx, k); err != nil {
					return err
				}
			}
		}
	}
	for _, o := range objs {
		if contains(first, o.Key) {
			continue
		}
		if err := s.Delete(ctx, o.Key); err != nil {
			return err
		}
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// Do runs op, retrying it with exponential backoff and jitter while it fails
// with a transient error, at most RetryPolicy.MaxAttempts times. A NotFound
// error is returned as ErrNotFound (wrapped). what names the operation in
// logs and errors.
func (s *Store) Do(ctx context.Context, what string, op func(ctx context.Context) error) error {
	policy := retry.Policy{Initial: s.retry.InitialBackoff, Max: s.retry.MaxBackoff, MaxAttempts: s.retry.MaxAttempts}
	attempts := 0
	var last, final error // final: the answer, when an attempt decides it
	err := policy.Do(ctx, func() error {
		attempts++
		last = op(ctx)
		var p permanent
		switch {
		case last == nil:
			return nil
		case permanentProblem(what, last, false) != nil:
			final = permanentProblem(what, last, false)
		case gcerrors.Code(last) == gcerrors.NotFound:
			final = fmt.Errorf("%s: %w (%v)", what, ErrNotFound, last)
		case ctx.Err() != nil:
			final = fmt.Errorf("%s: %w", what, errors.Join(ctx.Err(), last))
		case errors.As(last, &p):
			final = fmt.Errorf("%s (attempt %d): %w", what, attempts, p.err)
		case !IsTransient(last):
			final = fmt.Errorf("%s (attempt %d): %w", what, attempts, last)
		default:
			return last
		}
		return retry.Permanent(final)
	}, func(attempt int, err error, wait time.Duration) {
		s.log.Warn("object store operation failed, retrying", "op", what, "attempt", attempt, "backoff", wait, "err", err)
	})
	switch {
	case err == nil:
		return nil
	case final != nil:
		return final
	case ctx.Err() != nil: // ended during a wait
		return fmt.Errorf("%s: %w", what, errors.Join(ctx.Err(), last))
	}
	return fmt.Errorf("%s (attempt %d): %w", what, attempts, last) // MaxAttempts
}

type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent marks err as not worth retrying.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// IsTransient reports whether err is worth retrying: an error marked
// Permanent, a context error, and gocloud errors that say the request itself
// is wrong (not found, already exists, invalid argument, failed precondition,
// permission denied, unimplemented) are not; everything else — network
// errors, throttling, internal server errors — is.
func IsTransient(err error) bool {
	var p permanent
	if errors.As(err, &p) || errors.Is(err, ErrPermanent) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	switch gcerrors.Code(err) {
	case gcerrors.NotFound, gcerrors.AlreadyExists, gcerrors.InvalidArgument,
		gcerrors.FailedPrecondition, gcerrors.PermissionDenied, gcerrors.Unimplemented,
		gcerrors.Canceled:
		return false
	}
	return true
}
