package pipeline

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/weir-stream/weir/expression"
)

// jsonText draws the text of a JSON value, with whitespace here and there:
// the values whose decoding has edges (escapes, numbers an int64 does not
// hold, -0, nesting, non-ASCII and invalid text in strings).
func jsonText(t *rapid.T, depth int) string {
	ws := rapid.SampledFrom([]string{"", "", " ", "\n\t "}).Draw(t, "ws")
	kinds := []string{"string", "number", "literal"}
	if depth < 3 {
		kinds = append(kinds, "object", "array")
	}
	switch rapid.SampledFrom(kinds).Draw(t, "kind") {
	case "string":
		return ws + rapid.SampledFrom([]string{`"home"`, `""`, `"a\"b"`, `"\u0041\n"`, `"pagé"`, "\"\u2028\"", "\"\xff\"", `"\\"`, `"}{]["`}).Draw(t, "string")
	case "number":
		return ws + rapid.SampledFrom([]string{`0`, `-0`, `7`, `-3`, `-3.25`, `1.50`, `1e3`, `1E-2`, `9007199254740993`,
			`12345678901234567890`, `-9223372036854775808`, `9223372036854775807`, `1e400`}).Draw(t, "number")
	case "literal":
		return ws + rapid.SampledFrom([]string{`true`, `false`, `null`}).Draw(t, "literal")
	case "array":
		n := rapid.IntRange(0, 3).Draw(t, "len")
		parts := make([]string, n)
		for i := range parts {
			parts[i] = jsonText(t, depth+1)
		}
		return ws + "[" + strings.Join(parts, ",") + ws + "]"
	}
	return ws + jsonObject(t, depth+1)
}

func jsonObject(t *rapid.T, depth int) string {
	n := rapid.IntRange(0, 5).Draw(t, "fields")
	parts := make([]string, n)
	for i := range parts {
		k := rapid.SampledFrom([]string{"page", "user", "p", "pagé", `pa\u0067e`, `a\"b`, "amount"}).Draw(t, "key")
		parts[i] = `"` + k + `"` + rapid.SampledFrom([]string{":", " : "}).Draw(t, "colon") + jsonText(t, depth)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// TestProjectionFastPathProperty: for random documents, the projection is
// the decoded value's fields (or the decoded value, for a non-object),
// whether the scanner or fastjson made it.
func TestProjectionFastPathProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var doc string
		if rapid.IntRange(0, 9).Draw(t, "object") > 0 {
			doc = rapid.SampledFrom([]string{"", " ", "\n"}).Draw(t, "lead") + jsonObject(t, 0) + rapid.SampledFrom([]string{"", " ", "\n"}).Draw(t, "trail")
		} else {
			doc = jsonText(t, 0)
		}
		lazy, err := JSONCodec{}.Decode([]byte(doc))
		if err != nil {
			t.Skip("not JSON for fastjson either")
		}
		eager, err := lazy.decoded()
		if err != nil {
			t.Fatal(err)
		}
		names := rapid.SliceOfNDistinct(rapid.SampledFrom([]string{"page", "user", "pagé", "amount", "x"}), 1, 3, rapid.ID).Draw(t, "names")
		got, err := projectJSON(lazy.raw, names, map[string]any{})
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		want := eager.V
		if o, ok := eager.V.(map[string]any); ok {
			p := map[string]any{}
			for _, n := range names {
				if x, ok := o[n]; ok {
					p[n] = x
				}
			}
			want = p
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: projection %#v, want %#v", doc, got, want)
		}
		for _, n := range names {
			v, ok, err := rawField(lazy.raw, n)
			o, _ := eager.V.(map[string]any)
			wv, wok := o[n]
			if err != nil || ok != wok || !reflect.DeepEqual(v, wv) {
				t.Fatalf("%s: rawField(%s) = %#v, %v, %v; want %#v, %v", doc, n, v, ok, err, wv, wok)
			}
		}
	})
}

// TestScanObjectFields: the scanner gives each top-level field's key and
// text, and gives up on what it cannot scan.
func TestScanObjectFields(t *testing.T) {
	var got []string
	ok := scanObject([]byte(` { "a" : 1 , "b":{"c":"}"},"d":[1,[2]] ,"e":"x\"y", "f":null}  `), func(k, v []byte) {
		got = append(got, string(k)+"="+string(v))
	})
	want := []string{`a=1`, `b={"c":"}"}`, `d=[1,[2]]`, `e="x\"y"`, `f=null`}
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("scanObject: %v %q, want %q", ok, got, want)
	}
	for _, doc := range []string{`[1]`, `"a"`, `{"a":1} x`, `{"a":1,}`, `{"a\"":1}`, `{"a" 1}`, `{"a":1`, `{"a":}`, `{"a":"x}`, `{"a":[1}`} {
		if scanObject([]byte(doc), func(_, _ []byte) {}) {
			t.Errorf("scanObject(%s) = true", doc)
		}
	}
	if !scanObject([]byte(`{}`), func(_, _ []byte) { t.Error("a field in {}") }) {
		t.Error("scanObject({}) = false")
	}
}

// TestAppendAsEncodedProperty: where the fast path copies a value's text,
// the text is what AppendJSON writes of the decoded value.
func TestAppendAsEncodedProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		text := strings.TrimLeft(jsonText(t, 0), " \n\t")
		v, _, err := DecodeJSON([]byte(text))
		if err != nil {
			t.Skip("not JSON")
		}
		got, ok := appendAsEncoded(nil, []byte(text))
		if !ok {
			return
		}
		want, err := AppendJSON(nil, v, nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: copied %s, AppendJSON writes %s (%v)", text, got, want, err)
		}
	})
}

func BenchmarkProjectJSON(b *testing.B) {
	doc := []byte(`{"i":123456,"user":"user-000123","page":"page-0042","amount":417}`)
	names := []string{"amount", "page", "user"}
	m := map[string]any{}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := projectJSON(doc, names, m); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFieldTextKeyProperty: where key_by reads value.f's key from the
// text, it is the key the expression gives over the decoded value.
func TestFieldTextKeyProperty(t *testing.T) {
	p, err := expression.Compile(`value.page`, expression.Any)
	if err != nil {
		t.Fatal(err)
	}
	ev := expression.NewEvaluator()
	rapid.Check(t, func(t *rapid.T) {
		doc := jsonObject(t, 0)
		v, _, err := DecodeJSON([]byte(doc))
		if err != nil {
			t.Skip("not JSON")
		}
		got, ok := fieldTextKey(nil, []byte(doc), "page")
		if !ok {
			return
		}
		want, err := ev.Key(p, &expression.Vars{Value: v}, nil)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: key from the text %q, the expression's %q (%v)", doc, got, want, err)
		}
	})
}

// TestScalarArgsProperty: where an aggregate's plain field arguments are
// read from the text, each is the decoded value's field (nil if missing).
func TestScalarArgsProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		doc := jsonObject(t, 0)
		v, _, err := DecodeJSON([]byte(doc))
		if err != nil {
			t.Skip("not JSON")
		}
		fields := rapid.SliceOfN(rapid.SampledFrom([]string{"", "page", "amount", "x"}), 1, 4).Draw(t, "fields")
		args := make([]any, len(fields))
		if !scalarArgs([]byte(doc), fields, make([][]byte, len(fields)), args) {
			return
		}
		for i, f := range fields {
			want := v.(map[string]any)[f]
			if f == "" {
				want = nil
			}
			if !reflect.DeepEqual(args[i], want) {
				t.Fatalf("%s: argument %q is %#v, want %#v", doc, f, args[i], want)
			}
		}
	})
}

// TestSkipStringProperty: skipString finds the end of a string as a
// byte-by-byte reading of its escapes does, on any text.
func TestSkipStringProperty(t *testing.T) {
	ref := func(b []byte) int {
		for i := 1; i < len(b); i++ {
			switch b[i] {
			case '\\':
				i++
			case '"':
				return i + 1
			}
		}
		return 0
	}
	rapid.Check(t, func(t *rapid.T) {
		b := []byte(`"` + rapid.StringOfN(rapid.SampledFrom([]rune{'"', '\\', 'a', 'é'}), 0, 12, -1).Draw(t, "text"))
		if got, want := skipString(b), ref(b); got != want {
			t.Fatalf("%q: %d, want %d", b, got, want)
		}
	})
}

// TestPlainASCIIProperty: plainASCII, eight bytes at a time, agrees with
// a byte-by-byte check on any text.
func TestPlainASCIIProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := rapid.SliceOfN(rapid.SampledFrom([]byte{0, 0x1f, 0x20, 'a', '\\', '"', 0x5b, 0x5d, 0x7f, 0x80, 0xc3, 0xff}), 0, 40).Draw(t, "s")
		want := true
		for _, c := range s {
			if c < 0x20 || c == '\\' || c >= 0x80 {
				want = false
			}
		}
		if got := plainASCII(s); got != want {
			t.Fatalf("%q: %v, want %v", s, got, want)
		}
	})
}
