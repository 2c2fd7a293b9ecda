package format

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/weir-stream/weir/internal/jsontext"
)

// The Confluent wire format of a Protobuf value: the 5-byte header, then
// the message indexes (which message of the schema's file: a zigzag-varint
// count and path, or one zero byte for the first message), then the
// Protobuf payload. franz-go's sr.ConfluentHeader reads and writes them.
var confluent sr.ConfluentHeader

// maxIndexDepth bounds the message-index path a record may carry.
const maxIndexDepth = 32

// mainProto is the name the schema itself compiles under: its imports are
// its references' names (the Confluent convention: a reference's name is
// the import path).
const mainProto = "weir-registry-schema.proto"

// Protobuf returns the compiled Protobuf schema (a .proto file) of id,
// from the cache or the registry, with its references. An ID the registry
// does not hold is ErrUnknownSchema; an unreachable registry is retried
// until ctx ends.
func (r *Registry) Protobuf(ctx context.Context, id int) (protoreflect.FileDescriptor, error) {
	s, err := r.schema(ctx, id, sr.TypeProtobuf, func(sch sr.Schema) (any, error) {
		srcs := map[string]string{}
		if err := r.protoReferences(ctx, sch.References, srcs, 0); err != nil {
			return nil, err
		}
		srcs[mainProto] = sch.Schema
		return compileProto(ctx, mainProto, srcs)
	})
	if err != nil {
		return nil, err
	}
	return s.(protoreflect.FileDescriptor), nil
}

// protoReferences adds the sources of refs, and of theirs, to srcs by
// import path.
func (r *Registry) protoReferences(ctx context.Context, refs []sr.SchemaReference, srcs map[string]string, depth int) error {
	if depth > 16 {
		return errors.New("references nested more than 16 deep")
	}
	for _, ref := range refs {
		if _, ok := srcs[ref.Name]; ok {
			continue
		}
		ss, err := do(ctx, r, fmt.Sprintf("reference %s version %d", ref.Subject, ref.Version), func(ctx context.Context) (sr.SubjectSchema, error) {
			return r.cl.SchemaByVersion(ctx, ref.Subject, ref.Version)
		})
		if err != nil {
			return fmt.Errorf("reference %q (%s version %d): %w", ref.Name, ref.Subject, ref.Version, err)
		}
		srcs[ref.Name] = ss.Schema.Schema
		if err := r.protoReferences(ctx, ss.References, srcs, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// compileProto compiles the file name of srcs, whose imports are the other
// sources or Protobuf's well-known types (google/protobuf/*.proto).
func compileProto(ctx context.Context, name string, srcs map[string]string) (protoreflect.FileDescriptor, error) {
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(srcs)}),
	}
	files, err := c.Compile(ctx, name)
	if err != nil {
		return nil, err
	}
	return files[0], nil
}

// messageAt returns the message that a record's message indexes name in
// fd: the first index picks a top-level message, each next one a message
// nested in the last.
func messageAt(fd protoreflect.FileDescriptor, index []int) (protoreflect.MessageDescriptor, error) {
	if len(index) == 0 {
		return nil, errors.New("no message index")
	}
	msgs := fd.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range index {
		if i < 0 || i >= msgs.Len() {
			return nil, fmt.Errorf("message index %v: no such message in the schema", index)
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	return md, nil
}

// messageIndex returns the message indexes of md in its file: the inverse
// of messageAt.
func messageIndex(md protoreflect.MessageDescriptor) []int {
	var index []int
	for d := protoreflect.Descriptor(md); ; d = d.Parent() {
		m, ok := d.(protoreflect.MessageDescriptor)
		if !ok {
			break
		}
		index = append(index, m.Index())
	}
	slices.Reverse(index)
	return index
}

// ProtoDecoder converts Protobuf values in the Confluent wire format, of
// any schema the registry holds, into JSON documents (docs/formats.md,
// "Protobuf values in JSON"). It is safe for concurrent use.
type ProtoDecoder struct {
	reg *Registry
	ctx context.Context
}

// NewProtoDecoder returns a decoder that looks schemas up in reg; ctx
// bounds the retries of an unreachable registry (the process's life).
func NewProtoDecoder(ctx context.Context, reg *Registry) *ProtoDecoder {
	return &ProtoDecoder{reg: reg, ctx: ctx}
}

// DecodeValue returns the JSON document of the Protobuf value v. A nil
// value (a tombstone) stays nil.
func (d *ProtoDecoder) DecodeValue(v []byte) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	id, rest, err := schemaID(v)
	if err != nil {
		return nil, err
	}
	fd, err := d.reg.Protobuf(d.ctx, id)
	if err != nil {
		return nil, err
	}
	index, payload, err := confluent.DecodeIndex(rest, maxIndexDepth)
	if err != nil {
		return nil, fmt.Errorf("%w: the message indexes after schema ID %d: %v", ErrBadWireFormat, id, err)
	}
	md, err := messageAt(fd, index)
	if err != nil {
		return nil, fmt.Errorf("format: schema %d: %w", id, err)
	}
	m := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(payload, m); err != nil {
		return nil, fmt.Errorf("format: the payload does not match message %s of schema %d: %w", md.FullName(), id, err)
	}
	out, err := appendProtoJSON(make([]byte, 0, len(payload)*2+16), m)
	if err != nil {
		return nil, fmt.Errorf("format: schema %d, message %s: %w", id, md.FullName(), err)
	}
	return out, nil
}

// appendProtoJSON appends m as a JSON object: every field, in the order
// of the message's declaration, by its name in the .proto file. A field
// without presence (a proto3 scalar, a list, a map) has its value, the
// default if unset; a field with presence (a message, an optional or
// oneof field, a proto2 field) is null while unset. Well-known types have
// their JSON forms (protoWellKnownJSON).
func appendProtoJSON(dst []byte, m protoreflect.Message) ([]byte, error) {
	if out, ok, err := appendWellKnownJSON(dst, m); ok {
		return out, err
	}
	fields := m.Descriptor().Fields()
	dst = append(dst, '{')
	var err error
	for i := range fields.Len() {
		fd := fields.Get(i)
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsontext.AppendText(dst, string(fd.Name()))
		dst = append(dst, ':')
		switch {
		case fd.IsList():
			l := m.Get(fd).List()
			dst = append(dst, '[')
			for j := range l.Len() {
				if j > 0 {
					dst = append(dst, ',')
				}
				if dst, err = appendProtoValue(dst, fd, l.Get(j)); err != nil {
					return nil, fmt.Errorf("%s[%d]: %w", fd.Name(), j, err)
				}
			}
			dst = append(dst, ']')
		case fd.IsMap():
			if dst, err = appendProtoMap(dst, fd, m.Get(fd).Map()); err != nil {
				return nil, fmt.Errorf("%s: %w", fd.Name(), err)
			}
		case fd.HasPresence() && !m.Has(fd):
			dst = append(dst, "null"...)
		default:
			if dst, err = appendProtoValue(dst, fd, m.Get(fd)); err != nil {
				return nil, fmt.Errorf("%s: %w", fd.Name(), err)
			}
		}
	}
	return append(dst, '}'), nil
}

// appendProtoMap appends a map field as an object, its keys as strings in
// their order (so that a value always encodes the same way).
func appendProtoMap(dst []byte, fd protoreflect.FieldDescriptor, m protoreflect.Map) ([]byte, error) {
	keys := make([]protoreflect.MapKey, 0, m.Len())
	m.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	slices.SortFunc(keys, func(a, b protoreflect.MapKey) int {
		switch a.Interface().(type) {
		case string:
			return cmp.Compare(a.String(), b.String())
		case bool:
			return cmp.Compare(strconv.FormatBool(a.Bool()), strconv.FormatBool(b.Bool()))
		case int32, int64:
			return cmp.Compare(a.Int(), b.Int())
		}
		return cmp.Compare(a.Uint(), b.Uint())
	})
	dst = append(dst, '{')
	var err error
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsontext.AppendText(dst, k.String())
		dst = append(dst, ':')
		if dst, err = appendProtoValue(dst, fd.MapValue(), m.Get(k)); err != nil {
			return nil, fmt.Errorf("[%q]: %w", k.String(), err)
		}
	}
	return append(dst, '}'), nil
}

// appendProtoValue appends one value of fd's kind (an element, if fd is a
// list). 64-bit integers are JSON numbers, not the strings of protojson:
// the JSON model holds them exactly (int64); an unsigned one past
// math.MaxInt64 is a decimal string, which it would not.
func appendProtoValue(dst []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) ([]byte, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(dst, v.Bool()), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.AppendInt(dst, v.Int(), 10), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if u := v.Uint(); u > math.MaxInt64 {
			// Past what the JSON model's int64 holds: a string, exact.
			dst = append(dst, '"')
			dst = strconv.AppendUint(dst, u, 10)
			return append(dst, '"'), nil
		}
		return strconv.AppendUint(dst, v.Uint(), 10), nil
	case protoreflect.FloatKind:
		return appendFloat(dst, v.Float(), 32)
	case protoreflect.DoubleKind:
		return appendFloat(dst, v.Float(), 64)
	case protoreflect.StringKind:
		return jsontext.AppendText(dst, v.String()), nil
	case protoreflect.BytesKind:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, v.Bytes())
		return append(dst, '"'), nil
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return jsontext.AppendText(dst, string(ev.Name())), nil
		}
		return strconv.AppendInt(dst, int64(v.Enum()), 10), nil // a number this schema does not name
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendProtoJSON(dst, v.Message())
	}
	return nil, fmt.Errorf("unsupported field kind %s", fd.Kind())
}

// The well-known types with a JSON form of their own.
const (
	wktTimestamp = "google.protobuf.Timestamp"
	wktDuration  = "google.protobuf.Duration"
	wktStruct    = "google.protobuf.Struct"
	wktValue     = "google.protobuf.Value"
	wktList      = "google.protobuf.ListValue"
)

// isWrapper reports whether name is one of the wrapper types
// (google.protobuf.Int64Value and the like), whose JSON form is their
// value.
func isWrapper(name protoreflect.FullName) bool {
	switch name {
	case "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
		"google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
		"google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue":
		return true
	}
	return false
}

// appendWellKnownJSON appends m's JSON form if m is a well-known type
// that has one (as protojson writes them, but for 64-bit integers):
// Timestamp as an RFC 3339 string, Duration as "1.5s", a wrapper as its
// value, Struct, Value and ListValue as the JSON they hold. ok is false
// for any other message.
func appendWellKnownJSON(dst []byte, m protoreflect.Message) (out []byte, ok bool, err error) {
	md := m.Descriptor()
	name := md.FullName()
	fields := md.Fields()
	switch {
	case name == wktTimestamp:
		t := time.Unix(m.Get(fields.ByNumber(1)).Int(), m.Get(fields.ByNumber(2)).Int()).UTC()
		dst = append(dst, '"')
		dst = t.AppendFormat(dst, time.RFC3339Nano)
		return append(dst, '"'), true, nil
	case name == wktDuration:
		d := time.Duration(m.Get(fields.ByNumber(1)).Int())*time.Second + time.Duration(m.Get(fields.ByNumber(2)).Int())
		return jsontext.AppendText(dst, durationString(d)), true, nil
	case isWrapper(name):
		out, err := appendProtoValue(dst, fields.ByNumber(1), m.Get(fields.ByNumber(1)))
		return out, true, err
	case name == wktStruct:
		out, err := appendProtoMap(dst, fields.ByNumber(1), m.Get(fields.ByNumber(1)).Map())
		return out, true, err
	case name == wktList:
		l := m.Get(fields.ByNumber(1)).List()
		dst = append(dst, '[')
		for i := range l.Len() {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = appendProtoJSON(dst, l.Get(i).Message()); err != nil {
				return nil, true, err
			}
		}
		return append(dst, ']'), true, nil
	case name == wktValue:
		fd := m.WhichOneof(md.Oneofs().ByName("kind"))
		if fd == nil || fd.Name() == "null_value" {
			return append(dst, "null"...), true, nil
		}
		if fd.Kind() == protoreflect.MessageKind {
			out, err := appendProtoJSON(dst, m.Get(fd).Message())
			return out, true, err
		}
		out, err := appendProtoValue(dst, fd, m.Get(fd))
		return out, true, err
	}
	return dst, false, nil
}

// durationString writes d in seconds with the fraction it has ("1.5s",
// "-0.000001s", "3s"), which time.ParseDuration reads back.
func durationString(d time.Duration) string {
	s := strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
	if frac := d % time.Second; frac != 0 { // exact, not through a float
		sign := ""
		if d < 0 {
			sign, d, frac = "-", -d, -frac
		}
		f := strconv.FormatInt(int64(frac)+1_000_000_000, 10)[1:]
		for f[len(f)-1] == '0' {
			f = f[:len(f)-1]
		}
		s = sign + strconv.FormatInt(int64(d/time.Second), 10) + "." + f
	}
	return s + "s"
}
