// Package source is Weir's Kafka source: a Source reads the partitions of a
// task's topics read_committed, places each barrier its task asks for between
// two records (Barrier returns the exact offsets it covers), commits the
// offsets of a completed checkpoint, and reports lag. Records are decoded as
// they are read (Decoder); those that fail are dropped, stop the task, or go
// to a dead-letter topic, as the on-error policy (Config.OnError) says.
package source
