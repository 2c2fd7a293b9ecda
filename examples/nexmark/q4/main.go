// Command q4 is Nexmark q4, the average closing price per category, as a
// Weir job defined in Go: the YAML language cannot say it yet, because no
// step emits one result per key when an event time of the record's own
// (the auction's expiry) passes. The SQL (nexmark-flink's q4.sql):
//
//	SELECT Q.category, AVG(Q.final)
//	FROM (SELECT MAX(B.price) AS final, A.category
//	      FROM auction A, bid B
//	      WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
//	      GROUP BY A.id, A.category) Q
//	GROUP BY Q.category
//
// In the source's stage, keyed by the record key (auctions by id, bids by
// auction: the generator's keys), a Process keeps each auction and the
// highest price of its bids within its lifetime, and emits the closing
// price once the watermark passes the auction's expiry (an event-time
// timer). The closing prices are re-keyed by category (a shuffle), and a
// second Process emits, for each, the category's running count, sum and
// average: its last record per category is the query's row. Flink's
// streaming SQL updates a category's average when an auction's maximum
// changes (retractions); here each auction counts once, when it closes.
//
//	go build -o q4 ./examples/nexmark/q4
//	./q4 run -c examples/nexmark/q4/weir.yaml
//
// The topics are the program's own settings: NEXMARK_TOPIC (default
// nexmark, every event, as internal/tools/nexmark writes it) and
// Q4_TOPIC (default nexmark-q4) in the environment.
package main

import (
	"os"
	"strconv"
	"time"

	"github.com/weir-stream/weir/cli"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

func main() {
	cli.Main(q4(env("NEXMARK_TOPIC", "nexmark"), env("Q4_TOPIC", "nexmark-q4")))
}

// Event is an input record's value: the fields of package nexmark's JSON
// that q4 reads.
type Event struct {
	EventType int      `json:"event_type"`
	Auction   *Auction `json:"auction,omitempty"`
	Bid       *Bid     `json:"bid,omitempty"`
}

// Auction is an auction event's fields that q4 reads.
type Auction struct {
	DateTime int64 `json:"date_time"`
	Expires  int64 `json:"expires"`
	Category int64 `json:"category"`
}

// Bid is a bid event's fields that q4 reads.
type Bid struct {
	Price    int64 `json:"price"`
	DateTime int64 `json:"date_time"`
}

// Closed is an auction's closing price: the highest price of its bids
// within its lifetime.
type Closed struct {
	Category int64 `json:"category"`
	Price    int64 `json:"price"`
}

// Average is an output record's value: a category's closed auctions so
// far, the sum of their closing prices and its average.
type Average struct {
	Category int64   `json:"category"`
	Auctions int64   `json:"auctions"`
	Sum      int64   `json:"sum"`
	Avg      float64 `json:"avg"`
}

// The event types of package nexmark.
const (
	typeAuction = 1
	typeBid     = 2
)

// q4 defines the job: events from input, averages per category to output.
func q4(input, output string) *stream.Job {
	job := stream.NewJob("nexmark-q4")
	events := stream.From(job, stream.KafkaSource{
		Topics:    []string{input},
		Format:    stream.FormatJSON,
		Start:     kafkaio.Start{Kind: kafkaio.StartEarliest},
		Timestamp: stream.TimestampSpec{Field: "date_time", Format: kafkaio.TimestampUnixMs},
		Watermark: stream.WatermarkSpec{MaxOutOfOrderness: time.Second, IdleTimeout: 5 * time.Second},
	}, stream.JSONCodec[Event]{})
	relevant := stream.Filter(events, func(e Event) (bool, error) {
		return (e.EventType == typeAuction && e.Auction != nil) || (e.EventType == typeBid && e.Bid != nil), nil
	})
	closed := stream.Process(relevant, "closing-price", func() stream.KeyedProcessFunction[Event, Closed] {
		return &closer{}
	}, stream.WithEventTime())
	byCategory := stream.KeyBy(closed, func(c Closed) ([]byte, error) { return strconv.AppendInt(nil, c.Category, 10), nil },
		stream.ShuffleCodec(stream.JSONCodec[Closed]{}))
	averages := stream.Process(byCategory, "average", func() stream.KeyedProcessFunction[Closed, Average] {
		return &averager{}
	})
	stream.To(averages, stream.KafkaSink{Topic: output}, stream.JSONCodec[Average]{})
	return job
}

// closer keeps, per auction (the current key), the auction and the
// highest price of its bids in [date_time, expires], and emits it when the
// watermark passes expires. Bids read before their auction wait in list
// state until it comes, or until the watermark passes them (an auction
// that could still match one would be late).
type closer struct {
	auction *state.ValueState[Auction]
	best    *state.ValueState[int64]
	early   *state.ListState[Bid]
}

func (c *closer) Open(oc stream.OpenContext) error {
	var err error
	if c.auction, err = state.NewValueState(oc.Backend, oc.StateName("auction"), state.Codec[Auction](state.JSONCodec[Auction]{})); err != nil {
		return err
	}
	if c.best, err = state.NewValueState(oc.Backend, oc.StateName("best"), state.Codec[int64](state.Int64Codec{})); err != nil {
		return err
	}
	c.early, err = state.NewListState(oc.Backend, oc.StateName("early"), state.Codec[Bid](state.JSONCodec[Bid]{}))
	return err
}

func (c *closer) ProcessElement(ctx *stream.Context[Closed], e Event) error {
	if e.EventType == typeAuction {
		if _, ok, err := c.auction.Get(); err != nil || ok {
			return err // a second auction with this id: the generator makes none
		}
		a := *e.Auction
		if err := c.auction.Put(a); err != nil {
			return err
		}
		bids, err := c.early.Get()
		if err != nil {
			return err
		}
		if len(bids) > 0 {
			if err := c.early.Clear(); err != nil {
				return err
			}
		}
		for _, b := range bids {
			if err := c.bid(a, b); err != nil {
				return err
			}
		}
		return ctx.RegisterEventTimeTimer(time.UnixMilli(a.Expires))
	}
	a, ok, err := c.auction.Get()
	if err != nil {
		return err
	}
	if !ok {
		if err := c.early.Add(*e.Bid); err != nil {
			return err
		}
		return ctx.RegisterEventTimeTimer(time.UnixMilli(e.Bid.DateTime))
	}
	return c.bid(a, *e.Bid)
}

// bid folds a bid on auction a into its highest price.
func (c *closer) bid(a Auction, b Bid) error {
	if b.DateTime < a.DateTime || b.DateTime > a.Expires {
		return nil
	}
	best, ok, err := c.best.Get()
	if err != nil || (ok && best >= b.Price) {
		return err
	}
	return c.best.Put(b.Price)
}

// OnTimer closes the auction once the watermark passes its expiry, or
// drops the early bids the watermark has passed.
func (c *closer) OnTimer(ctx *stream.Context[Closed], at time.Time) error {
	a, ok, err := c.auction.Get()
	if err != nil {
		return err
	}
	if ok {
		if at.UnixMilli() < a.Expires {
			return nil // an early bid's timer: its bid was folded in
		}
		best, found, err := c.best.Get()
		if err != nil {
			return err
		}
		for _, drop := range []func() error{c.auction.Clear, c.best.Clear, c.early.Clear} {
			if err := drop(); err != nil {
				return err
			}
		}
		if !found {
			return nil // no bid in its lifetime: no closing price (an inner join)
		}
		return ctx.Emit(Closed{Category: a.Category, Price: best})
	}
	bids, err := c.early.Get()
	if err != nil {
		return err
	}
	keep := bids[:0]
	for _, b := range bids {
		if b.DateTime > at.UnixMilli() {
			keep = append(keep, b)
		}
	}
	if len(keep) == 0 {
		return c.early.Clear()
	}
	return c.early.Update(keep)
}

// averager keeps, per category (the current key), the number of closed
// auctions and the sum of their closing prices, and emits them with the
// average for every closed auction.
type averager struct {
	sums *state.ValueState[Average]
}

func (v *averager) Open(oc stream.OpenContext) error {
	var err error
	v.sums, err = state.NewValueState(oc.Backend, oc.StateName("sums"), state.Codec[Average](state.JSONCodec[Average]{}))
	return err
}

func (v *averager) ProcessElement(ctx *stream.Context[Average], c Closed) error {
	s, _, err := v.sums.Get()
	if err != nil {
		return err
	}
	s.Category = c.Category
	s.Auctions++
	s.Sum += c.Price
	s.Avg = float64(s.Sum) / float64(s.Auctions)
	if err := v.sums.Put(s); err != nil {
		return err
	}
	return ctx.Emit(s)
}

func env(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
