package state

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"testing/quick"
	"time"
)

func newTestBackend(t *testing.T) (*Backend, *fakeClock) {
	return newLayoutBackend(t, 0)
}

// newLayoutBackend opens a backend whose keyed state is filed under
// maxParallelism key groups (0: the legacy layout).
func newLayoutBackend(t *testing.T, maxParallelism int) (*Backend, *fakeClock) {
	t.Helper()
	store, _ := newStore(t)
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	cfg := testConfig(t, store, t.TempDir())
	cfg.Now = clock.Now
	cfg.MaxParallelism = maxParallelism
	return openTest(t, cfg), clock
}

// eachLayout runs test on a fresh backend of each key layout: the legacy
// one, one key group (every key in the same group), and 128 key groups.
func eachLayout(t *testing.T, test func(t *testing.T, b *Backend, clock *fakeClock)) {
	for _, m := range []int{0, 1, 128} {
		t.Run(fmt.Sprintf("max_parallelism=%d", m), func(t *testing.T) {
			b, clock := newLayoutBackend(t, m)
			test(t, b, clock)
		})
	}
}

func TestValueState(t *testing.T) { eachLayout(t, testValueState) }

func testValueState(t *testing.T, b *Backend, _ *fakeClock) {
	s, err := NewValueState(b, "count", Int64Codec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(); !errors.Is(err, ErrNoCurrentKey) {
		t.Fatalf("Get without key: %v, want ErrNoCurrentKey", err)
	}
	b.SetCurrentKey([]byte("a"))
	if _, ok, err := s.Get(); ok || err != nil {
		t.Fatalf("empty Get: ok=%v err=%v", ok, err)
	}
	if err := s.Put(-42); err != nil {
		t.Fatal(err)
	}
	b.SetCurrentKey([]byte("ab")) // shares a prefix with "a"
	if err := s.Put(7); err != nil {
		t.Fatal(err)
	}
	b.SetCurrentKey([]byte("a"))
	if v, ok, err := s.Get(); v != -42 || !ok || err != nil {
		t.Fatalf("Get a = %v %v %v", v, ok, err)
	}
	// Another state with the same user key is independent.
	other, err := NewValueState(b, "count2", StringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := other.Get(); ok {
		t.Fatal("state count2 sees count's value")
	}
	if err := s.Clear(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(); ok {
		t.Fatal("value survived Clear")
	}
	b.SetCurrentKey([]byte("ab"))
	if v, ok, _ := s.Get(); v != 7 || !ok {
		t.Fatalf("Get ab = %v %v after clearing a", v, ok)
	}
	// Empty user key is a key like any other.
	b.SetCurrentKey(nil)
	if err := s.Put(1); err != nil {
		t.Fatal(err)
	}
	if v, ok, _ := s.Get(); v != 1 || !ok {
		t.Fatalf("empty key: %v %v", v, ok)
	}
}

func TestStateKindConflict(t *testing.T) {
	b, _ := newTestBackend(t)
	if _, err := NewValueState(b, "x", Int64Codec{}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewListState(b, "x", Int64Codec{}); !errors.Is(err, ErrStateKind) {
		t.Fatalf("list named like a value state: %v", err)
	}
	if _, err := NewValueState(b, "x", Int64Codec{}, WithTTL(TTLConfig{TTL: time.Second})); !errors.Is(err, ErrStateKind) {
		t.Fatalf("same name, other TTL: %v", err)
	}
	if _, err := NewValueState(b, "x", Int64Codec{}); err != nil {
		t.Fatalf("same name, same kind: %v", err)
	}
	if _, err := NewValueState(b, "", Int64Codec{}); err == nil {
		t.Fatal("empty name accepted")
	}
}

func TestListState(t *testing.T) { eachLayout(t, testListState) }

func testListState(t *testing.T, b *Backend, _ *fakeClock) {
	s, err := NewListState(b, "l", StringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	b.SetCurrentKey([]byte("k"))
	if got, err := s.Get(); got != nil || err != nil {
		t.Fatalf("empty list: %v %v", got, err)
	}
	for _, v := range []string{"a", "", "ccc"} {
		if err := s.Add(v); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddAll("d", "e"); err != nil {
		t.Fatal(err)
	}
	got, err := s.Get()
	if err != nil || !slices.Equal(got, []string{"a", "", "ccc", "d", "e"}) {
		t.Fatalf("list = %q, %v", got, err)
	}
	b.SetCurrentKey([]byte("k2"))
	if got, _ := s.Get(); got != nil {
		t.Fatalf("other key sees %q", got)
	}
	b.SetCurrentKey([]byte("k"))
	if err := s.Update([]string{"x"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("y"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("after Update+Add: %q", got)
	}
	if err := s.Clear(); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Get(); got != nil {
		t.Fatalf("after Clear: %q", got)
	}
	if err := s.Update(nil); err != nil {
		t.Fatal(err)
	}
}

func TestMapState(t *testing.T) { eachLayout(t, testMapState) }

func testMapState(t *testing.T, b *Backend, _ *fakeClock) {
	s, err := NewMapState(b, "m", Int64Codec{}, StringCodec{})
	if err != nil {
		t.Fatal(err)
	}
	b.SetCurrentKey([]byte("u1"))
	if empty, err := s.IsEmpty(); !empty || err != nil {
		t.Fatalf("IsEmpty = %v %v", empty, err)
	}
	for _, k := range []int64{5, -3, 100, 0} {
		if err := s.Put(k, "v"+string(rune('a'+k%26+3))); err != nil {
			t.Fatal(err)
		}
	}
	b.SetCurrentKey([]byte("u")) // prefix of u1: must not see u1's entries
	if err := s.Put(1, "other"); err != nil {
		t.Fatal(err)
	}
	b.SetCurrentKey([]byte("u1"))
	var keys []int64
	if err := s.Range(func(k int64, v string) bool { keys = append(keys, k); return true }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keys, []int64{-3, 0, 5, 100}) {
		t.Fatalf("Range keys = %v, want numeric order", keys)
	}
	for _, c := range []struct {
		from int64
		want []int64
	}{{-3, []int64{-3, 0, 5, 100}}, {1, []int64{5, 100}}, {5, []int64{5, 100}}, {101, nil}} {
		keys = keys[:0]
		if err := s.RangeFrom(c.from, func(k int64, v string) bool { keys = append(keys, k); return true }); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(keys, c.want) {
			t.Fatalf("RangeFrom(%d) keys = %v, want %v (and not u's)", c.from, keys, c.want)
		}
	}
	if ok, _ := s.Contains(5); !ok {
		t.Fatal("Contains(5) = false")
	}
	if err := s.Remove(5); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(5); ok {
		t.Fatal("removed entry still there")
	}
	if v, ok, _ := s.Get(100); !ok || v == "" {
		t.Fatal("Get(100) missing")
	}
	n := 0
	_ = s.Range(func(int64, string) bool { n++; return false })
	if n != 1 {
		t.Fatalf("Range did not stop: %d calls", n)
	}
	if err := s.Clear(); err != nil {
		t.Fatal(err)
	}
	if empty, _ := s.IsEmpty(); !empty {
		t.Fatal("not empty after Clear")
	}
	b.SetCurrentKey([]byte("u"))
	if v, ok, _ := s.Get(1); v != "other" || !ok {
		t.Fatalf("Clear of u1 touched u: %q %v", v, ok)
	}
}

type avg struct{}

type avgAcc struct{ Sum, N int64 }

func (avg) CreateAccumulator() avgAcc { return avgAcc{} }
func (avg) Add(a avgAcc, in int64) avgAcc {
	a.Sum += in
	a.N++
	return a
}
func (avg) Result(a avgAcc) float64 { return float64(a.Sum) / float64(a.N) }

func TestAggregatingAndReducingState(t *testing.T) { eachLayout(t, testAggregatingAndReducingState) }

func testAggregatingAndReducingState(t *testing.T, b *Backend, _ *fakeClock) {
	a, err := NewAggregatingState[int64, avgAcc, float64](b, "avg", JSONCodec[avgAcc]{}, avg{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReducingState(b, "max", Int64Codec{}, func(x, y int64) int64 { return max(x, y) })
	if err != nil {
		t.Fatal(err)
	}
	b.SetCurrentKey([]byte("k"))
	if _, ok, _ := a.Get(); ok {
		t.Fatal("empty aggregate has a result")
	}
	for _, v := range []int64{-5, 1, 10} {
		if err := a.Add(v); err != nil {
			t.Fatal(err)
		}
		if err := r.Add(v); err != nil {
			t.Fatal(err)
		}
	}
	if got, ok, err := a.Get(); got != 2 || !ok || err != nil {
		t.Fatalf("avg = %v %v %v", got, ok, err)
	}
	if got, ok, _ := r.Get(); got != 10 || !ok {
		t.Fatalf("max = %v %v", got, ok)
	}
	// The first value of a reducing state is taken as is, not reduced with
	// a zero value.
	b.SetCurrentKey([]byte("neg"))
	if err := r.Add(-7); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := r.Get(); got != -7 {
		t.Fatalf("max of {-7} = %d", got)
	}
	if err := r.Clear(); err != nil {
		t.Fatal(err)
	}
	if err := a.Clear(); err != nil {
		t.Fatal(err)
	}
	b.SetCurrentKey([]byte("k"))
	if _, ok, _ := a.Get(); !ok {
		t.Fatal("Clear of key neg cleared key k")
	}
}

func TestTTLValue(t *testing.T) { eachLayout(t, testTTLValue) }

func testTTLValue(t *testing.T, b *Backend, clock *fakeClock) {
	s, err := NewValueState(b, "v", StringCodec{}, WithTTL(TTLConfig{TTL: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	b.SetCurrentKey([]byte("k"))
	if err := s.Put("x"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(9 * time.Second)
	if v, ok, _ := s.Get(); !ok || v != "x" {
		t.Fatal("expired too early")
	}
	clock.Advance(time.Second)
	if _, ok, _ := s.Get(); ok {
		t.Fatal("value returned at its expiry")
	}
	// Cleanup on read: the entry is gone, even if the clock went back.
	clock.Advance(-time.Hour)
	if _, ok, _ := s.Get(); ok {
		t.Fatal("expired value not removed on read")
	}
	clock.Advance(time.Hour)

	// A write restarts the TTL (OnCreateAndWrite); a read does not.
	if err := s.Put("y"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(6 * time.Second)
	_, _, _ = s.Get()
	clock.Advance(6 * time.Second)
	if _, ok, _ := s.Get(); ok {
		t.Fatal("read restarted the TTL without UpdateOnRead")
	}
}

func TestTTLUpdateOnReadAndReturnExpired(t *testing.T) {
	eachLayout(t, testTTLUpdateOnReadAndReturnExpired)
}

func testTTLUpdateOnReadAndReturnExpired(t *testing.T, b *Backend, clock *fakeClock) {
	s, err := NewValueState(b, "v", Int64Codec{}, WithTTL(TTLConfig{TTL: 10 * time.Second, UpdateOnRead: true}))
	if err != nil {
		t.Fatal(err)
	}
	b.SetCurrentKey([]byte("k"))
	_ = s.Put(1)
	for range 5 {
		clock.Advance(6 * time.Second)
		if _, ok, _ := s.Get(); !ok {
			t.Fatal("read did not restart the TTL")
		}
	}
	clock.Advance(11 * time.Second)
	if _, ok, _ := s.Get(); ok {
		t.Fatal("not expired")
	}

	r, err := NewValueState(b, "r", Int64Codec{}, WithTTL(TTLConfig{TTL: time.Second, ReturnExpired: true}))
	if err != nil {
		t.Fatal(err)
	}
	_ = r.Put(2)
	clock.Advance(time.Minute)
	if v, ok, _ := r.Get(); !ok || v != 2 {
		t.Fatal("ReturnExpired did not return the expired value")
	}
	if n, err := b.PurgeExpired(0); n != 1 || err != nil {
		t.Fatalf("PurgeExpired = %d, %v; want 1", n, err)
	}
	if _, ok, _ := r.Get(); ok {
		t.Fatal("purged value still returned")
	}
}

func TestTTLListAndMap(t *testing.T) { eachLayout(t, testTTLListAndMap) }

func testTTLListAndMap(t *testing.T, b *Backend, clock *fakeClock) {
	l, err := NewListState(b, "l", StringCodec{}, WithTTL(TTLConfig{TTL: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewMapState(b, "m", StringCodec{}, Int64Codec{}, WithTTL(TTLConfig{TTL: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	b.SetCurrentKey([]byte("k"))
	_ = l.Add("old")
	_ = m.Put("old", 1)
	clock.Advance(5 * time.Second)
	_ = l.Add("new")
	_ = m.Put("new", 2)
	clock.Advance(5 * time.Second) // "old" entries expire now
	if got, _ := l.Get(); !slices.Equal(got, []string{"new"}) {
		t.Fatalf("list = %q, want per-element expiry", got)
	}
	var keys []string
	_ = m.Range(func(k string, v int64) bool { keys = append(keys, k); return true })
	if !slices.Equal(keys, []string{"new"}) {
		t.Fatalf("map keys = %q", keys)
	}
	if ok, _ := m.Contains("old"); ok {
		t.Fatal("expired map entry visible")
	}
	// PurgeExpired removes entries nobody reads.
	b.SetCurrentKey([]byte("unread"))
	_ = l.AddAll("a", "b")
	_ = m.Put("a", 1)
	v, _ := NewValueState(b, "v", StringCodec{}, WithTTL(TTLConfig{TTL: time.Second}))
	_ = v.Put("z")
	clock.Advance(time.Hour)
	n, err := b.PurgeExpired(0)
	if err != nil {
		t.Fatal(err)
	}
	// "new" list element + "new" map entry of k, 2 list elements + 1 map entry + 1 value of "unread".
	if n != 6 {
		t.Fatalf("PurgeExpired removed %d, want 6", n)
	}
	it, _ := b.DB().NewIter(nil)
	defer it.Close()
	if it.First() {
		t.Fatalf("key %q survived PurgeExpired", it.Key())
	}
}

func TestCodecsRoundTripAndOrder(t *testing.T) {
	i64 := func(a, b int64) bool {
		ea, _ := Int64Codec{}.Append(nil, a)
		eb, _ := Int64Codec{}.Append(nil, b)
		da, err := Int64Codec{}.Decode(ea)
		return err == nil && da == a && (a < b) == (string(ea) < string(eb))
	}
	f64 := func(a, b float64) bool {
		ea, _ := Float64Codec{}.Append(nil, a)
		eb, _ := Float64Codec{}.Append(nil, b)
		da, err := Float64Codec{}.Decode(ea)
		return err == nil && da == a && (a < b) == (string(ea) < string(eb))
	}
	u64 := func(a uint64) bool {
		e, _ := Uint64Codec{}.Append([]byte("prefix"), a)
		d, err := Uint64Codec{}.Decode(e[6:])
		return err == nil && d == a
	}
	for _, f := range []any{i64, f64, u64} {
		if err := quick.Check(f, nil); err != nil {
			t.Error(err)
		}
	}
	if !f64(math.Inf(-1), -1) || !f64(-1, 0) || !f64(0, math.SmallestNonzeroFloat64) {
		t.Error("float order at the edges")
	}
	if _, err := (Int64Codec{}).Decode([]byte{1}); !errors.Is(err, ErrCorruptValue) {
		t.Errorf("short int64: %v", err)
	}
	type rec struct{ A string }
	e, _ := JSONCodec[rec]{}.Append(nil, rec{"x"})
	if d, err := (JSONCodec[rec]{}).Decode(e); err != nil || d.A != "x" {
		t.Errorf("json: %v %v", d, err)
	}
	src := []byte("abc")
	d, _ := BytesCodec{}.Decode(src)
	src[0] = 'z'
	if string(d) != "abc" {
		t.Error("BytesCodec.Decode aliases its input")
	}
}

// The hot path allocates nothing beyond what Pebble itself does: a Put and
// a Get through ValueState cost no more allocations than the same raw Pebble
// calls.
func TestKeyedHotPathAllocations(t *testing.T) { eachLayout(t, testKeyedHotPathAllocations) }

func testKeyedHotPathAllocations(t *testing.T, b *Backend, _ *fakeClock) {
	s, _ := NewValueState(b, "v", Int64Codec{})
	key := []byte("some-user-key")
	b.SetCurrentKey(key)
	_ = s.Put(1)
	apiPut := testing.AllocsPerRun(200, func() {
		b.SetCurrentKey(key)
		_ = s.Put(2)
	})
	apiGet := testing.AllocsPerRun(200, func() {
		b.SetCurrentKey(key)
		_, _, _ = s.Get()
	})
	raw := []byte("raw-key-of-similar-size")
	val := make([]byte, 8)
	rawPut := testing.AllocsPerRun(200, func() { _ = b.DB().Set(raw, val, b.wo) })
	rawGet := testing.AllocsPerRun(200, func() {
		v, c, err := b.DB().Get(raw)
		if err == nil {
			_ = v
			_ = c.Close()
		}
	})
	t.Logf("allocs/op: api put %.1f get %.1f; raw put %.1f get %.1f", apiPut, apiGet, rawPut, rawGet)
	if apiPut > rawPut || apiGet > rawGet {
		t.Fatalf("state API allocates more than raw Pebble: put %.1f > %.1f or get %.1f > %.1f", apiPut, rawPut, apiGet, rawGet)
	}
}
