package pipeline

import (
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/format"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/stream"
)

// source compiles the source step: its records are decoded into Recs in
// the source stage. A json source's values are decoded as JSON (the
// source's on_error applies to a record that does not decode); a raw
// source's value is its text, a string.
func (c *compiler) source(path string, s *config.SourceStep) {
	src := stream.KafkaSource{Topics: s.Topics, DeadLetterTopic: s.DeadLetterTopic}
	if len(s.Topics) == 0 {
		c.add(path+".topics", "required: at least one topic")
	}
	// A Kafka value is never reused (Borrow), and was checked as JSON at
	// the edge (stream.FormatJSON) before the source decodes it (Checked).
	var codec stream.Codec[Rec] = JSONCodec{Borrow: true, Checked: true}
	switch s.Format.Type {
	case "", config.FormatJSON:
		src.Format = stream.FormatJSON
	case config.FormatRaw:
		src.Format = stream.FormatRaw
		codec, c.raw = textCodec{}, true
	case config.FormatAvro, config.FormatProtobuf:
		// Avro and Protobuf values become their JSON documents at the
		// edge: every step reads them as it reads JSON.
		src.Format = stream.FormatJSON
		src.ValueDecoder = c.registryDecoder(path+".format", s.Format)
	default:
		c.add(path+".format", "%q: must be json, raw, avro or protobuf", s.Format.Type)
	}
	switch s.KeyFormat.Type {
	case "", config.FormatRaw:
	case config.FormatAvro, config.FormatProtobuf:
		src.KeyDecoder = c.registryDecoder(path+".key_format", s.KeyFormat)
	default:
		c.add(path+".key_format", "%q: must be raw, avro or protobuf", s.KeyFormat.Type)
	}
	var err error
	if src.Start, err = kafkaio.ParseStart(s.Start); err != nil {
		c.add(path+".start", "%q: must be earliest, latest or an RFC 3339 time", s.Start)
	}
	if src.OnError, err = kafkaio.ParseOnError(s.OnError); err != nil {
		c.add(path+".on_error", "%q: must be fail, skip or dead-letter", s.OnError)
	}
	if src.OnError == kafkaio.OnErrorDeadLetter && s.DeadLetterTopic == "" {
		c.add(path+".dead_letter_topic", "required when on_error is dead-letter")
	}
	if s.DeadLetterTopic != "" && src.OnError != kafkaio.OnErrorDeadLetter {
		c.add(path+".dead_letter_topic", "set, but on_error is %q: set on_error to dead-letter or remove it", s.OnError)
	}
	if ts := s.Timestamp; ts != nil {
		src.Timestamp.Field = ts.Field
		switch {
		case ts.Field == "":
			c.add(path+".timestamp.field", "required: the top-level JSON field that holds the event time")
		case c.raw:
			c.add(path+".timestamp", "reads a JSON field, but the source's format is raw: use format json")
		}
		if src.Timestamp.Format, err = kafkaio.ParseTimestampFormat(ts.Format); err != nil {
			c.add(path+".timestamp.format", "%q: must be unix_ms, unix_s or rfc3339", ts.Format)
		}
	}
	if wm := s.Watermark; wm != nil {
		src.Watermark = stream.WatermarkSpec{MaxOutOfOrderness: wm.MaxOutOfOrderness, IdleTimeout: wm.IdleTimeout, Interval: wm.Interval}
	}
	if len(c.problems) > 0 {
		return
	}
	c.cur = stream.From(c.job, src, codec)
	if err := c.job.Err(); err != nil {
		c.addJob(path, err)
	}
}

// registryDecoder makes the decoder of an avro or protobuf format (the
// records' values or keys), or reports why not and returns nil.
func (c *compiler) registryDecoder(path string, f config.Format) stream.ValueDecoder {
	if f.Registry == "" {
		c.add(path+".registry", "required for %s", f.Type)
		return nil
	}
	reg, err := c.env.Registry(f)
	if err != nil {
		c.add(path+".registry", "%v", err)
		return nil
	}
	if f.Type == config.FormatProtobuf {
		return format.NewProtoDecoder(c.env.Context, reg)
	}
	return format.NewAvroDecoder(c.env.Context, reg)
}
