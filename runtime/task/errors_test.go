package task

import (
	"errors"
	"fmt"
	"testing"

	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/stream"
)

// TestPermanentRecordErrors: a record that does not decode and a poison
// record (an expression that fails on it) are permanent failures of cause
// record naming the record; another error of a record is not permanent
// (the task is restored and runs again).
func TestPermanentRecordErrors(t *testing.T) {
	at := control.Position{Topic: "orders", Partition: 2, Offset: 1}
	rec := func(err error) error {
		return fmt.Errorf("task main/0: %w", &stream.RecordError{Topic: at.Topic, Partition: at.Partition, Offset: at.Offset, Err: err})
	}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"decode", rec(fmt.Errorf("%w: not JSON", stream.ErrDecode)), true},
		{"poison", rec(&stream.PoisonError{Err: errors.New("invalid operation: int(abc)")}), true},
		{"other", rec(errors.New("pebble: disk full")), false},
		{"poison without a record", &stream.PoisonError{Err: errors.New("x")}, false},
	} {
		p := Permanent(tc.err)
		switch {
		case !tc.want && p != nil:
			t.Errorf("%s: permanent %+v", tc.name, p)
		case tc.want && (p == nil || p.Cause != control.CauseRecord || p.Record != at):
			t.Errorf("%s: %+v, want cause record at %v", tc.name, p, at)
		}
	}
}
