package state

import (
	"context"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
)

// Hot-path benchmarks: go test -run '^$' -bench . -benchmem ./state/
// The state API should cost no allocation beyond raw Pebble's, and BytesCodec's
// one copy of the value (raw Pebble's caller has to make the same copy).

const benchKeys = 10_000

func benchBackend(b *testing.B) *Backend { return benchLayoutBackend(b, 0, 0) }

// benchLayoutBackend opens a backend whose keyed state is filed under
// maxParallelism key groups (0: the legacy layout), with a record cache of
// cacheBytes (0: the default, -1: off).
func benchLayoutBackend(b *testing.B, maxParallelism int, cacheBytes int64) *Backend {
	store, _ := newStore(b)
	cfg := testConfig(b, store, b.TempDir())
	cfg.MemTableSize = 64 << 20
	cfg.MaxParallelism = maxParallelism
	cfg.RecordCacheBytes = cacheBytes
	bk, err := Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = bk.Close(context.Background()) })
	return bk
}

func benchKeyList() [][]byte {
	keys := make([][]byte, benchKeys)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "user-%012d", i)
	}
	return keys
}

func BenchmarkValueStatePutInt64(b *testing.B) {
	bk := benchBackend(b)
	s, _ := NewValueState(bk, "v", Int64Codec{})
	keys := benchKeyList()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bk.SetCurrentKey(keys[i%benchKeys])
		if err := s.Put(int64(i)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValueStateGetInt64(b *testing.B) {
	bk := benchBackend(b)
	s, _ := NewValueState(bk, "v", Int64Codec{})
	keys := benchKeyList()
	for i, k := range keys {
		bk.SetCurrentKey(k)
		_ = s.Put(int64(i))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bk.SetCurrentKey(keys[i%benchKeys])
		if _, ok, err := s.Get(); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkValueStatePutBytes(b *testing.B) {
	bk := benchBackend(b)
	s, _ := NewValueState(bk, "v", BytesCodec{})
	keys := benchKeyList()
	val := make([]byte, 100)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bk.SetCurrentKey(keys[i%benchKeys])
		if err := s.Put(val); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkValueStateGetBytes(b *testing.B) {
	bk := benchBackend(b)
	s, _ := NewValueState(bk, "v", BytesCodec{})
	keys := benchKeyList()
	val := make([]byte, 100)
	for _, k := range keys {
		bk.SetCurrentKey(k)
		_ = s.Put(val)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bk.SetCurrentKey(keys[i%benchKeys])
		if _, ok, err := s.Get(); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkMapStatePut(b *testing.B) {
	bk := benchBackend(b)
	s, _ := NewMapState(bk, "m", Int64Codec{}, Int64Codec{})
	keys := benchKeyList()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		bk.SetCurrentKey(keys[i%benchKeys])
		if err := s.Put(int64(i%7), int64(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKeyLayout compares SetCurrentKey with a Put or Get in the
// legacy layout and with 128 key groups (a murmur2 hash per SetCurrentKey,
// two more key bytes), through the record cache (value state) and without
// (value state with the cache off, map state).
func BenchmarkKeyLayout(b *testing.B) {
	keys := benchKeyList()
	for _, m := range []int{0, 128} {
		for _, cache := range []bool{true, false} {
			name := fmt.Sprintf("max_parallelism=%d/cache=%v", m, cache)
			open := func(b *testing.B) *Backend {
				if cache {
					return benchLayoutBackend(b, m, 0)
				}
				return benchLayoutBackend(b, m, -1)
			}
			b.Run(name+"/value-put", func(b *testing.B) {
				bk := open(b)
				s, _ := NewValueState(bk, "v", Int64Codec{})
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					bk.SetCurrentKey(keys[i%benchKeys])
					if err := s.Put(int64(i)); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(name+"/value-get", func(b *testing.B) {
				bk := open(b)
				s, _ := NewValueState(bk, "v", Int64Codec{})
				for i, k := range keys {
					bk.SetCurrentKey(k)
					_ = s.Put(int64(i))
				}
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					bk.SetCurrentKey(keys[i%benchKeys])
					if _, ok, err := s.Get(); !ok || err != nil {
						b.Fatal(ok, err)
					}
				}
			})
		}
		b.Run(fmt.Sprintf("max_parallelism=%d/map-put", m), func(b *testing.B) {
			bk := benchLayoutBackend(b, m, 0)
			s, _ := NewMapState(bk, "m", Int64Codec{}, Int64Codec{})
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				bk.SetCurrentKey(keys[i%benchKeys])
				if err := s.Put(int64(i%7), int64(i)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSetCurrentKey is the per-record cost of setting the key: a copy,
// and with key groups the key's murmur2 hash.
func BenchmarkSetCurrentKey(b *testing.B) {
	keys := benchKeyList()
	for _, m := range []int{0, 128} {
		b.Run(fmt.Sprintf("max_parallelism=%d", m), func(b *testing.B) {
			bk := benchLayoutBackend(b, m, 0)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				bk.SetCurrentKey(keys[i%benchKeys])
			}
		})
	}
}

func BenchmarkRawPebblePut(b *testing.B) {
	bk := benchBackend(b)
	keys := benchKeyList()
	val := make([]byte, 100)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := bk.DB().Set(keys[i%benchKeys], val, pebble.NoSync); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRawPebbleGet(b *testing.B) {
	bk := benchBackend(b)
	keys := benchKeyList()
	val := make([]byte, 100)
	for _, k := range keys {
		_ = bk.DB().Set(k, val, pebble.NoSync)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		v, c, err := bk.DB().Get(keys[i%benchKeys])
		if err != nil {
			b.Fatal(err)
		}
		_ = v
		_ = c.Close()
	}
}
