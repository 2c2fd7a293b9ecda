package nexmark

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// The JSON shape, decoded with encoding/json: unknown fields fail, so the
// field set is exactly this.
type jsonPerson struct {
	ID           int64  `json:"id"`
	Name         string `json:"name"`
	EmailAddress string `json:"email_address"`
	CreditCard   string `json:"credit_card"`
	City         string `json:"city"`
	State        string `json:"state"`
	DateTime     int64  `json:"date_time"`
	Extra        string `json:"extra"`
}

type jsonAuction struct {
	ID          int64  `json:"id"`
	ItemName    string `json:"item_name"`
	Description string `json:"description"`
	InitialBid  int64  `json:"initial_bid"`
	Reserve     int64  `json:"reserve"`
	DateTime    int64  `json:"date_time"`
	Expires     int64  `json:"expires"`
	Seller      int64  `json:"seller"`
	Category    int64  `json:"category"`
	Extra       string `json:"extra"`
}

type jsonBid struct {
	Auction  int64  `json:"auction"`
	Bidder   int64  `json:"bidder"`
	Price    int64  `json:"price"`
	Channel  string `json:"channel"`
	URL      string `json:"url"`
	DateTime int64  `json:"date_time"`
	Extra    string `json:"extra"`
}

type jsonEvent struct {
	EventType *int         `json:"event_type"`
	DateTime  *int64       `json:"date_time"`
	Person    *jsonPerson  `json:"person"`
	Auction   *jsonAuction `json:"auction"`
	Bid       *jsonBid     `json:"bid"`
}

func decodeEvent(t *testing.T, b []byte) Event {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var j jsonEvent
	if err := d.Decode(&j); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	if d.More() {
		t.Fatalf("more than one JSON value in %s", b)
	}
	if j.EventType == nil || j.DateTime == nil {
		t.Fatalf("no event_type or date_time in %s", b)
	}
	var e Event
	present := 0
	if j.Person != nil {
		present++
		e.Kind, e.Person = KindPerson, Person(*j.Person)
	}
	if j.Auction != nil {
		present++
		e.Kind, e.Auction = KindAuction, Auction(*j.Auction)
	}
	if j.Bid != nil {
		present++
		e.Kind, e.Bid = KindBid, Bid(*j.Bid)
	}
	if present != 1 {
		t.Fatalf("%d of person, auction, bid in %s, want 1", present, b)
	}
	if Kind(*j.EventType) != e.Kind {
		t.Fatalf("event_type %d with a %v in %s", *j.EventType, e.Kind, b)
	}
	if *j.DateTime != e.DateTime() {
		t.Fatalf("top-level date_time %d, the %v's %d, in %s", *j.DateTime, e.Kind, e.DateTime(), b)
	}
	return e
}

func TestJSONRoundTrip(t *testing.T) {
	g := newGen(t, Config{Seed: 2, Events: 20_000})
	var buf []byte
	for e, ok := g.Next(); ok; e, ok = g.Next() {
		buf = AppendJSON(buf[:0], e)
		if !json.Valid(buf) {
			t.Fatalf("invalid JSON: %s", buf)
		}
		if got := decodeEvent(t, buf); !reflect.DeepEqual(got, e) {
			t.Fatalf("decoded %+v\nwant    %+v", got, e)
		}
	}
}

func TestJSONEscapes(t *testing.T) {
	e := Event{Kind: KindPerson, Person: Person{
		ID: 1, Name: "a \"quoted\"\\name", EmailAddress: "tab\there", CreditCard: "nl\nx",
		City: "Zürich", State: "\x01", DateTime: -5, Extra: "\u2028",
	}}
	b := AppendJSON([]byte("prefix"), e)
	if !bytes.HasPrefix(b, []byte("prefix{")) {
		t.Fatalf("AppendJSON did not append: %s", b)
	}
	if got := decodeEvent(t, b[len("prefix"):]); !reflect.DeepEqual(got, e) {
		t.Fatalf("decoded %+v\nwant    %+v", got, e)
	}
}

func TestJSONShape(t *testing.T) {
	e := Event{Kind: KindBid, Bid: Bid{Auction: 1000, Bidder: 1001, Price: 1234, Channel: "Google", URL: "u", DateTime: 1735689600000, Extra: "x"}}
	want := `{"event_type":2,"date_time":1735689600000,"bid":{"auction":1000,"bidder":1001,"price":1234,"channel":"Google","url":"u","date_time":1735689600000,"extra":"x"}}`
	if got := string(AppendJSON(nil, e)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// TestAvroRoundTrip: every kind of event round-trips through AvroCodec.
func TestAvroRoundTrip(t *testing.T) {
	c, err := NewAvroCodec()
	if err != nil {
		t.Fatal(err)
	}
	g, err := NewGenerator(Config{Seed: 7, Events: 500, EventRate: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for e, ok := g.Next(); ok; e, ok = g.Next() {
		b, err := c.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Decode(b)
		if err != nil || got != e {
			t.Fatalf("%+v: round trip %+v, %v", e, got, err)
		}
	}
}
