package replica

import (
	"testing"

	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio/controltopic"
)

// TestJobFailureAndStop: the job's failure and stop are the newest failed
// and stopped records that no generation or resumed record follows.
func TestJobFailureAndStop(t *testing.T) {
	gen := func(g uint64) control.Message { return control.Generation{Gen: g} }
	failed := control.Failed{Gen: 1, Cause: control.CauseRecord, Reason: "bad"}
	stopped := control.Stopped{Gen: 2, TS: 5}
	for _, c := range []struct {
		name        string
		msgs        []control.Message
		failedAt    int64 // -1: not failed
		stoppedAt   int64 // -1: not stopped
		stoppedGen  uint64
		failedCause control.FailureCause
	}{
		{"none", []control.Message{gen(1)}, -1, -1, 0, ""},
		{"failed", []control.Message{gen(1), failed}, 1, -1, 0, control.CauseRecord},
		{"failed, resumed", []control.Message{gen(1), failed, control.Resumed{Gen: 1}}, -1, -1, 0, ""},
		{"failed, next generation", []control.Message{gen(1), failed, gen(2)}, -1, -1, 0, ""},
		{"stopped", []control.Message{gen(1), gen(2), stopped}, -1, 2, 2, ""},
		{"stopped, resumed", []control.Message{gen(1), gen(2), stopped, control.Resumed{Gen: 2}}, -1, -1, 0, ""},
		{"stopped, resumed, stopped", []control.Message{gen(2), stopped, control.Resumed{Gen: 2}, gen(3), control.Stopped{Gen: 3}}, -1, 4, 3, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			recs := make([]controltopic.Record, len(c.msgs))
			for i, m := range c.msgs {
				recs[i] = controltopic.Record{Topic: control.TopicCommit, Offset: int64(i), Msg: m}
			}
			f, fAt := JobFailure(recs)
			if fAt != c.failedAt || (f == nil) != (c.failedAt < 0) || (f != nil && f.Cause != c.failedCause) {
				t.Errorf("JobFailure = %+v at %d, want at %d", f, fAt, c.failedAt)
			}
			s, sAt := JobStop(recs)
			if sAt != c.stoppedAt || (s == nil) != (c.stoppedAt < 0) || (s != nil && s.Gen != c.stoppedGen) {
				t.Errorf("JobStop = %+v at %d, want at %d", s, sAt, c.stoppedAt)
			}
		})
	}
}
