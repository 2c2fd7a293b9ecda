package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/format"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// TestProduce runs `processor produce` through the binary against the
// broker (kfake, and the real one), with the connection settings of the
// job file, and reads the records back: JSON lines to a json source topic
// as they are, keyed records of one key in one partition; a line that is
// not JSON refuses the whole file before anything is written; JSON lines
// to an avro or a protobuf source topic encoded in the Confluent wire
// format under the schema of --schema-file, registered as <topic>-value,
// and decoded back by the sources' decoders.
func TestProduce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildProcessor(t)
	registry := testRegistry(t)
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		orders := kafkatest.Name(t, "orders")
		c.CreateTopic(t, orders, 3, nil)
		dir := t.TempDir()
		job := filepath.Join(dir, "job.yaml")
		write(t, job, fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s]}
    - sink: {topic: out}
kafka: {brokers: [%s]}
`, kafkatest.Name(t, "job"), orders, strings.Join(c.Brokers, ", ")))
		var env []string
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "WEIR_") {
				env = append(env, kv)
			}
		}
		produce := func(args ...string) (string, error) {
			cmd := exec.Command(bin, append([]string{"produce"}, args...)...)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			return string(out), err
		}

		bad := filepath.Join(dir, "bad.txt")
		write(t, bad, "{\"id\":1}\n{\"id\":\n")
		if out, err := produce("-c", job, "--topic", orders, "--input", bad); err == nil || !strings.Contains(out, bad+":2: not a JSON value") {
			t.Errorf("a line that is not JSON: %v\n%s", err, out)
		}
		if out, err := produce("-c", job, "--topic", "nope", "--input", bad); err == nil || !strings.Contains(out, "--topic nope: job") || !strings.Contains(out, orders) {
			t.Errorf("a topic the job does not name: %v\n%s", err, out)
		}

		in := filepath.Join(dir, "orders.txt")
		write(t, in, "ann\t{\"id\":1,\"amount\":10}\n\nbob\t{\"id\":2}\nann\t{\"id\":3}\n{\"id\":4}\n")
		out, err := produce("-c", job, "--topic", orders, "--input", in)
		if err != nil || !strings.Contains(out, "produced 4 records to "+orders+" (json)") {
			t.Fatalf("produce: %v\n%s", err, out)
		}
		recs := readBack(t, c, orders, 4)
		got := map[string]string{}
		partition := map[string]int32{}
		for _, r := range recs {
			got[string(r.Value)] = string(r.Key)
			if p, ok := partition[string(r.Key)]; ok && len(r.Key) > 0 && p != r.Partition {
				t.Errorf("key %s in partitions %d and %d", r.Key, p, r.Partition)
			}
			partition[string(r.Key)] = r.Partition
		}
		want := map[string]string{`{"id":1,"amount":10}`: "ann", `{"id":2}`: "bob", `{"id":3}`: "ann", `{"id":4}`: ""}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("read back %v, want %v (value: key)", got, want)
		}

		// Avro and Protobuf: JSON lines encoded under --schema-file,
		// read back with the decoders the sources use.
		reg, err := format.NewRegistry(format.RegistryConfig{URL: registry})
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []struct{ typ, schema string }{
			{"avro", `{"type":"record","name":"Click","fields":[{"name":"user","type":"string"},{"name":"n","type":"int"}]}`},
			{"protobuf", "syntax = \"proto3\";\npackage try;\nmessage Click { string user = 1; int32 n = 2; }\n"},
		} {
			topic := kafkatest.Name(t, "clicks-"+f.typ)
			c.CreateTopic(t, topic, 1, nil)
			job := filepath.Join(dir, f.typ+".yaml")
			write(t, job, fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s], format: {type: %s, registry: %q}}
    - sink: {topic: out}
kafka: {brokers: [%s]}
`, kafkatest.Name(t, "job"), topic, f.typ, registry, strings.Join(c.Brokers, ", ")))
			schema := filepath.Join(dir, "click."+f.typ)
			write(t, schema, f.schema)
			in := filepath.Join(dir, "clicks.txt")
			write(t, in, "u1\t{\"user\":\"u1\",\"n\":1}\n{\"user\":\"u2\",\"n\":2}\n")
			out, err := produce("-c", job, "--topic", topic, "--input", in, "--schema-file", schema)
			if err != nil || !strings.Contains(out, "produced 2 records to "+topic+" ("+f.typ+", schema ") || !strings.Contains(out, "(subject "+topic+"-value)") {
				t.Fatalf("produce %s: %v\n%s", f.typ, err, out)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			var dec interface{ DecodeValue([]byte) ([]byte, error) } = format.NewAvroDecoder(ctx, reg)
			if f.typ == "protobuf" {
				dec = format.NewProtoDecoder(ctx, reg)
			}
			var values []string
			for _, r := range readBack(t, c, topic, 2) {
				j, err := dec.DecodeValue(r.Value)
				if err != nil {
					t.Fatalf("%s: %x: %v", f.typ, r.Value, err)
				}
				var v map[string]any
				if err := json.Unmarshal(j, &v); err != nil {
					t.Fatal(err)
				}
				values = append(values, fmt.Sprintf("%s %v %v", r.Key, v["user"], v["n"]))
			}
			cancel()
			if got := strings.Join(values, ", "); got != "u1 u1 1,  u2 2" {
				t.Errorf("%s records read back: %q", f.typ, got)
			}
		}
	})
}

// write writes a test file.
func write(t *testing.T, name, text string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readBack reads n records of topic, from its start, and fails unless it
// holds exactly those.
func readBack(t *testing.T, c *kafkatest.Cluster, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("%s: read %d records of %d", topic, len(recs), n)
		}
		fs.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
	}
	ends, err := c.Admin(t).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	total := int64(0)
	ends.Each(func(o kadm.ListedOffset) { total += o.Offset })
	if total != int64(n) {
		t.Fatalf("%s holds %d records, want %d", topic, total, n)
	}
	return recs
}
