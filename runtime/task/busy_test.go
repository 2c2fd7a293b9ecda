package task

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestBusyTime: a task's second is split into idle (polls), backpressured
// (timed writes, one in busySample, counted for all) and busy (the rest),
// published once a second as milliseconds per second, and never more than
// the wall time.
func TestBusyTime(t *testing.T) {
	g := func() prometheus.Gauge { return prometheus.NewGauge(prometheus.GaugeOpts{Name: "g"}) }
	b := busyTime{on: true, busyG: g(), blockedG: g(), idleG: g()}
	at := time.Unix(1000, 0)
	b.publish(at) // starts the first window

	b.polledFor(300 * time.Millisecond)
	timed := 0
	for range 10 * busySample {
		if b.timeWrite() {
			timed++
			b.wroteFor(10 * time.Millisecond) // stands for busySample writes
		}
	}
	if timed != 10 {
		t.Fatalf("%d of %d writes timed, want 10", timed, 10*busySample)
	}
	b.publish(at.Add(500 * time.Millisecond)) // not a second yet: nothing published
	if v := testutil.ToFloat64(b.idleG); v != 0 {
		t.Fatalf("published after half a second: idle %v", v)
	}
	b.publish(at.Add(2 * time.Second))
	// 2 s: 300 ms idle, 10 × 16 × 10 ms = 1.6 s blocked, 100 ms busy.
	for name, want := range map[string]float64{"idle": 150, "backpressured": 800, "busy": 50} {
		gauge := map[string]prometheus.Gauge{"idle": b.idleG, "backpressured": b.blockedG, "busy": b.busyG}[name]
		if got := testutil.ToFloat64(gauge); got < want-0.001 || got > want+0.001 {
			t.Errorf("%s: %v ms/s, want %v", name, got, want)
		}
	}

	// A sampled write that stands for more than the second is capped: the
	// three always add up to 1000 ms/s.
	b.polledFor(400 * time.Millisecond)
	for !b.timeWrite() {
	}
	b.wroteFor(time.Second)
	b.publish(at.Add(3 * time.Second))
	idle, blocked, busy := testutil.ToFloat64(b.idleG), testutil.ToFloat64(b.blockedG), testutil.ToFloat64(b.busyG)
	if idle != 400 || blocked != 600 || busy != 0 {
		t.Fatalf("idle %v, backpressured %v, busy %v ms/s; want 400, 600, 0", idle, blocked, busy)
	}
}
