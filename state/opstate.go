package state

import "slices"

// SetOperatorState replaces the operator state that the snapshot's manifest
// will hold. Call it before Run, from the goroutine that will call Run: a
// two-phase-commit sink knows the handles of the transactions it
// pre-committed at the barrier only once their flush, which the
// asynchronous part waits for, is done.
func (s *Snapshot) SetOperatorState(operatorState []byte) {
	s.opState = slices.Clone(operatorState)
}
