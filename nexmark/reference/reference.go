// Package reference computes Nexmark queries the plain way: each one a Go
// function over a slice of events in memory, giving the result a correct
// streaming job must end with once it has read all of them. It is the
// oracle Weir's Nexmark jobs are checked against; it knows nothing of
// Weir, Kafka or time beyond the events' own date_time.
//
// The queries are those of nexmark-flink's SQL
// (nexmark-flink/src/main/resources/queries/q*.sql); each function's doc
// comment says what its SQL does and every choice made where the SQL is
// loose. Common to all:
//
//   - Event time is date_time, Unix ms. Windows are aligned on the Unix
//     epoch, as Flink's TUMBLE and HOP with no offset; a window [start,
//     end) holds the events with start <= date_time < end.
//   - A result is the final one: for a query whose streaming result is
//     updated (q3, q4: retractions and upserts), the state after the last
//     event; for windowed queries, every window, as if the watermark had
//     passed all of them.
//   - Stateless queries (q0, q1, q2) return their rows in input order;
//     the others return rows sorted as their doc says, so that a caller
//     compares a job's output, sorted the same way, with ==, or
//     reflect.DeepEqual for the slices.
package reference

import (
	"cmp"
	"slices"

	"github.com/weir-stream/weir/nexmark"
)

// Window sizes of the windowed queries, in ms.
const (
	// Q5Size and Q5Slide are q5's HOP: windows of 10 s every 2 s.
	Q5Size  = 10_000
	Q5Slide = 2_000
	// TumbleSize is q7's and q8's TUMBLE: 10 s.
	TumbleSize = 10_000
)

// windowStart returns the start of the window of size size, aligned on 0,
// that holds t (floored also for t < 0).
func windowStart(t, size int64) int64 {
	q := t / size
	if t%size < 0 {
		q--
	}
	return q * size
}

// bids returns the bids of events, in order.
func bids(events []nexmark.Event) []nexmark.Bid {
	var out []nexmark.Bid
	for _, e := range events {
		if e.Kind == nexmark.KindBid {
			out = append(out, e.Bid)
		}
	}
	return out
}

// Q0 is the pass-through: every bid, in input order. The SQL (q0.sql)
// selects auction, bidder, price, dateTime and extra of each bid; the bids
// are returned whole, channel and url included, for a caller that compares
// more columns.
func Q0(events []nexmark.Event) []nexmark.Bid {
	return bids(events)
}

// Q1Row is a bid with its price in euros.
type Q1Row struct {
	Auction  int64
	Bidder   int64
	Price    float64
	DateTime int64
	Extra    string
}

// Q1 is currency conversion: every bid with price × 0.908 (dollars to
// euros), in input order. The SQL (q1.sql) computes 0.908 * price as a
// DECIMAL(23, 3), exactly price × 908 / 1000; this computes
// float64(price) * 0.908, unrounded, which is what a Weir job's `price *
// 0.908` in float64 gives bit for bit. The two differ by less than one
// part in 2^52; rounded to three decimals, the float64 gives the
// DECIMAL for every price the generator makes (at most 1e8).
func Q1(events []nexmark.Event) []Q1Row {
	var out []Q1Row
	for _, b := range bids(events) {
		out = append(out, Q1Row{Auction: b.Auction, Bidder: b.Bidder, Price: float64(b.Price) * 0.908, DateTime: b.DateTime, Extra: b.Extra})
	}
	return out
}

// Q2Row is a selected bid's auction and price.
type Q2Row struct {
	Auction int64
	Price   int64
}

// Q2Modulus is q2's: the bids on auctions whose id is a multiple of 123.
const Q2Modulus = 123

// Q2 is selection: the auction and price of the bids with MOD(auction,
// 123) = 0 (q2.sql; Beam's version selects a fixed list of auctions
// instead), in input order.
func Q2(events []nexmark.Event) []Q2Row {
	var out []Q2Row
	for _, b := range bids(events) {
		if b.Auction%Q2Modulus == 0 {
			out = append(out, Q2Row{Auction: b.Auction, Price: b.Price})
		}
	}
	return out
}

// Q3Row is a seller in OR, ID or CA and one of their auctions in category
// 10.
type Q3Row struct {
	Name  string
	City  string
	State string
	ID    int64 // the auction's id
}

// Q3 is local item suggestion: the SQL (q3.sql) is a regular (unwindowed)
// inner join of auction and person on A.seller = P.id, with A.category =
// 10 and P.state in ('OR', 'ID', 'CA'), giving P.name, P.city, P.state,
// A.id. A regular join's result does not depend on the order of its
// inputs, so a person generated after their auction still matches. One
// row per matching (auction, person) pair, sorted by ID, then Name, City,
// State.
func Q3(events []nexmark.Event) []Q3Row {
	persons := map[int64][]nexmark.Person{}
	for _, e := range events {
		if e.Kind == nexmark.KindPerson {
			switch e.Person.State {
			case "OR", "ID", "CA":
				persons[e.Person.ID] = append(persons[e.Person.ID], e.Person)
			}
		}
	}
	var out []Q3Row
	for _, e := range events {
		if e.Kind != nexmark.KindAuction || e.Auction.Category != 10 {
			continue
		}
		for _, p := range persons[e.Auction.Seller] {
			out = append(out, Q3Row{Name: p.Name, City: p.City, State: p.State, ID: e.Auction.ID})
		}
	}
	slices.SortFunc(out, func(a, b Q3Row) int {
		return cmp.Or(cmp.Compare(a.ID, b.ID), cmp.Compare(a.Name, b.Name), cmp.Compare(a.City, b.City), cmp.Compare(a.State, b.State))
	})
	return out
}

// Q4Row is the average closing price of one category's auctions.
type Q4Row struct {
	Category int64
	// Auctions is the number of auctions of the category with at least
	// one bid in their time, Sum the sum of their closing prices.
	Auctions int64
	Sum      int64
	// Avg is Sum / Auctions in float64. Flink's AVG of a BIGINT is a
	// BIGINT, Sum / Auctions truncated: compare with that when checking
	// Flink's own output.
	Avg float64
}

// Q4 is the average closing price per category (q4.sql): an auction's
// closing price ("final") is the highest price among the bids on it whose
// dateTime is BETWEEN the auction's dateTime AND its expires, both ends
// included; auctions without such a bid have none and do not count (inner
// join). Then per category, the average of the closing prices. The join is
// regular, not windowed: a bid read before its auction counts the same.
// The inner group is by (auction id, category), so two auction events
// with the same id and category are one auction, whose bids are checked
// against each. Sorted by Category.
func Q4(events []nexmark.Event) []Q4Row {
	type key struct{ id, category int64 }
	auctions := map[int64][]nexmark.Auction{}
	for _, e := range events {
		if e.Kind == nexmark.KindAuction {
			auctions[e.Auction.ID] = append(auctions[e.Auction.ID], e.Auction)
		}
	}
	final := map[key]int64{}
	for _, b := range bids(events) {
		for _, a := range auctions[b.Auction] {
			if b.DateTime < a.DateTime || b.DateTime > a.Expires {
				continue
			}
			k := key{a.ID, a.Category}
			if p, ok := final[k]; !ok || b.Price > p {
				final[k] = b.Price
			}
		}
	}
	rows := map[int64]*Q4Row{}
	for k, price := range final {
		r := rows[k.category]
		if r == nil {
			r = &Q4Row{Category: k.category}
			rows[k.category] = r
		}
		r.Auctions++
		r.Sum += price
	}
	out := make([]Q4Row, 0, len(rows))
	for _, r := range rows {
		r.Avg = float64(r.Sum) / float64(r.Auctions)
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Q4Row) int { return cmp.Compare(a.Category, b.Category) })
	return out
}

// Q5Row is an auction with the most bids in a window.
type Q5Row struct {
	WindowStart int64
	WindowEnd   int64
	Auction     int64
	Num         int64 // its bids in the window
}

// Q5 is hot items (q5.sql): over HOP windows of 10 s sliding by 2 s (each
// bid in 5 windows), the number of bids per auction per window, and for
// each window the auctions whose count is the window's maximum. The SQL
// joins the counts with their per-window maximum on num >= maxn, so every
// tied auction is a row. Its output has auction and num only; rows here
// carry their window too, as auctions repeat across windows. Windows with
// no bid have no row. Sorted by WindowStart, then Auction.
func Q5(events []nexmark.Event) []Q5Row {
	counts := map[int64]map[int64]int64{} // window start → auction → bids
	for _, b := range bids(events) {
		for s := windowStart(b.DateTime, Q5Slide); s > b.DateTime-Q5Size; s -= Q5Slide {
			w := counts[s]
			if w == nil {
				w = map[int64]int64{}
				counts[s] = w
			}
			w[b.Auction]++
		}
	}
	var out []Q5Row
	for s, w := range counts {
		var top int64
		for _, n := range w {
			top = max(top, n)
		}
		for a, n := range w {
			if n == top {
				out = append(out, Q5Row{WindowStart: s, WindowEnd: s + Q5Size, Auction: a, Num: n})
			}
		}
	}
	slices.SortFunc(out, func(a, b Q5Row) int {
		return cmp.Or(cmp.Compare(a.WindowStart, b.WindowStart), cmp.Compare(a.Auction, b.Auction))
	})
	return out
}

// Q7Row is a bid with the highest price of its window.
type Q7Row struct {
	WindowStart int64
	Auction     int64
	Bidder      int64
	Price       int64
	DateTime    int64
	Extra       string
}

// Q7 is the highest bid (q7.sql): the maximum price per TUMBLE window of
// 10 s, joined back with the bids on price = maxprice and dateTime BETWEEN
// window_end - 10 s AND window_end, so every bid tied at the maximum is a
// row. Two choices where the SQL is off:
//
//   - BETWEEN includes window_end, which is the next window's first
//     millisecond: a bid there at exactly the previous window's maximum
//     would also be a row of the previous window. Here a window's rows are
//     its own bids, [start, end).
//   - The SQL inserts B.auction, B.price, B.bidder into columns (auction,
//     bidder, price), swapping price and bidder; the rows here have each
//     in its field.
//
// Rows carry their window's start (not in the SQL's output; it is
// date_time floored to 10 s). Sorted by WindowStart, DateTime, Auction,
// Bidder, Extra.
func Q7(events []nexmark.Event) []Q7Row {
	bs := bids(events)
	top := map[int64]int64{} // window start → max price
	for _, b := range bs {
		s := windowStart(b.DateTime, TumbleSize)
		if p, ok := top[s]; !ok || b.Price > p {
			top[s] = b.Price
		}
	}
	var out []Q7Row
	for _, b := range bs {
		s := windowStart(b.DateTime, TumbleSize)
		if b.Price == top[s] {
			out = append(out, Q7Row{WindowStart: s, Auction: b.Auction, Bidder: b.Bidder, Price: b.Price, DateTime: b.DateTime, Extra: b.Extra})
		}
	}
	slices.SortFunc(out, func(a, b Q7Row) int {
		return cmp.Or(cmp.Compare(a.WindowStart, b.WindowStart), cmp.Compare(a.DateTime, b.DateTime),
			cmp.Compare(a.Auction, b.Auction), cmp.Compare(a.Bidder, b.Bidder), cmp.Compare(a.Extra, b.Extra))
	})
	return out
}

// Q8Row is a person who opened an auction in the window they joined.
type Q8Row struct {
	ID          int64
	Name        string
	WindowStart int64
}

// Q8 is monitor new users (q8.sql): persons grouped by (id, name, TUMBLE
// window of 10 s) joined with auctions grouped by (seller, window) on id =
// seller and the same window: the persons who created an auction in the
// same 10 s window as they were created, in either order within it. The
// groupings make each (id, name, window) one row, however many auctions.
// Sorted by WindowStart, ID, Name.
func Q8(events []nexmark.Event) []Q8Row {
	type sellerWindow struct{ seller, start int64 }
	sold := map[sellerWindow]bool{}
	for _, e := range events {
		if e.Kind == nexmark.KindAuction {
			sold[sellerWindow{e.Auction.Seller, windowStart(e.Auction.DateTime, TumbleSize)}] = true
		}
	}
	seen := map[Q8Row]bool{}
	var out []Q8Row
	for _, e := range events {
		if e.Kind != nexmark.KindPerson {
			continue
		}
		r := Q8Row{ID: e.Person.ID, Name: e.Person.Name, WindowStart: windowStart(e.Person.DateTime, TumbleSize)}
		if sold[sellerWindow{r.ID, r.WindowStart}] && !seen[r] {
			seen[r] = true
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Q8Row) int {
		return cmp.Or(cmp.Compare(a.WindowStart, b.WindowStart), cmp.Compare(a.ID, b.ID), cmp.Compare(a.Name, b.Name))
	})
	return out
}
