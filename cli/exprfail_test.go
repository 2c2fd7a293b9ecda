package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/controltopic"
)

// TestExpressionFailureStopsTheJob: under on_error: fail (the default), a
// record on which an expression fails stops the job as a record that does
// not decode does, instead of restarting the session over and over: a
// failed record of cause record on the commit topic naming the input
// record, /readyz and weir_replica_job_failed say why, no session restarts;
// `processor resume --skip` skips it and the output stays exactly once.
// Two records: int("abc") in the source's stage, and a field of a null
// customer after a key_by's shuffle (named by its input record, not the
// shuffle's). On kfake and on the real broker.
func TestExpressionFailureStopsTheJob(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		clearConfigEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		name := kafkatest.Name(t, "exprfail")
		j := &failJob{t: t, c: c, name: name, in: name + "-in", out: name + "-out", dir: t.TempDir()}
		c.CreateTopic(t, j.in, 2, nil)
		c.CreateTopic(t, j.out, 2, nil)
		file := filepath.Join(j.dir, "job.yaml")
		yaml := fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s], format: json}
    - map: {value: {k: value.k, n: "int(value.s)", customer: value.customer}}
    - key_by: {field: k}
    - map: {value: {k: value.k, city: value.customer.city}}
    - aggregate: {op: count}
    - sink: {topic: %s}
kafka: {brokers: [%s], session_timeout: 6s}
checkpoint: {interval: 300ms, timeout: 20s, storage: "file://%s/chk"}
log: {level: info}
`, j.name, j.in, j.out, c.Brokers[0], j.dir)
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		prod := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
		// produce writes records from..to-1 to partition i%2, keyed k0..k4;
		// bad, if not empty, is the value of record at instead, whose
		// position it returns.
		produce := func(from, to, at int, bad string) control.Position {
			var pos control.Position
			for i := from; i < to; i++ {
				part := int32(i % 2)
				r := &kgo.Record{Topic: j.in, Partition: part, Value: fmt.Appendf(nil, `{"k":"k%d","s":"%d","customer":{"city":"c%d"}}`, i%5, i, i)}
				if i == at {
					r.Value = []byte(bad)
				}
				res := prod.ProduceSync(ctx, r)
				if err := res.FirstErr(); err != nil {
					t.Fatal(err)
				}
				if i == at {
					pos = control.Position{Topic: j.in, Partition: part, Offset: res[0].Record.Offset}
				}
			}
			return pos
		}
		resumeCmd := func(args ...string) (string, error) {
			var out bytes.Buffer
			root := newRootCmd(&out, nil)
			root.SetErr(io.Discard)
			root.SetArgs(append([]string{"resume", "-c", file}, args...))
			err := root.Execute()
			return out.String(), err
		}
		ready := func(ps ...*proc) func() bool {
			return func() bool {
				for _, p := range ps {
					if code, _ := p.get("/readyz"); code != http.StatusOK {
						return false
					}
				}
				return true
			}
		}
		topics := controltopic.NewTopics("_weir." + name + ".")
		failures := func() []control.Failed {
			hist, err := controltopic.ReadHistory(ctx, []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, topics, control.TopicCommit)
			if err != nil {
				t.Fatal(err)
			}
			var failed []control.Failed
			for _, r := range hist.Records {
				if f, ok := r.Msg.(control.Failed); ok {
					failed = append(failed, f)
				}
			}
			return failed
		}

		produce(0, 20, -1, "")
		a := j.start(ctx, "a", file)
		b := j.start(ctx, "b", file)
		waitFor(t, "both replicas ready", time.Minute, ready(a, b))

		for n, tc := range []struct {
			what, value, reason string
		}{
			{"int of a string that is no number", `{"k":"k1","s":"abc","customer":{"city":"x"}}`, "invalid operation: int(abc)"},
			{"a field of null, past the shuffle", `{"k":"k2","s":"7","customer":null}`, "cannot fetch city from null"},
		} {
			from := 20 + 20*n
			bad := produce(from, from+20, from+5, tc.value)
			failedOn := func(p *proc) bool {
				code, body := p.get("/readyz")
				return code == http.StatusServiceUnavailable && strings.Contains(body, "job failed") &&
					strings.Contains(body, "record "+bad.String()) && strings.Contains(body, "processor resume -c FILE --skip "+bad.String()) &&
					strings.Contains(body, tc.reason)
			}
			waitFor(t, tc.what+": both replicas report the failure on /readyz", time.Minute, func() bool { return failedOn(a) && failedOn(b) })
			failed := failures()
			if len(failed) != n+1 || failed[n].Record != bad || failed[n].Cause != control.CauseRecord || !strings.Contains(failed[n].Reason, tc.reason) {
				t.Fatalf("%s: failed records on %s: %+v, want the %d-th for %s", tc.what, topics.Commit, failed, n+1, bad)
			}
			for _, p := range []*proc{a, b} {
				if v := p.metric(t, "weir_replica_session_restarts_total"); v != "0" {
					t.Errorf("%s: replica %s: %s session restarts: a restart loop", tc.what, p.id, v)
				}
				if v := p.metric(t, `weir_replica_job_failed{cause="record"}`); v != "1" {
					t.Errorf("%s: replica %s: weir_replica_job_failed{cause=record} = %s", tc.what, p.id, v)
				}
			}
			if out, err := resumeCmd("--skip", bad.String()); err != nil || !strings.Contains(out, "resumed") {
				t.Fatalf("%s: resume --skip: %v\n%s", tc.what, err, out)
			}
			waitFor(t, tc.what+": both replicas ready after resume --skip", 2*time.Minute, ready(a, b))
		}
		produce(60, 70, -1, "")
		j.verifyExactlyOnce(ctx, 68) // 70 records, two skipped
	})
}
