package format_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/weir-stream/weir/format"
)

// allProto has a field of every Protobuf type the JSON mapping covers
// (docs/formats.md), nested messages (the second top-level message is the
// one written, so its message index is not the shortcut), and well-known
// types.
const allProto = `syntax = "proto3";
package weir.test;

import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";

message Unused { string x = 1; }

message All {
  enum Color { RED = 0; GREEN = 1; BLUE = 2; }
  message Inner { int32 x = 1; repeated string tags = 2; }

  bool b = 1;
  int32 i32 = 2;
  sint32 s32 = 3;
  sfixed32 sf32 = 4;
  uint32 u32 = 5;
  fixed32 f32 = 6;
  int64 i64 = 7;
  sint64 s64 = 8;
  sfixed64 sf64 = 9;
  uint64 u64 = 10;
  fixed64 f64 = 11;
  float fl = 12;
  double db = 13;
  string s = 14;
  bytes by = 15;
  Color color = 16;
  Inner inner = 17;
  repeated int64 nums = 18;
  repeated Inner inners = 19;
  map<string, int64> counts = 20;
  map<int32, Inner> by_id = 21;
  optional string opt = 22;
  oneof choice {
    string name = 23;
    Inner other = 24;
  }
  google.protobuf.Timestamp ts = 25;
  google.protobuf.Duration dur = 26;
  google.protobuf.Int64Value wrapped = 27;
  google.protobuf.Struct doc = 28;
  google.protobuf.Value any_json = 29;
  string camel_case_field = 30;
}
`

func TestProtobufRoundTripsEveryType(t *testing.T) {
	registries(t, func(t *testing.T, url string, real bool) {
		ctx := context.Background()
		enc, err := format.NewProtoEncoder(newRegistry(t, url), format.ProtoEncoderConfig{Subject: subject(t), Message: "All"}, allProto)
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		dec := format.NewProtoDecoder(ctx, newRegistry(t, url)) // a second client: the schema comes from the registry
		for _, tc := range []struct{ name, in, want string }{
			{"values",
				`{"b":true,"i32":-5,"s32":-6,"sf32":-7,"u32":4000000000,"f32":9,"i64":9007199254740993,"s64":-9007199254740993,"sf64":-1,
				"u64":9223372036854775807,"f64":3,"fl":1.5,"db":-0.25,"s":"h\u00e9\"llo\n","by":"AAEC/w==","color":"GREEN",
				"inner":{"x":3,"tags":["p","q"]},"nums":[1,2,3],"inners":[{"x":1,"tags":[]},{"x":2,"tags":["t"]}],
				"counts":{"z":1,"a":2},"by_id":{"7":{"x":7,"tags":[]},"-1":{"x":-1,"tags":["n"]}},"opt":"here","name":"n1",
				"ts":"2026-12-02T10:11:12.345678901Z","dur":"1.5s","wrapped":42,"doc":{"k":[1,"two",null,true,{"x":1.5}]},"any_json":"text",
				"camelCaseField":"by its JSON name"}`,
				`{"b":true,"i32":-5,"s32":-6,"sf32":-7,"u32":4000000000,"f32":9,"i64":9007199254740993,"s64":-9007199254740993,"sf64":-1,
				"u64":9223372036854775807,"f64":3,"fl":1.5,"db":-0.25,"s":"h\u00e9\"llo\n","by":"AAEC/w==","color":"GREEN",
				"inner":{"x":3,"tags":["p","q"]},"nums":[1,2,3],"inners":[{"x":1,"tags":[]},{"x":2,"tags":["t"]}],
				"counts":{"a":2,"z":1},"by_id":{"-1":{"x":-1,"tags":["n"]},"7":{"x":7,"tags":[]}},"opt":"here","name":"n1","other":null,
				"ts":"2026-12-02T10:11:12.345678901Z","dur":"1.5s","wrapped":42,"doc":{"k":[1,"two",null,true,{"x":1.5}]},"any_json":"text",
				"camel_case_field":"by its JSON name"}`},
			{"defaults, nulls, numbers for times, the other oneof member, an enum by number",
				`{"color":2,"other":{"x":1},"ts":1796206272345,"dur":-0.25,"opt":null,"inner":null}`,
				`{"b":false,"i32":0,"s32":0,"sf32":0,"u32":0,"f32":0,"i64":0,"s64":0,"sf64":0,
				"u64":0,"f64":0,"fl":0,"db":0,"s":"","by":"","color":"BLUE",
				"inner":null,"nums":[],"inners":[],"counts":{},"by_id":{},"opt":null,"name":null,"other":{"x":1,"tags":[]},
				"ts":"2026-12-02T10:11:12.345Z","dur":"-0.25s","wrapped":null,"doc":null,"any_json":null,"camel_case_field":""}`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wire, err := enc.Append(nil, decodeJSON(t, tc.in))
				if err != nil {
					t.Fatal(err)
				}
				id := int(uint32(wire[1])<<24 | uint32(wire[2])<<16 | uint32(wire[3])<<8 | uint32(wire[4]))
				if wire[0] != 0 || id != enc.SchemaID() {
					t.Fatalf("header % x, want magic 0 and ID %d", wire[:5], enc.SchemaID())
				}
				// All is the second top-level message: indexes [1], as a
				// count 1 (zigzag 2) and 1 (zigzag 2).
				if wire[5] != 2 || wire[6] != 2 {
					t.Fatalf("message indexes % x, want 02 02 ([1])", wire[5:7])
				}
				got, err := dec.DecodeValue(wire)
				if err != nil {
					t.Fatal(err)
				}
				if g, w := canonical(t, string(got)), canonical(t, tc.want); g != w {
					t.Errorf("decoded\n%s\nwant\n%s", g, w)
				}
				if !strings.HasPrefix(string(got), `{"b":`) || !strings.HasSuffix(string(got), `"camel_case_field":`+map[bool]string{true: `"by its JSON name"}`, false: `""}`}[strings.Contains(tc.in, "camel")]) {
					t.Errorf("fields out of the message's order: %s", got)
				}
				// The output is deterministic: encoding the decoded value
				// again gives the same bytes.
				again, err := enc.Append(nil, decodeJSON(t, string(got)))
				if err != nil {
					t.Fatal(err)
				}
				if string(again) != string(wire) {
					t.Errorf("re-encoded % x\nwant % x", again, wire)
				}
			})
		}
	})
}

// canonical re-marshals a JSON document with sorted keys, keeping numbers
// exactly.
func canonical(t *testing.T, doc string) string {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("not JSON: %s: %v", doc, err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func TestProtobufEncodeRejectsWhatDoesNotFit(t *testing.T) {
	reg := newRegistry(t, "http://127.0.0.1:1") // NewProtoEncoder makes no request
	if _, err := format.NewProtoEncoder(reg, format.ProtoEncoderConfig{Subject: "s"}, "syntax = \"proto3\"; message M { strin x = 1; }"); err == nil || !strings.Contains(err.Error(), "strin") {
		t.Errorf("a bad schema: %v, want the compiler's error naming strin", err)
	}
	if _, err := format.NewProtoEncoder(reg, format.ProtoEncoderConfig{Subject: "s", Message: "Nope"}, allProto); err == nil || !strings.Contains(err.Error(), "weir.test.Unused, weir.test.All") {
		t.Errorf("an unknown message: %v, want the schema's messages listed", err)
	}
	registries(t, func(t *testing.T, url string, real bool) {
		enc, err := format.NewProtoEncoder(newRegistry(t, url), format.ProtoEncoderConfig{Subject: subject(t), Message: "weir.test.All"}, allProto)
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.Prepare(context.Background()); err != nil {
			t.Fatal(err)
		}
		for in, want := range map[string]string{
			`{"i32":3000000000}`:            "i32: 3000000000 is out of the range of int32",
			`{"u64":-1}`:                    "u64: -1 is out of the range of uint64",
			`{"color":"PINK"}`:              `color: enum weir.test.All.Color: "PINK" is not one of its values`,
			`{"s":5}`:                       "s: want a string, got a number",
			`{"nums":[1,"x"]}`:              `nums: [1]: "x" is not an integer (int64)`,
			`{"name":"a","other":{"x":1}}`:  "other: set, but so is name, of the same oneof choice",
			`{"ts":"yesterday"}`:            `ts: timestamp: "yesterday" is not an RFC 3339 time`,
			`{"by_id":{"x":{}}}`:            `by_id: ["x"]: "x" is not an integer key`,
			`{"inner":{"x":1.5}}`:           "inner: x: 1.5 is not an integer",
			`"not an object"`:               "message weir.test.All: want an object, got a string",
			`{"counts":{"a":{"nested":1}}}`: `counts: ["a"]: want an integer, got an object`,
		} {
			_, err := enc.Append(nil, decodeJSON(t, in))
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want an error containing %q", in, err, want)
			}
		}
	})
}

func TestProtobufDecodeErrorsAreTheRecords(t *testing.T) {
	registries(t, func(t *testing.T, url string, real bool) {
		ctx := context.Background()
		reg := newRegistry(t, url)
		enc, err := format.NewProtoEncoder(reg, format.ProtoEncoderConfig{Subject: subject(t)}, allProto)
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		id := enc.SchemaID()
		head := []byte{0, byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}
		dec := format.NewProtoDecoder(ctx, reg)
		for name, tc := range map[string]struct {
			v    []byte
			want error
			msg  string
		}{
			"no header":       {[]byte("{}"), format.ErrBadWireFormat, ""},
			"unknown schema":  {[]byte{0, 0x7f, 0xff, 0xff, 0xf0, 0}, format.ErrUnknownSchema, ""},
			"bad index":       {append(head, 2, 40), nil, "no such message"},
			"no index":        {head, format.ErrBadWireFormat, ""},
			"bad payload":     {append(head, 0, 0x0a, 0x05, 'a'), nil, "does not match message weir.test.Unused"},
			"negative length": {append(head, 1), format.ErrBadWireFormat, ""},
		} {
			_, err := dec.DecodeValue(tc.v)
			switch {
			case err == nil:
				t.Errorf("%s: no error", name)
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Errorf("%s: %v, want %v", name, err, tc.want)
			case tc.msg != "" && !strings.Contains(err.Error(), tc.msg):
				t.Errorf("%s: %v, want it to say %q", name, err, tc.msg)
			}
		}
		if v, err := dec.DecodeValue(nil); v != nil || err != nil {
			t.Errorf("a tombstone: %q, %v; want nil, nil", v, err)
		}
	})
}

// TestProtobufReferencesAndEvolution reads a schema that imports another
// subject's (a reference), and a record of v1 and v2 of one subject (v2
// adds a field) with one decoder; a v2 that changes a field's type is
// rejected at Prepare with the registry's reason where it gives one.
func TestProtobufReferencesAndEvolution(t *testing.T) {
	registries(t, func(t *testing.T, url string, real bool) {
		ctx := context.Background()
		reg := newRegistry(t, url)
		cl := reg.Client()
		common := subject(t) + "-common"
		shared := `syntax = "proto3"; package shared; message Money { string currency = 1; int64 units = 2; }`
		cs, err := cl.CreateSchema(ctx, common, sr.Schema{Schema: shared, Type: sr.TypeProtobuf})
		if err != nil {
			t.Fatal(err)
		}
		main := subject(t)
		if res := cl.SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatBackward}, main); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		v1 := `syntax = "proto3"; package orders; import "shared/money.proto"; message Order { int64 id = 1; shared.Money price = 2; }`
		s1, err := cl.CreateSchema(ctx, main, sr.Schema{Schema: v1, Type: sr.TypeProtobuf,
			References: []sr.SchemaReference{{Name: "shared/money.proto", Subject: common, Version: cs.Version}}})
		if err != nil {
			t.Fatal(err)
		}
		dec := format.NewProtoDecoder(ctx, newRegistry(t, url))
		// id 1, price {currency "EUR", units 5}: written by hand, as any
		// producer would.
		rec := []byte{0, byte(s1.ID >> 24), byte(s1.ID >> 16), byte(s1.ID >> 8), byte(s1.ID), 0,
			0x08, 0x01, 0x12, 0x07, 0x0a, 0x03, 'E', 'U', 'R', 0x10, 0x05}
		got, err := dec.DecodeValue(rec)
		if err != nil {
			t.Fatal(err)
		}
		if want := `{"id":1,"price":{"currency":"EUR","units":5}}`; string(got) != want {
			t.Errorf("v1 with a reference: %s, want %s", got, want)
		}

		// v2 adds a field and retires price (reserved); the encoder registers
		// it (compatible) and the
		// one decoder reads both versions.
		v2 := `syntax = "proto3"; package orders; message Order { int64 id = 1; reserved 2; reserved "price"; string note = 3; }`
		enc, err := format.NewProtoEncoder(reg, format.ProtoEncoderConfig{Subject: main}, v2)
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		w2, err := enc.Append(nil, map[string]any{"id": int64(2), "note": "new"})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := dec.DecodeValue(w2); err != nil || string(got) != `{"id":2,"note":"new"}` {
			t.Errorf("v2: %s, %v", got, err)
		}
		if got, err := dec.DecodeValue(rec); err != nil || !strings.Contains(string(got), `"units":5`) {
			t.Errorf("v1 after v2: %s, %v", got, err)
		}
		if !real {
			return // srfake does not check compatibility
		}
		v3 := `syntax = "proto3"; package orders; message Order { string id = 1; string note = 3; }`
		enc, err = format.NewProtoEncoder(reg, format.ProtoEncoderConfig{Subject: main}, v3)
		if err != nil {
			t.Fatal(err)
		}
		err = enc.Prepare(ctx)
		if err == nil || !strings.Contains(err.Error(), "not compatible") {
			t.Fatalf("v3 (id changed from int64 to string) under BACKWARD: %v, want an incompatible-schema error", err)
		}
		t.Logf("v3: %v", err)
	})
}

func TestRecordName(t *testing.T) {
	for _, tc := range []struct {
		typ             sr.SchemaType
		schema, message string
		want            string
	}{
		{sr.TypeAvro, `{"type":"record","name":"Order","namespace":"shop","fields":[]}`, "", "shop.Order"},
		{sr.TypeAvro, `{"type":"enum","name":"Color","symbols":["R"]}`, "", "Color"},
		{sr.TypeAvro, `"string"`, "", "error: has no name"},
		{sr.TypeProtobuf, allProto, "", "weir.test.Unused"},
		{sr.TypeProtobuf, allProto, "All.Inner", "weir.test.All.Inner"},
		{sr.TypeProtobuf, allProto, "Gone", "error: no message weir.test.Gone"},
	} {
		got, err := format.RecordName(tc.typ, tc.schema, tc.message)
		if err != nil {
			got = "error: " + err.Error()
		}
		if got != tc.want && !(strings.HasPrefix(tc.want, "error: ") && strings.Contains(got, strings.TrimPrefix(tc.want, "error: "))) {
			t.Errorf("RecordName(%s, %.30q, %q) = %q, want %q", tc.typ, tc.schema, tc.message, got, tc.want)
		}
	}
}
