// Package kafkaio owns everything Weir says to Kafka, on franz-go: sources
// that read partitions and inject barriers, the transactional two-phase-commit
// sink, the control-topic transport, and admin helpers (topic creation,
// lingering transactions).
package kafkaio
