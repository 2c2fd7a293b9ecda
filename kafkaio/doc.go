// Package kafkaio owns the settings of a job's Kafka inputs and outputs that
// the Go job API (stream), the YAML job language (config, pipeline) and the
// Kafka reader and writer (kafkaio/source, kafkaio/sink) share: where a
// source starts (Start), what happens to a record that does not decode or
// that a step fails on (OnError), how a JSON field holds a record's event
// time (TimestampFormat), and a sink's guarantee (Delivery).
//
// Each is defined here once, with the names users write in YAML, so that
// no other package keeps a copy to convert from. Its sub-packages do the
// Kafka I/O; this package does none: it imports the standard library
// only, reads no clock and keeps no state.
package kafkaio
