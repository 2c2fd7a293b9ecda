package pipeline

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"

	"github.com/valyala/fastjson"

	"github.com/weir-stream/weir/internal/jsontext"
	"github.com/weir-stream/weir/stream"
)

// Rec is the element of a compiled pipeline's streams: a record's decoded
// value and where the record came from. The key, timestamp and headers are
// the stream element's (stream.Elem, stream.Context), not Rec's.
//
// Values are what expressions see (docs/yaml.md, "The value model"):
// map[string]any, []any, string, int64 (a JSON integer that fits), float64
// (any other JSON number), bool and nil. Steps never modify a Rec's V in
// place: a step that changes a value builds a new one (a V may be shared by
// the branches of a route).
type Rec struct {
	// V is the decoded value; a raw source's value is its text, a string.
	V any
	// Fields is the order of V's top-level fields when V is an object and
	// the order is known (as decoded, as a projection or an aggregate wrote
	// them): encoding writes those fields first, in this order, then any
	// other field in key order. Nil: key order. Shared, never modified.
	Fields []string
	// raw is the value's JSON text while no step has read it: a source's
	// or a shuffle's record value, decoded only when a step needs it
	// (decoded), and written as is by the encoders when none did, so that
	// a record that only travels (a key_by on a field, a count) is never
	// decoded into maps. V and Fields are nil while raw is set; raw is
	// never empty (an empty value is V nil).
	raw []byte
	// Topic, Partition and Offset are the origin of the source record the
	// Rec came from, kept across shuffles; Topic is empty until a step
	// needs them (elemVars then reads the stream element's).
	Topic     string
	Partition int32
	Offset    int64
	// key is the key a key_by (or map's key) computed, which the pending
	// stream.KeyBy after it reads (compiler.flush).
	key []byte
}

// decoded returns r with its value decoded, if it was not: every step that
// reads a value calls it first (compiler.transform does for the stateless
// steps). The text was checked when it was read (JSONCodec.Decode) or
// written by RecCodec, so the error is for a corrupt shuffle record.
func (r Rec) decoded() (Rec, error) {
	if r.raw == nil {
		return r, nil
	}
	v, fields, err := DecodeJSON(r.raw)
	if err != nil {
		return r, err
	}
	r.V, r.Fields, r.raw = v, fields, nil
	return r, nil
}

// object returns r's value as an object (decoding it if need be), nil if
// it is not one.
func (r Rec) object() (map[string]any, error) {
	r, err := r.decoded()
	o, _ := r.V.(map[string]any)
	return o, err
}

// appendValue appends r's value as JSON: its text as read if no step
// decoded it, else V in its field order.
func (r Rec) appendValue(dst []byte) ([]byte, error) {
	if r.raw != nil {
		return append(dst, r.raw...), nil
	}
	return AppendJSON(dst, r.V, r.Fields)
}

// RecCodec encodes a Rec for a shuffle topic: its origin, then its value as
// JSON in its field order. Decoding keeps the field order of the value's
// top level. It keeps no state: the tasks of a job share it.
//
// Decode keeps the value's JSON text undecoded (Rec.decoded decodes it
// when a step reads it): a copy of it, or src itself if Borrow is set,
// for a caller that never reuses src (a shuffle record's value).
type RecCodec struct{ Borrow bool }

// Append implements stream.Codec.
func (RecCodec) Append(dst []byte, r Rec) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(r.Topic)))
	dst = append(dst, r.Topic...)
	dst = binary.AppendVarint(dst, int64(r.Partition))
	dst = binary.AppendVarint(dst, r.Offset)
	return r.appendValue(dst)
}

// Decode implements stream.Codec.
func (c RecCodec) Decode(src []byte) (Rec, error) {
	var r Rec
	n, k := binary.Uvarint(src)
	if k <= 0 || uint64(len(src)-k) < n {
		return r, errors.New("pipeline: a shuffled record with a bad origin")
	}
	r.Topic = string(src[k : k+int(n)])
	src = src[k+int(n):]
	p, k := binary.Varint(src)
	if k <= 0 {
		return r, errors.New("pipeline: a shuffled record with a bad partition")
	}
	src = src[k:]
	o, k := binary.Varint(src)
	if k <= 0 {
		return r, errors.New("pipeline: a shuffled record with a bad offset")
	}
	r.Partition, r.Offset = int32(p), o
	if v := src[k:]; len(v) > 0 {
		r.raw = borrowOrCopy(v, c.Borrow) // decoded if a step reads it (Rec.decoded)
	}
	return r, nil
}

func borrowOrCopy(b []byte, borrow bool) []byte {
	if borrow {
		return b
	}
	return bytes.Clone(b)
}

// JSONCodec encodes a Rec's value as JSON: the codec of sinks and dead
// letters. Decode reads a JSON document (the source's codec); Borrow is
// RecCodec's (the source sets it: a Kafka record's value is never reused).
//
// Checked says that every value Decode gets was checked as JSON already,
// as the runtime checks a stream.FormatJSON source's values at the edge
// (kafkaio/source.DecodeJSON): Decode then does not parse it again, and
// rejects only what that check accepts and DecodeJSON does not (a document
// nested deeper than fastjson.MaxDepth), so that a record is rejected at
// its source exactly as when Decode parsed it.
type JSONCodec struct{ Borrow, Checked bool }

// Append implements stream.Codec.
func (JSONCodec) Append(dst []byte, r Rec) ([]byte, error) { return r.appendValue(dst) }

// Decode implements stream.Codec. It checks that src is one JSON document
// (the parse that DecodeJSON does, without building the value) and keeps
// the text: the value is built only if a step reads it (Rec.decoded).
func (c JSONCodec) Decode(src []byte) (Rec, error) {
	if len(src) == 0 {
		return Rec{}, nil
	}
	if !c.Checked || !shallowJSON(src) {
		if err := checkJSON(src); err != nil {
			return Rec{}, err
		}
	}
	return Rec{raw: borrowOrCopy(src, c.Borrow)}, nil
}

// shallowJSON reports whether the valid JSON document b is certainly
// within fastjson.MaxDepth, which bounds the depth of the values of a
// document (the top level is depth 1, a value inside n arrays or objects
// depth n+1): b is shorter than the shortest document too deep (MaxDepth
// brackets around a value, each one closed), or its brackets outside
// strings never nest MaxDepth-1 deep. False sends b to checkJSON, which
// decides.
func shallowJSON(b []byte) bool {
	if len(b) <= 2*fastjson.MaxDepth {
		return true
	}
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			n := skipString(b[i:])
			if n == 0 {
				return false
			}
			i += n - 1
		case '{', '[':
			if depth++; depth >= fastjson.MaxDepth-1 {
				return false
			}
		case '}', ']':
			depth--
		}
	}
	return true
}

// textCodec is a raw source's codec: the value is its bytes as a string.
// Encoding writes a string value's text as is, anything else as JSON.
type textCodec struct{}

func (textCodec) Append(dst []byte, r Rec) ([]byte, error) {
	r, err := r.decoded() // a JSON string's text is written without quotes
	if err != nil {
		return nil, err
	}
	if s, ok := r.V.(string); ok {
		return append(dst, s...), nil
	}
	return AppendJSON(dst, r.V, r.Fields)
}

func (textCodec) Decode(src []byte) (Rec, error) { return Rec{V: string(src)}, nil }

// decoders are DecodeJSON's parsers and key caches, reused: a parser is
// not safe for concurrent use, and DecodeJSON is called by every task.
var decoders = sync.Pool{New: func() any { return &jsonDecoder{keys: make(map[string]string)} }}

// jsonDecoder is a fastjson parser and the object keys it has seen: a
// record's field names repeat from one record to the next, so a key is
// allocated once per decoder rather than once per record.
type jsonDecoder struct {
	p    fastjson.Parser
	keys map[string]string
	num  []byte
}

// The bounds of a decoder's key cache: keys longer than maxCachedKey are
// not cached (they are rarely field names), and the cache is emptied when
// it holds maxCachedKeys (a stream of ever-new keys, a map used as a
// dictionary, must not grow it without bound).
const (
	maxCachedKey  = 64
	maxCachedKeys = 4096
)

func (d *jsonDecoder) key(k []byte) string {
	if len(k) > maxCachedKey {
		return string(k)
	}
	if s, ok := d.keys[string(k)]; ok { // the lookup does not allocate
		return s
	}
	if len(d.keys) >= maxCachedKeys {
		clear(d.keys)
	}
	s := string(k)
	d.keys[s] = s
	return s
}

// DecodeJSON decodes a JSON document into the value model: objects to
// map[string]any, arrays to []any, integers that fit to int64, other numbers
// to float64. It returns the top-level fields in document order if the
// document is an object. An empty document is null (a Kafka record without
// a value). An error wraps stream.ErrDecode.
func DecodeJSON(b []byte) (any, []string, error) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	d := decoders.Get().(*jsonDecoder)
	defer decoders.Put(d)
	v, err := d.p.ParseBytes(b)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: not JSON: %v", stream.ErrDecode, err)
	}
	if v.Type() == fastjson.TypeObject {
		o, _ := v.Object()
		fields := make([]string, 0, o.Len())
		m := make(map[string]any, o.Len())
		o.Visit(func(k []byte, x *fastjson.Value) {
			key := d.key(k)
			if _, dup := m[key]; !dup {
				fields = append(fields, key)
			}
			m[key] = d.value(x)
		})
		return m, fields, nil
	}
	return d.value(v), nil, nil
}

// checkJSON reports whether b is what DecodeJSON accepts, without
// building the value: the same parse, so that a record is rejected at its
// source exactly as before decoding became lazy.
func checkJSON(b []byte) error {
	d := decoders.Get().(*jsonDecoder)
	defer decoders.Put(d)
	if _, err := d.p.ParseBytes(b); err != nil {
		return fmt.Errorf("%w: not JSON: %v", stream.ErrDecode, err)
	}
	return nil
}

// rawField returns the top-level field name of the JSON object b as
// DecodeJSON would decode it (the last one if the name repeats), and
// whether b is an object with that field; the value is built only for that
// field. appendFieldKey uses it to key a record without decoding it.
func rawField(b []byte, name string) (any, bool, error) {
	if text, ok := fieldText(b, name); ok {
		if text == nil {
			return nil, false, nil
		}
		if v, ok := scalarValue(text); ok {
			return v, true, nil
		}
	}
	d := decoders.Get().(*jsonDecoder)
	defer decoders.Put(d)
	v, err := d.p.ParseBytes(b)
	if err != nil {
		return nil, false, fmt.Errorf("%w: not JSON: %v", stream.ErrDecode, err)
	}
	o, err := v.Object()
	if err != nil {
		return nil, false, nil
	}
	var f *fastjson.Value
	o.Visit(func(k []byte, x *fastjson.Value) {
		if string(k) == name {
			f = x
		}
	})
	if f == nil {
		return nil, false, nil
	}
	return d.value(f), true, nil
}

// projectJSON decodes of the JSON document b only the top-level fields
// names, into m (emptied first): what an expression that reads only those
// fields sees of the value (expression.Program.ValueFields), built without
// the fields it does not read. A document that is not an object is
// decoded whole, as DecodeJSON decodes it; an empty one is null.
func projectJSON(b []byte, names []string, m map[string]any) (any, error) {
	if len(b) == 0 {
		return nil, nil
	}
	d := decoders.Get().(*jsonDecoder)
	defer decoders.Put(d)
	// The fast path: the scanner finds the fields, and only a value that
	// is not a plain scalar is parsed.
	clear(m)
	bad := false
	ok := scanObject(b, func(k, x []byte) {
		for _, n := range names {
			if string(k) == n {
				v, isScalar := scalarValue(x)
				if !isScalar {
					pv, err := d.p.ParseBytes(x)
					bad = bad || err != nil
					if err == nil {
						v = d.value(pv)
					}
				}
				m[n] = v // the last one if the name repeats, as DecodeJSON
				return
			}
		}
	})
	if ok && !bad {
		return m, nil
	}
	v, err := d.p.ParseBytes(b)
	if err != nil {
		return nil, fmt.Errorf("%w: not JSON: %v", stream.ErrDecode, err)
	}
	if v.Type() != fastjson.TypeObject {
		return d.value(v), nil
	}
	o, _ := v.Object()
	clear(m)
	o.Visit(func(k []byte, x *fastjson.Value) {
		for _, n := range names {
			if string(k) == n {
				m[n] = d.value(x) // the last one if the name repeats, as DecodeJSON
				return
			}
		}
	})
	return m, nil
}

func (d *jsonDecoder) value(v *fastjson.Value) any {
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		m := make(map[string]any, o.Len())
		o.Visit(func(k []byte, x *fastjson.Value) { m[d.key(k)] = d.value(x) })
		return m
	case fastjson.TypeArray:
		a, _ := v.Array()
		l := make([]any, len(a))
		for i, x := range a {
			l[i] = d.value(x)
		}
		return l
	case fastjson.TypeString:
		return string(v.GetStringBytes())
	case fastjson.TypeNumber:
		// The number's text decides: Int64 on a fraction or an exponent
		// would fail, and its error allocates.
		d.num = v.MarshalTo(d.num[:0])
		if isIntegerText(d.num) {
			if i, err := v.Int64(); err == nil {
				return i
			}
		}
		f, _ := v.Float64() // 1e400 is +Inf: out of range, which steps check
		return f
	case fastjson.TypeTrue:
		return true
	case fastjson.TypeFalse:
		return false
	}
	return nil
}

// isIntegerText reports whether a JSON number is written without a
// fraction or an exponent.
func isIntegerText(b []byte) bool {
	for _, c := range b {
		if c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// AppendJSON appends v as JSON: an object's fields in the order fields
// gives, then its other fields in key order (nested objects in key order);
// strings escaped as AppendJSONString; a float64 as encoding/json writes it
// (an infinity or NaN as null); a value of another Go type (an expression's
// result) as encoding/json marshals it.
func AppendJSON(dst []byte, v any, fields []string) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return jsontext.AppendText(dst, x), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case int64:
		return strconv.AppendInt(dst, x, 10), nil
	case int:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case float64:
		return AppendJSONNumber(dst, x), nil
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = AppendJSON(dst, e, nil); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		return appendObject(dst, x, fields)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("encode a %T as JSON: %w", v, err)
	}
	return append(dst, b...), nil
}

func appendObject(dst []byte, m map[string]any, fields []string) ([]byte, error) {
	dst = append(dst, '{')
	n := 0
	var err error
	field := func(k string, v any) {
		if err != nil {
			return
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst = jsontext.AppendText(dst, k)
		dst = append(dst, ':')
		dst, err = AppendJSON(dst, v, nil)
	}
	written := 0
	for _, k := range fields {
		if v, ok := m[k]; ok {
			field(k, v)
			written++
		}
	}
	if written < len(m) {
		keys := make([]string, 0, len(m)-written)
		for k := range m {
			if !slices.Contains(fields, k) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			field(k, m[k])
		}
	}
	if err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

// finite reports whether v is a number that JSON can write.
func finite(f float64) bool { return !math.IsInf(f, 0) && !math.IsNaN(f) }
