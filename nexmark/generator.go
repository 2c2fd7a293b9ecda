package nexmark

import (
	"math"
	"math/bits"
	"strconv"
)

// The reference's fixed constants (GeneratorConfig, PersonGenerator,
// AuctionGenerator, BidGenerator, StringsGenerator).
const (
	// FirstPersonID, FirstAuctionID and FirstCategoryID are the first ids:
	// person and auction ids count up from 1000, categories are 10 to 14.
	FirstPersonID   = 1000
	FirstAuctionID  = 1000
	FirstCategoryID = 10
	// NumCategories is the number of auction categories.
	NumCategories = 5

	// Of every ProportionTotal events, in event-number order, the first
	// PersonProportion are persons, the next AuctionProportion auctions,
	// the rest bids: event n's kind is fixed by n mod 50.
	PersonProportion  = 1
	AuctionProportion = 3
	BidProportion     = 46
	ProportionTotal   = PersonProportion + AuctionProportion + BidProportion

	// hotBatch is the size of the batches of persons and auctions whose
	// first (for bidders the second) member is the hot one; the reference
	// names it HOT_SELLER_RATIO, HOT_AUCTION_RATIO, HOT_BIDDER_RATIO.
	hotBatch = 100

	// numChannels is the number of cold bid channels ("channel-0" to
	// "channel-9999"), each with its url.
	numChannels = 10_000
	// extraTableSize is the length of the letters extra is cut from, at a
	// random offset. The reference's REUSABLE_EXTRA_STRING is 1 MiB; 32 KiB
	// stays in the CPU cache (Next+AppendJSON ran about 10% faster), and
	// extra is padding nobody reads.
	extraTableSize = 1 << 15
	// minStringLen is the shortest random string before trimming.
	minStringLen = 3
)

// The reference's value lists.
var (
	usStates    = [...]string{"AZ", "CA", "ID", "OR", "WA", "WY"}
	usCities    = [...]string{"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"}
	firstNames  = [...]string{"Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"}
	lastNames   = [...]string{"Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"}
	hotChannels = [...]string{"Google", "Facebook", "Baidu", "Apple"}
)

// Generator produces the events of one Config in event-number order. It is
// not safe for concurrent use.
type Generator struct {
	cfg    Config
	baseMs int64
	next   int64 // number of the next event
	t      tables
}

// tables are the strings the reference builds once per process from an
// unseeded random source; here they are built from the seed.
type tables struct {
	extra       string // extraTableSize lowercase letters
	hotURLs     [len(hotChannels)]string
	channels    [numChannels]string // "channel-<i>"
	channelURLs [numChannels]string
	names       [len(firstNames) * len(lastNames)]string // "<first> <last>"
}

// NewGenerator returns a generator of the events of cfg, whose zero fields
// take their defaults. Its errors wrap ErrInvalidConfig, one per problem.
func NewGenerator(cfg Config) (*Generator, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Generator{cfg: cfg, baseMs: cfg.BaseTime.UnixMilli()}
	g.t.build(cfg.Seed)
	return g, nil
}

// Config returns the generator's configuration, defaults filled in.
func (g *Generator) Config() Config { return g.cfg }

// Next returns the next event, or false once Config.Events events have been
// returned. Event n (from 0) happens at BaseTime + n × 1000 / EventRate
// ms, floored, and its kind is fixed by n mod ProportionTotal.
func (g *Generator) Next() (Event, bool) {
	n := g.next
	if g.cfg.Events > 0 && n >= g.cfg.Events {
		return Event{}, false
	}
	g.next++
	r := eventRand(g.cfg.Seed, n)
	ts := g.timestamp(n)
	switch off := n % ProportionTotal; {
	case off < PersonProportion:
		return Event{Kind: KindPerson, Person: g.person(&r, n, ts)}, true
	case off < PersonProportion+AuctionProportion:
		return Event{Kind: KindAuction, Auction: g.auction(&r, n, ts)}, true
	default:
		return Event{Kind: KindBid, Bid: g.bid(&r, n, ts)}, true
	}
}

// timestamp returns the event time of event n in Unix ms: the reference's
// baseTime + (long)(n × interEventDelayUs) / 1000 with interEventDelayUs
// = 1e6 / rate, computed exactly in integers (n × 1000 / rate, floored)
// rather than through a float64 product, which can fall an ulp short of a
// millisecond boundary.
func (g *Generator) timestamp(n int64) int64 {
	return g.baseMs + n*1000/g.cfg.EventRate
}

// lastPerson returns the base-0 id of the last person generated up to and
// including event n (n's own, if n is a person).
func lastPerson(n int64) int64 {
	epoch, off := n/ProportionTotal, n%ProportionTotal
	return epoch*PersonProportion + min(off, PersonProportion-1)
}

// lastAuction returns the base-0 id of the last auction generated up to
// and including event n (n's own, if n is an auction); -1 before the first.
func lastAuction(n int64) int64 {
	epoch, off := n/ProportionTotal, n%ProportionTotal
	switch {
	case off < PersonProportion: // the last auction of the previous epoch
		epoch--
		off = AuctionProportion - 1
	case off >= PersonProportion+AuctionProportion: // the last of this epoch
		off = AuctionProportion - 1
	default:
		off -= PersonProportion
	}
	return epoch*AuctionProportion + off
}

// randomPerson returns a random base-0 person id for event n: one of the
// NumActivePeople last persons, or up to IDLead beyond the last.
func (g *Generator) randomPerson(r *rng, n int64) int64 {
	people := lastPerson(n) + 1
	active := min(people, int64(g.cfg.NumActivePeople))
	return people - active + r.int63n(active+int64(g.cfg.IDLead))
}

// randomAuction returns a random base-0 auction id for event n: one of the
// auctions from NumInFlightAuctions before the last to the last, or up to
// IDLead beyond it.
func (g *Generator) randomAuction(r *rng, n int64) int64 {
	last := lastAuction(n)
	first := max(last-int64(g.cfg.NumInFlightAuctions), 0)
	return first + r.int63n(last-first+1+int64(g.cfg.IDLead))
}

func (g *Generator) person(r *rng, n, ts int64) Person {
	p := Person{ID: lastPerson(n) + FirstPersonID, DateTime: ts}
	p.Name = g.t.names[r.intn(len(firstNames))*len(lastNames)+r.intn(len(lastNames))]
	p.EmailAddress = email(r)
	p.CreditCard = creditCard(r)
	p.City = usCities[r.intn(len(usCities))]
	p.State = usStates[r.intn(len(usStates))]
	size := 8 + len(p.Name) + len(p.EmailAddress) + len(p.CreditCard) + len(p.City) + len(p.State)
	p.Extra = g.t.nextExtra(r, size, g.cfg.AvgPersonSize)
	return p
}

func (g *Generator) auction(r *rng, n, ts int64) Auction {
	a := Auction{ID: lastAuction(n) + FirstAuctionID, DateTime: ts}
	if r.intn(g.cfg.HotSellersRatio) > 0 {
		// The first person of the batch of the last hotBatch persons.
		a.Seller = lastPerson(n) / hotBatch * hotBatch
	} else {
		a.Seller = g.randomPerson(r, n)
	}
	a.Seller += FirstPersonID
	a.Category = FirstCategoryID + int64(r.intn(NumCategories))
	a.InitialBid = price(r)
	a.Expires = ts + g.auctionLength(r, n, ts)
	a.ItemName = randomString(r, 20, ' ')
	a.Description = randomString(r, 100, ' ')
	a.Reserve = a.InitialBid + price(r)
	size := 8 + len(a.ItemName) + len(a.Description) + 8 + 8 + 8 + 8 + 8
	a.Extra = g.t.nextExtra(r, size, g.cfg.AvgAuctionSize)
	return a
}

// auctionLength returns how long the auction of event n (at ts) lasts, in
// ms: uniform in [1, 2h], h being the event time until NumInFlightAuctions
// more auctions have been created (at least 1 ms), so that on average about
// NumInFlightAuctions auctions are open. At the default rate, 10M events/s,
// h is 0 or 1 ms (1666 events take 0.17 ms), so auctions last 1 or 2 ms;
// at 10 000 events/s, about 167 ms.
func (g *Generator) auctionLength(r *rng, n, ts int64) int64 {
	events := int64(g.cfg.NumInFlightAuctions) * ProportionTotal / AuctionProportion
	horizon := g.timestamp(n+events) - ts
	return 1 + r.int63n(max(2*horizon, 1))
}

func (g *Generator) bid(r *rng, n, ts int64) Bid {
	b := Bid{DateTime: ts}
	if r.intn(g.cfg.HotAuctionRatio) > 0 {
		// The first auction of the batch of the last hotBatch auctions.
		b.Auction = lastAuction(n) / hotBatch * hotBatch
	} else {
		b.Auction = g.randomAuction(r, n)
	}
	b.Auction += FirstAuctionID
	if r.intn(g.cfg.HotBiddersRatio) > 0 {
		// The second person of the batch of the last hotBatch persons
		// (so that hot bidders and hot sellers differ), as the reference;
		// but while that person is more than IDLead ahead of the last one
		// generated (the batch has one member), the last one.
		last := lastPerson(n)
		b.Bidder = min(last/hotBatch*hotBatch+1, last+int64(g.cfg.IDLead))
	} else {
		b.Bidder = g.randomPerson(r, n)
	}
	// Once, as Beam: nexmark-flink's BidGenerator adds FIRST_PERSON_ID a
	// second time, so that its bidders are 1000 past the persons.
	b.Bidder += FirstPersonID
	b.Price = price(r)
	if r.intn(2) > 0 { // HOT_CHANNELS_RATIO: half the bids come from a hot channel
		i := r.intn(len(hotChannels))
		b.Channel, b.URL = hotChannels[i], g.t.hotURLs[i]
	} else {
		i := r.intn(numChannels)
		b.Channel, b.URL = g.t.channels[i], g.t.channelURLs[i]
	}
	b.Extra = g.t.nextExtra(r, 8+8+8+8, g.cfg.AvgBidSize)
	return b
}

// price returns a random price in cents, 100 ($1) to 100 000 000 ($1M),
// log-uniform: round(10^(6u) × 100), u uniform in [0, 1).
func price(r *rng) int64 {
	return int64(math.Round(math.Pow(10, r.float64()*6) * 100))
}

// randomString returns a random string of minStringLen to maxLen-1
// characters, each special with probability 1/13 and otherwise a uniform
// lowercase letter, with leading and trailing spaces trimmed (Java's
// String.trim; only a space special is trimmed).
func randomString(r *rng, maxLen int, special byte) string {
	var buf [128]byte
	return string(appendRandomString(buf[:0], r, maxLen, special))
}

func appendRandomString(dst []byte, r *rng, maxLen int, special byte) []byte {
	start := len(dst)
	for n := minStringLen + r.intn(maxLen-minStringLen); n > 0; n-- {
		// One draw for both choices: v < 26 is 1 in 13 of 338 values; the
		// other 312 are 12 of each letter.
		if v := r.intn(13 * 26); v < 26 {
			dst = append(dst, special)
		} else {
			dst = append(dst, byte('a'+v%26))
		}
	}
	s := dst[start:]
	i, j := 0, len(s)
	for i < j && s[i] == ' ' {
		i++
	}
	for j > i && s[j-1] == ' ' {
		j--
	}
	n := copy(s, s[i:j])
	return dst[:start+n]
}

// email returns "<3 to 6 chars>@<3 or 4 chars>.com", each part a random
// string (spaces possible inside, not at its ends).
func email(r *rng) string {
	var buf [32]byte
	b := appendRandomString(buf[:0], r, 7, ' ')
	b = append(b, '@')
	b = appendRandomString(b, r, 5, ' ')
	b = append(b, ".com"...)
	return string(b)
}

// creditCard returns four random groups of four digits, space separated.
func creditCard(r *rng) string {
	var buf [19]byte
	b := buf[:0]
	for i := range 4 {
		if i > 0 {
			b = append(b, ' ')
		}
		v := r.intn(10000)
		b = append(b, byte('0'+v/1000), byte('0'+v/100%10), byte('0'+v/10%10), byte('0'+v%10))
	}
	return string(b[:])
}

// nextExtra returns a string of letters such that size + its length is on
// average avg: uniform in [m-d, m+d) with m = avg-size and d = round(m/5);
// empty if size >= avg. It is a slice of t.extra: no allocation.
func (t *tables) nextExtra(r *rng, size, avg int) string {
	if size >= avg {
		return ""
	}
	want := avg - size
	delta := int(math.Round(float64(want) * 0.2))
	n := want - delta
	if delta > 0 {
		n += r.intn(2 * delta)
	}
	off := r.intn(len(t.extra) - n)
	return t.extra[off : off+n]
}

// build fills t from seed.
func (t *tables) build(seed uint64) {
	r := rng{s: mix64(seed ^ 0x7461626c6573)}
	// Lowercase letters; the reference's nextExactString takes 'a' +
	// (negative int) % 26 too, which gives 'H' to '`', backslash included.
	extra := make([]byte, extraTableSize)
	for i := range extra {
		extra[i] = byte('a' + r.intn(26))
	}
	t.extra = string(extra)
	for i := range t.hotURLs {
		t.hotURLs[i] = string(appendBaseURL(nil, &r))
	}
	for i := range numChannels {
		t.channels[i] = "channel-" + strconv.Itoa(i)
		u := appendBaseURL(make([]byte, 0, 80), &r)
		if r.intn(10) > 0 {
			// The reference's Math.abs(Integer.reverse(i)), int32
			// overflow included (i = 1 gives -2147483648).
			id := int32(bits.Reverse32(uint32(i)))
			if id < 0 {
				id = -id
			}
			u = append(u, "&channel_id="...)
			u = strconv.AppendInt(u, int64(id), 10)
		}
		t.channelURLs[i] = string(u)
	}
	for i, f := range firstNames {
		for j, l := range lastNames {
			t.names[i*len(lastNames)+j] = f + " " + l
		}
	}
}

// appendBaseURL appends "https://www.nexmark.com/<a>/<b>/<c>/item.htm?query=1",
// each part 3 or 4 random letters or underscores.
func appendBaseURL(dst []byte, r *rng) []byte {
	dst = append(dst, "https://www.nexmark.com/"...)
	for range 3 {
		dst = appendRandomString(dst, r, 5, '_')
		dst = append(dst, '/')
	}
	return append(dst, "item.htm?query=1"...)
}
