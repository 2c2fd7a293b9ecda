package stream

import (
	"fmt"
	"time"
)

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

// Emitter takes the records a task writes: to its sinks (Emit) and, in a
// stage that ends in a shuffle, to the shuffle topics of the stages
// downstream (Shuffle).
//
// r's byte slices (Key, Value, header values) and its Headers slice are
// only valid during a call: the task reuses its encoding buffers, so an
// Emitter that keeps r (a Kafka producer does) must copy them. A zero
// Timestamp means "let the producer set it".
type Emitter interface {
	// Emit writes r to sink number sink (its index in Job.Sinks); r.Topic
	// is the sink's topic.
	Emit(sink int, r Record) error
	// Shuffle writes r to shuffle edge number edge (its index in
	// Job.Shuffles): r.Key is the new key (the KeyBy's), r.Value the
	// element encoded with the KeyBy's codec, r.Timestamp and r.Headers
	// those of the element; r.Topic is empty (the runtime knows the
	// edge's topic from the plan). The runtime chooses the partition from
	// r.Key and adds its own headers.
	Shuffle(edge int, r Record) error
}

// EmitterFunc adapts a function to an Emitter of a stage that writes only
// sinks: its Shuffle fails.
type EmitterFunc func(sink int, r Record) error

// Emit calls f(sink, r).
func (f EmitterFunc) Emit(sink int, r Record) error { return f(sink, r) }

// Shuffle returns an error: an EmitterFunc takes sink records only.
func (f EmitterFunc) Shuffle(edge int, _ Record) error {
	return fmt.Errorf("stream: a record for shuffle %d given to an EmitterFunc, which takes sink records only", edge)
}
