package task

import (
	"testing"

	"github.com/weir-stream/weir/control"
)

func TestStateNameRoundTrip(t *testing.T) {
	for _, id := range []control.TaskID{{Stage: "main", Index: 0}, {Stage: "by-page", Index: 3}, {Stage: "a-b-c", Index: 127}} {
		got, ok := ParseStateName(StateName(id))
		if !ok || got != id {
			t.Errorf("ParseStateName(%q) = %v, %v; want %v", StateName(id), got, ok, id)
		}
	}
	for _, bad := range []string{"", "main", "-3", "main-", "main-x", "main-03"} {
		if id, ok := ParseStateName(bad); ok {
			t.Errorf("ParseStateName(%q) = %v, want no task", bad, id)
		}
	}
}
