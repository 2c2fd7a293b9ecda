// Package coordinator owns Weir's checkpoint coordinator.
//
// Its core (Core) is a pure, deterministic state machine in the shape of etcd
// raft's RawNode: inputs arrive through Step and Tick, and Ready lists what the
// owner must do, in order. The core performs no I/O, reads no clock, draws no
// random numbers and starts no goroutines; time and randomness are inputs.
// The runtime loop that drives the core over Kafka control topics lives beside
// it and keeps all I/O at the edges.
package coordinator
