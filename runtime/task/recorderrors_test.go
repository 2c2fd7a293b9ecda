package task

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/stream"
)

// recordErrorJob counts the input per key, after two Transforms: one skips
// the records whose value starts with "bad-", the other writes those that
// start with "dlq-" to the topic <name>-dlq.
func recordErrorJob(name, in, out string) *stream.Job {
	j := stream.NewJob(name)
	s := stream.From(j, stream.KafkaSource{Topics: []string{in}}, stream.RawCodec{})
	failOn := func(prefix string) func(stream.Elem, []byte, func([]byte) error) error {
		return func(_ stream.Elem, v []byte, emit func([]byte) error) error {
			if strings.HasPrefix(string(v), prefix) {
				return errors.New("rejected " + string(v))
			}
			return emit(v)
		}
	}
	kept := stream.Transform(s, "skip-bad", failOn("bad-"), stream.OnErrorPolicy[[]byte](kafkaio.OnErrorSkip, "", nil))
	kept = stream.Transform(kept, "dlq-odd", failOn("dlq-"), stream.OnErrorPolicy(kafkaio.OnErrorDeadLetter, name+"-dlq", stream.Codec[[]byte](stream.RawCodec{})))
	n := stream.Count(kept, "count")
	text := stream.Map(n, func(c int64) (string, error) { return strconv.FormatInt(c, 10), nil })
	stream.To(text, stream.KafkaSink{Topic: out, TransactionTimeout: testTxnTimeout}, stream.StringCodec{})
	return j
}

// TestTransformRecordErrorsCounted: a Transform's failures that its policy
// skips or dead-letters are counted by weir_record_errors_total{operator,
// policy} (TaskContext.OnRecordError); the dead letters commit with the
// checkpoint, with their headers, and the rest is counted exactly once.
// On kfake and on the real broker.
func TestTransformRecordErrorsCounted(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		r := newRig(t, ctx, c, rigConfig{inParts: 1, outParts: 1, build: recordErrorJob})
		dlq := r.job.Sinks()[0].Topic
		if !strings.HasSuffix(dlq, "-dlq") {
			t.Fatalf("sinks %+v", r.job.Sinks())
		}
		c.CreateTopic(t, dlq, 1, nil)
		g1 := r.newGen(1)
		tasks := r.openAll(ctx, g1, 0)
		want := map[string]int{}
		good := keys(12, 3)
		for _, k := range good {
			want[k]++
		}
		r.produce(ctx, nil, append(good, "bad-1", "dlq-1", "bad-2", "bad-3", "dlq-2")...)
		r.waitConsumed(ctx, tasks[control.TaskID{Stage: "main", Index: 0}])
		r.checkpoint(ctx, 1, 1, tasks)
		r.verifyCounts(ctx, want)
		if n := recordErrors(t, g1.reg, "skip-bad", "skip"); n != 3 {
			t.Errorf("weir_record_errors_total{operator=skip-bad,policy=skip} = %v, want 3", n)
		}
		if n := recordErrors(t, g1.reg, "dlq-odd", "dead-letter"); n != 2 {
			t.Errorf("weir_record_errors_total{operator=dlq-odd,policy=dead-letter} = %v, want 2", n)
		}
		c.WaitStable(t, dlq)
		var got []string
		for _, rec := range c.ReadCommitted(ctx, t, dlq) {
			hs := map[string]string{}
			for _, h := range rec.Headers {
				hs[h.Key] = string(h.Value)
			}
			got = append(got, string(rec.Key)+"="+string(rec.Value)+" "+hs[stream.DeadLetterHeaderOperator]+" "+hs[stream.DeadLetterHeaderTopic]+"@"+hs[stream.DeadLetterHeaderOffset]+" "+hs[stream.DeadLetterHeaderError])
		}
		if w := []string{"dlq-1=dlq-1 dlq-odd " + r.in + "@13 rejected dlq-1", "dlq-2=dlq-2 dlq-odd " + r.in + "@16 rejected dlq-2"}; strings.Join(got, "\n") != strings.Join(w, "\n") {
			t.Fatalf("dead letters:\ngot  %q\nwant %q", got, w)
		}
	})
}

// recordErrors returns weir_record_errors_total of operator and policy on
// reg.
func recordErrors(t *testing.T, reg *prometheus.Registry, operator, policy string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "weir_record_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["operator"] == operator && labels["policy"] == policy {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
