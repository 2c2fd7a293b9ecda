package state

import (
	"context"
	"slices"
)

// SetOperatorState replaces the operator state that the snapshot's manifest
// will hold. Call it before Run, from the goroutine that will call Run.
func (s *Snapshot) SetOperatorState(operatorState []byte) {
	b := slices.Clone(operatorState)
	s.opStateFn = func(context.Context) ([]byte, error) { return b, nil }
}

// SetOperatorStateFunc makes fn the source of the operator state that the
// snapshot's manifest will hold. Run calls it once, after it has uploaded
// every file and before it writes the manifest, so that the uploads overlap
// whatever fn waits for: a two-phase-commit sink knows the handles of the
// transactions it pre-committed at the barrier only once their flush is
// done. If fn fails, Run fails with its error. Call it before Run, from the
// goroutine that will call Run.
func (s *Snapshot) SetOperatorStateFunc(fn func(context.Context) ([]byte, error)) {
	s.opStateFn = fn
}
