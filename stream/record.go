package stream

import "time"

// Record is a Kafka record as the runtime reads and writes it: key, value,
// timestamp and headers, plus its origin (Topic, Partition, Offset) when it
// was read from an input topic. In a record handed to Emitter.Emit, Topic is
// the sink's topic and Partition and Offset are zero.
type Record struct {
	Key, Value []byte
	Timestamp  time.Time
	Headers    []Header
	Topic      string
	Partition  int32
	Offset     int64
}

// Header is one Kafka record header.
type Header struct {
	Key   string
	Value []byte
}

// Emitter takes the records a task writes to its sinks.
type Emitter interface {
	// Emit writes r to sink number sink (its index in Job.Sinks).
	//
	// r's byte slices (Key, Value, header values) and its Headers slice are
	// only valid during the call: the task reuses its encoding buffers, so
	// an Emitter that keeps r (a Kafka producer does) must copy them.
	// A zero Timestamp means "let the producer set it".
	Emit(sink int, r Record) error
}

// EmitterFunc adapts a function to Emitter.
type EmitterFunc func(sink int, r Record) error

// Emit calls f(sink, r).
func (f EmitterFunc) Emit(sink int, r Record) error { return f(sink, r) }
