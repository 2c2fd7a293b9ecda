// Package nexmark owns Weir's copy of the Nexmark benchmark's input: the
// event model (persons, auctions, bids), a deterministic generator with the
// reference generator's event mix and field distributions, the events' JSON
// text and their Kafka keys. It performs no I/O and reads no clock: event
// time is base time + event number × inter-event delay, and the same Config
// always yields the same events, byte for byte.
//
// The reference is the Java generator of github.com/nexmark/nexmark
// (nexmark-flink/.../generator) and Apache Beam's
// sdks/java/testing/nexmark, which it derives from. Where this package
// departs from them, the doc comment of the item concerned says how and why.
//
// A Generator is not safe for concurrent use; the events it returns are
// values that share nothing mutable with it.
package nexmark

import (
	"strconv"
	"time"
)

// Kind is the kind of an event. Its value is the event's "event_type" in
// JSON, as in nexmark-flink's tables: 0 person, 1 auction, 2 bid.
type Kind uint8

// The kinds of event.
const (
	KindPerson  Kind = 0
	KindAuction Kind = 1
	KindBid     Kind = 2
)

// String returns "person", "auction" or "bid".
func (k Kind) String() string {
	switch k {
	case KindPerson:
		return "person"
	case KindAuction:
		return "auction"
	case KindBid:
		return "bid"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Person is a new user of the auction site. Times are Unix milliseconds.
type Person struct {
	ID           int64  `avro:"id"`
	Name         string `avro:"name"`
	EmailAddress string `avro:"email_address"`
	CreditCard   string `avro:"credit_card"`
	City         string `avro:"city"`
	State        string `avro:"state"`
	DateTime     int64  `avro:"date_time"`
	Extra        string `avro:"extra"`
}

// Auction is a new item put up for auction by the person Seller, open from
// DateTime to Expires (Unix milliseconds).
type Auction struct {
	ID          int64  `avro:"id"`
	ItemName    string `avro:"item_name"`
	Description string `avro:"description"`
	InitialBid  int64  `avro:"initial_bid"`
	Reserve     int64  `avro:"reserve"`
	DateTime    int64  `avro:"date_time"`
	Expires     int64  `avro:"expires"`
	Seller      int64  `avro:"seller"`
	Category    int64  `avro:"category"`
	Extra       string `avro:"extra"`
}

// Bid is a bid by the person Bidder on the auction Auction. Price is in
// cents; DateTime is Unix milliseconds.
type Bid struct {
	Auction  int64  `avro:"auction"`
	Bidder   int64  `avro:"bidder"`
	Price    int64  `avro:"price"`
	Channel  string `avro:"channel"`
	URL      string `avro:"url"`
	DateTime int64  `avro:"date_time"`
	Extra    string `avro:"extra"`
}

// Event is one Nexmark event: Kind says which one of Person, Auction and
// Bid it holds; the other two are zero. (DateTime, KeyID and AppendJSON
// take a Kind other than the three for a bid.)
type Event struct {
	Kind    Kind
	Person  Person
	Auction Auction
	Bid     Bid
}

// DateTime returns the event time of e, Unix milliseconds: its person's,
// auction's or bid's DateTime.
func (e Event) DateTime() int64 {
	switch e.Kind {
	case KindPerson:
		return e.Person.DateTime
	case KindAuction:
		return e.Auction.DateTime
	}
	return e.Bid.DateTime
}

// KeyID returns the id an event is keyed by in Kafka: a person's id, an
// auction's id, a bid's auction. Bids and their auction thus share a key
// (and a partition, with the same partitioner), which is what queries
// joining them on the auction id (q4, q5) want; q3 and q8 join auctions on
// their seller instead, and a producer serving those keys auctions with
// AppendIDKey(dst, e.Auction.Seller).
func KeyID(e Event) int64 {
	switch e.Kind {
	case KindPerson:
		return e.Person.ID
	case KindAuction:
		return e.Auction.ID
	}
	return e.Bid.Auction
}

// Key returns the Kafka key of e: KeyID(e) in decimal ASCII, the text of
// the JSON number it is in the value.
func Key(e Event) []byte {
	return AppendKey(make([]byte, 0, 20), e)
}

// AppendKey appends Key(e) to dst.
func AppendKey(dst []byte, e Event) []byte {
	return AppendIDKey(dst, KeyID(e))
}

// AppendIDKey appends the key of an id (decimal ASCII) to dst: the same
// form Key uses, for a caller that keys events by another field, say
// auctions by seller.
func AppendIDKey(dst []byte, id int64) []byte {
	return strconv.AppendInt(dst, id, 10)
}

// Flush returns the event that closes a finite input whose last event
// happened at last (Unix ms): a person an hour later, written once to
// each partition after the input so that every partition's watermark
// passes every window and auction expiry of the input (a task whose
// inputs are all idle keeps its watermark). It is no row of any query
// over bids and auctions.
func Flush(last int64) Event {
	return Event{Kind: KindPerson, Person: Person{ID: 1, Name: "flush", DateTime: last + time.Hour.Milliseconds()}}
}
