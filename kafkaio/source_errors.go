package kafkaio

import (
	"errors"
	"fmt"
)

// Sentinel errors of the source, for errors.Is.
var (
	// ErrSourceClosed is returned by a Source's methods after Close.
	ErrSourceClosed = errors.New("kafkaio: source closed")

	// ErrSourceConfig wraps every problem NewSource finds in a SourceConfig.
	ErrSourceConfig = errors.New("kafkaio: invalid source config")

	// ErrSourceBarrierOrder reports a barrier whose checkpoint ID is not
	// higher than one the source already accepted. Checkpoint IDs only grow
	// (DESIGN.md section 13, invariant 2), so the trigger is a duplicate or
	// stale and the source ignores it.
	ErrSourceBarrierOrder = errors.New("kafkaio: barrier checkpoint ID not increasing")

	// ErrSourceOffsetLost is matched by every error that says the source
	// cannot continue from the offset it must read next without losing or
	// replacing records: SourceOffsetOutOfRangeError and SourceDataLossError.
	ErrSourceOffsetLost = errors.New("kafkaio: source offset lost")
)

// SourceOffsetOutOfRangeError reports that the broker has no record at the
// offset the source must read next: typically a restore from a checkpoint
// whose offsets retention has since deleted, or a topic that was recreated.
// The source never resets silently (that would lose or repeat records); the
// task stops and a person decides.
type SourceOffsetOutOfRangeError struct {
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

func (e *SourceOffsetOutOfRangeError) Error() string {
	hint := ""
	switch {
	case e.LogStartOffset >= 0 && e.Offset < e.LogStartOffset:
		hint = fmt.Sprintf(" (below the log start offset %d: the records were deleted, by retention or DeleteRecords)", e.LogStartOffset)
	case e.HighWatermark >= 0 && e.Offset > e.HighWatermark:
		hint = fmt.Sprintf(" (above the high watermark %d: was the topic recreated?)", e.HighWatermark)
	}
	return fmt.Sprintf("kafkaio: source topic %s partition %d: offset %d out of range%s; not resetting, which would skip or repeat records: "+
		"raise the topic's retention so checkpoints stay readable, or start the job without this checkpoint: %v",
		e.Topic, e.Partition, e.Offset, hint, e.Err)
}

// Unwrap returns the broker's error.
func (e *SourceOffsetOutOfRangeError) Unwrap() error { return e.Err }

// Is matches ErrSourceOffsetLost.
func (e *SourceOffsetOutOfRangeError) Is(target error) bool { return target == ErrSourceOffsetLost }

// SourceDataLossError reports that the broker lost records the source had
// read or was about to read (franz-go's kgo.ErrDataLoss, for example after an
// unclean leader election or retention deleting a segment the source was
// still reading). Exactly-once is no longer possible from this position.
type SourceDataLossError struct {
	Topic     string
	Partition int32
	// Offset is the source's next offset when the loss was reported.
	Offset int64
	// Err is the *kgo.ErrDataLoss with the details.
	Err error
}

func (e *SourceDataLossError) Error() string {
	return fmt.Sprintf("kafkaio: source topic %s partition %d: data loss at offset %d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

// Unwrap returns the *kgo.ErrDataLoss.
func (e *SourceDataLossError) Unwrap() error { return e.Err }

// Is matches ErrSourceOffsetLost.
func (e *SourceDataLossError) Is(target error) bool { return target == ErrSourceOffsetLost }

// SourceFetchError is a fetch error franz-go does not retry itself
// (authorization, unsupported versions, a topic that keeps being unknown...).
type SourceFetchError struct {
	Topic     string
	Partition int32
	// Offset is the source's next offset for the partition.
	Offset int64
	Err    error
}

func (e *SourceFetchError) Error() string {
	return fmt.Sprintf("kafkaio: source topic %s partition %d offset %d: fetch: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

// Unwrap returns the fetch error.
func (e *SourceFetchError) Unwrap() error { return e.Err }

// SourceDecodeError is a record the Decoder rejected under DecodeFail.
type SourceDecodeError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *SourceDecodeError) Error() string {
	return fmt.Sprintf("kafkaio: source topic %s partition %d offset %d: decode: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

// Unwrap returns the decoder's error.
func (e *SourceDecodeError) Unwrap() error { return e.Err }
