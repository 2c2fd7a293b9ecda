package nexmark

import (
	"encoding/binary"
	"strconv"
	"unsafe"

	"github.com/weir-stream/weir/internal/jsontext"
)

// AppendJSON appends e to dst as one JSON object, the shape of
// nexmark-flink's Kafka table (ddl_kafka.sql: event_type, then the row of
// the event's kind), with two differences:
//
//   - Times (date_time, expires) are Unix milliseconds, JSON numbers, and
//     the event's time is also at the top level as "date_time", so that a
//     Weir source reads it with `timestamp: {field: date_time, format:
//     unix_ms}` whatever the kind (nexmark-flink computes that column in
//     SQL, and writes TIMESTAMP(3) as text).
//   - Field names are snake_case (email_address, credit_card, date_time,
//     item_name, initial_bid), where nexmark-flink's rows use camelCase
//     (emailAddress, ...), and the two rows of the other kinds are left
//     out rather than written as null.
//
// So, a bid:
//
//	{"event_type":2,"date_time":1735689600000,"bid":{"auction":1000,
//	"bidder":1001,"price":1234,"channel":"Google","url":"https://...",
//	"date_time":1735689600000,"extra":"..."}}
//
// a person: {"event_type":0,"date_time":…,"person":{"id","name",
// "email_address","credit_card","city","state","date_time","extra"}}; an
// auction: {"event_type":1,"date_time":…,"auction":{"id","item_name",
// "description","initial_bid","reserve","date_time","expires","seller",
// "category","extra"}}. Strings are escaped as encoding/json escapes them
// (internal/jsontext), so any Event round-trips.
func AppendJSON(dst []byte, e Event) []byte {
	dst = append(dst, `{"event_type":`...)
	dst = strconv.AppendInt(dst, int64(e.Kind), 10)
	dst = append(dst, `,"date_time":`...)
	dst = strconv.AppendInt(dst, e.DateTime(), 10)
	switch e.Kind {
	case KindPerson:
		p := &e.Person
		dst = append(dst, `,"person":{"id":`...)
		dst = strconv.AppendInt(dst, p.ID, 10)
		dst = appendStringField(dst, `,"name":`, p.Name)
		dst = appendStringField(dst, `,"email_address":`, p.EmailAddress)
		dst = appendStringField(dst, `,"credit_card":`, p.CreditCard)
		dst = appendStringField(dst, `,"city":`, p.City)
		dst = appendStringField(dst, `,"state":`, p.State)
		dst = appendIntField(dst, `,"date_time":`, p.DateTime)
		dst = appendStringField(dst, `,"extra":`, p.Extra)
	case KindAuction:
		a := &e.Auction
		dst = append(dst, `,"auction":{"id":`...)
		dst = strconv.AppendInt(dst, a.ID, 10)
		dst = appendStringField(dst, `,"item_name":`, a.ItemName)
		dst = appendStringField(dst, `,"description":`, a.Description)
		dst = appendIntField(dst, `,"initial_bid":`, a.InitialBid)
		dst = appendIntField(dst, `,"reserve":`, a.Reserve)
		dst = appendIntField(dst, `,"date_time":`, a.DateTime)
		dst = appendIntField(dst, `,"expires":`, a.Expires)
		dst = appendIntField(dst, `,"seller":`, a.Seller)
		dst = appendIntField(dst, `,"category":`, a.Category)
		dst = appendStringField(dst, `,"extra":`, a.Extra)
	default:
		b := &e.Bid
		dst = append(dst, `,"bid":{"auction":`...)
		dst = strconv.AppendInt(dst, b.Auction, 10)
		dst = appendIntField(dst, `,"bidder":`, b.Bidder)
		dst = appendIntField(dst, `,"price":`, b.Price)
		dst = appendStringField(dst, `,"channel":`, b.Channel)
		dst = appendStringField(dst, `,"url":`, b.URL)
		dst = appendIntField(dst, `,"date_time":`, b.DateTime)
		dst = appendStringField(dst, `,"extra":`, b.Extra)
	}
	return append(dst, "}}"...)
}

func appendIntField(dst []byte, name string, v int64) []byte {
	return strconv.AppendInt(append(dst, name...), v, 10)
}

func appendStringField(dst []byte, name, v string) []byte {
	dst = append(dst, name...)
	if !plainASCII(v) {
		return jsontext.AppendText(dst, v)
	}
	dst = append(dst, '"')
	dst = append(dst, v...)
	return append(dst, '"')
}

// plainASCII reports whether s is ASCII with nothing JSON escapes (no
// control character, '"' or '\\'), so that it can be copied between quotes
// as is: every string the generator makes. It tests 8 bytes at a time, as
// jsontext.Append, which handles the other strings, goes byte by byte.
func plainASCII(s string) bool {
	const (
		ones  = 0x0101010101010101
		highs = 0x8080808080808080
	)
	// hasLess(x, n): some byte of x is < n (n <= 128); exact as a whole.
	hasLess := func(x, n uint64) bool { return (x-ones*n)&^x&highs != 0 }
	b := unsafe.Slice(unsafe.StringData(s), len(s))
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		if x&highs != 0 || hasLess(x, 0x20) || hasLess(x^(ones*'"'), 1) || hasLess(x^(ones*'\\'), 1) {
			return false
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c >= 0x80 || c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
