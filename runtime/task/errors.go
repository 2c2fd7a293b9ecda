package task

import (
	"errors"
	"strings"

	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio/source"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

// ErrFewerPartitions reports a restore from a checkpoint with state for
// more partitions of the input topics than they have now (a topic deleted
// and created again with fewer): the job stops with cause job, before its
// tasks write anything.
var ErrFewerPartitions = errors.New("task: input topics have fewer partitions than the checkpoint")

// PermanentError is a task failure that no retry or restart can fix: a
// record that does not decode under on_error: fail, or that an operator
// cannot process (a poison record: an expression that fails on it), an
// object store that refuses the job. The replica reports it to the coordinator (a
// control.Failure), which stops the job (DESIGN.md section 11).
type PermanentError struct {
	Cause control.FailureCause
	// Record is the input record that caused it, if one did.
	Record control.Position
	Err    error
}

func (e *PermanentError) Error() string { return e.Err.Error() }

// Unwrap returns the underlying error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Failure is the report of e for the coordinator.
func (e *PermanentError) Failure(gen uint64, id control.TaskID) control.Failure {
	reason := e.Err.Error()
	if len(reason) > 2048 {
		reason = strings.ToValidUTF8(reason[:2048], "") + "…"
	}
	return control.Failure{Gen: gen, Task: id, Cause: e.Cause, Reason: reason, Record: e.Record}
}

// Permanent returns err as a *PermanentError if no retry or restart can fix
// it, and nil otherwise.
func Permanent(err error) *PermanentError {
	var pe *PermanentError
	var dec *source.DecodeError
	var rec *stream.RecordError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe):
		return pe
	case errors.As(err, &dec):
		return &PermanentError{Cause: control.CauseRecord, Err: err,
			Record: control.Position{Topic: dec.Topic, Partition: dec.Partition, Offset: dec.Offset}}
	case errors.As(err, &rec) && (errors.Is(err, stream.ErrDecode) || errors.Is(err, stream.ErrPoison)):
		return &PermanentError{Cause: control.CauseRecord, Err: err,
			Record: control.Position{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}}
	case errors.Is(err, state.ErrKeyGroups):
		return &PermanentError{Cause: control.CauseJob, Err: err}
	case errors.Is(err, objstore.ErrPermanent):
		return &PermanentError{Cause: control.CauseStorage, Err: err}
	}
	return nil
}
