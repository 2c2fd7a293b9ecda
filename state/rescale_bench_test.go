package state

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weir-stream/weir/keygroup"
)

// BenchmarkCopyKeyGroups compares the two ways a rescaling restore can
// move the key groups of another task's snapshot into the task's
// database (docs/state.md, "Rescaling"): writing them into SST files that
// the database ingests (what RestoreKeyGroups does), or writing them
// through batches (iterate-and-write). The source is a database of about
// 64 MiB of 512-byte values in 16 key groups, all of which move.
//
//	go test -run '^$' -bench CopyKeyGroups -benchtime 5x ./state/
func BenchmarkCopyKeyGroups(b *testing.B) {
	const groups = 16
	store, _ := newStore(b)
	src := testConfig(b, store, b.TempDir())
	src.MemTableSize = 64 << 20
	src.MaxParallelism, src.RecordCacheBytes = groups, -1
	sb, err := Open(context.Background(), src)
	if err != nil {
		b.Fatal(err)
	}
	kv, _ := NewValueState(sb, "kv", BytesCodec{})
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 512)
	var bytes int64
	for i := range 120_000 {
		for j := range val {
			val[j] = byte(rng.Uint32())
		}
		sb.SetCurrentKey(fmt.Appendf(nil, "user-%012d", i))
		if err := kv.Put(val); err != nil {
			b.Fatal(err)
		}
		bytes += int64(len(val)) + 30
	}
	if err := flushDB(sb); err != nil {
		b.Fatal(err)
	}
	srcDB := sb.db
	defer sb.Close(context.Background())

	newDst := func(b *testing.B) *Backend {
		cfg := testConfig(b, store, b.TempDir())
		cfg.MemTableSize = 64 << 20
		cfg.MaxParallelism, cfg.RecordCacheBytes = groups, -1
		d, err := Open(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	b.Run("ingest", func(b *testing.B) {
		b.SetBytes(bytes)
		for i := range b.N {
			d := newDst(b)
			path := filepath.Join(b.TempDir(), fmt.Sprintf("%d.sst", i))
			o := d.readOnlyOptions()
			if _, err := d.copyRange(srcDB, 0, keygroup.Limit, path, o); err != nil {
				b.Fatal(err)
			}
			if err := d.db.Ingest(context.Background(), []string{path}); err != nil {
				b.Fatal(err)
			}
			if err := d.db.Flush(); err != nil {
				b.Fatal(err)
			}
			_ = d.Close(context.Background())
		}
	})
	b.Run("batch", func(b *testing.B) {
		b.SetBytes(bytes)
		for range b.N {
			d := newDst(b)
			start, end := KeyGroupBounds(0, keygroup.Limit)
			it, err := srcDB.NewIter(&pebble.IterOptions{LowerBound: start, UpperBound: end})
			if err != nil {
				b.Fatal(err)
			}
			batch := d.db.NewBatch()
			for ok := it.First(); ok; ok = it.Next() {
				if err := batch.Set(it.Key(), it.Value(), nil); err != nil {
					b.Fatal(err)
				}
				if batch.Len() >= 4<<20 {
					if err := batch.Commit(pebble.NoSync); err != nil {
						b.Fatal(err)
					}
					batch = d.db.NewBatch()
				}
			}
			if err := batch.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			_ = it.Close()
			// Comparable with the ingest: the entries in SSTs.
			if err := d.db.Flush(); err != nil {
				b.Fatal(err)
			}
			_ = d.Close(context.Background())
		}
	})
}
