package pipeline

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
)

// rec200 is a typical record of about 200 bytes.
var rec200 = []byte(`{"id":"o-1029384","customer":"c-48213","amount":129.95,"currency":"EUR","items":[{"sku":"a-12","qty":2},{"sku":"b-7","qty":1}],"ts":1764615600123,"country":"DE","channel":"web"}`)

// BenchmarkDecodeJSON is the source's decoding of a typical record
// (fastjson, converted to the value model).
func BenchmarkDecodeJSON(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(rec200)))
	for b.Loop() {
		if _, _, err := DecodeJSON(rec200); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeEncodingJSON is the same with encoding/json (UseNumber,
// then numbers converted), the alternative measured.
func BenchmarkDecodeEncodingJSON(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(rec200)))
	for b.Loop() {
		d := json.NewDecoder(bytes.NewReader(rec200))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			b.Fatal(err)
		}
		convertNumbers(v)
	}
}

func convertNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = convertNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = convertNumbers(e)
		}
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 64); err == nil {
			return i
		}
		f, _ := strconv.ParseFloat(string(x), 64)
		return f
	}
	return v
}

// BenchmarkEncodeJSON is a sink's encoding of the decoded record.
func BenchmarkEncodeJSON(b *testing.B) {
	v, fields, _ := DecodeJSON(rec200)
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf, _ = AppendJSON(buf[:0], v, fields)
	}
}
