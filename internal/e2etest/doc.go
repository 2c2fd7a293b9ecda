// Package e2etest holds what Weir's end-to-end tests (e2e, e2e/faults)
// share: building bin/processor, writing a YAML job, running replicas as
// separate processes, producing input, and independent verifiers: of
// count jobs (Verifier) and of window jobs (WindowReader).
//
// The verifiers and the control-topic watcher read Kafka with their own raw
// franz-go consumers (read_committed) and decode the output and control
// records by hand: they share no code with Weir's source, sink or control
// packages, so a defect there cannot hide itself from the check.
//
// It must not be imported by product code. Nothing in it keeps
// package-level state; every helper takes the test it reports to.
package e2etest
