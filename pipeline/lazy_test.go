package pipeline

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"pgregory.net/rapid"

	"github.com/weir-stream/weir/expression"
	"github.com/weir-stream/weir/stream"
)

// lazyDocs are values whose decoding has edges: duplicate fields (the last
// wins), escapes, numbers an int64 does not hold, nesting, non-objects.
var lazyDocs = []string{
	`{"page":"home","user":"u1"}`,
	`{"page": "a\u0041\n", "n": 1}`,
	`{"page":1,"page":2}`,
	`{"page":-0}`, `{"page":1.50}`, `{"page":1e3}`, `{"page":12345678901234567890}`, `{"page":-9223372036854775808}`,
	`{"page":true}`, `{"page":null}`, `{"page":{"x":1}}`, `{"page":[1,2]}`,
	`{"other":1}`, `{}`, `[1,2]`, `"page"`, `42`, `null`,
	` { "page" : "spaced" , "b" : [ 1 , { "c" : null } ] } `,
}

// TestRecFieldKeyMatchesDecoded: the key of `key_by: {field}` read from a
// value's text is exactly the key of the decoded value, error or not.
func TestRecFieldKeyMatchesDecoded(t *testing.T) {
	for _, doc := range lazyDocs {
		lazy, err := JSONCodec{}.Decode([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if lazy.raw == nil {
			t.Fatalf("%s: decoded eagerly", doc)
		}
		eager, err := lazy.decoded()
		if err != nil {
			t.Fatal(err)
		}
		got, gerr := recFieldKey(nil, lazy, "page")
		want, werr := fieldKey(nil, eager.V, "page")
		if (gerr == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Errorf("%s: from the text %q (%v), decoded %q (%v)", doc, got, gerr, want, werr)
		}
		if gerr != nil && !errors.Is(gerr, stream.ErrDecode) {
			t.Errorf("%s: %v does not wrap ErrDecode", doc, gerr)
		}
	}
}

// TestLazyValueRoundTrips: a value no step decoded is written as it was
// read, through a sink and through a shuffle; once decoded it is what
// DecodeJSON gives; RecCodec keeps the origin either way.
func TestLazyValueRoundTrips(t *testing.T) {
	for _, doc := range lazyDocs {
		r, err := JSONCodec{Borrow: true}.Decode([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		out, err := JSONCodec{}.Append(nil, r)
		if err != nil || string(out) != doc {
			t.Fatalf("sink wrote %q (%v), want %q as read", out, err, doc)
		}
		r.Topic, r.Partition, r.Offset = "clicks", 3, 99
		enc, err := RecCodec{}.Append(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		back, err := RecCodec{Borrow: true}.Decode(enc)
		if err != nil {
			t.Fatal(err)
		}
		if back.Topic != "clicks" || back.Partition != 3 || back.Offset != 99 || string(back.raw) != doc {
			t.Fatalf("shuffled %q: %+v", doc, back)
		}
		dec, err := back.decoded()
		if err != nil {
			t.Fatal(err)
		}
		v, fields, _ := DecodeJSON([]byte(doc))
		if dec.raw != nil || !reflect.DeepEqual(dec.V, v) || !reflect.DeepEqual(dec.Fields, fields) {
			t.Fatalf("%s decoded to %#v %v, want %#v %v", doc, dec.V, dec.Fields, v, fields)
		}
		if again, _ := dec.decoded(); !reflect.DeepEqual(again, dec) {
			t.Fatalf("decoding twice changed %+v", dec)
		}
	}
	if r, err := (JSONCodec{}).Decode(nil); err != nil || r.raw != nil || r.V != nil {
		t.Fatalf("an empty value: %+v, %v", r, err)
	}
	if _, err := (JSONCodec{}).Decode([]byte(`{"a":`)); !errors.Is(err, stream.ErrDecode) {
		t.Fatalf("malformed JSON: %v, want ErrDecode at the source", err)
	}
}

// TestDecodeCopiesUnlessBorrowed: without Borrow, Decode keeps a copy, so
// that a caller may reuse its buffer (state reads do); with it, src.
func TestDecodeCopiesUnlessBorrowed(t *testing.T) {
	buf := []byte(`{"a":1}`)
	r, _ := JSONCodec{}.Decode(buf)
	b, _ := JSONCodec{Borrow: true}.Decode(buf)
	enc, _ := RecCodec{}.Append(nil, r)
	s, _ := RecCodec{}.Decode(enc)
	copy(buf, `{"b":2}`)
	for i := range enc {
		enc[i] = 0
	}
	if string(r.raw) != `{"a":1}` || string(s.raw) != `{"a":1}` {
		t.Fatalf("a reused buffer changed a copied value: %q, %q", r.raw, s.raw)
	}
	if string(b.raw) != `{"b":2}` {
		t.Fatalf("a borrowed value is not src: %q", b.raw)
	}
}

// TestRecFieldKeyProperty: for random objects, the key read from the text
// is the decoded value's.
func TestRecFieldKeyProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		names := rapid.SliceOfN(rapid.SampledFrom([]string{"page", "user", "p", "pagé"}), 0, 5).Draw(t, "names")
		vals := rapid.SliceOfN(rapid.SampledFrom([]string{`"x"`, `"a\"b"`, `7`, `-3.25`, `1e400`, `9007199254740993`, `null`, `{}`, `[]`, `false`}), len(names), len(names)).Draw(t, "values")
		var doc bytes.Buffer
		doc.WriteByte('{')
		for i, n := range names {
			if i > 0 {
				doc.WriteByte(',')
			}
			doc.WriteString(`"` + n + `":` + vals[i])
		}
		doc.WriteByte('}')
		lazy, err := JSONCodec{}.Decode(doc.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		eager, _ := lazy.decoded()
		got, gerr := recFieldKey(nil, lazy, "page")
		want, werr := fieldKey(nil, eager.V, "page")
		if (gerr == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("%s: from the text %q (%v), decoded %q (%v)", doc.String(), got, gerr, want, werr)
		}
	})
}

// TestProjectionMatchesDecoded: for every document, what view gives an
// expression that reads some fields has exactly those fields of the
// decoded value (the last one of a repeated name), a non-object is the
// decoded value, and the record stays undecoded; an expression that reads
// the whole value gets the decoded record.
func TestProjectionMatchesDecoded(t *testing.T) {
	some := readsOf(mustCompile(t, `value.page`), mustCompile(t, `value.n ?? value.b`))
	whole := readsOf(mustCompile(t, `value.page`), mustCompile(t, `len(value)`))
	if !reflect.DeepEqual(some, valueReads{fields: []string{"b", "n", "page"}}) || !whole.whole {
		t.Fatalf("readsOf: %+v, %+v", some, whole)
	}
	var task evalTask
	for _, doc := range lazyDocs {
		lazy, err := JSONCodec{}.Decode([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		eager, _ := lazy.decoded()
		r, v, err := task.view(lazy, some)
		if err != nil || r.raw == nil {
			t.Fatalf("%s: view: %v, raw kept %v", doc, err, r.raw != nil)
		}
		want := eager.V
		if o, ok := eager.V.(map[string]any); ok {
			p := map[string]any{}
			for _, f := range some.fields {
				if x, ok := o[f]; ok {
					p[f] = x
				}
			}
			want = p
		}
		if !reflect.DeepEqual(v, want) {
			t.Errorf("%s: projection %#v, want %#v", doc, v, want)
		}
		r, v, err = task.view(lazy, whole)
		if err != nil || r.raw != nil || !reflect.DeepEqual(v, eager.V) || !reflect.DeepEqual(r.V, eager.V) {
			t.Errorf("%s: whole view %#v (raw kept %v, %v), want %#v", doc, v, r.raw != nil, err, eager.V)
		}
	}
}

func mustCompile(t *testing.T, src string) *expression.Program {
	t.Helper()
	p, err := expression.Compile(src, expression.Any)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCheckedDecodeRejectsAsParse: the source's codec, which trusts the
// edge's JSON check (gjson, kafkaio/source.DecodeJSON) instead of parsing
// the value again, rejects exactly the valid documents that the parse
// rejects: those nested deeper than fastjson allows, whatever the
// brackets inside strings and the length of the text.
func TestCheckedDecodeRejectsAsParse(t *testing.T) {
	nest := func(n int, open, inner, close, pad string) string {
		return strings.Repeat(open, n) + inner + strings.Repeat(close, n) + pad
	}
	var docs []string
	for n := 295; n <= 302; n++ {
		for _, pad := range []string{"", strings.Repeat(" ", 700)} {
			docs = append(docs,
				nest(n, "[", "", "]", pad), nest(n, "[", "1", "]", pad),
				nest(n, `{"a":`, "1", "}", pad), nest(n, `{"a":`, "{}", "}", pad),
				nest(n, "[", `"[[[[{{{{"`, "]", pad), `{"s":"`+nest(n, "[", "", "", "")+`","a":`+nest(n/2, "[", "", "]", "")+`}`)
		}
	}
	check := func(t interface{ Fatalf(string, ...any) }, doc string) {
		if !gjson.Valid(doc) {
			return
		}
		_, perr := JSONCodec{}.Decode([]byte(doc))
		r, cerr := JSONCodec{Checked: true}.Decode([]byte(doc))
		if (perr == nil) != (cerr == nil) || cerr != nil && !errors.Is(cerr, stream.ErrDecode) {
			t.Fatalf("%.60s… (%d bytes): checked %v, parsed %v", doc, len(doc), cerr, perr)
		}
		if cerr == nil && string(r.raw) != doc {
			t.Fatalf("%.60s…: kept %q", doc, r.raw)
		}
	}
	for _, doc := range docs {
		check(t, doc)
	}
	rapid.Check(t, func(t *rapid.T) { check(t, jsonText(t, 0)) })
}
