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
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/weir-stream/weir/internal/jsontext"
)

// wireHeader is the Confluent wire format's header: magic byte 0 and the
// schema ID, big-endian.
const wireHeader = 5

// schemaID splits a Confluent-framed value into its schema ID and payload.
func schemaID(b []byte) (int, []byte, error) {
	if len(b) < wireHeader || b[0] != 0 {
		return 0, nil, ErrBadWireFormat
	}
	return int(binary.BigEndian.Uint32(b[1:wireHeader])), b[wireHeader:], nil
}

// AvroDecoder converts Avro values in the Confluent wire format, of any
// schema the registry holds, into JSON documents (docs/formats.md, "Avro
// values in JSON"). It is safe for concurrent use.
type AvroDecoder struct {
	reg *Registry
	ctx context.Context
}

// NewAvroDecoder returns a decoder that looks schemas up in reg; ctx bounds
// the retries of an unreachable registry (the process's life).
func NewAvroDecoder(ctx context.Context, reg *Registry) *AvroDecoder {
	return &AvroDecoder{reg: reg, ctx: ctx}
}

// DecodeValue returns the JSON document of the Avro value v. A nil value
// (a tombstone) stays nil.
func (d *AvroDecoder) DecodeValue(v []byte) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	id, payload, err := schemaID(v)
	if err != nil {
		return nil, err
	}
	schema, err := d.reg.Avro(d.ctx, id)
	if err != nil {
		return nil, err
	}
	var native any
	if err := avro.Unmarshal(schema, payload, &native); err != nil {
		return nil, fmt.Errorf("format: the payload does not match schema %d: %w", id, err)
	}
	out, err := appendAvroJSON(make([]byte, 0, len(payload)*2+16), schema, native)
	if err != nil {
		return nil, fmt.Errorf("format: schema %d: %w", id, err)
	}
	return out, nil
}

// appendAvroJSON appends the JSON form of native, a value hamba decoded
// into an interface under schema s.
func appendAvroJSON(dst []byte, s avro.Schema, native any) ([]byte, error) {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if native == nil {
		return append(dst, "null"...), nil
	}
	switch s := s.(type) {
	case *avro.RecordSchema:
		m, ok := native.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("record %s decoded as %T", s.FullName(), native)
		}
		dst = append(dst, '{')
		for i, f := range s.Fields() {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsontext.AppendText(dst, f.Name())
			dst = append(dst, ':')
			var err error
			if dst, err = appendAvroJSON(dst, f.Type(), m[f.Name()]); err != nil {
				return nil, fmt.Errorf("%s.%s: %w", s.Name(), f.Name(), err)
			}
		}
		return append(dst, '}'), nil
	case *avro.UnionSchema:
		if !unionWrapped(s) {
			// Every branch is a type hamba resolves (a primitive or one
			// of its logical types): it decodes the value itself. The
			// first non-null branch that takes it writes it.
			var err error
			for _, b := range s.Types() {
				if b.Type() == avro.Null {
					continue
				}
				var out []byte
				if out, err = appendAvroJSON(dst, b, native); err == nil {
					return out, nil
				}
			}
			return nil, fmt.Errorf("union: %w", err)
		}
		// Else hamba decodes every branch into map[string]any{<branch
		// name>: value} (nil for null): the JSON form is the value alone.
		m, ok := native.(map[string]any)
		if !ok || len(m) != 1 {
			return nil, fmt.Errorf("union decoded as %T", native)
		}
		for name, v := range m {
			for _, b := range s.Types() {
				if branchName(b) == name {
					return appendAvroJSON(dst, b, v)
				}
			}
			return nil, fmt.Errorf("union branch %q not in the schema", name)
		}
	case *avro.ArraySchema:
		l, ok := native.([]any)
		if !ok {
			return nil, fmt.Errorf("array decoded as %T", native)
		}
		dst = append(dst, '[')
		for i, v := range l {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendAvroJSON(dst, s.Items(), v); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case *avro.MapSchema:
		m, ok := native.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("map decoded as %T", native)
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = jsontext.AppendText(dst, k)
			dst = append(dst, ':')
			var err error
			if dst, err = appendAvroJSON(dst, s.Values(), m[k]); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	case *avro.PrimitiveSchema:
		if t, ok := native.(time.Time); ok && s.Logical() != nil && s.Logical().Type() == avro.Date {
			dst = append(dst, '"')
			dst = t.UTC().AppendFormat(dst, time.DateOnly)
			return append(dst, '"'), nil
		}
	case *avro.FixedSchema:
		if v := reflect.ValueOf(native); v.Kind() == reflect.Array {
			b := make([]byte, v.Len()) // hamba decodes a fixed into a [size]byte
			reflect.Copy(reflect.ValueOf(b), v)
			native = b
		}
	}
	return appendScalarJSON(dst, native)
}

// appendScalarJSON appends a scalar hamba decoded: the logical types come
// as time.Time, time.Duration and *big.Rat.
func appendScalarJSON(dst []byte, native any) ([]byte, error) {
	switch v := native.(type) {
	case bool:
		return strconv.AppendBool(dst, v), nil
	case int:
		return strconv.AppendInt(dst, int64(v), 10), nil
	case int32:
		return strconv.AppendInt(dst, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(dst, v, 10), nil
	case float32:
		return appendFloat(dst, float64(v), 32)
	case float64:
		return appendFloat(dst, v, 64)
	case string:
		return jsontext.AppendText(dst, v), nil
	case []byte:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, v)
		return append(dst, '"'), nil
	case time.Time:
		dst = append(dst, '"')
		dst = v.UTC().AppendFormat(dst, time.RFC3339Nano)
		return append(dst, '"'), nil
	case time.Duration: // time-millis, time-micros: the time of day
		return jsontext.AppendText(dst, timeOfDay(v)), nil
	case *big.Rat:
		return jsontext.AppendText(dst, ratString(v)), nil
	}
	return nil, fmt.Errorf("unsupported decoded value %T", native)
}

// ratString writes a decimal exactly, without trailing zeros after the
// point (the schema's scale is the precision, not the form).
func ratString(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	// A decimal's denominator is 10^scale: 40 digits cover every scale a
	// registry accepts (precision ≤ 38 in practice).
	s := r.FloatString(40)
	for s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	return s
}

// timeOfDay writes a time of day as "15:04:05", with a fraction if it has
// one ("15:04:05.123", "15:04:05.123456").
func timeOfDay(d time.Duration) string {
	sec := d / time.Second
	s := fmt.Sprintf("%02d:%02d:%02d", sec/3600, sec/60%60, sec%60)
	if frac := d % time.Second; frac != 0 {
		f := strconv.FormatInt(int64(frac/time.Microsecond)+1_000_000, 10)[1:]
		if strings.HasSuffix(f, "000") {
			f = f[:3]
		}
		s += "." + f
	}
	return s
}

var errNotFinite = errors.New("NaN or infinity: not representable in JSON")

func appendFloat(dst []byte, f float64, bits int) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, errNotFinite
	}
	if math.Abs(f) < 1e21 {
		return strconv.AppendFloat(dst, f, 'f', -1, bits), nil
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bits), nil
}

// unionWrapped reports whether hamba decodes union s (into an interface)
// in its map form, {<branch name>: value}: when a branch is a type its
// default type resolver does not know (a record, enum, fixed, array or
// map, or a logical type it does not register), every branch is. A union
// of primitives decodes into the value itself.
func unionWrapped(s *avro.UnionSchema) bool {
	for _, b := range s.Types() {
		switch b.Type() {
		case avro.Record, avro.Enum, avro.Fixed, avro.Array, avro.Map, avro.Ref:
			return true
		}
		if !resolvedLogical(b) {
			return true
		}
	}
	return false
}

// resolvedLogical reports whether b, a primitive, is plain or of a logical
// type hamba's default type resolver registers (avro.NewTypeResolver).
func resolvedLogical(b avro.Schema) bool {
	l, ok := b.(avro.LogicalTypeSchema)
	if !ok || l.Logical() == nil {
		return true
	}
	switch string(b.Type()) + "." + string(l.Logical().Type()) {
	case "int.date", "int.time-millis", "long.timestamp-millis", "long.timestamp-micros",
		"long.time-micros", "bytes.decimal", "string.uuid":
		return true
	}
	return false
}

// branchName is the name hamba gives a union branch in the map it decodes
// a union into: the full name of a named type, else the type name (with
// the logical type, as "long.timestamp-millis"; arrays and maps as
// "array" and "map").
func branchName(s avro.Schema) string {
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	if ref, ok := s.(*avro.RefSchema); ok {
		return ref.Schema().FullName()
	}
	if l, ok := s.(avro.LogicalTypeSchema); ok && l.Logical() != nil {
		return string(s.Type()) + "." + string(l.Logical().Type())
	}
	return string(s.Type())
}
