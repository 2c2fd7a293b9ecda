package reference

import (
	"math"
	"reflect"
	"testing"

	"github.com/weir-stream/weir/nexmark"
)

// t0 is a multiple of every window size: offsets below are window offsets.
const t0 = 1_735_689_600_000

func person(id int64, name, city, state string, at int64) nexmark.Event {
	return nexmark.Event{Kind: nexmark.KindPerson, Person: nexmark.Person{ID: id, Name: name, City: city, State: state, DateTime: t0 + at}}
}

func auction(id, seller, category, at, expires int64) nexmark.Event {
	return nexmark.Event{Kind: nexmark.KindAuction, Auction: nexmark.Auction{ID: id, Seller: seller, Category: category, DateTime: t0 + at, Expires: t0 + expires}}
}

func bid(auction, bidder, price, at int64) nexmark.Event {
	return nexmark.Event{Kind: nexmark.KindBid, Bid: nexmark.Bid{Auction: auction, Bidder: bidder, Price: price, DateTime: t0 + at, Extra: "x"}}
}

// events is the hand-made input every query test reads; times are ms
// after t0, so [0, 10000) is the first tumbling window.
var events = []nexmark.Event{
	person(1000, "Ann", "Boise", "ID", 100),
	person(1001, "Bob", "Phoenix", "AZ", 200),
	bid(1000, 1001, 999, 299), // before auction 1000 opens
	bid(1000, 1001, 500, 300), // at its opening: counts
	auction(1000, 1000, 10, 300, 5000),
	auction(1001, 1001, 10, 400, 6000),
	auction(1002, 1002, 11, 500, 9000), // its seller comes in the next window
	bid(1001, 1000, 300, 1000),
	auction(1005, 1000, 10, 1000, 2000),
	bid(1005, 1003, 100, 1500),
	bid(1001, 1000, 200, 2000),
	person(1004, "Eve", "Kent", "WA", 3000),
	bid(1230, 1000, 55, 3000), // no such auction; 1230 = 10 × 123
	bid(1002, 1000, 1000, 4000),
	bid(1000, 1002, 700, 5000), // at auction 1000's expiry: counts
	bid(1000, 1001, 900, 5001), // after it
	bid(1001, 1002, 1000, 9999),
	auction(1006, 1004, 12, 10000, 11000), // Eve's, one window after her
	bid(1003, 1003, 1000, 10000),
	person(1002, "Cid", "Portland", "OR", 12000),
	bid(1107, 1001, 66, 12000), // 1107 = 9 × 123
	auction(1003, 1002, 10, 15000, 30000),
	bid(1003, 1000, 401, 16000),
	auction(1004, 1003, 10, 21000, 22000), // no bid; before its seller
	person(1003, "Dee", "Los Angeles", "CA", 25000),
}

func TestQ0(t *testing.T) {
	got := Q0(events)
	var want []nexmark.Bid
	for _, e := range events {
		if e.Kind == nexmark.KindBid {
			want = append(want, e.Bid)
		}
	}
	if len(got) != 13 || !reflect.DeepEqual(got, want) {
		t.Fatalf("Q0 = %v bids, want the 13 bids in input order", len(got))
	}
}

func TestQ1(t *testing.T) {
	got := Q1(events)
	if len(got) != 13 {
		t.Fatalf("Q1 gave %d rows, want 13", len(got))
	}
	// 999 × 0.908 = 907.092; 500 × 0.908 = 454.
	for i, want := range []float64{907.092, 454, 272.4} {
		if math.Abs(got[i].Price-want) > 1e-9 {
			t.Errorf("row %d: price %v, want %v", i, got[i].Price, want)
		}
	}
	if r := got[1]; r.Auction != 1000 || r.Bidder != 1001 || r.DateTime != t0+300 || r.Extra != "x" {
		t.Errorf("row 1 = %+v", r)
	}
	// The float64 rounded to 3 decimals is the SQL's DECIMAL, price × 908
	// / 1000, for prices up to the generator's 1e8.
	for p := int64(100); p <= 100_000_000; p = p*1_000_003/1_000_000 + 1 {
		if got := math.Round(float64(p) * 0.908 * 1000); got != float64(p*908) {
			t.Fatalf("price %d: round(%v × 1000) = %v, want %d", p, float64(p)*0.908, got, p*908)
		}
	}
}

func TestQ2(t *testing.T) {
	want := []Q2Row{{Auction: 1230, Price: 55}, {Auction: 1107, Price: 66}}
	if got := Q2(events); !reflect.DeepEqual(got, want) {
		t.Fatalf("Q2 = %v, want %v", got, want)
	}
}

func TestQ3(t *testing.T) {
	// Category-10 auctions by sellers in ID, OR, CA: 1000 and 1005 by Ann
	// (ID), 1003 by Cid (OR, who came after auction 1002, which is
	// category 11), 1004 by Dee (CA, who came after it). Not 1001: Bob is
	// in AZ.
	want := []Q3Row{
		{"Ann", "Boise", "ID", 1000},
		{"Cid", "Portland", "OR", 1003},
		{"Dee", "Los Angeles", "CA", 1004},
		{"Ann", "Boise", "ID", 1005},
	}
	if got := Q3(events); !reflect.DeepEqual(got, want) {
		t.Fatalf("Q3 = %v\nwant %v", got, want)
	}
}

func TestQ4(t *testing.T) {
	// Closing prices: auction 1000: 700 (999 before its opening, 900 after
	// its expiry); 1001: 300; 1005: 100; 1003: 401; 1004 has no bid;
	// category 11's 1002: 1000. The bid on 1230 has no auction.
	want := []Q4Row{
		{Category: 10, Auctions: 4, Sum: 700 + 300 + 100 + 401, Avg: 1501.0 / 4},
		{Category: 11, Auctions: 1, Sum: 1000, Avg: 1000},
	}
	if got := Q4(events); !reflect.DeepEqual(got, want) {
		t.Fatalf("Q4 = %v\nwant %v", got, want)
	}
}

func TestQ5(t *testing.T) {
	// Bids (ms: auction): 299, 300: 1000; 1000: 1001; 1500: 1005; 2000:
	// 1001; 3000: 1230; 4000: 1002; 5000, 5001: 1000; 9999: 1001; 10000:
	// 1003; 12000: 1107; 16000: 1003. Windows [s, s+10000), s every 2000.
	row := func(s, auction, n int64) Q5Row {
		return Q5Row{WindowStart: t0 + s, WindowEnd: t0 + s + Q5Size, Auction: auction, Num: n}
	}
	want := []Q5Row{
		row(-8000, 1000, 2),                      // 299, 300, 1000, 1500
		row(-6000, 1000, 2), row(-6000, 1001, 2), // tie, up to 3000
		row(-4000, 1000, 4), // with 5000, 5001
		row(-2000, 1000, 4),
		row(0, 1000, 4),
		row(2000, 1000, 2), row(2000, 1001, 2), // from 2000 to 10000
		row(4000, 1000, 2),
		row(6000, 1001, 1), row(6000, 1003, 1), row(6000, 1107, 1),
		row(8000, 1003, 2),
		row(10000, 1003, 2),
		row(12000, 1003, 1), row(12000, 1107, 1),
		row(14000, 1003, 1),
		row(16000, 1003, 1),
	}
	if got := Q5(events); !reflect.DeepEqual(got, want) {
		t.Fatalf("Q5 = %v\nwant %v", got, want)
	}
}

func TestQ7(t *testing.T) {
	// Window [0, 10000): max 1000, twice (a tie: both rows). The bid of
	// 1000 at 10000 is the next window's: its max, and not a row of the
	// first window, though the SQL's BETWEEN includes window_end.
	want := []Q7Row{
		{WindowStart: t0, Auction: 1002, Bidder: 1000, Price: 1000, DateTime: t0 + 4000, Extra: "x"},
		{WindowStart: t0, Auction: 1001, Bidder: 1002, Price: 1000, DateTime: t0 + 9999, Extra: "x"},
		{WindowStart: t0 + 10000, Auction: 1003, Bidder: 1003, Price: 1000, DateTime: t0 + 10000, Extra: "x"},
	}
	if got := Q7(events); !reflect.DeepEqual(got, want) {
		t.Fatalf("Q7 = %v\nwant %v", got, want)
	}

	// Windows before the epoch floor too.
	neg := []nexmark.Event{bid(1, 1, 5, -t0-1), bid(2, 2, 3, -t0)}
	wantNeg := []Q7Row{
		{WindowStart: -10000, Auction: 1, Bidder: 1, Price: 5, DateTime: -1, Extra: "x"},
		{WindowStart: 0, Auction: 2, Bidder: 2, Price: 3, DateTime: 0, Extra: "x"},
	}
	if got := Q7(neg); !reflect.DeepEqual(got, wantNeg) {
		t.Fatalf("Q7 before the epoch = %v\nwant %v", got, wantNeg)
	}
}

func TestQ8(t *testing.T) {
	// Ann and Bob sold in their own window [0, 10000) (Ann twice: one
	// row); Cid joined at 12000 and sold at 15000 (his auction at 500 is
	// a window earlier); Dee sold at 21000 before joining at 25000, same
	// window; Eve's auction at 10000 is one window after her.
	want := []Q8Row{
		{ID: 1000, Name: "Ann", WindowStart: t0},
		{ID: 1001, Name: "Bob", WindowStart: t0},
		{ID: 1002, Name: "Cid", WindowStart: t0 + 10000},
		{ID: 1003, Name: "Dee", WindowStart: t0 + 20000},
	}
	if got := Q8(events); !reflect.DeepEqual(got, want) {
		t.Fatalf("Q8 = %v\nwant %v", got, want)
	}
}

// TestOnGenerated runs every query over generated events: they must agree
// with the generator's invariants (not a check of their answers, which the
// hand-made tests above are).
func TestOnGenerated(t *testing.T) {
	g, err := nexmark.NewGenerator(nexmark.Config{Seed: 1, Events: 50_000, EventRate: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var evs []nexmark.Event
	for e, ok := g.Next(); ok; e, ok = g.Next() {
		evs = append(evs, e)
	}
	if n := len(Q0(evs)); n != 50_000/50*46 {
		t.Errorf("Q0: %d bids, want %d", n, 50_000/50*46)
	}
	if len(Q3(evs)) == 0 || len(Q4(evs)) != nexmark.NumCategories || len(Q5(evs)) == 0 || len(Q7(evs)) == 0 || len(Q8(evs)) == 0 {
		t.Errorf("a query found nothing in 50 000 generated events: q3 %d, q4 %d, q5 %d, q7 %d, q8 %d rows",
			len(Q3(evs)), len(Q4(evs)), len(Q5(evs)), len(Q7(evs)), len(Q8(evs)))
	}
}
