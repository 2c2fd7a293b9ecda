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
// operator name, a stream that reaches no sink, streams of two stages
// merged...) is recorded, later builder calls do nothing, and Build returns
// it.
//
// # Keys and stages
//
// Every element carries the key of the Kafka record it came from. Keyed
// operators (Process, Aggregate, Reduce, Count) keep their state per the
// current key. In the source stage, main, that is the record key, which is
// correct because the input topic is partitioned by it: task i reads
// partition i of every input topic, so all records of one key meet in one
// task. Map, Filter and FlatMap never change the key; a Transform may
// (Elem.SetKey) only if defined with ChangesKey, and Build rejects one
// whose stream reaches a keyed operator without a KeyBy (KeyByCurrent) in
// between.
//
// KeyBy changes it. A KeyBy whose stream reaches a keyed operator (directly
// or through stateless operators) is a shuffle point, and Build cuts the job
// there into stages (DESIGN.md section 9): the upstream stage runs the key
// function, encodes the element with the KeyBy's codec and hands it, with
// its new key, to Emitter.Shuffle; the runtime writes it to the shuffle
// topic's partition of that key's key group. The downstream stage reads the
// shuffle topic and runs everything after the KeyBy with the new key as the
// record key. A KeyBy that reaches no keyed operator stays in its stage and
// only changes the key that sinks write. Job.Stages, Job.Shuffles and
// Job.Graph show the result; package plan gives each stage its parallelism
// and tasks.
//
// A stream that went through a shuffle cannot meet one that did not (or one
// of another shuffle): a Merge of streams of two stages is an error.
//
// # Runtime contract
//
// The runtime (package runtime/task) asks a built job for its Sources,
// Sinks and Stages, and calls NewTask once per task with the task's stage
// and state backend. The returned Task runs the operator chain of that
// stage, composed at NewTask time as closures: on the per-record path there
// is no reflection, no interface boxing and no allocation beyond what the
// user's functions and codecs do.
//
// # Timers
//
// Processing-time timers are keyed state (DESIGN.md section 7): they live in
// the task's Pebble database, in the map state named TimerStateName under
// the empty key, each entry keyed by (time, operator, record key) encoded so
// that Pebble's order is time order. They are therefore snapshotted and
// restored with the rest of the state. A timer registered twice for the
// same operator, key and time fires once. Event-time timers have the same
// layout in EventTimerStateName and fire when the watermark reaches them
// (Task.AdvanceWatermark).
//
// # Event time
//
// A job uses event time if it has a Window or a Process defined
// WithEventTime (Job.EventTime): the runtime then computes watermarks from
// the sources' WatermarkSpec and calls Task.AdvanceWatermark. Window groups
// a key's records by event time (tumbling, sliding or session windows) and
// emits one WindowResult per window when the watermark passes its end plus
// the allowed lateness; records that come after their windows fired are
// late (TaskContext.OnLate, Windowing.LateTopic). docs/event-time.md
// describes it all.
//
// # Concurrency
//
// Build and the builder functions belong to one goroutine. A built Job is
// immutable and NewTask may be called from any goroutine. A Task belongs to
// the goroutine that drives it (the task goroutine, which also owns the
// state backend): its methods must not be called concurrently.
package stream
