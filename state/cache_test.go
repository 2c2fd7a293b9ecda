package state

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

// cacheSide is one backend of the differential test, with its state handles.
type cacheSide struct {
	b     *Backend
	plain *ValueState[int64]
	ttl   *ValueState[int64] // TTL, refreshed on read
	stale *ValueState[int64] // TTL, expired values returned until removed
	sum   *ReducingState[int64]
	list  *ListState[int64]
}

func newCacheSide(tt *testing.T, t *rapid.T, cacheBytes int64, maxParallelism int, clock *fakeClock) *cacheSide {
	store, _ := newStore(tt)
	cfg := testConfig(tt, store, tt.TempDir())
	cfg.RecordCacheBytes = cacheBytes
	cfg.MaxParallelism = maxParallelism
	cfg.Now = clock.Now
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return openCacheSide(t, b)
}

func openCacheSide(t *rapid.T, b *Backend) *cacheSide {
	s := &cacheSide{b: b}
	var err error
	must := func(e error) {
		if e != nil && err == nil {
			err = e
		}
	}
	s.plain, err = NewValueState(b, "plain", Int64Codec{})
	var e error
	s.ttl, e = NewValueState(b, "ttl", Int64Codec{}, WithTTL(TTLConfig{TTL: 10 * time.Second, UpdateOnRead: true}))
	must(e)
	s.stale, e = NewValueState(b, "stale", Int64Codec{}, WithTTL(TTLConfig{TTL: 10 * time.Second, ReturnExpired: true}))
	must(e)
	s.sum, e = NewReducingState(b, "sum", Int64Codec{}, func(a, b int64) int64 { return a + b })
	must(e)
	s.list, e = NewListState(b, "list", Int64Codec{})
	must(e)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// apply runs one operation and returns what it observed.
func (s *cacheSide) apply(op string, key string, v int64) string {
	s.b.SetCurrentKey([]byte(key))
	var got int64
	var ok bool
	var err error
	switch op {
	case "get":
		got, ok, err = s.plain.Get()
	case "put":
		err = s.plain.Put(v)
	case "clear":
		err = s.plain.Clear()
	case "ttl-get":
		got, ok, err = s.ttl.Get()
	case "ttl-put":
		err = s.ttl.Put(v)
	case "stale-get":
		got, ok, err = s.stale.Get()
	case "stale-put":
		err = s.stale.Put(v)
	case "sum-add":
		err = s.sum.Add(v)
	case "sum-get":
		got, ok, err = s.sum.Get()
	case "list-add":
		err = s.list.Add(v)
	case "list-get":
		var l []int64
		l, err = s.list.Get()
		return fmt.Sprint(l, err)
	}
	return fmt.Sprint(got, ok, err)
}

// With any cache size — none, tiny (evicting all the time) or large — and
// either key layout, the keyed state API returns the same results, through
// TTL expiry, purges, flushes, snapshots and restores, and a restored
// checkpoint holds exactly the state at its barrier.
func TestRecordCacheDifferential(tt *testing.T) {
	rapid.Check(tt, func(t *rapid.T) {
		clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
		cacheBytes := rapid.SampledFrom([]int64{200, 1 << 10, 1 << 20}).Draw(t, "cacheBytes")
		maxPar := rapid.SampledFrom([]int{0, 4, 128}).Draw(t, "maxParallelism")
		ref := newCacheSide(tt, t, -1, 0, clock)
		got := newCacheSide(tt, t, cacheBytes, maxPar, clock)
		defer func() {
			_ = ref.b.Close(context.Background())
			_ = got.b.Close(context.Background())
		}()
		ops := []string{"get", "put", "clear", "ttl-get", "ttl-put", "stale-get", "stale-put", "sum-add", "sum-get", "list-add", "list-get", "advance", "purge", "flush", "snapshot"}
		var id ckpt.ID
		n := rapid.IntRange(1, 300).Draw(t, "n")
		for i := range n {
			op := rapid.SampledFrom(ops).Draw(t, "op")
			switch op {
			case "advance":
				clock.Advance(time.Duration(rapid.IntRange(1, 8).Draw(t, "seconds")) * time.Second)
			case "purge":
				a, errA := ref.b.PurgeExpired(0)
				b, errB := got.b.PurgeExpired(0)
				if errA != nil || errB != nil {
					t.Fatalf("purge: %v %v", errA, errB)
				}
				if a != b {
					t.Fatalf("step %d: purge removed %d with the cache off, %d with it on", i, a, b)
				}
			case "flush":
				if err := got.b.Flush(); err != nil {
					t.Fatal(err)
				}
			case "snapshot":
				id++
				res := snapshotSide(t, got.b, id)
				want := rawEntries(t, got.b)
				cfg := testConfig(tt, got.b.cfg.Store, tt.TempDir())
				cfg.Now = clock.Now
				cfg.MaxParallelism = maxPar
				r, err := Restore(context.Background(), cfg, res.Handle)
				if err != nil {
					t.Fatal(err)
				}
				if d := rawEntries(t, r); !maps.Equal(d, want) {
					t.Fatalf("step %d: restored checkpoint %d differs from the live state:\n got %v\nwant %v", i, id, d, want)
				}
				_ = r.Close(context.Background())
			default:
				key := fmt.Sprintf("k%d", rapid.IntRange(0, 12).Draw(t, "key"))
				v := rapid.Int64Range(-5, 5).Draw(t, "v")
				a, b := ref.apply(op, key, v), got.apply(op, key, v)
				if a != b {
					t.Fatalf("step %d: %s(%s, %d): cache off %s, cache %d bytes %s", i, op, key, v, a, cacheBytes, b)
				}
				if size := got.b.rc.size; size > cacheBytes {
					t.Fatalf("step %d: the cache holds %d bytes, over its budget of %d", i, size, cacheBytes)
				}
			}
		}
		if a, b := logicalEntries(t, ref.b), logicalEntries(t, got.b); !maps.Equal(a, b) {
			t.Fatalf("final state differs:\n cache off %v\n cache on, max parallelism %d %v", a, maxPar, b)
		}
	})
}

func snapshotSide(t *rapid.T, b *Backend, id ckpt.ID) *SnapshotResult {
	s, err := b.Snapshot(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.NotifyComplete(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	return res
}

// A hit reads and writes without allocating, and writes collapse: many
// updates of one key between flushes cost Pebble one write.
func TestRecordCacheHitPathAndCollapse(t *testing.T) {
	b, _ := newTestBackend(t)
	s, _ := NewValueState(b, "v", Int64Codec{})
	key := []byte("user-key")
	b.SetCurrentKey(key)
	_ = s.Put(1)
	allocs := testing.AllocsPerRun(500, func() {
		b.SetCurrentKey(key)
		n, _, _ := s.Get()
		_ = s.Put(n + 1)
	})
	if allocs != 0 {
		t.Fatalf("cached get+put allocates %.1f times", allocs)
	}
	before := b.DB().Metrics().WAL.BytesIn
	for i := range 1000 {
		_ = s.Put(int64(i))
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	// One batch of one entry: a batch header, the key and 8 bytes.
	if n := b.DB().Metrics().WAL.BytesIn - before; n > 100 {
		t.Fatalf("1000 puts of one key then a flush logged %d bytes, want one entry", n)
	}
	b.SetCurrentKey(key)
	if n, ok, err := s.Get(); err != nil || !ok || n != 999 {
		t.Fatalf("Get = %d, %v, %v", n, ok, err)
	}
}

// A value that grows in place (a hot key's accumulator) cannot take the
// cache past its budget: the write that crosses it flushes and evicts.
func TestRecordCacheBoundedByGrowingValues(t *testing.T) {
	store, _ := newStore(t)
	cfg := testConfig(t, store, t.TempDir())
	cfg.RecordCacheBytes = 4 << 10
	b := openTest(t, cfg)
	s, _ := NewValueState(b, "acc", StringCodec{})
	for i := range 20 {
		b.SetCurrentKey(fmt.Appendf(nil, "cold-%d", i))
		if err := s.Put("x"); err != nil {
			t.Fatal(err)
		}
	}
	b.SetCurrentKey([]byte("hot"))
	v := ""
	for i := range 300 {
		v += "0123456789"
		if err := s.Put(v); err != nil {
			t.Fatal(err)
		}
		if b.rc.size > cfg.RecordCacheBytes {
			t.Fatalf("after write %d (%d bytes) the cache holds %d bytes, budget %d", i, len(v), b.rc.size, cfg.RecordCacheBytes)
		}
	}
	if got, ok, err := s.Get(); err != nil || !ok || got != v {
		t.Fatalf("Get: %d bytes, %v, %v", len(got), ok, err)
	}
	if b.rc.evictions == 0 {
		t.Fatal("no eviction: the test exercises nothing")
	}
}
