// Package promreg registers Prometheus collectors that another instance of
// the same component in this process may have registered already (the
// tasks of a replica, the memberships of its successive sessions): the
// collector already there is adopted, so that series and counts carry on.
package promreg

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c with reg, or returns the collector already
// registered under c's description if it is of c's concrete type (a Gauge
// has Inc and Add, so the interface alone would let it pass for a
// Counter). added reports whether c itself was registered, which the
// caller may undo with reg.Unregister. A nil reg registers nothing.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (got C, added bool, err error) {
	if reg == nil {
		return c, false, nil
	}
	err = reg.Register(c)
	if err == nil {
		return c, true, nil
	}
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		return c, false, err
	}
	existing, ok := are.ExistingCollector.(C)
	if !ok || reflect.TypeOf(are.ExistingCollector) != reflect.TypeOf(c) {
		return c, false, fmt.Errorf("a %T is registered under the name of this %T", are.ExistingCollector, c)
	}
	return existing, false, nil
}

// Group registers several collectors with Register and can undo, on
// failure, what it registered itself (never what it adopted). The first
// error stops it: later Adds return their collector unregistered.
type Group struct {
	reg   prometheus.Registerer
	added []prometheus.Collector
	err   error
}

// NewGroup returns a Group registering with reg.
func NewGroup(reg prometheus.Registerer) *Group { return &Group{reg: reg} }

// Add registers c in g (see Register) and returns the collector to use.
func Add[C prometheus.Collector](g *Group, c C) C {
	if g.err != nil {
		return c
	}
	got, added, err := Register(g.reg, c)
	if err != nil {
		g.err = err
		return c
	}
	if added {
		g.added = append(g.added, got)
	}
	return got
}

// Err returns the first error of an Add.
func (g *Group) Err() error { return g.err }

// Undo unregisters every collector g registered itself.
func (g *Group) Undo() {
	for _, c := range g.added {
		g.reg.Unregister(c)
	}
	g.added = nil
}
