package state

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"gocloud.dev/blob"
	"gocloud.dev/blob/memblob"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/keygroup"
	"github.com/weir-stream/weir/state/objstore"
)

// faultyBucket wraps a Bucket and fails chosen calls.
type faultyBucket struct {
	objstore.Bucket
	mu      sync.Mutex
	rules   []*fault
	uploads []string // keys of successful uploads, in order
	deletes []string
	onPut   func(key string) // called before each upload
	onRead  func(key string) // called before each read
}

type fault struct {
	op, substr string
	times      int // remaining failures; <0: forever
	err        error
}

var errInjected = errors.New("injected fault")

// fail makes the next times calls of op ("upload", "read", "delete",
// "list", "attrs") on keys containing substr fail; times < 0 fails forever.
// Transient faults are retried by the store; permanent ones are not.
func (f *faultyBucket) fail(op, substr string, times int, transient bool) {
	err := error(errInjected)
	if !transient {
		err = objstore.Permanent(errInjected)
	}
	f.mu.Lock()
	f.rules = append(f.rules, &fault{op: op, substr: substr, times: times, err: err})
	f.mu.Unlock()
}

func (f *faultyBucket) clear() {
	f.mu.Lock()
	f.rules = nil
	f.mu.Unlock()
}

func (f *faultyBucket) check(op, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.rules {
		if r.op == op && strings.Contains(key, r.substr) && r.times != 0 {
			if r.times > 0 {
				r.times--
			}
			return fmt.Errorf("%s %s: %w", op, key, r.err)
		}
	}
	return nil
}

func (f *faultyBucket) Upload(ctx context.Context, key string, r io.Reader, opts *blob.WriterOptions) error {
	if f.onPut != nil {
		f.onPut(key)
	}
	if err := f.check("upload", key); err != nil {
		return err
	}
	if err := f.Bucket.Upload(ctx, key, r, opts); err != nil {
		return err
	}
	f.mu.Lock()
	f.uploads = append(f.uploads, key)
	f.mu.Unlock()
	return nil
}

func (f *faultyBucket) NewReader(ctx context.Context, key string) (io.ReadCloser, error) {
	if f.onRead != nil {
		f.onRead(key)
	}
	if err := f.check("read", key); err != nil {
		return nil, err
	}
	return f.Bucket.NewReader(ctx, key)
}

func (f *faultyBucket) Delete(ctx context.Context, key string) error {
	if err := f.check("delete", key); err != nil {
		return err
	}
	f.mu.Lock()
	f.deletes = append(f.deletes, key)
	f.mu.Unlock()
	return f.Bucket.Delete(ctx, key)
}

func (f *faultyBucket) List(ctx context.Context, prefix string) ([]objstore.Object, error) {
	if err := f.check("list", prefix); err != nil {
		return nil, err
	}
	return f.Bucket.List(ctx, prefix)
}

func (f *faultyBucket) Attributes(ctx context.Context, key string) (objstore.Object, error) {
	if err := f.check("attrs", key); err != nil {
		return objstore.Object{}, err
	}
	return f.Bucket.Attributes(ctx, key)
}

// takeUploads returns and forgets the upload log.
func (f *faultyBucket) takeUploads() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := f.uploads
	f.uploads = nil
	return u
}

const testJob = "job1"

// newStore returns a Store on a fresh in-memory bucket, and the faulty
// wrapper around it.
func newStore(t testing.TB) (*objstore.Store, *faultyBucket) {
	t.Helper()
	fb := &faultyBucket{Bucket: objstore.FromBlob("mem://", memblob.OpenBucket(nil))}
	s, err := objstore.New(fb, testJob, objstore.Options{Retry: objstore.RetryPolicy{MaxAttempts: 3, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, fb
}

// fakeClock is a settable clock for TTL tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func testConfig(t testing.TB, store *objstore.Store, dir string) Config {
	return Config{
		Dir:          dir,
		Task:         "t0",
		Store:        store,
		MemTableSize: 1 << 20,
	}
}

func openTest(t testing.TB, cfg Config) *Backend {
	t.Helper()
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

func restoreTest(t testing.TB, cfg Config, handle string) *Backend {
	t.Helper()
	b, err := Restore(context.Background(), cfg, handle)
	if err != nil {
		t.Fatalf("restore %s: %v", handle, err)
	}
	t.Cleanup(func() { _ = b.Close(context.Background()) })
	return b
}

// model is what a test expects a "kv" value state to hold.
type model map[string]string

func (m model) clone() model {
	c := make(model, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// fataler is what the dump helpers need of a *testing.T or a *rapid.T.
type fataler interface{ Fatal(args ...any) }

// rawEntries returns every entry in Pebble, after flushing the record
// cache, by iterating the database.
func rawEntries(t fataler, b *Backend) map[string]string {
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	it, err := b.db.NewIter(nil) // not DB(): reading does not make it non-empty
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]string{}
	for ok := it.First(); ok; ok = it.Next() {
		out[string(it.Key())] = string(it.Value())
	}
	return out
}

// logicalEntries returns every entry in Pebble as rawEntries does, keyed
// by state, user key and sub key, whatever the layout; it checks that each
// key is filed under its key group.
func logicalEntries(t fataler, b *Backend) map[string]string {
	out := map[string]string{}
	for k, v := range rawEntries(t, b) {
		e, err := decodeKey([]byte(k))
		if err != nil {
			t.Fatal(err)
		}
		if e.grouped != (b.MaxParallelism() > 0) || e.grouped && e.group != keygroup.Of([]byte(e.user), b.MaxParallelism()) {
			t.Fatal(fmt.Sprintf("key %q is not filed under its key group among %d", k, b.MaxParallelism()))
		}
		out[fmt.Sprintf("%q/%q/%q", e.state, e.user, e.sub)] = v
	}
	return out
}

// dump reads every key of value state "kv" by iterating the database.
func dump(t testing.TB, b *Backend) model {
	t.Helper()
	out := model{}
	for k, v := range rawEntries(t, b) {
		e, err := decodeKey([]byte(k))
		if err != nil || e.state != "kv" || e.sub != "" {
			t.Fatalf("unexpected key %q (%+v, %v)", k, e, err)
		}
		out[e.user] = v
	}
	return out
}

// rawKey is a keyed-state Pebble key taken apart.
type rawKey struct {
	grouped          bool
	group            int // if grouped
	state, user, sub string
}

// decodeKey takes a keyed-state Pebble key apart, in either layout.
func decodeKey(k []byte) (rawKey, error) {
	var e rawKey
	switch {
	case len(k) > 0 && k[0] == keyedStateTag:
		k = k[1:]
	case len(k) >= 3 && k[0] == keyGroupedTag:
		e.grouped, e.group = true, int(k[1])<<8|int(k[2])
		k = k[3:]
	default:
		return e, fmt.Errorf("bad tag in %q", k)
	}
	field := func() (string, error) {
		n, w := binary.Uvarint(k)
		if w <= 0 || uint64(len(k)-w) < n {
			return "", fmt.Errorf("bad length in %q", k)
		}
		f := string(k[w : w+int(n)])
		k = k[w+int(n):]
		return f, nil
	}
	var err error
	if e.state, err = field(); err != nil {
		return e, err
	}
	if e.user, err = field(); err != nil {
		return e, err
	}
	e.sub = string(k)
	return e, nil
}

// apply writes m's difference from the backend's content through the API.
func put(t testing.TB, s *ValueState[string], key, value string) {
	t.Helper()
	s.b.SetCurrentKey([]byte(key))
	if err := s.Put(value); err != nil {
		t.Fatal(err)
	}
}

func del(t testing.TB, s *ValueState[string], key string) {
	t.Helper()
	s.b.SetCurrentKey([]byte(key))
	if err := s.Clear(); err != nil {
		t.Fatal(err)
	}
}

// snapshotNow takes and uploads a snapshot, failing the test on error.
func snapshotNow(t testing.TB, b *Backend, id ckpt.ID, opState string) *SnapshotResult {
	t.Helper()
	s, err := b.Snapshot(id, []byte(opState))
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func listKeys(t testing.TB, s *objstore.Store, prefix string) []string {
	t.Helper()
	objs, err := s.List(context.Background(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, o := range objs {
		out = append(out, o.Key)
	}
	slices.Sort(out)
	return out
}

func memFSConfig(t testing.TB, store *objstore.Store, fs vfs.FS) Config {
	cfg := testConfig(t, store, "/state/job1/t0")
	cfg.FS = fs
	return cfg
}

// flushDB writes the record cache and then Pebble's memtable to files, for
// tests that need state in SSTs.
func flushDB(b *Backend) error {
	if err := b.Flush(); err != nil {
		return err
	}
	return b.DB().Flush()
}

// putMetadata writes checkpoint id's _metadata object with a conditional
// put, as the coordinator does (package checkpoint owns its contents).
func putMetadata(ctx context.Context, store *objstore.Store, id ckpt.ID, data []byte) error {
	return store.PutIfAbsent(ctx, objstore.MetadataKey(id), data)
}
