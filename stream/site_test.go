package stream_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/weir-stream/weir/stream"
)

// TestAtNamesOperators: operators defined after Job.At are named by its
// site, not by their Go call site, in run-time errors, definition problems
// and the graph; At("") restores Go call sites.
func TestAtNamesOperators(t *testing.T) {
	j := stream.NewJob("site")
	j.At("job.pipeline[0].source")
	in := stream.From(j, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{})
	j.At("job.pipeline[1].map")
	m := stream.Map(in, func(v []byte) ([]byte, error) {
		if string(v) == "bad" {
			return nil, errors.New("boom")
		}
		return v, nil
	})
	j.At("")
	stream.To(m, stream.KafkaSink{Topic: "out"}, stream.RawCodec{})
	if err := j.Build(); err != nil {
		t.Fatal(err)
	}
	gj, _ := json.Marshal(j.Graph())
	graph := string(gj)
	if !strings.Contains(graph, "job.pipeline[1].map") || !strings.Contains(graph, "site_test.go:") {
		t.Errorf("graph names neither the site nor the Go call site after At(\"\"):\n%s", graph)
	}
	task := newTask(t, j, nil, &clock{})
	err := task.ProcessBatch(recs("in", "k=bad"), discard{})
	if err == nil || !strings.Contains(err.Error(), "(job.pipeline[1].map)") || strings.Contains(err.Error(), ".go:") {
		t.Fatalf("ProcessBatch = %v, want the error at job.pipeline[1].map and no Go file", err)
	}

	bad := stream.NewJob("site-bad")
	bad.At("job.pipeline[0].source")
	src := stream.From(bad, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{})
	bad.At("job.pipeline[1].sink")
	stream.To(src, stream.KafkaSink{Topic: "in"}, stream.RawCodec{})
	if err := bad.Build(); err == nil || !strings.Contains(err.Error(), "(job.pipeline[1].sink)") || strings.Contains(err.Error(), ".go:") {
		t.Fatalf("Build = %v, want the problem at job.pipeline[1].sink and no Go file", err)
	}
}
