package pipeline

import (
	"context"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/format"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/stream"
)

// sink compiles a sink step: each Rec's value is written as JSON (a raw
// source's text as is, if no step changed it), with the element's key.
func (c *compiler) sink(path string, s *config.SinkStep) {
	c.flush()
	sink := stream.KafkaSink{Topic: s.Topic, TransactionTimeout: s.TransactionTimeout}
	if s.Topic == "" {
		c.add(path+".topic", "required")
	}
	var codec stream.Codec[Rec] = JSONCodec{}
	switch s.Format.Type {
	case "", config.FormatJSON:
		if c.raw {
			c.add(path+".format", "json, but the values reaching the sink are raw bytes (source format raw): use a json source, or a step that produces JSON")
		}
	case config.FormatAvro, config.FormatProtobuf:
		enc := c.registryEncoder(path+".format", s.Topic, s.Topic+"-value", s.Format)
		if enc == nil {
			break
		}
		if c.raw {
			c.add(path+".format", "%s, but the values reaching the sink are raw bytes (source format raw): use a json, avro or protobuf source, or a step that produces JSON", s.Format.Type)
		}
		codec = registryCodec{enc}
	default:
		c.add(path+".format", "%q: must be json, avro or protobuf", s.Format.Type)
	}
	switch s.KeyFormat.Type {
	case "", config.FormatRaw:
	case config.FormatAvro, config.FormatProtobuf:
		if enc := c.registryEncoder(path+".key_format", s.Topic, s.Topic+"-key", s.KeyFormat); enc != nil {
			codec = keyCodec{Codec: codec, key: enc}
		}
	default:
		c.add(path+".key_format", "%q: must be raw, avro or protobuf", s.KeyFormat.Type)
	}
	var err error
	if sink.Delivery, err = kafkaio.ParseDelivery(s.Delivery); err != nil {
		c.add(path+".delivery", "%q: must be exactly-once or at-least-once", s.Delivery)
	}
	if s.TransactionTimeout < 0 {
		c.add(path+".transaction_timeout", "%v: must not be negative", s.TransactionTimeout)
	}
	if len(c.problems) > 0 || c.cur == nil {
		return
	}
	stream.To(c.cur, sink, codec)
	if err := c.job.Err(); err != nil {
		c.addJob(path, err)
	}
}

// registryEncoder is an Avro or a Protobuf encoder.
type registryEncoder interface {
	Prepare(ctx context.Context) error
	Append(dst []byte, v any) ([]byte, error)
}

// registryEncoder makes the encoder of an avro or protobuf format (a
// sink's values or keys), prepared when the job starts (OnStart), or
// reports why not and returns nil. subject is the default subject (of
// the TopicNameStrategy, on topic).
func (c *compiler) registryEncoder(path, topic, subject string, f config.Format) registryEncoder {
	if f.Registry == "" {
		c.add(path+".registry", "required for %s", f.Type)
		return nil
	}
	schema := f.Schema
	if f.SchemaFile != "" {
		b, err := os.ReadFile(f.SchemaFile)
		if err != nil {
			c.add(path+".schema_file", "%v", err)
			return nil
		}
		schema = string(b)
	}
	if f.Subject != "" {
		subject = f.Subject
	}
	if st := f.SubjectStrategy; schema != "" && (st == config.SubjectRecord || st == config.SubjectTopicRecord) {
		typ := sr.TypeAvro
		if f.Type == config.FormatProtobuf {
			typ = sr.TypeProtobuf
		}
		name, err := format.RecordName(typ, schema, f.Message)
		if err != nil {
			c.add(path+".subject_strategy", "%v", err)
			return nil
		}
		if subject = name; st == config.SubjectTopicRecord {
			subject = topic + "-" + name
		}
	}
	reg, err := c.env.Registry(f)
	if err != nil {
		c.add(path+".registry", "%v", err)
		return nil
	}
	var enc registryEncoder
	if f.Type == config.FormatProtobuf {
		enc, err = format.NewProtoEncoder(reg, format.ProtoEncoderConfig{Subject: subject, SchemaID: f.SchemaID, Message: f.Message}, schema)
	} else {
		enc, err = format.NewAvroEncoder(reg, format.AvroEncoderConfig{Subject: subject, SchemaID: f.SchemaID}, schema)
	}
	if err != nil {
		key := path + ".schema"
		if f.SchemaFile != "" {
			key = path + ".schema_file"
		}
		c.add(key, "%v", err)
		return nil
	}
	c.job.OnStart(func(ctx context.Context) error {
		if err := enc.Prepare(ctx); err != nil {
			return fmt.Errorf("%s (subject %s): %w", path, subject, err)
		}
		return nil
	})
	return enc
}

// registryCodec writes a Rec's value as Avro or Protobuf in the Confluent
// wire format.
type registryCodec struct{ enc registryEncoder }

// Append implements stream.Codec.
func (a registryCodec) Append(dst []byte, r Rec) ([]byte, error) {
	r, err := r.decoded()
	if err != nil {
		return nil, err
	}
	return a.enc.Append(dst, r.V)
}

// Decode implements stream.Codec; nothing reads such a sink's records
// back through it.
func (registryCodec) Decode([]byte) (Rec, error) {
	return Rec{}, fmt.Errorf("pipeline: an avro or protobuf sink's codec does not decode")
}

// keyCodec writes the records' keys as Avro or Protobuf too
// (stream.KeyCodec). A key is a JSON document (what an avro or protobuf
// source's key becomes) or, if it is not one, or if its JSON value does
// not fit the schema, a string.
type keyCodec struct {
	stream.Codec[Rec]
	key registryEncoder
}

// AppendKey implements stream.KeyCodec.
func (k keyCodec) AppendKey(dst, key []byte) ([]byte, error) {
	v, _, err := DecodeJSON(key)
	if err != nil {
		return k.key.Append(dst, string(key))
	}
	out, err := k.key.Append(dst, v)
	if _, isString := v.(string); err == nil || isString {
		return out, err
	}
	if out, err2 := k.key.Append(dst, string(key)); err2 == nil {
		return out, nil
	}
	return nil, err // the JSON value's error
}
