package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
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
// Avro keys out. The input is written and the output read with plain
// protocompile, dynamicpb, protojson and hamba codecs, not Weir's.
func TestProtobufAndKeyFormatsThroughRun(t *testing.T) {
	url := testRegistry(t)
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		clearConfigEnv(t)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		job := kafkatest.Name(t, "fmt")
		in, out := job+"-in", job+"-out"
		c.CreateTopic(t, in, 2, nil)
		c.CreateTopic(t, out, 2, nil)

		reg, err := sr.NewClient(sr.URLs(url))
		if err != nil {
			t.Fatal(err)
		}
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
        format: {type: protobuf, registry: "%[4]s", schema_file: "%[5]s/line.proto", message: Line}
        key_format: {type: avro, registry: "%[4]s", schema_file: "%[5]s/key.avsc"}
kafka: {brokers: [%[6]s]}
checkpoint: {interval: 200ms, storage: "file://%[5]s/chk"}
state: {dir: "%[5]s/state"}
process: {replica_id: r0}
`, job, in, out, url, dir, strings.Join(c.Brokers, ","))
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		stop, done, logs := startRun(t, ctx, file)
		var recs []*kgo.Record
		deadline := time.Now().Add(90 * time.Second)
		for len(recs) < len(want) {
			select {
			case err := <-done:
				t.Fatalf("processor run exited: %v\n%s", err, logs.String())
			case <-time.After(200 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("after 90s: %d of %d outputs committed\n%s", len(recs), len(want), logs.String())
			}
			recs = c.ReadCommitted(ctx, t, out)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatalf("processor run: %v\n%s", err, logs.String())
		}

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
