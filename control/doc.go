// Package control owns the messages of Weir's Kafka control topics (trigger,
// ack, commit) and their versioned JSON encoding, shared by the coordinator
// and the tasks. It imports the standard library only.
package control
