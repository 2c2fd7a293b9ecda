package pipeline

import (
	"github.com/weir-stream/weir/config"
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
	switch s.Format {
	case "", config.FormatJSON:
		if c.raw {
			c.add(path+".format", "json, but the values reaching the sink are raw bytes (source format raw): use a json source, or a step that produces JSON")
		}
	default:
		c.add(path+".format", "%q: must be json", s.Format)
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
	stream.To(c.cur, sink, stream.Codec[Rec](JSONCodec{}))
	if err := c.job.Err(); err != nil {
		c.addJob(path, err)
	}
}
