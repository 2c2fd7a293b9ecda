package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// testRegistry is the real schema registry of scripts/registry.sh (which
// WEIR_REQUIRE_REGISTRY=1 requires) or else franz-go's fake.
func testRegistry(t *testing.T) string {
	t.Helper()
	if url := os.Getenv("WEIR_REGISTRY_URL"); url != "" {
		resp, err := http.Get(url + "/subjects")
		if err != nil {
			t.Fatalf("the registry at %s is unreachable: %v", url, err)
		}
		resp.Body.Close()
		return url
	}
	if os.Getenv("WEIR_REQUIRE_REGISTRY") == "1" {
		t.Fatal("WEIR_REQUIRE_REGISTRY=1 but WEIR_REGISTRY_URL is not set: start one with scripts/registry.sh up")
	}
	t.Log("WEIR_REGISTRY_URL not set (scripts/registry.sh up): on srfake")
	fake := srfake.New()
	t.Cleanup(fake.Close)
	return fake.URL()
}

// The input's value schema (the second message is the one written, so that
// its message index is not the one-byte shortcut) and the output's.
const (
	ordersProto = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Money { string currency = 1; int64 units = 2; }
message Order {
  enum Kind { UNKNOWN = 0; WEB = 1; STORE = 2; }
  int64 id = 1;
  int32 qty = 2;
  Money price = 3;
  repeated string tags = 4;
  map<string, int64> extra = 5;
  google.protobuf.Timestamp ts = 6;
  Kind kind = 7;
  optional string note = 8;
}`
	outProto = `syntax = "proto3";
package shop.out;
import "google/protobuf/timestamp.proto";
message Line {
  int64 id = 1;
  string user = 2;
  int64 total = 3;
  repeated string tags = 4;
  google.protobuf.Timestamp at = 5;
  string kind = 6;
  map<string, int64> extra = 7;
  string note = 8;
}`
	keyAvro    = `{"type":"record","name":"OrderKey","namespace":"shop","fields":[{"name":"user","type":"string"},{"name":"region","type":"string"}]}`
	outKeyAvro = `{"type":"record","name":"LineKey","namespace":"shop","fields":[{"name":"user","type":"string"}]}`
)

// TestProtobufAndKeyFormatsThroughRun runs a YAML job through `processor
// run`, on kfake and on the real broker, with the real schema registry:
// Protobuf values with Avro keys in, a filter and a projection over every
// kind of field (nested messages, repeated, maps, enums, timestamps,
// optional) and over the key's fields (fromJSON(key)), Protobuf values with
// Avro keys out, registered by the RecordNameStrategy and the
// TopicRecordNameStrategy. The input is written and the output read with plain
// protocompile, dynamicpb, protojson and hamba codecs, not Weir's.
func TestProtobufAndKeyFormatsThroughRun(t *testing.T) {
	url := testRegistry(t)
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		clearConfigEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		job, in, out, reg := formatTopics(t, c, "fmt", url, 2)
		vs, err := reg.CreateSchema(ctx, in+"-value", sr.Schema{Schema: ordersProto, Type: sr.TypeProtobuf})
		if err != nil {
			t.Fatal(err)
		}
		ks, err := reg.CreateSchema(ctx, in+"-key", sr.Schema{Schema: keyAvro, Type: sr.TypeAvro})
		if err != nil {
			t.Fatal(err)
		}
		orderMD := compileMessage(t, ordersProto, "shop.Order")
		keySchema := avro.MustParse(keyAvro)

		// 30 orders; those with qty 0 are filtered out.
		prod := c.Client(t, kgo.DefaultProduceTopic(in))
		want := map[string]string{} // id -> the output line, as protojson
		wantKey := map[string]string{}
		for i := range 30 {
			user := fmt.Sprintf("u%d", i%4)
			m := dynamicpb.NewMessage(orderMD)
			js := fmt.Sprintf(`{"id":"%d","qty":%d,"price":{"currency":"EUR","units":"%d"},"tags":["t%d","x"],"extra":{"a":"%d"},"ts":"2026-12-02T10:00:%02d.5Z","kind":"%s"%s}`,
				1000+i, i%3, 7+i, i, i*10, i, []string{"WEB", "STORE", "UNKNOWN"}[i%3], map[bool]string{true: `,"note":"n"`, false: ""}[i%2 == 0])
			if err := protojson.Unmarshal([]byte(js), m); err != nil {
				t.Fatal(err)
			}
			payload, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var h sr.ConfluentHeader
			value, _ := h.AppendEncode(nil, vs.ID, []int{1}) // Order is the file's second message
			value = append(value, payload...)
			kp, err := avro.Marshal(keySchema, map[string]any{"user": user, "region": "eu"})
			if err != nil {
				t.Fatal(err)
			}
			key, _ := h.AppendEncode(nil, ks.ID, nil)
			key = append(key, kp...)
			prod.Produce(ctx, &kgo.Record{Key: key, Value: value}, nil)
			if i%3 == 0 {
				continue
			}
			id := fmt.Sprint(1000 + i)
			note := ""
			if i%2 == 0 {
				note = `,"note":"n"`
			}
			want[id] = fmt.Sprintf(`{"id":"%d","user":"%s","total":"%d","tags":["t%d","x"],"at":"2026-12-02T10:00:%02d.500Z","kind":"%s","extra":{"a":"%d"}%s}`,
				1000+i, user, (i%3)*(7+i), i, i, []string{"WEB", "STORE", "UNKNOWN"}[i%3], i*10, note)
			wantKey[id] = user
		}
		// A record whose key is not in the wire format is the record's
		// error: skipped (on_error), not the job's end.
		prod.Produce(ctx, &kgo.Record{Key: []byte("not avro"), Value: []byte{0, 0, 0, 0, 1, 0}}, nil)
		if err := prod.Flush(ctx); err != nil {
			t.Fatal(err)
		}

		dir := t.TempDir()
		for name, text := range map[string]string{"line.proto": outProto, "key.avsc": outKeyAvro} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		file := filepath.Join(dir, "job.yaml")
		yaml := fmt.Sprintf(`job:
  name: %[1]s
  pipeline:
    - source:
        topics: [%[2]s]
        format: {type: protobuf, registry: "%[4]s"}
        key_format: {type: avro, registry: "%[4]s"}
        on_error: skip
    - filter: {where: "value.qty > 0"}
    - map:
        value:
          id: value.id
          user: fromJSON(key).user
          total: value.qty * value.price.units
          tags: value.tags
          at: value.ts
          kind: value.kind
          extra: value.extra
          note: value.note
        key: 'toJSON({"user": fromJSON(key).user})'
    - sink:
        topic: %[3]s
        format: {type: protobuf, registry: "%[4]s", schema_file: "%[5]s/line.proto", message: Line, subject_strategy: record}
        key_format: {type: avro, registry: "%[4]s", schema_file: "%[5]s/key.avsc", subject_strategy: topic_record}
`, job, in, out, url, dir) + runSettings(c, dir)
		recs := runUntilCommitted(t, ctx, c, file, yaml, out, len(want))

		// The output, read with the registry's schemas by their IDs.
		lineMD := compileMessage(t, outProto, "shop.out.Line")
		outKey := avro.MustParse(outKeyAvro)
		seen := map[string]bool{}
		for _, r := range recs {
			var h sr.ConfluentHeader
			id, rest, err := h.DecodeID(r.Value)
			if err != nil {
				t.Fatalf("value % x: %v", r.Value, err)
			}
			index, payload, err := h.DecodeIndex(rest, 8)
			if err != nil || len(index) != 1 || index[0] != 0 {
				t.Fatalf("message indexes %v, %v: want [0]", index, err)
			}
			got, err := reg.SchemaByID(ctx, id)
			if err != nil || got.Type != sr.TypeProtobuf || !strings.Contains(got.Schema, "message Line") {
				t.Fatalf("value schema %d: %+v, %v", id, got, err)
			}
			m := dynamicpb.NewMessage(lineMD)
			if err := proto.Unmarshal(payload, m); err != nil {
				t.Fatal(err)
			}
			js, _ := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
			lineID := fmt.Sprint(m.Get(lineMD.Fields().ByName("id")).Int())
			if seen[lineID] {
				t.Errorf("line %s twice", lineID)
			}
			seen[lineID] = true
			if w := want[lineID]; canonicalJSON(t, string(js)) != canonicalJSON(t, w) {
				t.Errorf("line %s:\n%s\nwant\n%s", lineID, js, w)
			}
			kid, kp, err := h.DecodeID(r.Key)
			if err != nil {
				t.Fatalf("key % x: %v", r.Key, err)
			}
			if ksch, err := reg.SchemaByID(ctx, kid); err != nil || ksch.Type != sr.TypeAvro {
				t.Fatalf("key schema %d: %+v, %v", kid, ksch, err)
			}
			var k map[string]any
			if err := avro.Unmarshal(outKey, kp, &k); err != nil {
				t.Fatal(err)
			}
			if k["user"] != wantKey[lineID] {
				t.Errorf("line %s: key %v, want user %s", lineID, k, wantKey[lineID])
			}
		}
		if len(seen) != len(want) || len(recs) != len(want) {
			t.Errorf("%d records of %d lines, want %d", len(recs), len(seen), len(want))
		}
		// The subjects: the RecordNameStrategy's for the values, the
		// TopicRecordNameStrategy's for the keys.
		for subject, typ := range map[string]sr.SchemaType{"shop.out.Line": sr.TypeProtobuf, out + "-shop.LineKey": sr.TypeAvro} {
			if ss, err := reg.SchemaByVersion(ctx, subject, -1); err != nil || ss.Type != typ {
				t.Errorf("subject %s: %+v, %v; want a %s schema", subject, ss, err, typ)
			}
		}
	})
}

// compileMessage compiles a .proto text that imports only well-known types
// and returns its message name.
func compileMessage(t *testing.T, text, name string) protoreflect.MessageDescriptor {
	t.Helper()
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"x.proto": text}),
	})}
	files, err := c.Compile(context.Background(), "x.proto")
	if err != nil {
		t.Fatal(err)
	}
	md, _ := files[0].FindDescriptorByName(protoreflect.FullName(name)).(protoreflect.MessageDescriptor)
	if md == nil {
		t.Fatalf("no message %s", name)
	}
	return md
}

// canonicalJSON re-marshals a JSON document with sorted keys.
func canonicalJSON(t *testing.T, doc string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("not JSON: %s: %v", doc, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// everyAvroType has a field of each Avro type and logical type the format
// maps (docs/formats.md), for TestAvroEveryTypeThroughRun.
const everyAvroType = `{"type":"record","name":"Sample","namespace":"shop.types","fields":[
  {"name":"flag","type":"boolean"},{"name":"small","type":"int"},{"name":"big","type":"long"},
  {"name":"ratio","type":"float"},{"name":"precise","type":"double"},{"name":"text","type":"string"},
  {"name":"blob","type":"bytes"},{"name":"code","type":{"type":"fixed","name":"Code","size":3}},
  {"name":"level","type":{"type":"enum","name":"Level","symbols":["LOW","MID","HIGH"]}},
  {"name":"series","type":{"type":"array","items":"double"}},
  {"name":"attrs","type":{"type":"map","values":"long"}},
  {"name":"child","type":{"type":"record","name":"Child","fields":[{"name":"n","type":"long"},{"name":"labels","type":{"type":"array","items":"string"}}]}},
  {"name":"maybe","type":["null","string"],"default":null},
  {"name":"either","type":["null","long","Child"]},
  {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
  {"name":"rate","type":{"type":"fixed","name":"Rate","size":6,"logicalType":"decimal","precision":10,"scale":4}},
  {"name":"at","type":{"type":"long","logicalType":"timestamp-millis"}},
  {"name":"atu","type":{"type":"long","logicalType":"timestamp-micros"}},
  {"name":"on","type":{"type":"int","logicalType":"date"}},
  {"name":"when","type":{"type":"long","logicalType":"time-micros"}},
  {"name":"uid","type":{"type":"string","logicalType":"uuid"}}]}`

// TestAvroEveryTypeThroughRun writes records of every Avro type with a
// plain hamba codec, runs source (avro) → filter and map (expressions over
// the record) → sink (avro, the same schema) through `processor run` on
// kfake and the real broker with the registry, and reads the output back
// with hamba: each record must come out as it went in.
func TestAvroEveryTypeThroughRun(t *testing.T) {
	url := testRegistry(t)
	schema := avro.MustParse(everyAvroType)
	sample := func(i int) map[string]any {
		m := map[string]any{
			"flag": i%2 == 0, "small": int32(-i), "big": int64(1)<<53 + int64(i), "ratio": float32(1.5), "precise": -0.125 * float64(i),
			"text": fmt.Sprintf("s\u00e9 \"%d\"\n", i), "blob": []byte{0, byte(i), 255}, "code": [3]byte{'a', 'b', byte('0' + i%10)},
			"level": []string{"LOW", "MID", "HIGH"}[i%3], "series": []any{1.25, float64(i)}, "attrs": map[string]any{"a": int64(i), "z": int64(-1)},
			"child": map[string]any{"n": int64(i), "labels": []any{"x", "y"}}, "maybe": nil, "either": nil,
			"price": big.NewRat(int64(1234+i), 100), "rate": big.NewRat(-15, 10000),
			"at": time.UnixMilli(1796206272345 + int64(i)).UTC(), "atu": time.UnixMicro(1796206272345678 + int64(i)).UTC(),
			"on": time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC), "when": 13*time.Hour + 14*time.Minute + 15250*time.Microsecond,
			"uid": "6f1c2a36-59c3-4a57-9d6e-1e1c1b1b1b1b",
		}
		switch i % 3 {
		case 1:
			m["maybe"], m["either"] = "here", map[string]any{"long": int64(42)}
		case 2:
			m["either"] = map[string]any{"shop.types.Child": map[string]any{"n": int64(-i), "labels": []any{}}}
		}
		return m
	}
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		clearConfigEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		job, in, out, reg := formatTopics(t, c, "avt", url, 2)
		ss, err := reg.CreateSchema(ctx, in+"-value", sr.Schema{Schema: everyAvroType, Type: sr.TypeAvro})
		if err != nil {
			t.Fatal(err)
		}
		const n = 12
		prod := c.Client(t, kgo.DefaultProduceTopic(in))
		var h sr.ConfluentHeader
		for i := range n {
			payload, err := avro.Marshal(schema, sample(i))
			if err != nil {
				t.Fatal(err)
			}
			v, _ := h.AppendEncode(nil, ss.ID, nil)
			prod.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: append(v, payload...)}, nil)
		}
		recs := runIdentity(t, ctx, c, prod, identityJob{job, in, out, url, "avro", everyAvroType,
			`value.child.n >= 0 && len(value.series) == 2 && value.level in ["LOW", "MID", "HIGH"]`}, n)
		for _, r := range recs {
			id, payload, err := h.DecodeID(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			got, err := reg.SchemaByID(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]any
			if err := avro.Unmarshal(avro.MustParse(got.Schema), payload, &v); err != nil {
				t.Fatal(err)
			}
			var i int
			fmt.Sscanf(string(r.Key), "k%d", &i)
			var want map[string]any
			wb, _ := avro.Marshal(schema, sample(i))
			if err := avro.Unmarshal(schema, wb, &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(v, want) {
				t.Errorf("record %s:\n got %v\nwant %v", r.Key, v, want)
			}
		}
	})
}

// TestIncompatibleSinkSchemaStopsAtStart: a sink schema that the subject's
// compatibility rule (BACKWARD) refuses stops `processor run` at start,
// before any record, with the sink's key path and the registry's verdict.
// franz-go's fake registry checks no compatibility, so this runs on the
// real registry only (which WEIR_REQUIRE_REGISTRY=1 requires).
func TestIncompatibleSinkSchemaStopsAtStart(t *testing.T) {
	url := testRegistry(t)
	if os.Getenv("WEIR_REGISTRY_URL") == "" {
		t.Log("franz-go's fake registry checks no compatibility: nothing to check without the real one")
		return
	}
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		clearConfigEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		job, in, out, reg := formatTopics(t, c, "inc", url, 1)
		if res := reg.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatBackward}, out+"-value"); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		if _, err := reg.CreateSchema(ctx, out+"-value", sr.Schema{Type: sr.TypeAvro,
			Schema: `{"type":"record","name":"Total","fields":[{"name":"count","type":"long"}]}`}); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		file := filepath.Join(dir, "job.yaml")
		// A field without a default: readers of the new schema cannot read
		// the old records, which BACKWARD forbids.
		yaml := fmt.Sprintf(`job:
  name: %[1]s
  pipeline:
    - source: {topics: [%[2]s]}
    - aggregate: {count: true}
    - sink:
        topic: %[3]s
        format:
          type: avro
          registry: "%[4]s"
          schema: '{"type":"record","name":"Total","fields":[{"name":"count","type":"long"},{"name":"key","type":"string"}]}'
`, job, in, out, url, dir) + runSettings(c, dir)
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		_, done, logs := startRun(t, ctx, file)
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "job.pipeline[2].sink.format") || !strings.Contains(err.Error(), "not compatible") {
				t.Fatalf("processor run: %v, want the sink's key path and 'not compatible'\n%s", err, logs.String())
			}
			t.Logf("processor run: %v", err)
		case <-time.After(60 * time.Second):
			t.Fatalf("processor run still running after 60s with an incompatible sink schema\n%s", logs.String())
		}
		if recs := c.ReadCommitted(ctx, t, out); len(recs) != 0 {
			t.Errorf("%d records written", len(recs))
		}
	})
}

// runSettings are the settings of a format test's job after its job
// section: the cluster, and the state and checkpoints under dir.
func runSettings(c *kafkatest.Cluster, dir string) string {
	return fmt.Sprintf(`kafka: {brokers: [%s]}
checkpoint: {interval: 200ms, storage: "file://%s/chk"}
state: {dir: "%s/state"}
process: {replica_id: r0}
`, strings.Join(c.Brokers, ","), dir, dir)
}

// runUntilCommitted writes yaml to file, runs `processor run -c file`
// until n records of out are committed (90s at most), stops it, and
// returns them.
func runUntilCommitted(t *testing.T, ctx context.Context, c *kafkatest.Cluster, file, yaml, out string, n int) []*kgo.Record {
	t.Helper()
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	stop, done, logs := startRun(t, ctx, file)
	var recs []*kgo.Record
	deadline := time.Now().Add(90 * time.Second)
	for len(recs) < n {
		select {
		case err := <-done:
			t.Fatalf("processor run exited: %v\n%s", err, logs.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90s: %d of %d outputs committed\n%s", len(recs), n, logs.String())
		}
		recs = c.ReadCommitted(ctx, t, out)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("processor run: %v\n%s", err, logs.String())
	}
	return recs
}

// formatTopics makes a format test's job name, its input and output topics
// (parts partitions each) and a client of the registry at url.
func formatTopics(t *testing.T, c *kafkatest.Cluster, prefix, url string, parts int32) (job, in, out string, reg *sr.Client) {
	t.Helper()
	job = kafkatest.Name(t, prefix)
	in, out = job+"-in", job+"-out"
	c.CreateTopic(t, in, parts, nil)
	c.CreateTopic(t, out, parts, nil)
	reg, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		t.Fatal(err)
	}
	return job, in, out, reg
}

// everyProtoType has a field of each Protobuf kind and well-known type the
// format maps (docs/formats.md), for TestProtobufEveryTypeThroughRun.
const everyProtoType = `syntax = "proto3";
package shop.types;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
message Sample {
  enum Level { LOW = 0; MID = 1; HIGH = 2; }
  message Child { sint64 n = 1; repeated string labels = 2; }
  bool flag = 1;
  int32 a32 = 2; sint32 b32 = 3; sfixed32 c32 = 4; uint32 d32 = 5; fixed32 e32 = 6;
  int64 a64 = 7; sint64 b64 = 8; sfixed64 c64 = 9; uint64 d64 = 10; fixed64 e64 = 11;
  float ratio = 12; double precise = 13; string text = 14; bytes blob = 15;
  Level level = 16; Child child = 17;
  repeated double series = 18; repeated Child children = 19;
  map<string, sint32> attrs = 20; map<uint64, Child> by_id = 21; map<bool, string> flags = 22;
  optional int64 maybe = 23;
  oneof either { string label = 24; Child other = 25; }
  google.protobuf.Timestamp at = 26; google.protobuf.Duration took = 27;
  google.protobuf.StringValue wrapped = 28; google.protobuf.Struct doc = 29;
  google.protobuf.ListValue list = 30; google.protobuf.Value any_json = 31;
}`

// TestProtobufEveryTypeThroughRun writes messages of every Protobuf kind
// with plain protocompile/dynamicpb codecs, runs source (protobuf) →
// filter and map (expressions over the message) → sink (protobuf, the
// same schema) through `processor run` on kfake and the real broker with
// the registry, and reads the output back: each message must come out
// equal (proto.Equal) to the one that went in.
func TestProtobufEveryTypeThroughRun(t *testing.T) {
	url := testRegistry(t)
	md := compileMessage(t, everyProtoType, "shop.types.Sample")
	sample := func(i int) *dynamicpb.Message {
		js := fmt.Sprintf(`{"flag":%t,"a32":-%d,"b32":-2,"c32":-3,"d32":4000000000,"e32":5,
			"a64":"9007199254740993","b64":"-%d","c64":"-7","d64":"18446744073709551615","e64":"9",
			"ratio":1.5,"precise":-0.125,"text":"s\u00e9 \"%d\"\n","blob":"AAH/",
			"level":"%s","child":{"n":"%d","labels":["x","y"]},"series":[1.25,%d],"children":[{"n":"1"},{"labels":["z"]}],
			"attrs":{"a":-%d,"z":1},"byId":{"7":{"n":"7"},"0":{}},"flags":{"true":"yes","false":"no"},
			"at":"2026-12-02T10:11:12.345678901Z","took":"3.5s","wrapped":"w","doc":{"k":[1,"two",null,true,{"x":1.5}]},
			"list":[1,"a"],"anyJson":{"deep":[false]}%s}`,
			i%2 == 0, i, i, i, []string{"LOW", "MID", "HIGH"}[i%3], i, i, i,
			[]string{``, `,"maybe":"0","label":"l"`, `,"other":{"n":"-1"}`}[i%3])
		m := dynamicpb.NewMessage(md)
		if err := protojson.Unmarshal([]byte(js), m); err != nil {
			t.Fatalf("sample %d: %v", i, err)
		}
		return m
	}
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		clearConfigEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		job, in, out, reg := formatTopics(t, c, "pbt", url, 2)
		ss, err := reg.CreateSchema(ctx, in+"-value", sr.Schema{Schema: everyProtoType, Type: sr.TypeProtobuf})
		if err != nil {
			t.Fatal(err)
		}
		const n = 12
		prod := c.Client(t, kgo.DefaultProduceTopic(in))
		var h sr.ConfluentHeader
		for i := range n {
			payload, err := proto.Marshal(sample(i))
			if err != nil {
				t.Fatal(err)
			}
			v, _ := h.AppendEncode(nil, ss.ID, []int{0})
			prod.Produce(ctx, &kgo.Record{Key: fmt.Appendf(nil, "k%d", i), Value: append(v, payload...)}, nil)
		}
		recs := runIdentity(t, ctx, c, prod, identityJob{job, in, out, url, "protobuf", everyProtoType,
			`value.child.labels[0] == "x" && value.e64 > 0 && value.level in ["LOW", "MID", "HIGH"]`}, n)
		for _, r := range recs {
			_, rest, err := h.DecodeID(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			_, payload, err := h.DecodeIndex(rest, 8)
			if err != nil {
				t.Fatal(err)
			}
			got := dynamicpb.NewMessage(md)
			if err := proto.Unmarshal(payload, got); err != nil {
				t.Fatal(err)
			}
			var i int
			fmt.Sscanf(string(r.Key), "k%d", &i)
			if want := sample(i); !proto.Equal(got, want) {
				g, _ := protojson.Marshal(got)
				w, _ := protojson.Marshal(want)
				t.Errorf("record %s:\n got %s\nwant %s", r.Key, g, w)
			}
		}
	})
}

// identityJob is a job of the every-type tests: source (format) → filter
// (where) → map {value: value} → sink (format, schema).
type identityJob struct {
	name, in, out, registry, format, schema, where string
}

// runIdentity flushes prod, runs j until n records of its output are
// committed, and returns them.
func runIdentity(t *testing.T, ctx context.Context, c *kafkatest.Cluster, prod *kgo.Client, j identityJob, n int) []*kgo.Record {
	t.Helper()
	if err := prod.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	schemaFile := filepath.Join(dir, "schema")
	if err := os.WriteFile(schemaFile, []byte(j.schema), 0o600); err != nil {
		t.Fatal(err)
	}
	yaml := fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s], format: {type: %s, registry: "%s"}}
    - filter: {where: '%s'}
    - map: {value: value}
    - sink: {topic: %s, format: {type: %s, registry: "%s", schema_file: "%s"}}
`, j.name, j.in, j.format, j.registry, j.where, j.out, j.format, j.registry, schemaFile) + runSettings(c, dir)
	recs := runUntilCommitted(t, ctx, c, filepath.Join(dir, "job.yaml"), yaml, j.out, n)
	if len(recs) != n {
		t.Fatalf("%d outputs, want %d", len(recs), n)
	}
	return recs
}
