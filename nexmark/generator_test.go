package nexmark

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func newGen(t testing.TB, cfg Config) *Generator {
	t.Helper()
	g, err := NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// each calls fn with every event of cfg, in order, without keeping them.
func each(t testing.TB, cfg Config, fn func(i int, e Event)) {
	t.Helper()
	g := newGen(t, cfg)
	i := 0
	for e, ok := g.Next(); ok; e, ok = g.Next() {
		fn(i, e)
		i++
	}
}

func TestDeterministic(t *testing.T) {
	const n = 100_000
	a := newGen(t, Config{Seed: 42, Events: n})
	b := newGen(t, Config{Seed: 42, Events: n})
	other := newGen(t, Config{Seed: 43, Events: n})
	var ba, bb, bo []byte
	differ := 0
	for i := range n {
		ea, okA := a.Next()
		eb, okB := b.Next()
		eo, okO := other.Next()
		if !okA || !okB || !okO {
			t.Fatalf("event %d: generator ended early", i)
		}
		ba, bb, bo = AppendJSON(ba[:0], ea), AppendJSON(bb[:0], eb), AppendJSON(bo[:0], eo)
		if !bytes.Equal(ba, bb) {
			t.Fatalf("event %d differs with the same seed:\n%s\n%s", i, ba, bb)
		}
		if !bytes.Equal(ba, bo) {
			differ++
		}
	}
	if _, ok := a.Next(); ok {
		t.Fatalf("generator did not stop after Events = %d", n)
	}
	// Another seed changes (almost) every event: at least the extra of
	// each differs, but a few small fields may collide.
	if differ < n*99/100 {
		t.Fatalf("seed 43 differs from seed 42 in only %d of %d events", differ, n)
	}
}

func TestKindProportions(t *testing.T) {
	want := make([]Kind, ProportionTotal)
	for i := range want {
		switch {
		case i < PersonProportion:
			want[i] = KindPerson
		case i < PersonProportion+AuctionProportion:
			want[i] = KindAuction
		default:
			want[i] = KindBid
		}
	}
	each(t, Config{Seed: 1, Events: 100_000}, func(i int, e Event) {
		if e.Kind != want[i%ProportionTotal] {
			t.Fatalf("event %d is a %v, want a %v (1:3:46 per 50 events)", i, e.Kind, want[i%ProportionTotal])
		}
	})
}

// checkReferences checks ids (persons and auctions numbered in order from
// 1000) and that every reference is to a person or auction generated at
// most lead ids beyond the last one so far.
func checkReferences(t *testing.T, cfg Config) (bidderAhead int) {
	t.Helper()
	lead := int64(cfg.IDLead)
	nextPerson, nextAuction := int64(FirstPersonID), int64(FirstAuctionID)
	ref := func(i int, what string, id, next int64) {
		if id < FirstPersonID || id >= next+lead {
			t.Fatalf("event %d: %s %d, but the last generated is %d (lead %d)", i, what, id, next-1, lead)
		}
	}
	each(t, cfg, func(i int, e Event) {
		switch e.Kind {
		case KindPerson:
			if e.Person.ID != nextPerson {
				t.Fatalf("event %d: person id %d, want %d", i, e.Person.ID, nextPerson)
			}
			nextPerson++
		case KindAuction:
			a := e.Auction
			if a.ID != nextAuction {
				t.Fatalf("event %d: auction id %d, want %d", i, a.ID, nextAuction)
			}
			nextAuction++
			ref(i, "seller", a.Seller, nextPerson)
			if a.Category < FirstCategoryID || a.Category >= FirstCategoryID+NumCategories {
				t.Fatalf("event %d: category %d", i, a.Category)
			}
			if a.Expires <= a.DateTime {
				t.Fatalf("event %d: auction expires %d, not after its date_time %d", i, a.Expires, a.DateTime)
			}
			if a.Reserve <= a.InitialBid || a.InitialBid < 100 || a.InitialBid > 100_000_000 {
				t.Fatalf("event %d: initial bid %d, reserve %d", i, a.InitialBid, a.Reserve)
			}
		case KindBid:
			b := e.Bid
			if b.Auction < FirstAuctionID || b.Auction >= nextAuction+lead {
				t.Fatalf("event %d: bid on auction %d, but the last generated is %d (lead %d)", i, b.Auction, nextAuction-1, lead)
			}
			ref(i, "bidder", b.Bidder, nextPerson)
			if b.Bidder >= nextPerson {
				bidderAhead++
			}
			if b.Price < 100 || b.Price > 100_000_000 {
				t.Fatalf("event %d: price %d outside [100, 1e8]", i, b.Price)
			}
		}
	})
	return bidderAhead
}

func TestIDsAndReferences(t *testing.T) {
	checkReferences(t, Config{Seed: 7, Events: 200_000})
	// The reference's IDLead of 10: references may run ahead, never more.
	if ahead := checkReferences(t, Config{Seed: 7, Events: 200_000, IDLead: 10}); ahead == 0 {
		t.Fatal("with IDLead 10, no bidder is ahead of the last person")
	}
}

func TestHotAndValueDistributions(t *testing.T) {
	var bids, hotAuction, hotBidder, hotChannel, persons, hotSeller, auctions int
	var cat [NumCategories]int
	each(t, Config{Seed: 3, Events: 500_000}, func(i int, e Event) {
		n := int64(i)
		switch e.Kind {
		case KindPerson:
			persons++
			if !slices.Contains(usStates[:], e.Person.State) || !slices.Contains(usCities[:], e.Person.City) {
				t.Fatalf("event %d: state %q city %q", i, e.Person.State, e.Person.City)
			}
			first, last, ok := strings.Cut(e.Person.Name, " ")
			if !ok || !slices.Contains(firstNames[:], first) || !slices.Contains(lastNames[:], last) {
				t.Fatalf("event %d: name %q", i, e.Person.Name)
			}
			if len(e.Person.CreditCard) != 19 || !strings.HasSuffix(e.Person.EmailAddress, ".com") {
				t.Fatalf("event %d: credit card %q, email %q", i, e.Person.CreditCard, e.Person.EmailAddress)
			}
		case KindAuction:
			auctions++
			cat[e.Auction.Category-FirstCategoryID]++
			if e.Auction.Seller-FirstPersonID == lastPerson(n)/hotBatch*hotBatch {
				hotSeller++
			}
		case KindBid:
			bids++
			if e.Bid.Auction-FirstAuctionID == lastAuction(n)/hotBatch*hotBatch {
				hotAuction++
			}
			if e.Bid.Bidder-FirstPersonID == lastPerson(n)/hotBatch*hotBatch+1 {
				hotBidder++
			}
			if slices.Contains(hotChannels[:], e.Bid.Channel) {
				hotChannel++
			} else if !strings.HasPrefix(e.Bid.Channel, "channel-") {
				t.Fatalf("event %d: channel %q", i, e.Bid.Channel)
			}
			if !strings.HasPrefix(e.Bid.URL, "https://www.nexmark.com/") {
				t.Fatalf("event %d: url %q", i, e.Bid.URL)
			}
		}
	})
	within := func(what string, got, of int, lo, hi float64) {
		t.Helper()
		if f := float64(got) / float64(of); f < lo || f > hi {
			t.Errorf("%s: %.4f, want in [%.2f, %.2f]", what, f, lo, hi)
		}
	}
	// Hot with probability 1 - 1/ratio, plus the random picks that land on
	// the hot one.
	within("bids on the hot auction", hotAuction, bids, 0.49, 0.53)
	within("bids by the hot bidder", hotBidder, bids, 0.73, 0.77)
	within("auctions by the hot seller", hotSeller, auctions, 0.74, 0.77)
	within("bids from hot channels", hotChannel, bids, 0.49, 0.51)
	for i, c := range cat {
		within("auctions of category "+string(rune('0'+i)), c, auctions, 0.19, 0.21)
	}
}

func TestAverageSizes(t *testing.T) {
	var sum, count [3]int
	each(t, Config{Seed: 5, Events: 500_000}, func(_ int, e Event) {
		var size int
		switch e.Kind {
		case KindPerson:
			p := e.Person
			size = 8 + len(p.Name) + len(p.EmailAddress) + len(p.CreditCard) + len(p.City) + len(p.State) + len(p.Extra)
		case KindAuction:
			a := e.Auction
			size = 8 + len(a.ItemName) + len(a.Description) + 5*8 + len(a.Extra)
		case KindBid:
			size = 4*8 + len(e.Bid.Extra)
			if n := len(e.Bid.Extra); n < 54 || n > 81 {
				t.Fatalf("bid extra of %d bytes, want 54 to 81", n)
			}
		}
		sum[e.Kind] += size
		count[e.Kind]++
	})
	for k, want := range []int{DefaultAvgPersonSize, DefaultAvgAuctionSize, DefaultAvgBidSize} {
		avg := float64(sum[k]) / float64(count[k])
		if avg < float64(want)*0.98 || avg > float64(want)*1.02 {
			t.Errorf("%v: average size %.1f, want %d ± 2%%", Kind(k), avg, want)
		}
	}
}

func TestTimestamps(t *testing.T) {
	base := time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, rate := range []int64{DefaultEventRate, 10_000, 1000, 3} {
		cfg := Config{Seed: 9, Events: 20_000, EventRate: rate, BaseTime: base}
		if rate == DefaultEventRate {
			cfg.EventRate = 0 // the default
		}
		prev := int64(0)
		each(t, cfg, func(i int, e Event) {
			ts := e.DateTime()
			// n events take n × 1e6/rate µs, truncated to the ms.
			if want := base.UnixMilli() + int64(i)*1000/rate; ts != want {
				t.Fatalf("rate %d: event %d at %d, want %d", rate, i, ts, want)
			}
			if ts < prev {
				t.Fatalf("rate %d: event %d at %d, before the previous one at %d", rate, i, ts, prev)
			}
			prev = ts
		})
	}
	// The default base time.
	e, _ := newGen(t, Config{}).Next()
	if got := e.DateTime(); got != DefaultBaseTimeMs || DefaultBaseTimeMs != time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() {
		t.Fatalf("event 0 at %d, want the default base time %d (2025-01-01)", got, int64(DefaultBaseTimeMs))
	}
}

func TestAuctionLength(t *testing.T) {
	// At 10 000 events/s, 1666 events take 166 or 167 ms: auctions last
	// 1 to 2 × 167 ms, 167 ms on average.
	var sum, n int64
	each(t, Config{Seed: 11, Events: 200_000, EventRate: 10_000}, func(_ int, e Event) {
		if e.Kind != KindAuction {
			return
		}
		d := e.Auction.Expires - e.Auction.DateTime
		if d < 1 || d > 2*167 {
			t.Fatalf("auction %d lasts %d ms", e.Auction.ID, d)
		}
		sum += d
		n++
	})
	if avg := float64(sum) / float64(n); avg < 160 || avg > 174 {
		t.Fatalf("auctions last %.1f ms on average, want about 167", avg)
	}
}

func TestConfigErrors(t *testing.T) {
	_, err := NewGenerator(Config{Events: -1, EventRate: -5, HotBiddersRatio: -1, AvgBidSize: 1 << 30, IDLead: -1})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, field := range []string{"Events -1", "EventRate -5", "HotBiddersRatio -1", "AvgBidSize 1073741824", "IDLead -1"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %q", err, field)
		}
	}
	g := newGen(t, Config{})
	if c := g.Config(); c.EventRate != DefaultEventRate || c.NumActivePeople != DefaultNumActivePeople || c.BaseTime.UnixMilli() != DefaultBaseTimeMs {
		t.Fatalf("defaults not applied: %+v", c)
	}
}

func TestKey(t *testing.T) {
	cases := []struct {
		e    Event
		want string
	}{
		{Event{Kind: KindPerson, Person: Person{ID: 1001}}, "1001"},
		{Event{Kind: KindAuction, Auction: Auction{ID: 1002, Seller: 1003}}, "1002"},
		{Event{Kind: KindBid, Bid: Bid{Auction: 1004, Bidder: 1005}}, "1004"},
	}
	for _, c := range cases {
		if got := string(Key(c.e)); got != c.want {
			t.Errorf("Key(%v) = %q, want %q", c.e.Kind, got, c.want)
		}
	}
	a := cases[1].e
	if got := string(AppendIDKey([]byte("k:"), a.Auction.Seller)); got != "k:1003" {
		t.Errorf("AppendIDKey = %q", got)
	}
}

func BenchmarkNextAppendJSON(b *testing.B) {
	g := newGen(b, Config{Seed: 1})
	buf := make([]byte, 0, 1024)
	var bytes int64
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		e, _ := g.Next()
		buf = AppendJSON(buf[:0], e)
		bytes += int64(len(buf))
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(bytes)/float64(b.N), "B/event")
}
