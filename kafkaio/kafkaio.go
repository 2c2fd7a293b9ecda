package kafkaio

import (
	"errors"
	"fmt"
	"time"
)

// ErrUnknown is wrapped by the errors of the Parse functions: a setting
// that is none of its allowed values.
var ErrUnknown = errors.New("kafkaio: unknown setting value")

// StartKind says where a source starts reading partitions that have no
// offset in a restored checkpoint.
type StartKind int

// The start kinds.
const (
	// StartEarliest starts at the log start offset (the default).
	StartEarliest StartKind = iota
	// StartLatest starts at the last stable offset: only records
	// committed after the start are read.
	StartLatest
	// StartTimestamp starts at the first record whose timestamp is at or
	// after Start.Time (the end, if there is none).
	StartTimestamp
)

// Start is where a source starts reading the partitions that have no
// offset in a restored checkpoint, that is when the job has no completed
// checkpoint (DESIGN.md section 6). The zero value is StartEarliest.
type Start struct {
	Kind StartKind
	// Time is the timestamp of StartTimestamp.
	Time time.Time
}

// StartAt returns the start at the first record at or after t.
func StartAt(t time.Time) Start { return Start{Kind: StartTimestamp, Time: t} }

// ParseStart parses the YAML form of a start: "earliest", "latest" or an
// RFC 3339 time (fractional seconds allowed). Empty is StartEarliest.
func ParseStart(s string) (Start, error) {
	switch s {
	case "", "earliest":
		return Start{Kind: StartEarliest}, nil
	case "latest":
		return Start{Kind: StartLatest}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return Start{}, fmt.Errorf("%w: start %q: want earliest, latest or an RFC 3339 time", ErrUnknown, s)
	}
	return StartAt(t), nil
}

// Valid reports whether s's Kind is one of the start kinds.
func (s Start) Valid() bool { return s.Kind >= StartEarliest && s.Kind <= StartTimestamp }

// String returns "earliest", "latest" or the RFC 3339 time: the form
// ParseStart reads.
func (s Start) String() string {
	switch s.Kind {
	case StartEarliest:
		return "earliest"
	case StartLatest:
		return "latest"
	case StartTimestamp:
		return s.Time.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("StartKind(%d)", int(s.Kind))
}

// OnError is what happens to a record that fails: one that does not
// decode, at the source's edge (its format's check, its timestamp field)
// or in the task (the source's codec), or one on which a step's function
// fails. The zero value is OnErrorFail.
type OnError string

// The on-error policies. Every failed record is counted
// (weir_source_decode_errors_total at the source's edge,
// weir_record_errors_total in the task).
const (
	// OnErrorFail stops the task with an error naming the record (the
	// default: nothing is dropped unless someone said so).
	OnErrorFail OnError = "fail"
	// OnErrorSkip drops the record (logged at debug level).
	OnErrorSkip OnError = "skip"
	// OnErrorDeadLetter writes the record to the dead-letter topic, with
	// weir-dlq-* headers naming its origin and the error, and drops it
	// from the stream.
	OnErrorDeadLetter OnError = "dead-letter"
)

// OnErrors returns the on-error policies, in the order the docs list them.
func OnErrors() []OnError { return []OnError{OnErrorFail, OnErrorSkip, OnErrorDeadLetter} }

// ParseOnError parses a policy name; empty is OnErrorFail.
func ParseOnError(s string) (OnError, error) {
	switch p := OnError(s); p {
	case "":
		return OnErrorFail, nil
	case OnErrorFail, OnErrorSkip, OnErrorDeadLetter:
		return p, nil
	}
	return "", fmt.Errorf("%w: on_error %q: want fail, skip or dead-letter", ErrUnknown, s)
}

// TimestampFormat is how a top-level JSON field holds a record's event
// time (`timestamp: {field, format}`). The zero value is TimestampUnixMs.
type TimestampFormat string

// The timestamp formats.
const (
	// TimestampUnixMs is a JSON number of milliseconds since the Unix
	// epoch (a fraction is truncated toward minus infinity).
	TimestampUnixMs TimestampFormat = "unix_ms"
	// TimestampUnixS is a JSON number of seconds since the Unix epoch,
	// possibly with a fraction (kept to the millisecond).
	TimestampUnixS TimestampFormat = "unix_s"
	// TimestampRFC3339 is a JSON string in RFC 3339 form, with or without
	// fractional seconds ("2026-12-01T19:30:00.250Z").
	TimestampRFC3339 TimestampFormat = "rfc3339"
)

// TimestampFormats returns the timestamp formats, in the order the docs
// list them.
func TimestampFormats() []TimestampFormat {
	return []TimestampFormat{TimestampUnixMs, TimestampUnixS, TimestampRFC3339}
}

// ParseTimestampFormat parses a timestamp format; empty is
// TimestampUnixMs.
func ParseTimestampFormat(s string) (TimestampFormat, error) {
	switch f := TimestampFormat(s); f {
	case "":
		return TimestampUnixMs, nil
	case TimestampUnixMs, TimestampUnixS, TimestampRFC3339:
		return f, nil
	}
	return "", fmt.Errorf("%w: timestamp format %q: want unix_ms, unix_s or rfc3339", ErrUnknown, s)
}

// Delivery is a sink's guarantee. The zero value is DeliveryExactlyOnce.
type Delivery string

// The deliveries.
const (
	// DeliveryExactlyOnce is the two-phase-commit sink over Kafka
	// transactions, committed when a checkpoint completes (DESIGN.md
	// sections 5, 6 and 8).
	DeliveryExactlyOnce Delivery = "exactly-once"
	// DeliveryAtLeastOnce writes with an idempotent producer flushed at
	// each checkpoint: nothing is lost, and the records after the last
	// completed checkpoint are written again after a restore.
	DeliveryAtLeastOnce Delivery = "at-least-once"
)

// Deliveries returns the deliveries, in the order the docs list them.
func Deliveries() []Delivery { return []Delivery{DeliveryExactlyOnce, DeliveryAtLeastOnce} }

// ParseDelivery parses a delivery; empty is DeliveryExactlyOnce.
func ParseDelivery(s string) (Delivery, error) {
	switch d := Delivery(s); d {
	case "":
		return DeliveryExactlyOnce, nil
	case DeliveryExactlyOnce, DeliveryAtLeastOnce:
		return d, nil
	}
	return "", fmt.Errorf("%w: delivery %q: want exactly-once or at-least-once", ErrUnknown, s)
}
