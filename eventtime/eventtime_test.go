package eventtime

import (
	"encoding/json"
	"testing"
	"time"
)

// TestStatesEncode: the states are small plain JSON, and MinWatermark (the
// state of a task that saw nothing) survives the round trip exactly.
func TestStatesEncode(t *testing.T) {
	v := NewValve(2)
	v.Advance(0, 1764612345678)
	v.SetIdle(1, true)
	b, err := json.Marshal(v.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"inputs":[1764612345678,-9223372036854775808],"idle":[false,true],"output":1764612345678}`; string(b) != want {
		t.Fatalf("valve state %s, want %s", b, want)
	}
	var s ValveState
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if s.Inputs[1] != MinWatermark {
		t.Fatalf("MinWatermark decoded as %d", s.Inputs[1])
	}
	g, err := NewGenerator(time.Second, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	b, err = json.Marshal(g.Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"max_timestamp":-9223372036854775808}`; string(b) != want {
		t.Fatalf("generator state %s, want %s", b, want)
	}
}

// TestRestoreNeverGoesBack: restoring an older state than a generator or
// valve has already is ignored where it would lower the watermark.
func TestRestoreNeverGoesBack(t *testing.T) {
	g, err := NewGenerator(0, 0, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	g.Observe(100, time.Time{})
	g.Restore(GeneratorState{MaxTimestamp: 50})
	if wm := g.Watermark(); wm != 99 {
		t.Fatalf("generator watermark after restoring an older state: %d, want 99", wm)
	}
	v := NewValve(1)
	v.Advance(0, 100)
	if err := v.Restore(ValveState{Inputs: []int64{40}, Idle: []bool{false}, Output: 40}); err != nil {
		t.Fatal(err)
	}
	if wm, _ := v.Output(); wm != 100 {
		t.Fatalf("valve output after restoring an older state: %d, want 100", wm)
	}
}

// TestNoAllocations: the per-record and per-watermark calls do not allocate.
func TestNoAllocations(t *testing.T) {
	now := time.Unix(0, 0)
	g, err := NewGenerator(time.Second, time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	v := NewValve(64)
	var ts int64
	if n := testing.AllocsPerRun(1000, func() {
		ts++
		g.Observe(ts, now)
		i := int(ts % 64)
		v.Advance(i, g.Watermark())
		v.SetIdle(i, g.Idle(now))
		v.Output()
	}); n != 0 {
		t.Fatalf("%v allocations per record", n)
	}
}

var sinkWM int64

func BenchmarkObserve(b *testing.B) {
	now := time.Unix(0, 0)
	g, err := NewGenerator(5*time.Second, 30*time.Second, now)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := range b.N {
		g.Observe(int64(i^0x5), now) // slightly out of order
	}
	sinkWM = g.Watermark()
}

// BenchmarkAdvance: a task reading 128 partitions from 8 upstream tasks
// (1024 valve inputs), each advancing in turn in rounds, as watermark
// records arrive.
func BenchmarkAdvance(b *testing.B) {
	const n = 1024
	v := NewValve(n)
	b.ReportAllocs()
	for i := range b.N {
		v.Advance(i%n, int64(i/n))
	}
	sinkWM, _ = v.Output()
}
