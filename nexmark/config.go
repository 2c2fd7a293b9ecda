package nexmark

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidConfig is wrapped by every problem NewGenerator finds in a
// Config; test for it with errors.Is.
var ErrInvalidConfig = errors.New("nexmark: invalid config")

// The reference's defaults (nexmark-flink NexmarkConfiguration and
// NexmarkSourceOptions; Beam NexmarkConfiguration has the same values),
// used where a Config field is zero.
const (
	// DefaultEventRate is the events per second of event time: the
	// "first-event.rate" every nexmark-flink benchmark suite runs with
	// (conf/nexmark.yaml: nexmark.workload.suite.100m.tps = 10000000,
	// which ddl_gen.sql passes as 'first-event.rate' = '${TPS}'). The
	// connector's own fallback, used by no suite, is 10 000.
	DefaultEventRate = 10_000_000
	// DefaultNumActivePeople is numActivePeople: bids and auctions refer
	// to one of the last 1000 persons.
	DefaultNumActivePeople = 1000
	// DefaultNumInFlightAuctions is numInFlightAuctions: bids refer to one
	// of the last 100 auctions, and auctions last about as long as it
	// takes to create 100 more.
	DefaultNumInFlightAuctions = 100
	// DefaultHotAuctionRatio is hotAuctionRatio: a bid is on a hot auction
	// with probability 1 - 1/2.
	DefaultHotAuctionRatio = 2
	// DefaultHotSellersRatio is hotSellersRatio: an auction is by a hot
	// seller with probability 1 - 1/4.
	DefaultHotSellersRatio = 4
	// DefaultHotBiddersRatio is hotBiddersRatio: a bid is by a hot bidder
	// with probability 1 - 1/4.
	DefaultHotBiddersRatio = 4
	// DefaultAvgPersonSize, DefaultAvgAuctionSize and DefaultAvgBidSize
	// are avgPersonByteSize, avgAuctionByteSize and avgBidByteSize: the
	// average sizes the extra field pads events to, as the reference
	// counts them (8 bytes per number, strings by length, and for bids
	// without channel and url).
	DefaultAvgPersonSize  = 200
	DefaultAvgAuctionSize = 500
	DefaultAvgBidSize     = 100
)

// DefaultBaseTimeMs is the event time of event 0, Unix ms, where
// Config.BaseTime is zero: 2025-01-01T00:00:00Z, a multiple of every window
// size the queries use. The reference takes the wall clock at the source's
// start instead, which would make two runs differ.
const DefaultBaseTimeMs = 1_735_689_600_000

// Config is what the events of a Generator depend on. A zero field takes
// its default (the Default constants); every field but Events, Seed and
// IDLead has a non-zero default.
type Config struct {
	// Seed selects one of the generator's event sequences: the same Config
	// (seed included) always gives the same events.
	Seed uint64
	// Events is the number of events Next returns before reporting the end;
	// 0 is no end (the reference's events.num = 0).
	Events int64
	// EventRate is the events per second of event time: event n happens at
	// BaseTime + n × (1e6 / EventRate) µs, truncated to the millisecond.
	// Default DefaultEventRate.
	EventRate int64
	// BaseTime is the event time of event 0, to the millisecond. Default
	// DefaultBaseTimeMs.
	BaseTime time.Time

	// NumActivePeople, NumInFlightAuctions and the Hot ratios are the
	// reference's knobs of the same names; see the Default constants.
	NumActivePeople     int
	NumInFlightAuctions int
	HotAuctionRatio     int
	HotSellersRatio     int
	HotBiddersRatio     int

	// AvgPersonSize, AvgAuctionSize and AvgBidSize are the average sizes,
	// in bytes as the reference counts them, that extra pads events to.
	AvgPersonSize  int
	AvgAuctionSize int
	AvgBidSize     int

	// IDLead is how many ids beyond the last person (auction) generated so
	// far a random seller or bidder (auction of a bid) may be. The
	// reference uses 10 (PERSON_ID_LEAD, AUCTION_ID_LEAD), so that some
	// events refer to a person or auction generated a little later, "as if
	// swapped in time". The default, 0, makes every reference point at an
	// event generated before it.
	IDLead int
}

// withDefaults returns c with every zero field that has a default set to it.
func (c Config) withDefaults() Config {
	setInt64 := func(v *int64, d int64) {
		if *v == 0 {
			*v = d
		}
	}
	setInt := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	setInt64(&c.EventRate, DefaultEventRate)
	if c.BaseTime.IsZero() {
		c.BaseTime = time.UnixMilli(DefaultBaseTimeMs).UTC()
	}
	setInt(&c.NumActivePeople, DefaultNumActivePeople)
	setInt(&c.NumInFlightAuctions, DefaultNumInFlightAuctions)
	setInt(&c.HotAuctionRatio, DefaultHotAuctionRatio)
	setInt(&c.HotSellersRatio, DefaultHotSellersRatio)
	setInt(&c.HotBiddersRatio, DefaultHotBiddersRatio)
	setInt(&c.AvgPersonSize, DefaultAvgPersonSize)
	setInt(&c.AvgAuctionSize, DefaultAvgAuctionSize)
	setInt(&c.AvgBidSize, DefaultAvgBidSize)
	return c
}

// maxAvgSize bounds the average sizes: extra is cut from a table of
// extraTableSize letters, and must stay well inside it.
const maxAvgSize = extraTableSize / 4

// validate returns every problem of c (after withDefaults), each naming its
// field and wrapping ErrInvalidConfig.
func (c Config) validate() error {
	var errs []error
	bad := func(field string, v any, why string) {
		errs = append(errs, fmt.Errorf("%w: %s %v: %s", ErrInvalidConfig, field, v, why))
	}
	if c.Events < 0 {
		bad("Events", c.Events, "must be >= 0 (0 is no end)")
	}
	if c.EventRate < 0 {
		bad("EventRate", c.EventRate, "must be > 0 events per second")
	}
	if ms := c.BaseTime.UnixMilli(); ms < 0 {
		bad("BaseTime", c.BaseTime, "must not be before 1970 (event times are Unix milliseconds >= 0)")
	}
	positive := []struct {
		field string
		v     int
	}{
		{"NumActivePeople", c.NumActivePeople},
		{"NumInFlightAuctions", c.NumInFlightAuctions},
		// A ratio r makes an entity hot with probability 1 - 1/r: 1 is
		// never hot, below 1 means nothing.
		{"HotAuctionRatio", c.HotAuctionRatio},
		{"HotSellersRatio", c.HotSellersRatio},
		{"HotBiddersRatio", c.HotBiddersRatio},
	}
	for _, p := range positive {
		if p.v < 1 {
			bad(p.field, p.v, "must be >= 1")
		}
	}
	sizes := []struct {
		field string
		v     int
	}{
		{"AvgPersonSize", c.AvgPersonSize},
		{"AvgAuctionSize", c.AvgAuctionSize},
		{"AvgBidSize", c.AvgBidSize},
	}
	for _, s := range sizes {
		if s.v < 1 || s.v > maxAvgSize {
			bad(s.field, s.v, fmt.Sprintf("must be in [1, %d] bytes", maxAvgSize))
		}
	}
	if c.IDLead < 0 {
		bad("IDLead", c.IDLead, "must be >= 0")
	}
	return errors.Join(errs...)
}
