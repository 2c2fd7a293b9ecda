package state

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/keygroup"
	"github.com/weir-stream/weir/state/objstore"
)

// rescaleKeys is how many user keys the rescale tests spread over the key
// groups.
const rescaleKeys = 600

// oldTasks writes the state of a stage of n tasks among maxPar key groups
// (each task the keys of its own key groups: value, map and list state,
// part in SSTs, part in the WAL only), snapshots it as checkpoint id, and
// returns each task's manifest handle and the logical entries the stage
// holds, by key group.
func oldTasks(t *testing.T, store *objstore.Store, n, maxPar int, id ckpt.ID) ([]string, map[int]map[string]string) {
	t.Helper()
	handles := make([]string, n)
	byGroup := map[int]map[string]string{}
	for j := range n {
		cfg := testConfig(t, store, t.TempDir())
		cfg.Task = fmt.Sprintf("agg-%d", j)
		cfg.MaxParallelism = maxPar
		lo, hi := keygroup.Range(j, n, maxPar)
		cfg.KeyGroups = [2]int{lo, hi}
		// Small files, so that a compaction leaves SSTs of a few key
		// groups each, and a restore downloads only some of them.
		cfg.TunePebble = func(o *pebble.Options) {
			for i := range o.TargetFileSizes {
				o.TargetFileSizes[i] = 2 << 10
			}
		}
		b := openTest(t, cfg)
		kv, _ := NewValueState(b, "kv", StringCodec{})
		m, _ := NewMapState(b, "m", StringCodec{}, Int64Codec{})
		l, _ := NewListState(b, "l", Int64Codec{})
		for i := range rescaleKeys {
			k := fmt.Sprintf("key-%d", i)
			if g := keygroup.Of([]byte(k), maxPar); g < lo || g >= hi {
				continue
			}
			put(t, kv, k, fmt.Sprint("v", i))
			if err := m.Put("a", int64(i)); err != nil {
				t.Fatal(err)
			}
			if err := l.Add(int64(i)); err != nil {
				t.Fatal(err)
			}
			if i%3 == 0 {
				if err := l.Add(int64(-i)); err != nil { // a merge operand
					t.Fatal(err)
				}
			}
			if i == rescaleKeys/2 {
				if err := flushDB(b); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Most of the state compacted into small files; the rest in
		// the WAL.
		start, end := KeyGroupBounds(0, keygroup.Limit)
		if err := b.DB().Compact(context.Background(), start, end, true); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			k := fmt.Sprintf("key-%d", i)
			if g := keygroup.Of([]byte(k), maxPar); g >= lo && g < hi {
				put(t, kv, k, "wal")
			}
		}
		for k, v := range logicalEntries(t, b) {
			e, _ := decodeKey([]byte(rawKeyOf(t, b, k)))
			if byGroup[e.group] == nil {
				byGroup[e.group] = map[string]string{}
			}
			byGroup[e.group][k] = v
		}
		handles[j] = snapshotNow(t, b, id, fmt.Sprintf(`{"task":%d}`, j)).Handle
	}
	return handles, byGroup
}

// rawKeyOf finds the raw key of logical entry k in b.
func rawKeyOf(t *testing.T, b *Backend, k string) string {
	for raw := range rawEntries(t, b) {
		e, err := decodeKey([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprintf("%q/%q/%q", e.state, e.user, e.sub) == k {
			return raw
		}
	}
	t.Fatalf("no raw key for %s", k)
	return ""
}

// overlapping returns the handles of the old tasks (n of them) whose key
// groups overlap [lo, hi).
func overlapping(handles []string, n, maxPar, lo, hi int) []string {
	var out []string
	for j := range n {
		if l, h := keygroup.Range(j, n, maxPar); l < hi && h > lo {
			out = append(out, handles[j])
		}
	}
	return out
}

// Every new task of every parallelism holds exactly the state of its key
// groups, whatever the old parallelism, also after a snapshot and restore
// of its own (excised and ingested files upload and restore like others).
func TestRestoreKeyGroups(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ from, to, maxPar int }{
		{6, 3, 128}, {3, 8, 128}, {8, 6, 128}, {1, 5, 16}, {5, 1, 16}, {4, 4, 16}, {7, 16, 16},
	} {
		t.Run(fmt.Sprintf("%d-%d-of-%d", tc.from, tc.to, tc.maxPar), func(t *testing.T) {
			store, _ := newStore(t)
			handles, byGroup := oldTasks(t, store, tc.from, tc.maxPar, 7)
			total := 0
			var downloaded, whole int64
			for i := range tc.to {
				lo, hi := keygroup.Range(i, tc.to, tc.maxPar)
				want := map[string]string{}
				for g := lo; g < hi; g++ {
					maps.Copy(want, byGroup[g])
				}
				total += len(want)
				cfg := testConfig(t, store, t.TempDir())
				cfg.Task = fmt.Sprintf("agg-%d", i)
				cfg.MaxParallelism, cfg.KeyGroups = tc.maxPar, [2]int{lo, hi}
				mine := overlapping(handles, tc.from, tc.maxPar, lo, hi)
				b, err := RestoreKeyGroups(ctx, cfg, mine)
				if err != nil {
					t.Fatalf("task %d: %v", i, err)
				}
				t.Cleanup(func() { _ = b.Close(ctx) })
				var all int64 // what downloading the snapshots whole would cost
				for _, h := range mine {
					m, err := ReadManifest(ctx, store, h)
					if err != nil {
						t.Fatal(err)
					}
					for _, f := range m.Files {
						if !f.Inline {
							all += f.Size
						}
					}
				}
				got := b.RestoreInfo().DownloadedBytes
				if got > all {
					t.Fatalf("task %d downloaded %d bytes, more than the snapshots' %d", i, got, all)
				}
				downloaded += got
				whole += all
				if got := logicalEntries(t, b); !maps.Equal(got, want) {
					t.Fatalf("task %d [%d,%d): %d entries, want %d", i, lo, hi, len(got), len(want))
				}
				ms := b.RestoredManifests()
				for k, m := range ms {
					if k > 0 && m.KeyGroups[0] != ms[k-1].KeyGroups[1] {
						t.Fatalf("task %d: restored manifests not in key-group order: %v", i, m.KeyGroups)
					}
				}
				if b.Restored() != ms[0] || ms[0].KeyGroups[0] > lo || ms[len(ms)-1].KeyGroups[1] < hi {
					t.Fatalf("task %d: restored manifests do not cover [%d,%d)", i, lo, hi)
				}
				// The state works on: written, snapshotted, restored.
				kv, _ := NewValueState(b, "kv", StringCodec{})
				for k := range rescaleKeys {
					key := fmt.Sprintf("key-%d", k)
					if g := keygroup.Of([]byte(key), tc.maxPar); g >= lo && g < hi {
						put(t, kv, key, "after")
						break
					}
				}
				res := snapshotNow(t, b, 8, "")
				rcfg := cfg
				rcfg.Dir = t.TempDir()
				r := restoreTest(t, rcfg, res.Handle)
				if got, want := logicalEntries(t, r), logicalEntries(t, b); !maps.Equal(got, want) {
					t.Fatalf("task %d: state after its own snapshot and restore differs: %d entries, want %d", i, len(got), len(want))
				}
			}
			if want := len(mergedEntries(byGroup)); total != want {
				t.Fatalf("new tasks hold %d entries, the old ones %d", total, want)
			}
			// Growing, a task owns less than half of an old task's key
			// groups and downloads only the files that hold them.
			if tc.to >= 2*tc.from && downloaded >= whole {
				t.Fatalf("the new tasks downloaded %d bytes, all of the %d of the snapshots they overlap", downloaded, whole)
			}
			t.Logf("downloaded %d bytes of the %d the overlapping snapshots hold", downloaded, whole)
		})
	}
}

func mergedEntries(byGroup map[int]map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range byGroup {
		maps.Copy(out, m)
	}
	return out
}

// A rescaling restore refuses what it cannot divide exactly, and a failed
// one leaves nothing behind that a later restore of the directory uses.
func TestRestoreKeyGroupsRefuses(t *testing.T) {
	ctx := context.Background()
	store, fb := newStore(t)
	handles, byGroup := oldTasks(t, store, 4, 16, 3)
	cfg := testConfig(t, store, t.TempDir())
	cfg.Task = "agg-0"
	cfg.MaxParallelism, cfg.KeyGroups = 16, [2]int{0, 8} // old tasks 0 and 1
	for _, bad := range []struct {
		name    string
		handles []string
		cfg     func(*Config)
		want    string
	}{
		{"gap", []string{handles[0]}, nil, "no snapshot holds key groups [4, 8)"},
		{"not overlapping", []string{handles[0], handles[1], handles[2]}, nil, "none of the task's [0, 8)"},
		{"twice", []string{handles[0], handles[0], handles[1]}, nil, "overlapping key groups"},
		{"max parallelism", handles[:2], func(c *Config) { c.MaxParallelism, c.KeyGroups = 32, [2]int{0, 16} }, "max parallelism 16"},
		{"none", nil, nil, "no snapshot"},
	} {
		c := cfg
		if bad.cfg != nil {
			bad.cfg(&c)
		}
		if _, err := RestoreKeyGroups(ctx, c, bad.handles); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: %v, want %q", bad.name, err, bad.want)
		}
	}

	// A file missing from the second snapshot fails the restore; once it
	// is back, the same directory restores in full.
	m, err := ReadManifest(ctx, store, handles[1])
	if err != nil {
		t.Fatal(err)
	}
	var key string
	for _, f := range m.Files {
		if !f.Inline && len(f.Parts) == 0 {
			key = m.ObjectKey(f)
			break
		}
	}
	if key == "" {
		t.Fatal("snapshot 1 has no uploaded file")
	}
	fb.fail("read", key, 100, false)
	if _, err := RestoreKeyGroups(ctx, cfg, handles[:2]); err == nil {
		t.Fatalf("restore with a file unreadable: %v", err)
	}
	fb.clear()
	b, err := RestoreKeyGroups(ctx, cfg, handles[:2])
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(ctx)
	want := map[string]string{}
	for g := range 8 {
		maps.Copy(want, byGroup[g])
	}
	if got := logicalEntries(t, b); !maps.Equal(got, want) {
		t.Fatalf("after a failed attempt: %d entries, want %d", len(got), len(want))
	}
}

// State that is not filed under a key group cannot be divided: the
// restore says so instead of dropping it.
func TestRestoreKeyGroupsRefusesUngroupedState(t *testing.T) {
	ctx := context.Background()
	store, _ := newStore(t)
	var handles []string
	for j := range 2 {
		cfg := testConfig(t, store, t.TempDir())
		cfg.Task = fmt.Sprintf("agg-%d", j)
		cfg.MaxParallelism = 16
		lo, hi := keygroup.Range(j, 2, 16)
		cfg.KeyGroups = [2]int{lo, hi}
		b := openTest(t, cfg)
		kv, _ := NewValueState(b, "kv", StringCodec{})
		put(t, kv, "key-1", "v")
		if j == 1 {
			if err := b.DB().Set([]byte{keyedStateTag, 1, 'x'}, []byte("global"), nil); err != nil {
				t.Fatal(err)
			}
		}
		handles = append(handles, snapshotNow(t, b, 2, "").Handle)
	}
	for _, to := range [][2]int{{0, 16}, {0, 8}, {8, 16}} {
		cfg := testConfig(t, store, t.TempDir())
		cfg.MaxParallelism, cfg.KeyGroups = 16, to
		_, err := RestoreKeyGroups(ctx, cfg, overlapping(handles, 2, 16, to[0], to[1]))
		if to == [2]int{0, 8} {
			if err != nil {
				t.Fatalf("[0,8) from task 0 alone: %v", err)
			}
			continue
		}
		if !errors.Is(err, ErrKeyGroups) || !strings.Contains(err.Error(), "not filed under a key group") {
			t.Fatalf("key groups %v: %v", to, err)
		}
	}
}
