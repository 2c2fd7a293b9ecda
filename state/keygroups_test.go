package state

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/weir-stream/weir/keygroup"
)

// The legacy layout is byte for byte what checkpoints of stage main hold,
// and the key-grouped layout puts the key group right after its tag.
func TestKeyEncodingGolden(t *testing.T) {
	for _, tc := range []struct {
		maxParallelism int
		value, entry   string // hex of value state "v" and map state "m" entry 5 of user key "user-1"
	}{
		{0,
			"01" + "0176" + "06" + hex.EncodeToString([]byte("user-1")),
			"01" + "016d" + "06" + hex.EncodeToString([]byte("user-1")) + "8000000000000005"},
		// keygroup.Of("user-1", 128) = 76 = 0x4c.
		{128,
			"02004c" + "0176" + "06" + hex.EncodeToString([]byte("user-1")),
			"02004c" + "016d" + "06" + hex.EncodeToString([]byte("user-1")) + "8000000000000005"},
	} {
		t.Run(fmt.Sprint("max_parallelism=", tc.maxParallelism), func(t *testing.T) {
			b, _ := newLayoutBackend(t, tc.maxParallelism)
			v, err := NewValueState(b, "v", Int64Codec{})
			if err != nil {
				t.Fatal(err)
			}
			m, err := NewMapState(b, "m", Int64Codec{}, StringCodec{})
			if err != nil {
				t.Fatal(err)
			}
			b.SetCurrentKey([]byte("user-1"))
			if err := v.Put(7); err != nil {
				t.Fatal(err)
			}
			if err := m.Put(5, "x"); err != nil {
				t.Fatal(err)
			}
			var got []string
			for k := range rawEntries(t, b) {
				got = append(got, hex.EncodeToString([]byte(k)))
			}
			slices.Sort(got)
			want := []string{tc.entry, tc.value} // 0x6d ('m') sorts before 0x76 ('v')
			if !slices.Equal(got, want) {
				t.Fatalf("keys:\n got %q\nwant %q", got, want)
			}
		})
	}
	if g := keygroup.Of([]byte("user-1"), 128); g != 0x4c {
		t.Fatalf("keygroup.Of(user-1, 128) = %d, the golden keys above assume 76", g)
	}
}

// KeyGroupBounds holds all keyed state of its key groups, of every kind,
// and none of any other group; ScanKeyGroups yields exactly those entries.
func TestKeyGroupBoundsAndScan(t *testing.T) {
	const maxPar = 16
	b, _ := newLayoutBackend(t, maxPar)
	v, _ := NewValueState(b, "v", Int64Codec{})
	l, _ := NewListState(b, "l", StringCodec{})
	m, _ := NewMapState(b, "m", Int64Codec{}, Int64Codec{})
	a, _ := NewReducingState(b, "sum", Int64Codec{}, func(x, y int64) int64 { return x + y })
	groups := map[int]bool{}
	for i := range 300 {
		key := fmt.Appendf(nil, "key-%d", i)
		groups[keygroup.Of(key, maxPar)] = true
		b.SetCurrentKey(key)
		if b.CurrentKeyGroup() != keygroup.Of(key, maxPar) {
			t.Fatalf("CurrentKeyGroup %d for %q", b.CurrentKeyGroup(), key)
		}
		for _, err := range []error{v.Put(int64(i)), l.Add("x"), m.Put(int64(i), 1), m.Put(-1, 2), a.Add(3)} {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(groups) != maxPar {
		t.Fatalf("the keys cover %d of %d groups; the test needs all", len(groups), maxPar)
	}
	all := rawEntries(t, b)
	for _, r := range [][2]int{{0, 16}, {0, 1}, {15, 16}, {3, 9}, {5, 5}} {
		lo, hi := r[0], r[1]
		start, end := KeyGroupBounds(lo, hi)
		want := map[string]string{}
		for k, val := range all {
			e, err := decodeKey([]byte(k))
			if err != nil {
				t.Fatal(err)
			}
			in := bytes.Compare([]byte(k), start) >= 0 && bytes.Compare([]byte(k), end) < 0
			if owned := e.group >= lo && e.group < hi; in != owned {
				t.Fatalf("[%d, %d): key %q of group %d within bounds: %v", lo, hi, k, e.group, in)
			}
			if in {
				want[k] = val
			}
		}
		got := map[string]string{}
		var prev []byte
		err := b.ScanKeyGroups(lo, hi, func(k, val []byte) error {
			if bytes.Compare(prev, k) >= 0 {
				return fmt.Errorf("key %q after %q", k, prev)
			}
			prev = append(prev[:0], k...)
			got[string(k)] = string(val)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("ScanKeyGroups(%d, %d): %d entries, want %d", lo, hi, len(got), len(want))
		}
	}
	stop := errors.New("stop")
	if err := b.ScanKeyGroups(0, maxPar, func(k, v []byte) error { return stop }); err != stop {
		t.Fatalf("ScanKeyGroups returned %v, not fn's error", err)
	}
	if err := b.ScanKeyGroups(0, maxPar+1, func(k, v []byte) error { return nil }); err == nil {
		t.Fatal("ScanKeyGroups beyond MaxParallelism accepted")
	}

	// The legacy layout lies outside every key-group range.
	legacy, _ := newLayoutBackend(t, 0)
	lv, _ := NewValueState(legacy, "v", Int64Codec{})
	legacy.SetCurrentKey([]byte{0xff, 0xff})
	_ = lv.Put(1)
	start, end := KeyGroupBounds(0, keygroup.Limit)
	for k := range rawEntries(t, legacy) {
		if bytes.Compare([]byte(k), start) >= 0 && bytes.Compare([]byte(k), end) < 0 {
			t.Fatalf("legacy key %q within the key-group bounds", k)
		}
	}
	if err := legacy.ScanKeyGroups(0, 1, func(k, v []byte) error { return nil }); err == nil {
		t.Fatal("ScanKeyGroups on the legacy layout accepted")
	}
}

// State keyed by key group survives a snapshot and restore; the manifest
// records the max parallelism and key groups, and a restore with other
// ones fails clearly instead of finding no state.
func TestKeyGroupedSnapshotRestore(t *testing.T) {
	ctx := context.Background()
	store, _ := newStore(t)
	cfg := testConfig(t, store, t.TempDir())
	cfg.MaxParallelism = 128
	lo, hi := keygroup.Range(1, 3, 128)
	cfg.KeyGroups = [2]int{lo, hi}
	b := openTest(t, cfg)
	if b.MaxParallelism() != 128 {
		t.Fatalf("MaxParallelism() = %d", b.MaxParallelism())
	}
	if l, h := b.KeyGroups(); l != lo || h != hi {
		t.Fatalf("KeyGroups() = %d, %d; want %d, %d", l, h, lo, hi)
	}
	kv, _ := NewValueState(b, "kv", StringCodec{})
	m, _ := NewMapState(b, "m", StringCodec{}, Int64Codec{})
	want := model{}
	for i := range 500 {
		k := fmt.Sprintf("key-%d", i)
		put(t, kv, k, fmt.Sprint("v", i))
		want[k] = fmt.Sprint("v", i)
		if err := m.Put("a", int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	// Some in SSTs, some only in the WAL.
	if err := flushDB(b); err != nil {
		t.Fatal(err)
	}
	put(t, kv, "late", "x")
	want["late"] = "x"
	res := snapshotNow(t, b, 1, "")
	if err := b.NotifyComplete(ctx, 1); err != nil {
		t.Fatal(err)
	}
	data, err := store.Get(ctx, res.Handle)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"max_parallelism": 128`) || !strings.Contains(string(data), fmt.Sprintf(`"key_groups": [
  %d,
  %d
 ]`, lo, hi)) {
		t.Fatalf("manifest does not record the key groups:\n%s", data)
	}

	rcfg := cfg
	rcfg.Dir = t.TempDir()
	r := restoreTest(t, rcfg, res.Handle)
	if got := r.Restored(); got.MaxParallelism != 128 || got.KeyGroups != [2]int{lo, hi} {
		t.Fatalf("restored manifest: max parallelism %d key groups %v", got.MaxParallelism, got.KeyGroups)
	}
	if got, want := logicalEntries(t, r), logicalEntries(t, b); !maps.Equal(got, want) {
		t.Fatalf("restored state differs: %d entries, want %d", len(got), len(want))
	}
	rkv, _ := NewValueState(r, "kv", StringCodec{})
	rm, _ := NewMapState(r, "m", StringCodec{}, Int64Codec{})
	for _, k := range []string{"key-0", "key-499", "late"} {
		r.SetCurrentKey([]byte(k))
		if v, ok, err := rkv.Get(); !ok || err != nil || v != want[k] {
			t.Fatalf("restored %s = %q %v %v", k, v, ok, err)
		}
	}
	r.SetCurrentKey([]byte("key-7"))
	if v, ok, err := rm.Get("a"); !ok || err != nil || v != 7 {
		t.Fatalf("restored map entry = %d %v %v", v, ok, err)
	}

	for _, bad := range []struct {
		name           string
		maxParallelism int
		keyGroups      [2]int
		want           string
	}{
		{"other max parallelism", 64, [2]int{0, 64}, "max parallelism 128 (0: no key groups), the task is configured with 64"},
		{"legacy layout", 0, [2]int{}, "configured with 0"},
		{"other key groups", 128, [2]int{0, 43}, fmt.Sprintf("holds key groups [%d, %d), the task owns [0, 43)", lo, hi)},
	} {
		bcfg := cfg
		bcfg.Dir = t.TempDir()
		bcfg.MaxParallelism, bcfg.KeyGroups = bad.maxParallelism, bad.keyGroups
		_, err := Restore(ctx, bcfg, res.Handle)
		if !errors.Is(err, ErrKeyGroups) || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("%s: restore error %v, want ErrKeyGroups saying %q", bad.name, err, bad.want)
		}
	}
}

// A legacy snapshot's manifest is what it was before key groups (no new
// fields), and restoring it into a key-grouped backend fails clearly.
func TestLegacySnapshotRefusesKeyGroups(t *testing.T) {
	store, _ := newStore(t)
	cfg := testConfig(t, store, t.TempDir())
	b := openTest(t, cfg)
	kv, _ := NewValueState(b, "kv", StringCodec{})
	put(t, kv, "a", "1")
	res := snapshotNow(t, b, 1, "")
	data, err := store.Get(context.Background(), res.Handle)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "max_parallelism") || strings.Contains(string(data), "key_groups") {
		t.Fatalf("legacy manifest names key groups:\n%s", data)
	}
	cfg.Dir = t.TempDir()
	cfg.MaxParallelism = 128
	if _, err := Restore(context.Background(), cfg, res.Handle); !errors.Is(err, ErrKeyGroups) ||
		!strings.Contains(err.Error(), "max parallelism 0 (0: no key groups), the task is configured with 128") {
		t.Fatalf("restore of a legacy snapshot with max parallelism 128: %v", err)
	}
}

func TestKeyGroupConfigValidation(t *testing.T) {
	store, _ := newStore(t)
	for _, bad := range []struct {
		maxParallelism int
		keyGroups      [2]int
		want           string
	}{
		{-1, [2]int{}, "MaxParallelism -1 outside [0, 32768]"},
		{keygroup.Limit + 1, [2]int{}, "MaxParallelism 32769 outside"},
		{0, [2]int{0, 4}, "KeyGroups [0, 4) without MaxParallelism"},
		{8, [2]int{4, 4}, "KeyGroups [4, 4) is not a non-empty range within [0, 8)"},
		{8, [2]int{4, 9}, "KeyGroups [4, 9) is not"},
		{8, [2]int{-1, 3}, "KeyGroups [-1, 3) is not"},
	} {
		cfg := testConfig(t, store, t.TempDir())
		cfg.MaxParallelism, cfg.KeyGroups = bad.maxParallelism, bad.keyGroups
		if _, err := Open(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("MaxParallelism %d KeyGroups %v: %v, want %q", bad.maxParallelism, bad.keyGroups, err, bad.want)
		}
	}
	cfg := testConfig(t, store, t.TempDir())
	cfg.MaxParallelism = keygroup.Limit
	b := openTest(t, cfg)
	if lo, hi := b.KeyGroups(); lo != 0 || hi != keygroup.Limit {
		t.Fatalf("default KeyGroups = [%d, %d), want all", lo, hi)
	}
	kv, _ := NewValueState(b, "kv", StringCodec{})
	put(t, kv, "x", "y") // the largest key groups still fit their two bytes
	if got := dump(t, b); got["x"] != "y" {
		t.Fatalf("dump = %v", got)
	}
}
