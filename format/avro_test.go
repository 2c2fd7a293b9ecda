package format_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/weir-stream/weir/format"
)

// registries runs f against franz-go's in-memory fake registry and, when
// WEIR_REGISTRY_URL is set (scripts/registry.sh env), the real registry
// there; with WEIR_REQUIRE_REGISTRY=1 a missing real registry fails the
// test instead of leaving it to the fake alone.
func registries(t *testing.T, f func(t *testing.T, url string, real bool)) {
	t.Run("srfake", func(t *testing.T) {
		fake := srfake.New()
		t.Cleanup(fake.Close)
		f(t, fake.URL(), false)
	})
	url := os.Getenv("WEIR_REGISTRY_URL")
	if url == "" {
		if os.Getenv("WEIR_REQUIRE_REGISTRY") == "1" {
			t.Fatal("WEIR_REQUIRE_REGISTRY=1 but WEIR_REGISTRY_URL is not set: start one with scripts/registry.sh up")
		}
		t.Log("real registry: WEIR_REGISTRY_URL not set (scripts/registry.sh up); ran on srfake only")
		return
	}
	t.Run("real", func(t *testing.T) {
		resp, err := http.Get(url + "/subjects")
		if err != nil {
			t.Fatalf("the registry at %s is unreachable: %v", url, err)
		}
		resp.Body.Close()
		f(t, url, true)
	})
}

func newRegistry(t *testing.T, url string) *format.Registry {
	t.Helper()
	r, err := format.NewRegistry(format.RegistryConfig{URL: url, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// subject is unique per test run: a real registry outlives the test.
func subject(t *testing.T) string {
	return fmt.Sprintf("%s-%d-value", strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()), time.Now().UnixNano())
}

// decodeJSON decodes a JSON document into the JSON value model (int64 for
// integers), as the pipeline does.
func decodeJSON(t *testing.T, doc string) any {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(doc))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	return model(v)
}

func model(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n
		}
		f, _ := x.Float64()
		return f
	case map[string]any:
		for k, e := range x {
			x[k] = model(e)
		}
	case []any:
		for i, e := range x {
			x[i] = model(e)
		}
	}
	return v
}

// allTypes is a record with a field of every Avro type and logical type
// the format maps (docs/formats.md).
const allTypes = `{
  "type": "record", "name": "All", "namespace": "weir.test",
  "fields": [
    {"name": "b", "type": "boolean"},
    {"name": "i", "type": "int"},
    {"name": "l", "type": "long"},
    {"name": "f", "type": "float"},
    {"name": "d", "type": "double"},
    {"name": "s", "type": "string"},
    {"name": "by", "type": "bytes"},
    {"name": "fx", "type": {"type": "fixed", "name": "Four", "size": 4}},
    {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}},
    {"name": "arr", "type": {"type": "array", "items": "long"}},
    {"name": "m", "type": {"type": "map", "values": "string"}},
    {"name": "nested", "type": {"type": "record", "name": "Inner", "fields": [
      {"name": "x", "type": "int"},
      {"name": "tags", "type": {"type": "array", "items": "string"}}
    ]}},
    {"name": "opt", "type": ["null", "string"], "default": null},
    {"name": "multi", "type": ["null", "long", "string", "Inner"]},
    {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "fdec", "type": {"type": "fixed", "name": "Dec8", "size": 8, "logicalType": "decimal", "precision": 12, "scale": 3}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "tsu", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "tod", "type": {"type": "int", "logicalType": "time-millis"}},
    {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
    {"name": "optrec", "type": ["null", "Inner"], "default": null},
    {"name": "optarr", "type": ["null", {"type": "array", "items": "long"}], "default": null},
    {"name": "optenum", "type": ["null", "Color"], "default": null},
    {"name": "optts", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}], "default": null},
    {"name": "either", "type": ["int", "string"], "default": 0},
    {"name": "withdefault", "type": "long", "default": 7}
  ]
}`

func TestAvroRoundTripsEveryType(t *testing.T) {
	registries(t, func(t *testing.T, url string, real bool) {
		ctx := context.Background()
		reg := newRegistry(t, url)
		enc, err := format.NewAvroEncoder(reg, format.AvroEncoderConfig{Subject: subject(t)}, allTypes)
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		dec := format.NewAvroDecoder(ctx, newRegistry(t, url)) // a second client: the schema comes from the registry
		for _, tc := range []struct{ name, in, want string }{
			{"values", `{"b":true,"i":-5,"l":9007199254740993,"f":1.5,"d":-0.25,"s":"h\u00e9\"llo\n","by":"AAEC/w==","fx":"AQIDBA==","e":"GREEN",
				"arr":[1,2,3],"m":{"z":"1","a":"2"},"nested":{"x":3,"tags":["p","q"]},"opt":"here","multi":42,
				"dec":"12.34","fdec":"-1.5","ts":"2026-12-02T10:11:12.345Z","tsu":"2026-12-02T10:11:12.345678Z","day":"2026-12-02","tod":"13:14:15.250",
				"id":"6f1c2a36-59c3-4a57-9d6e-1e1c1b1b1b1b","optrec":{"x":9,"tags":["r"]},"optarr":[4,5],"optenum":"RED","optts":"2026-12-02T10:11:12.345Z","either":"s","withdefault":1}`,
				`{"b":true,"i":-5,"l":9007199254740993,"f":1.5,"d":-0.25,"s":"h\u00e9\"llo\n","by":"AAEC/w==","fx":"AQIDBA==","e":"GREEN",
				"arr":[1,2,3],"m":{"a":"2","z":"1"},"nested":{"x":3,"tags":["p","q"]},"opt":"here","multi":42,
				"dec":"12.34","fdec":"-1.5","ts":"2026-12-02T10:11:12.345Z","tsu":"2026-12-02T10:11:12.345678Z","day":"2026-12-02","tod":"13:14:15.250",
				"id":"6f1c2a36-59c3-4a57-9d6e-1e1c1b1b1b1b","optrec":{"x":9,"tags":["r"]},"optarr":[4,5],"optenum":"RED","optts":"2026-12-02T10:11:12.345Z","either":"s","withdefault":1}`},
			{"nulls, numbers for times, a record in a union, defaults", `{"b":false,"i":0,"l":0,"f":0,"d":3,"s":"","by":"","fx":"AAAAAA==","e":"RED",
				"arr":[],"m":{},"nested":{"x":0,"tags":[]},"multi":{"x":1,"tags":["t"]},
				"dec":5,"fdec":"0.001","ts":1796206272345,"tsu":1796206272345678,"day":1,"tod":1000,"id":"x"}`,
				`{"b":false,"i":0,"l":0,"f":0,"d":3,"s":"","by":"","fx":"AAAAAA==","e":"RED",
				"arr":[],"m":{},"nested":{"x":0,"tags":[]},"opt":null,"multi":{"x":1,"tags":["t"]},
				"dec":"5","fdec":"0.001","ts":"2026-12-02T10:11:12.345Z","tsu":"2026-12-02T10:11:12.345678Z","day":"1970-01-02","tod":"00:00:01",
				"id":"x","optrec":null,"optarr":null,"optenum":null,"optts":null,"either":0,"withdefault":7}`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				wire, err := enc.Append(nil, decodeJSON(t, tc.in))
				if err != nil {
					t.Fatal(err)
				}
				if wire[0] != 0 || int(uint32(wire[1])<<24|uint32(wire[2])<<16|uint32(wire[3])<<8|uint32(wire[4])) != enc.SchemaID() {
					t.Fatalf("header % x, want magic 0 and ID %d", wire[:5], enc.SchemaID())
				}
				got, err := dec.DecodeValue(wire)
				if err != nil {
					t.Fatal(err)
				}
				var gotV, wantV any
				if err := json.Unmarshal(got, &gotV); err != nil {
					t.Fatalf("not JSON: %s: %v", got, err)
				}
				if err := json.Unmarshal([]byte(tc.want), &wantV); err != nil {
					t.Fatal(err)
				}
				g, _ := json.Marshal(gotV)
				w, _ := json.Marshal(wantV)
				if string(g) != string(w) {
					t.Errorf("decoded\n%s\nwant\n%s", g, w)
				}
				// The fields come in the schema's order.
				if !strings.HasPrefix(string(got), `{"b":`) || !strings.HasSuffix(string(got), `"withdefault":`+map[bool]string{true: "1}", false: "7}"}[strings.Contains(tc.in, "withdefault")]) {
					t.Errorf("fields out of the schema's order: %s", got)
				}
			})
		}
	})
}

func TestAvroEncodeRejectsWhatDoesNotFit(t *testing.T) {
	registries(t, func(t *testing.T, url string, real bool) {
		reg := newRegistry(t, url)
		enc, err := format.NewAvroEncoder(reg, format.AvroEncoderConfig{Subject: subject(t)},
			`{"type":"record","name":"R","fields":[{"name":"n","type":"int"},{"name":"e","type":{"type":"enum","name":"E","symbols":["A"]}}]}`)
		if err != nil {
			t.Fatal(err)
		}
		if err := enc.Prepare(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, in := range []string{`{"n":"x","e":"A"}`, `{"n":1.5,"e":"A"}`, `{"n":4294967296,"e":"A"}`, `{"e":"A"}`, `{"n":1,"e":"B"}`, `[1]`} {
			if _, err := enc.Append(nil, decodeJSON(t, in)); err == nil {
				t.Errorf("%s: encoded, want an error", in)
			} else {
				t.Logf("%s: %v", in, err)
			}
		}
	})
}

// TestAvroSchemaEvolution: one decoder reads values written with v1 and
// with v2 of a subject (v2 adds a field with a default), each with the
// schema of its ID; a v3 that breaks the subject's BACKWARD rule fails at
// Prepare, with the registry's reason.
func TestAvroSchemaEvolution(t *testing.T) {
	registries(t, func(t *testing.T, url string, real bool) {
		ctx := context.Background()
		reg := newRegistry(t, url)
		subj := subject(t)
		if res := reg.Client().SetCompatibility(ctx, sr.SetCompatibility{Level: sr.CompatBackward}, subj); res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		v1 := `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"}]}`
		v2 := `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"currency","type":"string","default":"EUR"}]}`
		v3 := `{"type":"record","name":"Order","fields":[{"name":"id","type":"long"},{"name":"currency","type":"string","default":"EUR"},{"name":"amount","type":"long"}]}`
		var wires [][]byte
		ids := map[int]bool{}
		for _, s := range []string{v1, v2} {
			enc, err := format.NewAvroEncoder(reg, format.AvroEncoderConfig{Subject: subj}, s)
			if err != nil {
				t.Fatal(err)
			}
			if err := enc.Prepare(ctx); err != nil {
				t.Fatal(err)
			}
			ids[enc.SchemaID()] = true
			w, err := enc.Append(nil, map[string]any{"id": int64(len(wires) + 1), "currency": "USD"})
			if err != nil {
				t.Fatal(err)
			}
			wires = append(wires, w)
		}
		if len(ids) != 2 {
			t.Fatalf("v1 and v2 got IDs %v, want two", ids)
		}
		dec := format.NewAvroDecoder(ctx, newRegistry(t, url))
		for i, want := range []string{`{"id":1}`, `{"id":2,"currency":"USD"}`} {
			got, err := dec.DecodeValue(wires[i])
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != want {
				t.Errorf("v%d: %s, want %s", i+1, got, want)
			}
		}
		if !real {
			return // srfake does not check compatibility
		}
		enc, err := format.NewAvroEncoder(reg, format.AvroEncoderConfig{Subject: subj}, v3)
		if err != nil {
			t.Fatal(err)
		}
		err = enc.Prepare(ctx)
		if err == nil {
			t.Fatal("v3 (a field without a default) registered under BACKWARD, want an error")
		}
		if !strings.Contains(err.Error(), "not compatible") {
			t.Errorf("error %q does not say the schema is not compatible", err)
		}
		t.Logf("v3: %v", err)
	})
}

func TestAvroDecodeErrorsAreTheRecords(t *testing.T) {
	registries(t, func(t *testing.T, url string, real bool) {
		dec := format.NewAvroDecoder(context.Background(), newRegistry(t, url))
		if _, err := dec.DecodeValue([]byte(`{"not":"avro"}`)); !errors.Is(err, format.ErrBadWireFormat) {
			t.Errorf("JSON input: %v, want ErrBadWireFormat", err)
		}
		if _, err := dec.DecodeValue([]byte{0, 0x7f, 0xff, 0xff, 0xf0, 2}); !errors.Is(err, format.ErrUnknownSchema) {
			t.Errorf("unknown ID: %v, want ErrUnknownSchema", err)
		}
		if v, err := dec.DecodeValue(nil); err != nil || v != nil {
			t.Errorf("tombstone: %q, %v; want nil, nil", v, err)
		}
	})
}

// TestRegistryOutageIsRetried: a registry that answers 503 and then comes
// back is retried, shown by Unavailable meanwhile, and the value decodes;
// nothing is reported as the record's error.
func TestRegistryOutageIsRetried(t *testing.T) {
	fake := srfake.New()
	defer fake.Close()
	fake.SeedSchema("s-value", 1, 1, sr.Schema{Schema: `"long"`})
	var failing atomic.Int32
	failing.Store(5)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Add(-1) >= 0 {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		req, _ := http.NewRequestWithContext(r.Context(), r.Method, fake.URL()+r.URL.Path, r.Body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		buf := make([]byte, 1<<16)
		n, _ := resp.Body.Read(buf)
		w.Write(buf[:n])
	}))
	defer proxy.Close()
	reg := newRegistry(t, proxy.URL)
	dec := format.NewAvroDecoder(context.Background(), reg)
	sawDown := make(chan bool, 1)
	go func() {
		for range 200 {
			if reg.Unavailable() != nil {
				sawDown <- true
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		sawDown <- false
	}()
	got, err := dec.DecodeValue([]byte{0, 0, 0, 0, 1, 0x54}) // 42 as an Avro long (zigzag)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "42" {
		t.Errorf("decoded %s, want 42", got)
	}
	if !<-sawDown {
		t.Error("Unavailable stayed nil during the outage")
	}
	if err := reg.Unavailable(); err != nil {
		t.Errorf("Unavailable after recovery: %v", err)
	}
}

// An unreachable registry (nothing listening) is an outage too.
func TestRegistryUnreachableUntilContextEnds(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	reg := newRegistry(t, url)
	_, err = format.NewAvroDecoder(ctx, reg).DecodeValue([]byte{0, 0, 0, 0, 1, 2})
	if err == nil || errors.Is(err, format.ErrUnknownSchema) {
		t.Fatalf("got %v, want the context's end", err)
	}
	if reg.Unavailable() == nil {
		t.Error("Unavailable is nil with no registry listening")
	}
}
