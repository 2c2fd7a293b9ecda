package pipeline_test

import (
	"testing"
	"time"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// TestIntervalJoinExpiresState: the interval join buffers both sides in
// keyed state until the watermark passes their time + within, and then
// removes them (its timers fire): a key whose records are all expired
// holds no state.
func TestIntervalJoinExpiresState(t *testing.T) {
	job := config.Job{Name: "j",
		Pipeline: []config.Step{
			{Source: &config.SourceStep{Topics: []string{"orders"}}},
			{Join: &config.JoinStep{Stream: &config.StreamJoin{Name: "payments", Within: 5 * time.Minute}, As: "payment"}},
			{Sink: &config.SinkStep{Topic: "out"}},
		},
		Streams: []config.NamedStream{{Name: "payments", Steps: []config.Step{{Source: &config.SourceStep{Topics: []string{"payments"}}}}}},
	}
	j, err := pipeline.Compile(job)
	if err != nil {
		t.Fatal(err)
	}
	b := openBackend(t)
	task, err := j.NewTask(stream.TaskContext{Backend: b, Task: "main/0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = task.Close() })
	out := newSinks(j)
	recs := []stream.Record{
		{Key: []byte("o1"), Value: []byte(`{"id":1}`), Topic: "orders", Timestamp: at(0)},
		{Key: []byte("o1"), Value: []byte(`{"paid":1}`), Topic: "payments", Offset: 0, Timestamp: at(time.Minute)},
		{Key: []byte("o2"), Value: []byte(`{"id":2}`), Topic: "orders", Offset: 1, Timestamp: at(3 * time.Minute)},
	}
	if err := task.ProcessBatch(recs, out); err != nil {
		t.Fatal(err)
	}
	expect(t, "out", out.take("out"), `{"id":1,"payment":{"paid":1}}`)
	// The buffers' keys are (time, sequence) pairs: read them as bytes.
	left, err := state.NewMapState(b, "join/left-records", state.BytesCodec{}, state.BytesCodec{})
	if err != nil {
		t.Fatal(err)
	}
	right, err := state.NewMapState(b, "join/right-records", state.BytesCodec{}, state.BytesCodec{})
	if err != nil {
		t.Fatal(err)
	}
	empty := func(m *state.MapState[[]byte, []byte], key string) bool {
		b.SetCurrentKey([]byte(key))
		ok, err := m.IsEmpty()
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if empty(left, "o1") || empty(right, "o1") || empty(left, "o2") {
		t.Fatal("the join buffered nothing")
	}
	// o1's order expires at 5m, its payment at 6m; o2's order at 8m.
	if err := task.AdvanceWatermark(at(6*time.Minute+time.Millisecond), out); err != nil {
		t.Fatal(err)
	}
	if !empty(left, "o1") || !empty(right, "o1") {
		t.Error("o1's records are still buffered after the watermark passed their time + within")
	}
	if empty(left, "o2") {
		t.Error("o2's order expired before its time + within")
	}
	if err := task.AdvanceWatermark(at(9*time.Minute), out); err != nil {
		t.Fatal(err)
	}
	if !empty(left, "o2") {
		t.Error("o2's order is still buffered")
	}
	expect(t, "out", out.take("out"))
}
