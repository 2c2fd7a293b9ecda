package nexmark

import (
	"fmt"

	"github.com/hamba/avro/v2"
)

// AvroSchema is the Avro schema of an event: the shape of AppendJSON's
// object, a record nexmark.Event with event_type (int), date_time (long,
// Unix ms) and one nullable record per kind, of which the event's own is
// set and the other two are null. Read as JSON (a Weir avro source, see
// docs/formats.md), an event is AppendJSON's object with "person",
// "auction" and "bid" all present, two of them null: every query reads
// either layout.
const AvroSchema = `{"type": "record", "name": "Event", "namespace": "nexmark", "fields": [
  {"name": "event_type", "type": "int"},
  {"name": "date_time", "type": "long"},
  {"name": "person", "default": null, "type": ["null", {"type": "record", "name": "Person", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "email_address", "type": "string"},
    {"name": "credit_card", "type": "string"},
    {"name": "city", "type": "string"},
    {"name": "state", "type": "string"},
    {"name": "date_time", "type": "long"},
    {"name": "extra", "type": "string"}]}]},
  {"name": "auction", "default": null, "type": ["null", {"type": "record", "name": "Auction", "fields": [
    {"name": "id", "type": "long"},
    {"name": "item_name", "type": "string"},
    {"name": "description", "type": "string"},
    {"name": "initial_bid", "type": "long"},
    {"name": "reserve", "type": "long"},
    {"name": "date_time", "type": "long"},
    {"name": "expires", "type": "long"},
    {"name": "seller", "type": "long"},
    {"name": "category", "type": "long"},
    {"name": "extra", "type": "string"}]}]},
  {"name": "bid", "default": null, "type": ["null", {"type": "record", "name": "Bid", "fields": [
    {"name": "auction", "type": "long"},
    {"name": "bidder", "type": "long"},
    {"name": "price", "type": "long"},
    {"name": "channel", "type": "string"},
    {"name": "url", "type": "string"},
    {"name": "date_time", "type": "long"},
    {"name": "extra", "type": "string"}]}]}
]}`

// avroEvent is an Event as AvroSchema lays it out.
type avroEvent struct {
	EventType int32    `avro:"event_type"`
	DateTime  int64    `avro:"date_time"`
	Person    *Person  `avro:"person"`
	Auction   *Auction `avro:"auction"`
	Bid       *Bid     `avro:"bid"`
}

// AvroCodec encodes events as AvroSchema's binary encoding (the payload
// alone: a producer for a schema registry frames it). It is safe for
// concurrent use.
type AvroCodec struct {
	schema avro.Schema
}

// NewAvroCodec returns a codec of AvroSchema.
func NewAvroCodec() (*AvroCodec, error) {
	s, err := avro.Parse(AvroSchema)
	if err != nil {
		return nil, fmt.Errorf("nexmark: the Avro schema: %w", err)
	}
	return &AvroCodec{schema: s}, nil
}

// Encode returns e's Avro encoding under AvroSchema.
func (c *AvroCodec) Encode(e Event) ([]byte, error) {
	a := avroEvent{EventType: int32(e.Kind), DateTime: e.DateTime()}
	switch e.Kind {
	case KindPerson:
		a.Person = &e.Person
	case KindAuction:
		a.Auction = &e.Auction
	default:
		a.EventType, a.Bid = int32(KindBid), &e.Bid
	}
	return avro.Marshal(c.schema, a)
}

// Decode decodes an event encoded by Encode.
func (c *AvroCodec) Decode(b []byte) (Event, error) {
	var a avroEvent
	if err := avro.Unmarshal(c.schema, b, &a); err != nil {
		return Event{}, err
	}
	e := Event{Kind: Kind(a.EventType)}
	switch {
	case a.Person != nil:
		e.Person = *a.Person
	case a.Auction != nil:
		e.Auction = *a.Auction
	case a.Bid != nil:
		e.Bid = *a.Bid
	}
	return e, nil
}
