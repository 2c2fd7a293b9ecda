package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRegisterAdoptsOnlyTheSameType(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "c_total", Help: "h"}
	first, added, err := Register(reg, prometheus.NewCounter(opts))
	if err != nil || !added {
		t.Fatalf("first: added %v, %v", added, err)
	}
	second, added, err := Register(reg, prometheus.NewCounter(opts))
	if err != nil || added || second != first {
		t.Fatalf("second: added %v, same %v, %v; want the first one adopted", added, second == first, err)
	}
	// Same name and help, but a gauge: Register calls it the same
	// collector; it must not be adopted as a Counter.
	if _, _, err := Register[prometheus.Counter](reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "c_total", Help: "h"})); err == nil {
		t.Fatal("a gauge was adopted as the registered counter")
	}
	if got, added, err := Register(nil, prometheus.NewCounter(opts)); err != nil || added || got == nil {
		t.Fatalf("nil registerer: %v, %v, %v", got, added, err)
	}
}

func TestGroupUndoesOnlyWhatItRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	kept := prometheus.NewCounter(prometheus.CounterOpts{Name: "kept_total", Help: "h"})
	reg.MustRegister(kept)
	g := NewGroup(reg)
	if got := Add(g, prometheus.NewCounter(prometheus.CounterOpts{Name: "kept_total", Help: "h"})); got != kept {
		t.Fatal("the registered counter was not adopted")
	}
	Add(g, prometheus.NewGauge(prometheus.GaugeOpts{Name: "new", Help: "h"}))
	Add(g, prometheus.NewGauge(prometheus.GaugeOpts{Name: "kept_total", Help: "other help"})) // conflict
	if g.Err() == nil {
		t.Fatal("no error for a conflicting registration")
	}
	g.Undo()
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "kept_total" {
		t.Fatalf("after Undo: %d families (%v), want only kept_total", len(mfs), err)
	}
}
