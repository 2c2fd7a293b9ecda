package pipeline

import (
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

// RecCodec encodes a Rec for a shuffle topic: its origin, then its value as
// JSON in its field order. Decoding keeps the field order of the value's
// top level. It keeps no state: the tasks of a job share it.
type RecCodec struct{}

// Append implements stream.Codec.
func (RecCodec) Append(dst []byte, r Rec) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(r.Topic)))
	dst = append(dst, r.Topic...)
	dst = binary.AppendVarint(dst, int64(r.Partition))
	dst = binary.AppendVarint(dst, r.Offset)
	return AppendJSON(dst, r.V, r.Fields)
}

// Decode implements stream.Codec.
func (RecCodec) Decode(src []byte) (Rec, error) {
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
	var err error
	r.V, r.Fields, err = DecodeJSON(src[k:])
	return r, err
}

// JSONCodec encodes a Rec's value as JSON: the codec of sinks and dead
// letters. Decode reads a JSON document (the source's codec).
type JSONCodec struct{}

// Append implements stream.Codec.
func (JSONCodec) Append(dst []byte, r Rec) ([]byte, error) { return AppendJSON(dst, r.V, r.Fields) }

// Decode implements stream.Codec.
func (JSONCodec) Decode(src []byte) (Rec, error) {
	v, fields, err := DecodeJSON(src)
	return Rec{V: v, Fields: fields}, err
}

// textCodec is a raw source's codec: the value is its bytes as a string.
// Encoding writes a string value's text as is, anything else as JSON.
type textCodec struct{}

func (textCodec) Append(dst []byte, r Rec) ([]byte, error) {
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
