package format

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

// AvroEncoder writes JSON-model values (map[string]any, []any, string,
// int64, float64, bool, nil: what the steps of a YAML job produce) as Avro
// in the Confluent wire format, under one schema. Prepare must succeed
// before Append is called; after that it is safe for concurrent use.
type AvroEncoder struct {
	reg     *Registry
	subject string
	text    string // the schema to register under subject, or ""
	wantID  int    // the schema ID to use, or 0

	prepared atomic.Pointer[encoderSchema]
}

type encoderSchema struct {
	id     int
	schema avro.Schema
}

// AvroEncoderConfig says which schema an AvroEncoder writes with.
type AvroEncoderConfig struct {
	// Subject is where Schema is registered (TopicNameStrategy:
	// "<topic>-value").
	Subject string
	// Schema is the Avro schema (JSON text) registered under Subject at
	// Prepare, after the registry's compatibility check; or else
	SchemaID int // an ID the registry already holds, used as it is.
}

// NewAvroEncoder returns an encoder of cfg's schema, looked up or
// registered in reg by Prepare.
func NewAvroEncoder(reg *Registry, cfg AvroEncoderConfig, schema string) (*AvroEncoder, error) {
	switch {
	case reg == nil:
		return nil, errors.New("format: an Avro sink needs a schema registry")
	case (schema == "") == (cfg.SchemaID == 0):
		return nil, errors.New("format: an Avro sink needs exactly one of a schema and a schema ID")
	case schema != "" && cfg.Subject == "":
		return nil, errors.New("format: an Avro sink's schema needs a subject to be registered under")
	}
	if schema != "" {
		if _, err := avro.Parse(schema); err != nil {
			return nil, fmt.Errorf("format: the sink's Avro schema: %w", err)
		}
	}
	return &AvroEncoder{reg: reg, subject: cfg.Subject, text: schema, wantID: cfg.SchemaID}, nil
}

// Prepare registers the schema (or looks its ID up) in the registry: an
// incompatible schema, an unknown ID or a registry that refuses is an
// error here, when the job starts, not at the first record. It retries an
// unreachable registry until ctx ends.
func (e *AvroEncoder) Prepare(ctx context.Context) error {
	if e.prepared.Load() != nil {
		return nil
	}
	var es encoderSchema
	var err error
	if e.text != "" {
		es.schema, err = avro.Parse(e.text)
		if err != nil {
			return fmt.Errorf("format: the sink's Avro schema: %w", err)
		}
		es.id, err = e.reg.Register(ctx, e.subject, sr.Schema{Schema: e.text, Type: sr.TypeAvro})
	} else {
		es.id = e.wantID
		es.schema, err = e.reg.Avro(ctx, e.wantID)
	}
	if err != nil {
		return err
	}
	e.prepared.Store(&es)
	return nil
}

// SchemaID returns the ID the encoder writes, 0 before Prepare.
func (e *AvroEncoder) SchemaID() int {
	if es := e.prepared.Load(); es != nil {
		return es.id
	}
	return 0
}

// Append appends v's Avro encoding, framed, to dst.
func (e *AvroEncoder) Append(dst []byte, v any) ([]byte, error) {
	es := e.prepared.Load()
	if es == nil {
		return nil, errors.New("format: AvroEncoder.Append before Prepare")
	}
	native, err := toAvro(es.schema, v)
	if err != nil {
		return nil, fmt.Errorf("format: the value does not fit schema %d: %w", es.id, err)
	}
	payload, err := avro.Marshal(es.schema, native)
	if err != nil {
		return nil, fmt.Errorf("format: the value does not fit schema %d: %w", es.id, err)
	}
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint32(dst, uint32(es.id))
	return append(dst, payload...), nil
}

// toAvro converts a JSON-model value into what hamba encodes under s: the
// inverse of appendAvroJSON (docs/formats.md).
func toAvro(s avro.Schema, v any) (any, error) {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	switch s := s.(type) {
	case *avro.RecordSchema:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("record %s: want an object, got %s", s.FullName(), kind(v))
		}
		out := make(map[string]any, len(s.Fields()))
		for _, f := range s.Fields() {
			fv, ok := m[f.Name()]
			if !ok {
				if f.HasDefault() {
					continue // hamba writes the default
				}
				if u, isUnion := f.Type().(*avro.UnionSchema); !isUnion || !u.Nullable() {
					return nil, fmt.Errorf("%s.%s: missing, and the field has no default", s.Name(), f.Name())
				}
			}
			c, err := toAvro(f.Type(), fv)
			if err != nil {
				return nil, fmt.Errorf("%s.%s: %w", s.Name(), f.Name(), err)
			}
			out[f.Name()] = c
		}
		return out, nil
	case *avro.UnionSchema:
		if v == nil {
			if s.Nullable() || s.Contains(avro.Null) {
				return nil, nil
			}
			return nil, errors.New("null, but the union has no null branch")
		}
		var errs []error
		for _, b := range s.Types() {
			if b.Type() == avro.Null {
				continue
			}
			c, err := toAvro(b, v)
			if err == nil {
				return map[string]any{branchName(b): c}, nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", branchName(b), err))
		}
		return nil, fmt.Errorf("fits no branch of the union: %w", errors.Join(errs...))
	case *avro.ArraySchema:
		l, ok := v.([]any)
		if !ok {
			return nil, fmt.Errorf("array: want a list, got %s", kind(v))
		}
		out := make([]any, len(l))
		for i, x := range l {
			c, err := toAvro(s.Items(), x)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = c
		}
		return out, nil
	case *avro.MapSchema:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("map: want an object, got %s", kind(v))
		}
		out := make(map[string]any, len(m))
		for k, x := range m {
			c, err := toAvro(s.Values(), x)
			if err != nil {
				return nil, fmt.Errorf("[%q]: %w", k, err)
			}
			out[k] = c
		}
		return out, nil
	case *avro.EnumSchema:
		str, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("enum %s: want a string, got %s", s.FullName(), kind(v))
		}
		if _, ok := s.Symbol(indexOf(s.Symbols(), str)); !ok {
			return nil, fmt.Errorf("enum %s: %q is not one of %v", s.FullName(), str, s.Symbols())
		}
		return str, nil
	case *avro.FixedSchema:
		if l := s.Logical(); l != nil && l.Type() == avro.Decimal {
			return decimal(v)
		}
		b, err := bytesOf(v)
		if err != nil {
			return nil, err
		}
		if len(b) != s.Size() {
			return nil, fmt.Errorf("fixed %s: %d bytes, want %d", s.FullName(), len(b), s.Size())
		}
		// hamba writes a fixed from a [size]byte.
		arr := reflect.New(reflect.ArrayOf(len(b), reflect.TypeFor[byte]())).Elem()
		reflect.Copy(arr, reflect.ValueOf(b))
		return arr.Interface(), nil
	case *avro.PrimitiveSchema:
		return primitive(s, v)
	}
	return nil, fmt.Errorf("unsupported schema type %s", s.Type())
}

func indexOf(l []string, s string) int {
	for i, x := range l {
		if x == s {
			return i
		}
	}
	return -1
}

func primitive(s *avro.PrimitiveSchema, v any) (any, error) {
	if l := s.Logical(); l != nil {
		switch l.Type() {
		case avro.Decimal:
			return decimal(v)
		case avro.TimestampMillis, avro.TimestampMicros, avro.LocalTimestampMillis, avro.LocalTimestampMicros:
			return timestamp(v, l.Type())
		case avro.Date:
			switch x := v.(type) {
			case string:
				t, err := time.Parse(time.DateOnly, x)
				if err != nil {
					return nil, fmt.Errorf("date: %q is not YYYY-MM-DD", x)
				}
				return t, nil
			default:
				n, err := integer(v)
				if err != nil {
					return nil, fmt.Errorf("date: %w", err)
				}
				return time.Unix(n*86400, 0).UTC(), nil
			}
		case avro.TimeMillis, avro.TimeMicros:
			switch x := v.(type) {
			case string:
				d, err := parseTimeOfDay(x)
				if err != nil {
					return nil, err
				}
				return d, nil
			default:
				n, err := integer(v)
				if err != nil {
					return nil, fmt.Errorf("time: %w", err)
				}
				if l.Type() == avro.TimeMillis {
					return time.Duration(n) * time.Millisecond, nil
				}
				return time.Duration(n) * time.Microsecond, nil
			}
		}
	}
	switch s.Type() {
	case avro.Null:
		if v != nil {
			return nil, fmt.Errorf("null: got %s", kind(v))
		}
		return nil, nil
	case avro.Boolean:
		b, ok := v.(bool)
		if !ok {
			return nil, fmt.Errorf("boolean: got %s", kind(v))
		}
		return b, nil
	case avro.Int:
		n, err := integer(v)
		if err != nil {
			return nil, fmt.Errorf("int: %w", err)
		}
		if n < math.MinInt32 || n > math.MaxInt32 {
			return nil, fmt.Errorf("int: %d out of range", n)
		}
		return int(n), nil
	case avro.Long:
		n, err := integer(v)
		if err != nil {
			return nil, fmt.Errorf("long: %w", err)
		}
		return n, nil
	case avro.Float:
		f, err := number(v)
		if err != nil {
			return nil, fmt.Errorf("float: %w", err)
		}
		return float32(f), nil
	case avro.Double:
		f, err := number(v)
		if err != nil {
			return nil, fmt.Errorf("double: %w", err)
		}
		return f, nil
	case avro.String:
		str, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("string: got %s", kind(v))
		}
		return str, nil
	case avro.Bytes:
		return bytesOf(v)
	}
	return nil, fmt.Errorf("unsupported type %s", s.Type())
}

func integer(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case float64:
		if x != math.Trunc(x) || math.Abs(x) > 1<<63 {
			return 0, fmt.Errorf("%v is not an integer", x)
		}
		return int64(x), nil
	}
	return 0, fmt.Errorf("want an integer, got %s", kind(v))
}

func number(v any) (float64, error) {
	switch x := v.(type) {
	case int64:
		return float64(x), nil
	case float64:
		return x, nil
	}
	return 0, fmt.Errorf("want a number, got %s", kind(v))
}

// bytesOf decodes bytes written as base64 (the JSON form of bytes).
func bytesOf(v any) ([]byte, error) {
	str, ok := v.(string)
	if !ok {
		return nil, fmt.Errorf("bytes: want a base64 string, got %s", kind(v))
	}
	b, err := base64.StdEncoding.DecodeString(str)
	if err != nil {
		return nil, fmt.Errorf("bytes: not base64: %w", err)
	}
	return b, nil
}

// decimal reads a decimal from a string ("12.34", exact) or a number.
func decimal(v any) (*big.Rat, error) {
	r := new(big.Rat)
	switch x := v.(type) {
	case string:
		if _, ok := r.SetString(x); !ok {
			return nil, fmt.Errorf("decimal: %q is not a number", x)
		}
	case int64:
		r.SetInt64(x)
	case float64:
		if r.SetFloat64(x) == nil {
			return nil, fmt.Errorf("decimal: %v is not finite", x)
		}
		r.SetString(strconv.FormatFloat(x, 'f', -1, 64)) // 0.1, not its binary expansion
	default:
		return nil, fmt.Errorf("decimal: want a string or a number, got %s", kind(v))
	}
	return r, nil
}

// timestamp reads an RFC 3339 string or a number in the type's unit.
func timestamp(v any, lt avro.LogicalType) (time.Time, error) {
	if str, ok := v.(string); ok {
		t, err := time.Parse(time.RFC3339Nano, str)
		if err != nil {
			return time.Time{}, fmt.Errorf("%s: %q is not an RFC 3339 time", lt, str)
		}
		return t, nil
	}
	n, err := integer(v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", lt, err)
	}
	if lt == avro.TimestampMicros || lt == avro.LocalTimestampMicros {
		return time.UnixMicro(n).UTC(), nil
	}
	return time.UnixMilli(n).UTC(), nil
}

// parseTimeOfDay reads "15:04:05" or "15:04:05.123456".
func parseTimeOfDay(s string) (time.Duration, error) {
	bad := fmt.Errorf("time: %q is not HH:MM:SS[.ffffff]", s)
	hms, frac, _ := strings.Cut(s, ".")
	parts := strings.Split(hms, ":")
	if len(parts) != 3 {
		return 0, bad
	}
	var d time.Duration
	for i, unit := range []time.Duration{time.Hour, time.Minute, time.Second} {
		n, err := strconv.Atoi(parts[i])
		if err != nil || n < 0 {
			return 0, bad
		}
		d += time.Duration(n) * unit
	}
	if frac != "" {
		if len(frac) > 9 {
			return 0, bad
		}
		n, err := strconv.Atoi(frac + strings.Repeat("0", 9-len(frac)))
		if err != nil {
			return 0, bad
		}
		d += time.Duration(n)
	}
	return d, nil
}

func kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	case string:
		return "a string"
	case int64, float64:
		return "a number"
	case bool:
		return "a boolean"
	}
	return fmt.Sprintf("%T", v)
}
