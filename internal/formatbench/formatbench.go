// Package formatbench measures what a record format costs per record
// (issue 15): the same orders decoded at a source's edge and into the
// value the steps read, then encoded by a sink, as JSON and as Avro and
// Protobuf in the Confluent wire format (package format, with franz-go's in-memory fake
// registry: a schema is fetched once, so the registry is not on the
// per-record path). make bench ARGS=-formats prints the figures.
package formatbench

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/weir-stream/weir/format"
	"github.com/weir-stream/weir/kafkaio/source"
	"github.com/weir-stream/weir/pipeline"
)

// Rounds is how many times each case runs; the fastest counts.
const Rounds = 3

// OrderSchema is the orders' Avro schema.
const OrderSchema = `{"type":"record","name":"Order","namespace":"bench","fields":[
	{"name":"id","type":"long"},{"name":"customer","type":"string"},{"name":"country","type":"string"},
	{"name":"amount","type":"double"},{"name":"items","type":{"type":"array","items":"string"}},
	{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
	{"name":"note","type":["null","string"],"default":null}]}`

// OrderProto is the orders' Protobuf schema: the same fields.
const OrderProto = `syntax = "proto3";
package bench;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  string customer = 2;
  string country = 3;
  double amount = 4;
  repeated string items = 5;
  google.protobuf.Timestamp ts = 6;
  optional string note = 7;
}`

// Result is one case's cost per record.
type Result struct {
	Name        string
	NsPerOp     float64
	AllocsPerOp int64
}

type fixture struct {
	json [][]byte // the orders as JSON
	avro [][]byte // the same orders, framed Avro
	pb   [][]byte // and framed Protobuf
	enc  *format.AvroEncoder
	dec  *format.AvroDecoder
	penc *format.ProtoEncoder
	pdec *format.ProtoDecoder
	vals []any // the orders decoded (the sinks' input)
}

func newFixture() (*fixture, func(), error) {
	reg := srfake.New()
	r, err := format.NewRegistry(format.RegistryConfig{URL: reg.URL()})
	if err != nil {
		return nil, reg.Close, err
	}
	enc, err := format.NewAvroEncoder(r, format.AvroEncoderConfig{Subject: "orders-value"}, OrderSchema)
	if err != nil {
		return nil, reg.Close, err
	}
	if err := enc.Prepare(context.Background()); err != nil {
		return nil, reg.Close, err
	}
	penc, err := format.NewProtoEncoder(r, format.ProtoEncoderConfig{Subject: "orders-pb-value"}, OrderProto)
	if err != nil {
		return nil, reg.Close, err
	}
	if err := penc.Prepare(context.Background()); err != nil {
		return nil, reg.Close, err
	}
	f := &fixture{enc: enc, dec: format.NewAvroDecoder(context.Background(), r), penc: penc, pdec: format.NewProtoDecoder(context.Background(), r)}
	countries := []string{"br", "de", "fr", "in", "jp", "us"}
	for i := range 1024 {
		o := map[string]any{
			"id": i, "customer": fmt.Sprintf("customer-%05d", i*7919%10000), "country": countries[i%len(countries)],
			"amount": float64(i%500) + 0.25, "items": []string{"sku-1", fmt.Sprintf("sku-%d", i%97)},
			"ts": "2026-12-02T10:00:00.123Z", "note": nil,
		}
		if i%3 == 0 {
			o["note"] = "gift"
		}
		j, err := json.Marshal(o)
		if err != nil {
			return nil, reg.Close, err
		}
		v, _, err := pipeline.DecodeJSON(j)
		if err != nil {
			return nil, reg.Close, err
		}
		a, err := enc.Append(nil, v)
		if err != nil {
			return nil, reg.Close, err
		}
		p, err := penc.Append(nil, v)
		if err != nil {
			return nil, reg.Close, err
		}
		f.json, f.avro, f.pb, f.vals = append(f.json, j), append(f.avro, a), append(f.pb, p), append(f.vals, v)
	}
	return f, reg.Close, nil
}

// Run measures every case and returns the fastest of Rounds each.
func Run() ([]Result, error) {
	f, closeReg, err := newFixture()
	defer closeReg()
	if err != nil {
		return nil, err
	}
	jsonCheck := source.DecodeJSON{}
	cases := []struct {
		name string
		fn   func(b *testing.B)
	}{
		// A json source: the edge's validation, then the decode into the
		// value the steps read.
		{"format_decode_json", func(b *testing.B) {
			var r kgo.Record
			b.ReportAllocs()
			for i := range b.N {
				r.Value = f.json[i%len(f.json)]
				if err := jsonCheck.Decode(&r); err != nil {
					b.Fatal(err)
				}
				if _, _, err := pipeline.DecodeJSON(r.Value); err != nil {
					b.Fatal(err)
				}
			}
		}},
		// An avro source: Avro into its JSON document at the edge, then
		// the same decode.
		{"format_decode_avro", func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				j, err := f.dec.DecodeValue(f.avro[i%len(f.avro)])
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := pipeline.DecodeJSON(j); err != nil {
					b.Fatal(err)
				}
			}
		}},
		// A protobuf source: likewise.
		{"format_decode_protobuf", func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				j, err := f.pdec.DecodeValue(f.pb[i%len(f.pb)])
				if err != nil {
					b.Fatal(err)
				}
				if _, _, err := pipeline.DecodeJSON(j); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"format_encode_json", func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			for i := range b.N {
				var err error
				if buf, err = pipeline.AppendJSON(buf[:0], f.vals[i%len(f.vals)], nil); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"format_encode_avro", func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			for i := range b.N {
				var err error
				if buf, err = f.enc.Append(buf[:0], f.vals[i%len(f.vals)]); err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"format_encode_protobuf", func(b *testing.B) {
			var buf []byte
			b.ReportAllocs()
			for i := range b.N {
				var err error
				if buf, err = f.penc.Append(buf[:0], f.vals[i%len(f.vals)]); err != nil {
					b.Fatal(err)
				}
			}
		}},
	}
	out := make([]Result, len(cases))
	for round := range Rounds {
		for i, c := range cases {
			r := testing.Benchmark(c.fn)
			if r.N == 0 {
				return nil, fmt.Errorf("%s failed", c.name)
			}
			ns := float64(r.T.Nanoseconds()) / float64(r.N)
			if round == 0 || ns < out[i].NsPerOp {
				out[i] = Result{Name: c.name, NsPerOp: ns, AllocsPerOp: r.AllocsPerOp()}
			}
		}
	}
	return out, nil
}
