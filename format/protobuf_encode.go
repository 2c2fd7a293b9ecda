package format

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// ProtoEncoder writes JSON-model values (map[string]any, []any, string,
// int64, float64, bool, nil) as one Protobuf message of a schema, in the
// Confluent wire format (with the message's indexes). Prepare must succeed
// before Append is called; after that it is safe for concurrent use.
type ProtoEncoder struct {
	reg     *Registry
	subject string
	text    string // the .proto to register under subject, or ""
	wantID  int    // the schema ID to use, or 0
	message string // the message's full name, or "" for the file's first

	prepared atomic.Pointer[protoSchema]
}

type protoSchema struct {
	id     int
	md     protoreflect.MessageDescriptor
	header []byte // magic byte, ID and message indexes
}

// ProtoEncoderConfig says which schema, and which message of it, a
// ProtoEncoder writes.
type ProtoEncoderConfig struct {
	// Subject is where the schema is registered (TopicNameStrategy:
	// "<topic>-value").
	Subject string
	// SchemaID is an ID the registry already holds, used as it is, if no
	// schema text is given.
	SchemaID int
	// Message is the full name of the message written (package.Name, or
	// Outer.Inner), default the first message of the file.
	Message string
}

// NewProtoEncoder returns an encoder of cfg's schema: schema, a .proto
// file's text, registered under cfg.Subject by Prepare, or else the
// registry's schema cfg.SchemaID. The text may import Protobuf's
// well-known types (google/protobuf/*.proto), and no other file.
func NewProtoEncoder(reg *Registry, cfg ProtoEncoderConfig, schema string) (*ProtoEncoder, error) {
	switch {
	case reg == nil:
		return nil, errors.New("format: a Protobuf sink needs a schema registry")
	case (schema == "") == (cfg.SchemaID == 0):
		return nil, errors.New("format: a Protobuf sink needs exactly one of a schema and a schema ID")
	case schema != "" && cfg.Subject == "":
		return nil, errors.New("format: a Protobuf sink's schema needs a subject to be registered under")
	}
	e := &ProtoEncoder{reg: reg, subject: cfg.Subject, text: schema, wantID: cfg.SchemaID, message: cfg.Message}
	if schema != "" {
		fd, err := compileProto(context.Background(), mainProto, map[string]string{mainProto: schema})
		if err != nil {
			return nil, fmt.Errorf("format: the sink's Protobuf schema: %w", err)
		}
		if _, err := e.pick(fd); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// pick returns the message the encoder writes, of fd.
func (e *ProtoEncoder) pick(fd protoreflect.FileDescriptor) (protoreflect.MessageDescriptor, error) {
	msgs := fd.Messages()
	if e.message == "" {
		if msgs.Len() == 0 {
			return nil, errors.New("format: the Protobuf schema declares no message")
		}
		return msgs.Get(0), nil
	}
	name := protoreflect.FullName(e.message)
	if pkg := fd.Package(); pkg != "" && !strings.HasPrefix(e.message, string(pkg)+".") {
		name = pkg + "." + name // a name relative to the file's package
	}
	if d := fd.Messages().ByName(name.Name()); d != nil && d.FullName() == name {
		return d, nil
	}
	var found protoreflect.MessageDescriptor
	var walk func(protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			if m := ms.Get(i); m.FullName() == name {
				found = m
			} else if !m.IsMapEntry() {
				walk(m.Messages())
			}
		}
	}
	walk(msgs)
	if found == nil {
		var names []string
		for i := range msgs.Len() {
			names = append(names, string(msgs.Get(i).FullName()))
		}
		return nil, fmt.Errorf("format: the Protobuf schema has no message %s (its top-level messages: %s)", name, strings.Join(names, ", "))
	}
	return found, nil
}

// Prepare registers the schema (or looks its ID up) in the registry: an
// incompatible schema, an unknown ID or a registry that refuses is an
// error here, when the job starts, not at the first record. It retries an
// unreachable registry until ctx ends.
func (e *ProtoEncoder) Prepare(ctx context.Context) error {
	if e.prepared.Load() != nil {
		return nil
	}
	var ps protoSchema
	var fd protoreflect.FileDescriptor
	var err error
	if e.text != "" {
		if fd, err = compileProto(ctx, mainProto, map[string]string{mainProto: e.text}); err != nil {
			return fmt.Errorf("format: the sink's Protobuf schema: %w", err)
		}
		ps.id, err = e.reg.Register(ctx, e.subject, sr.Schema{Schema: e.text, Type: sr.TypeProtobuf})
	} else {
		ps.id = e.wantID
		fd, err = e.reg.Protobuf(ctx, e.wantID)
	}
	if err != nil {
		return err
	}
	if ps.md, err = e.pick(fd); err != nil {
		return err
	}
	ps.header, _ = confluent.AppendEncode(nil, ps.id, messageIndex(ps.md)) // never fails
	e.prepared.Store(&ps)
	return nil
}

// SchemaID returns the ID the encoder writes, 0 before Prepare.
func (e *ProtoEncoder) SchemaID() int {
	if ps := e.prepared.Load(); ps != nil {
		return ps.id
	}
	return 0
}

// Append appends v's Protobuf encoding, framed, to dst. The encoding is
// deterministic (map entries in key order).
func (e *ProtoEncoder) Append(dst []byte, v any) ([]byte, error) {
	ps := e.prepared.Load()
	if ps == nil {
		return nil, errors.New("format: ProtoEncoder.Append before Prepare")
	}
	m := dynamicpb.NewMessage(ps.md)
	if err := setProto(m, v); err != nil {
		return nil, fmt.Errorf("format: the value does not fit message %s of schema %d: %w", ps.md.FullName(), ps.id, err)
	}
	dst = append(dst, ps.header...)
	out, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(dst, m)
	if err != nil {
		return nil, fmt.Errorf("format: message %s of schema %d: %w", ps.md.FullName(), ps.id, err)
	}
	return out, nil
}

// setProto sets m's fields from v, an object: the inverse of
// appendProtoJSON. A field is read by its .proto name or its JSON name
// (lowerCamelCase); a missing or null field stays unset; keys that name
// no field are ignored (as an Avro sink ignores them).
func setProto(m protoreflect.Message, v any) error {
	if ok, err := setWellKnown(m, v); ok {
		return err
	}
	md := m.Descriptor()
	obj, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("message %s: want an object, got %s", md.FullName(), kind(v))
	}
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		x, ok := obj[string(fd.Name())]
		if !ok {
			x, ok = obj[fd.JSONName()]
		}
		if !ok || x == nil {
			continue
		}
		if err := setField(m, fd, x); err != nil {
			return fmt.Errorf("%s: %w", fd.Name(), err)
		}
	}
	return nil
}

func setField(m protoreflect.Message, fd protoreflect.FieldDescriptor, x any) error {
	if oo := fd.ContainingOneof(); oo != nil && !oo.IsSynthetic() {
		if other := m.WhichOneof(oo); other != nil {
			return fmt.Errorf("set, but so is %s, of the same oneof %s", other.Name(), oo.Name())
		}
	}
	switch {
	case fd.IsList():
		l, ok := x.([]any)
		if !ok {
			return fmt.Errorf("repeated: want a list, got %s", kind(x))
		}
		list := m.Mutable(fd).List()
		for i, e := range l {
			var ev protoreflect.Value
			var err error
			if fd.Message() != nil {
				ev = list.NewElement()
				err = setProto(ev.Message(), e)
			} else {
				ev, err = protoScalar(fd, e)
			}
			if err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
			list.Append(ev)
		}
	case fd.IsMap():
		obj, ok := x.(map[string]any)
		if !ok {
			return fmt.Errorf("map: want an object, got %s", kind(x))
		}
		mp := m.Mutable(fd).Map()
		for k, e := range obj {
			key, err := protoMapKey(fd.MapKey(), k)
			if err != nil {
				return fmt.Errorf("[%q]: %w", k, err)
			}
			if vd := fd.MapValue(); vd.Message() != nil {
				err = setProto(mp.Mutable(key).Message(), e)
			} else {
				var ev protoreflect.Value
				if ev, err = protoScalar(vd, e); err == nil {
					mp.Set(key, ev)
				}
			}
			if err != nil {
				return fmt.Errorf("[%q]: %w", k, err)
			}
		}
	case fd.Message() != nil:
		return setProto(m.Mutable(fd).Message(), x)
	default:
		v, err := protoScalar(fd, x)
		if err != nil {
			return err
		}
		m.Set(fd, v)
	}
	return nil
}

// protoMapKey reads a map key, a JSON object's key, as fd's kind.
func protoMapKey(fd protoreflect.FieldDescriptor, k string) (protoreflect.MapKey, error) {
	var x any = k
	switch fd.Kind() {
	case protoreflect.StringKind:
	case protoreflect.BoolKind:
		switch k {
		case "true":
			x = true
		case "false":
			x = false
		default:
			return protoreflect.MapKey{}, fmt.Errorf("%q is not a boolean key", k)
		}
	default:
		n, err := parseInt(k)
		if err != nil {
			return protoreflect.MapKey{}, err
		}
		x = n
	}
	v, err := protoScalar(fd, x)
	if err != nil {
		return protoreflect.MapKey{}, err
	}
	return v.MapKey(), nil
}

func parseInt(s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer key", s)
	}
	return n, nil
}

// protoScalar converts a JSON-model value into a value of fd's (non
// message) kind: integers from integral numbers, within the kind's range;
// enums from a name or a number; bytes from base64.
func protoScalar(fd protoreflect.FieldDescriptor, x any) (protoreflect.Value, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		b, ok := x.(bool)
		if !ok {
			return protoreflect.Value{}, fmt.Errorf("want a boolean, got %s", kind(x))
		}
		return protoreflect.ValueOfBool(b), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		n, err := integer(x)
		if err == nil && (n < math.MinInt32 || n > math.MaxInt32) {
			err = fmt.Errorf("%d is out of the range of %s", n, fd.Kind())
		}
		return protoreflect.ValueOfInt32(int32(n)), err
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if s, ok := x.(string); ok { // protojson's form
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return protoreflect.Value{}, fmt.Errorf("%q is not an integer (%s)", s, fd.Kind())
			}
			return protoreflect.ValueOfInt64(n), nil
		}
		n, err := integer(x)
		return protoreflect.ValueOfInt64(n), err
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		n, err := integer(x)
		if err == nil && (n < 0 || n > math.MaxUint32) {
			err = fmt.Errorf("%d is out of the range of %s", n, fd.Kind())
		}
		return protoreflect.ValueOfUint32(uint32(n)), err
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if s, ok := x.(string); ok { // past math.MaxInt64, or protojson's form
			u, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return protoreflect.Value{}, fmt.Errorf("%q is not an integer (%s)", s, fd.Kind())
			}
			return protoreflect.ValueOfUint64(u), nil
		}
		n, err := integer(x)
		if err == nil && n < 0 {
			err = fmt.Errorf("%d is out of the range of %s", n, fd.Kind())
		}
		return protoreflect.ValueOfUint64(uint64(n)), err
	case protoreflect.FloatKind:
		f, err := number(x)
		return protoreflect.ValueOfFloat32(float32(f)), err
	case protoreflect.DoubleKind:
		f, err := number(x)
		return protoreflect.ValueOfFloat64(f), err
	case protoreflect.StringKind:
		s, ok := x.(string)
		if !ok {
			return protoreflect.Value{}, fmt.Errorf("want a string, got %s", kind(x))
		}
		return protoreflect.ValueOfString(s), nil
	case protoreflect.BytesKind:
		b, err := bytesOf(x)
		return protoreflect.ValueOfBytes(b), err
	case protoreflect.EnumKind:
		vals := fd.Enum().Values()
		if s, ok := x.(string); ok {
			ev := vals.ByName(protoreflect.Name(s))
			if ev == nil {
				return protoreflect.Value{}, fmt.Errorf("enum %s: %q is not one of its values", fd.Enum().FullName(), s)
			}
			return protoreflect.ValueOfEnum(ev.Number()), nil
		}
		n, err := integer(x)
		if err == nil && (n < math.MinInt32 || n > math.MaxInt32) {
			err = fmt.Errorf("enum %s: %d is out of range", fd.Enum().FullName(), n)
		}
		return protoreflect.ValueOfEnum(protoreflect.EnumNumber(n)), err
	}
	return protoreflect.Value{}, fmt.Errorf("unsupported field kind %s", fd.Kind())
}

// setWellKnown sets a well-known type from its JSON form (the inverse of
// appendWellKnownJSON): a Timestamp from an RFC 3339 string or Unix
// milliseconds, a Duration from "1.5s" (any time.ParseDuration string) or
// seconds, a wrapper from its value, Struct, Value and ListValue from any
// JSON. ok is false for any other message.
func setWellKnown(m protoreflect.Message, v any) (ok bool, err error) {
	md := m.Descriptor()
	name := md.FullName()
	fields := md.Fields()
	switch {
	case name == wktTimestamp:
		var t time.Time
		if s, isStr := v.(string); isStr {
			if t, err = time.Parse(time.RFC3339Nano, s); err != nil {
				return true, fmt.Errorf("timestamp: %q is not an RFC 3339 time", s)
			}
		} else {
			n, err := integer(v)
			if err != nil {
				return true, fmt.Errorf("timestamp: want an RFC 3339 string or Unix milliseconds: %w", err)
			}
			t = time.UnixMilli(n)
		}
		m.Set(fields.ByNumber(1), protoreflect.ValueOfInt64(t.Unix()))
		m.Set(fields.ByNumber(2), protoreflect.ValueOfInt32(int32(t.Nanosecond())))
		return true, nil
	case name == wktDuration:
		var d time.Duration
		if s, isStr := v.(string); isStr {
			if d, err = time.ParseDuration(s); err != nil {
				return true, fmt.Errorf("duration: %w", err)
			}
		} else {
			f, err := number(v)
			if err != nil {
				return true, fmt.Errorf("duration: want a string (\"1.5s\") or seconds: %w", err)
			}
			d = time.Duration(f * float64(time.Second))
		}
		m.Set(fields.ByNumber(1), protoreflect.ValueOfInt64(int64(d/time.Second)))
		m.Set(fields.ByNumber(2), protoreflect.ValueOfInt32(int32(d%time.Second)))
		return true, nil
	case isWrapper(name):
		x, err := protoScalar(fields.ByNumber(1), v)
		if err == nil {
			m.Set(fields.ByNumber(1), x)
		}
		return true, err
	case name == wktStruct:
		obj, isObj := v.(map[string]any)
		if !isObj {
			return true, fmt.Errorf("struct: want an object, got %s", kind(v))
		}
		mp := m.Mutable(fields.ByNumber(1)).Map()
		for k, x := range obj {
			if _, err := setWellKnown(mp.Mutable(protoreflect.ValueOfString(k).MapKey()).Message(), x); err != nil {
				return true, fmt.Errorf("[%q]: %w", k, err)
			}
		}
		return true, nil
	case name == wktList:
		l, isList := v.([]any)
		if !isList {
			return true, fmt.Errorf("list value: want a list, got %s", kind(v))
		}
		list := m.Mutable(fields.ByNumber(1)).List()
		for i, x := range l {
			e := list.NewElement()
			if _, err := setWellKnown(e.Message(), x); err != nil {
				return true, fmt.Errorf("[%d]: %w", i, err)
			}
			list.Append(e)
		}
		return true, nil
	case name == wktValue:
		set := func(field protoreflect.Name, x protoreflect.Value) {
			m.Set(fields.ByName(field), x)
		}
		switch x := v.(type) {
		case nil:
			set("null_value", protoreflect.ValueOfEnum(0))
		case bool:
			set("bool_value", protoreflect.ValueOfBool(x))
		case string:
			set("string_value", protoreflect.ValueOfString(x))
		case int64:
			set("number_value", protoreflect.ValueOfFloat64(float64(x)))
		case float64:
			set("number_value", protoreflect.ValueOfFloat64(x))
		case map[string]any:
			_, err = setWellKnown(m.Mutable(fields.ByName("struct_value")).Message(), x)
		case []any:
			_, err = setWellKnown(m.Mutable(fields.ByName("list_value")).Message(), x)
		default:
			err = fmt.Errorf("value: unsupported %s", kind(v))
		}
		return true, err
	}
	return false, nil
}
