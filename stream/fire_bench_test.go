package stream_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/weir-stream/weir/stream"
)

// BenchmarkFireWindows opens n tumbling windows (one per key) and fires
// them all with one watermark: the cost of firing per window.
func BenchmarkFireWindows(b *testing.B) {
	const n = 100_000
	for b.Loop() {
		b.StopTimer()
		task := newTask(b, windowJob1m(), openBackend(b, b.TempDir()), nil)
		in := make([]stream.Record, 10_000)
		for k := 0; k < n; k += len(in) {
			for i := range in {
				in[i] = stream.Record{Topic: "in", Timestamp: t0, Value: []byte("v"), Key: fmt.Appendf(nil, "key-%07d", k+i)}
			}
			if err := task.ProcessBatch(in, discard{}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if err := task.AdvanceWatermark(t0.Add(time.Hour), discard{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/window")
}
