package pipeline

import (
	"context"
	"fmt"
	"os"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/format"
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
	case config.FormatAvro:
		enc := c.avroSink(path+".format", s)
		if enc == nil {
			break
		}
		if c.raw {
			c.add(path+".format", "avro, but the values reaching the sink are raw bytes (source format raw): use a json or avro source, or a step that produces JSON")
		}
		codec = avroCodec{enc}
		c.job.OnStart(func(ctx context.Context) error {
			if err := enc.Prepare(ctx); err != nil {
				return fmt.Errorf("%s (subject %s): %w", path, s.Format.Subject, err)
			}
			return nil
		})
	default:
		c.add(path+".format", "%q: must be json or avro", s.Format.Type)
	}
	switch s.Delivery {
	case "", config.ModeExactlyOnce:
		sink.Delivery = stream.DeliveryExactlyOnce
	case config.ModeAtLeastOnce:
		sink.Delivery = stream.DeliveryAtLeastOnce
	default:
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

// avroSink makes the encoder of an avro sink, or reports why not.
func (c *compiler) avroSink(path string, s *config.SinkStep) *format.AvroEncoder {
	f := s.Format
	if f.Registry == "" {
		c.add(path+".registry", "required for avro")
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
	subject := f.Subject
	if subject == "" {
		subject = s.Topic + "-value"
	}
	reg, err := c.env.Registry(f)
	if err != nil {
		c.add(path+".registry", "%v", err)
		return nil
	}
	enc, err := format.NewAvroEncoder(reg, format.AvroEncoderConfig{Subject: subject, SchemaID: f.SchemaID}, schema)
	if err != nil {
		key := path + ".schema"
		if f.SchemaFile != "" {
			key = path + ".schema_file"
		}
		c.add(key, "%v", err)
		return nil
	}
	return enc
}

// avroCodec writes a Rec's value as Avro in the Confluent wire format.
type avroCodec struct{ enc *format.AvroEncoder }

// Append implements stream.Codec.
func (a avroCodec) Append(dst []byte, r Rec) ([]byte, error) { return a.enc.Append(dst, r.V) }

// Decode implements stream.Codec; nothing reads an avro sink's records
// back through it.
func (avroCodec) Decode([]byte) (Rec, error) {
	return Rec{}, fmt.Errorf("pipeline: an avro sink's codec does not decode")
}
