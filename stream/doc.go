// Package stream owns the Go API that defines a Weir job, and the operator
// chain that runs it inside a task.
//
// A job reads like its topology:
//
//	job := stream.NewJob("clicks-per-user")
//	clicks := stream.From(job, stream.KafkaSource{Topics: []string{"clicks"}}, stream.RawCodec{})
//	counts := stream.Count(clicks, "count")
//	stream.To(counts, stream.KafkaSink{Topic: "counts"}, stream.Int64Codec{})
//	if err := job.Build(); err != nil { ... }
//
// Builders never panic: the first problem (a nil function, a duplicate
// operator name, a keyed operator after KeyBy, a stream that reaches no
// sink...) is recorded, later builder calls do nothing, and Build returns
// it.
//
// # Keys
//
// Every element carries the key of the Kafka record it came from. Keyed
// operators (Process, Aggregate, Reduce, Count) keep their state per that
// key, which is only correct because the input topic is partitioned by it:
// task i reads partition i of every input topic, so all records of one key
// meet in one task. KeyBy changes the key that sinks write; a keyed operator
// downstream of KeyBy would need a shuffle (DESIGN.md section 9), so Build
// rejects it with ErrShuffle. Map, Filter and FlatMap never change the key.
//
// # Runtime contract
//
// The runtime (package runtime/task) asks a built job for its Sources and
// Sinks, and calls NewTask once per task with the task's state backend.
// The returned Task runs the whole operator chain of the stage, composed at
// NewTask time as closures: on the per-record path there is no reflection,
// no interface boxing and no allocation beyond what the user's functions and
// codecs do.
//
// # Timers
//
// Processing-time timers are keyed state (DESIGN.md section 7): they live in
// the task's Pebble database, in the map state named TimerStateName under
// the empty key, each entry keyed by (time, operator, record key) encoded so
// that Pebble's order is time order. They are therefore snapshotted and
// restored with the rest of the state. A timer registered twice for the
// same operator, key and time fires once.
//
// # Concurrency
//
// Build and the builder functions belong to one goroutine. A built Job is
// immutable and NewTask may be called from any goroutine. A Task belongs to
// the goroutine that drives it (the task goroutine, which also owns the
// state backend): its methods must not be called concurrently.
package stream
