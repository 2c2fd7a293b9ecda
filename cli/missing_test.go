package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// TestMisspeltFieldCounted: a replica running a YAML job whose aggregate
// reads a field no record has (value.amout) counts each record in
// weir_field_missing_total{step,field} and warns once, naming the step and
// the field. On kfake and on the real broker.
func TestMisspeltFieldCounted(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		clearConfigEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		name := kafkatest.Name(t, "misspelt")
		j := &failJob{t: t, c: c, name: name, in: name + "-in", out: name + "-out", dir: t.TempDir()}
		c.CreateTopic(t, j.in, 1, nil)
		c.CreateTopic(t, j.out, 1, nil)
		file := filepath.Join(j.dir, "job.yaml")
		yaml := fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s], format: json}
    - aggregate: {spent: {sum: value.amout}, n: {count: true}}
    - sink: {topic: %s}
kafka: {brokers: [%s], session_timeout: 6s}
checkpoint: {interval: 300ms, timeout: 20s, storage: "file://%s/chk"}
`, j.name, j.in, j.out, c.Brokers[0], j.dir)
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		prod := c.Client(t)
		for i := range 5 {
			if err := prod.ProduceSync(ctx, &kgo.Record{Topic: j.in, Key: []byte("u"), Value: fmt.Appendf(nil, `{"amount":%d}`, i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		p := j.start(ctx, "a", file)
		series := `weir_field_missing_total{field="amout",step="job.pipeline[1].aggregate"}`
		waitFor(t, "5 records counted", time.Minute, func() bool {
			if code, _ := p.get("/readyz"); code != http.StatusOK {
				return false
			}
			_, body := p.get("/metrics")
			return strings.Contains(body, series+" 5")
		})
		if n := strings.Count(p.log.String(), "a record lacks a field that the step reads"); n != 1 {
			t.Fatalf("%d warnings, want 1:\n%s", n, p.log)
		}
		if !strings.Contains(p.log.String(), `step=job.pipeline[1].aggregate field=amout`) {
			t.Fatalf("the warning does not name the step and the field:\n%s", p.log)
		}
	})
}
