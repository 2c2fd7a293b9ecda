package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/controltopic"
)

// TestSavepointAbortedByGeneration: `processor savepoint` fails at once
// when a new generation starts after its savepoint was triggered, even
// without an abort record for it (a new coordinator knows only the newest
// trigger), instead of waiting out --timeout and saying the savepoint may
// still complete. The test plays the coordinator on the control topics.
func TestSavepointAbortedByGeneration(t *testing.T) {
	clearConfigEnv(t) // the command reads the file's kfake brokers, not WEIR_KAFKA_BROKERS
	c := kafkatest.NewKfake(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	job := kafkatest.Name(t, "spgen")
	dir := t.TempDir()
	topics := controltopic.NewTopics("_weir." + job + ".")
	for _, topic := range []string{job + "-in", job + "-out", topics.Trigger, topics.Ack, topics.Commit} {
		c.CreateTopic(t, topic, 1, nil)
	}
	file := filepath.Join(dir, "job.yaml")
	yaml := fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s-in], format: json}
    - aggregate: {op: count}
    - sink: {topic: %s-out}
kafka: {brokers: [%s]}
checkpoint: {storage: "file://%s/chk"}
`, job, job, job, c.Brokers[0], dir)
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	cl := c.Client(t)
	produce := func(topic string, m control.Message) {
		t.Helper()
		b, err := control.Encode(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: b}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	assignment := control.Assignment{"r0": {{Stage: "main", Index: 0}}}
	produce(topics.Commit, control.Generation{Gen: 1, Assignment: assignment})

	done := make(chan error, 1)
	go func() {
		root := newRootCmd(io.Discard, nil)
		var stderr bytes.Buffer
		root.SetErr(&stderr)
		root.SetArgs([]string{"savepoint", "-c", file, "--target", "sp", "--timeout", "90s"})
		done <- root.Execute()
	}()

	// The coordinator reads the request, triggers the savepoint; then a
	// new generation starts, with no abort record for it.
	reader := c.Client(t, kgo.ConsumeTopics(topics.Ack), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var req control.SavepointRequest
	for req.Request == "" {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		fs := reader.PollFetches(pctx)
		pcancel()
		select {
		case err := <-done:
			t.Fatalf("processor savepoint ended before its request was read: %v", err)
		default:
		}
		if err := ctx.Err(); err != nil {
			t.Fatalf("no savepoint request on %s: %v", topics.Ack, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if m, err := control.Decode(r.Value); err == nil {
				if sr, ok := m.(control.SavepointRequest); ok {
					req = sr
				}
			}
		})
	}
	produce(topics.Trigger, control.Trigger{ID: 7, Gen: 1, TS: time.Now().UnixMilli(), Kind: ckpt.KindSavepoint,
		Target: "sp", Request: req.Request})
	produce(topics.Commit, control.Generation{Gen: 2, Assignment: assignment})

	start := time.Now()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "savepoint 7 (sp) failed: generation 2 started") {
			t.Fatalf("processor savepoint: %v, want the savepoint failed by generation 2", err)
		}
		t.Logf("processor savepoint after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-ctx.Done():
		t.Fatal("processor savepoint still waits after generation 2 started")
	}
}
