package source

import (
	"errors"
	"fmt"
)

// Sentinel errors of the source, for errors.Is.
var (
	// ErrClosed is returned by a Source's methods after Close.
	ErrClosed = errors.New("source: closed")

	// ErrConfig wraps every problem New finds in a Config.
	ErrConfig = errors.New("source: invalid source config")

	// ErrBarrierOrder reports a barrier whose checkpoint ID is not
	// higher than one already accepted (by Source.Barrier, or by the task's
	// trigger queue). Checkpoint IDs only grow (DESIGN.md section 13,
	// invariant 2), so the trigger is a duplicate or stale and is ignored.
	ErrBarrierOrder = errors.New("source: barrier checkpoint ID not increasing")

	// ErrOffsetLost is matched by every error that says the source
	// cannot continue from the offset it must read next without losing or
	// replacing records: OffsetOutOfRangeError and DataLossError.
	ErrOffsetLost = errors.New("source: offset lost")
)

// OffsetOutOfRangeError reports that the broker has no record at the
// offset the source must read next: typically a restore from a checkpoint
// whose offsets retention has since deleted, or a topic that was recreated.
// The source never resets silently (that would lose or repeat records); the
// task stops and a person decides.
type OffsetOutOfRangeError struct {
	Topic     string
	Partition int32
	// Offset is the offset the source asked for.
	Offset int64
	// LogStartOffset and HighWatermark are the partition's bounds as the
	// broker reported them when the error was found, or -1 when unknown.
	LogStartOffset, HighWatermark int64
	// Err is the broker's error (kerr.OffsetOutOfRange).
	Err error
}

func (e *OffsetOutOfRangeError) Error() string {
	hint := ""
	switch {
	case e.LogStartOffset >= 0 && e.Offset < e.LogStartOffset:
		hint = fmt.Sprintf(" (below the log start offset %d: the records were deleted, by retention or DeleteRecords)", e.LogStartOffset)
	case e.HighWatermark >= 0 && e.Offset > e.HighWatermark:
		hint = fmt.Sprintf(" (above the high watermark %d: was the topic recreated?)", e.HighWatermark)
	}
	return fmt.Sprintf("source: topic %s partition %d: offset %d out of range%s; not resetting, which would skip or repeat records: "+
		"raise the topic's retention so checkpoints stay readable, or start the job without this checkpoint: %v",
		e.Topic, e.Partition, e.Offset, hint, e.Err)
}

// Unwrap returns the broker's error.
func (e *OffsetOutOfRangeError) Unwrap() error { return e.Err }

// Is matches ErrOffsetLost.
func (e *OffsetOutOfRangeError) Is(target error) bool { return target == ErrOffsetLost }

// DataLossError reports that the broker lost records the source had
// read or was about to read (franz-go's kgo.ErrDataLoss, for example after an
// unclean leader election or retention deleting a segment the source was
// still reading). Exactly-once is no longer possible from this position.
type DataLossError struct {
	Topic     string
	Partition int32
	// Offset is the source's next offset when the loss was reported.
	Offset int64
	// Err is the *kgo.ErrDataLoss with the details.
	Err error
}

func (e *DataLossError) Error() string {
	return fmt.Sprintf("source: topic %s partition %d: data loss at offset %d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

// Unwrap returns the *kgo.ErrDataLoss.
func (e *DataLossError) Unwrap() error { return e.Err }

// Is matches ErrOffsetLost.
func (e *DataLossError) Is(target error) bool { return target == ErrOffsetLost }

// FetchError is a fetch error franz-go does not retry itself
// (authorization, unsupported versions, a topic that keeps being unknown...).
type FetchError struct {
	Topic     string
	Partition int32
	// Offset is the source's next offset for the partition.
	Offset int64
	Err    error
}

func (e *FetchError) Error() string {
	return fmt.Sprintf("source: topic %s partition %d offset %d: fetch: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

// Unwrap returns the fetch error.
func (e *FetchError) Unwrap() error { return e.Err }

// DecodeError is a record the Decoder rejected under kafkaio.OnErrorFail.
type DecodeError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("source: topic %s partition %d offset %d: decode: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

// Unwrap returns the decoder's error.
func (e *DecodeError) Unwrap() error { return e.Err }
