package pipeline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// join compiles a join step: `join: {table: {topic: t}, as: f, type:
// left|inner}` (tableJoin) or `join: {stream: {name: s, within: d}, as:
// f}` (intervalJoin). The output is the record's value, an object, with
// field f set to the other side's value. A pending key change
// (c.pending) is the join's to apply: an interval join merges its two
// sides before one KeyBy.
func (c *compiler) join(path string, j *config.JoinStep) {
	switch {
	case (j.Table == nil) == (j.Stream == nil):
		c.flush()
		c.add(path, "needs exactly one of table (a stream–table join) and stream (an interval join)")
	case j.Table != nil:
		c.tableJoin(path, j)
	default:
		c.intervalJoin(path, j)
	}
}

// tableJoin compiles a stream–table join: the table topic's records,
// read by the same tasks as the stream (graph.go, openSources: task i
// reads partition i of the stream's topics and of the table's), upsert
// the table's value of their record key (a tombstone, or a null value,
// deletes it), and each stream record gets the current value of its key.
// Both sides meet in one keyed operator "join" (then "join-2"...) of the
// source stage: the stream must still be keyed by its record key there.
// Records are processed in the order the task reads them: there is no
// synchronization of the table's and the stream's timestamps.
func (c *compiler) tableJoin(path string, j *config.JoinStep) {
	inner := false
	switch j.Type {
	case "", "left":
	case "inner":
		inner = true
	default:
		c.add(path+".type", "%q: must be left or inner", j.Type)
	}
	as := j.As
	if as == "" {
		as = "table"
	}
	changed, _ := c.keyState(c.stepIndex(j))
	switch {
	case c.pending != nil || changed:
		c.add(path, "a table join looks up each record's Kafka record key, as the source read it, but a key_by (or a map's key) before it changed the key: remove it and key the stream's and the table's records by the join key in Kafka (joining on a computed key, with both sides shuffled, is not supported yet)")
	case c.raw:
		c.add(path, "joins an object value, but the values are raw text (source format raw): use a json source")
	}
	table := c.graph.tables[j.Table.Topic]
	if len(c.problems) > 0 || c.cur == nil || table == nil {
		return
	}
	left := stream.Map(c.cur, func(r Rec) (sided, error) { return sided{r: r}, nil })
	right := stream.Map(table, func(r Rec) (sided, error) { return sided{right: true, r: r}, nil })
	c.cur = stream.Process(stream.Merge(left, right), c.stateName("join"), func() stream.KeyedProcessFunction[sided, Rec] {
		return &tableJoin{as: as, inner: inner}
	}, c.stateSchema("join", "table-join", "table "+j.Table.Topic))
	if err := c.job.Err(); err != nil {
		c.addJob(path, err)
	}
	c.joinedFields(as)
}

// joinedFields records that the values now have field as too.
func (c *compiler) joinedFields(as string) {
	if c.fields != nil && !slices.Contains(c.fields, as) {
		c.fields = append(slices.Clip(c.fields), as)
	}
	if i := slices.Index(c.numbers, as); i >= 0 {
		c.numbers = slices.Delete(slices.Clone(c.numbers), i, i+1)
	}
}

// intervalJoin compiles an interval join with the stream s of job.streams
// (compiled before this unit, graph.go): a left record (this pipeline's)
// and a right one (s's) with the same key and event times at most within
// apart give the left value with field as set to the right value (an inner
// join). Both sides are buffered in keyed state by event time, in one
// keyed operator "join" using event time, and expire when the watermark
// passes their time + within. Both sides must reach that operator in one
// stage with the same key: if either has a pending key change, each side
// is tagged, the two are merged and one KeyBy keys each by its side's key
// (one shuffle into one stage); if both are keyed by their record keys in
// the source stage, nothing is shuffled.
func (c *compiler) intervalJoin(path string, j *config.JoinStep) {
	sj := j.Stream
	if j.Type != "" && j.Type != "inner" {
		c.add(path+".type", "%q: an interval join is inner (a record without a match within the interval is dropped): remove type", j.Type)
	}
	if sj.Within <= 0 {
		c.add(path+".stream.within", "required: how far apart in event time two records may be and join (for example 5m)")
	}
	as := j.As
	if as == "" {
		as = sj.Name
	}
	other := c.graph.byName[sj.Name]
	if other == nil || other.out == nil {
		return // link or the stream's compile reported it
	}
	right := *other.out
	_, leftShuffled := c.keyState(c.stepIndex(j))
	switch {
	case c.raw:
		c.add(path, "joins an object value, but the values are raw text (source format raw): use a json source")
	case leftShuffled && c.pending == nil:
		c.add(path, "the stream reaches the join after a shuffle (a key_by before an aggregate, window or dedupe), and the other side is in the source stage: both sides must reach the join with one key_by each, or none")
	case right.shuffled && right.pending == nil:
		c.add(path, "the stream %s reaches the join after a shuffle (a key_by before an aggregate, window or dedupe): both sides must reach the join with one key_by each just before it, or none", sj.Name)
	case leftShuffled || right.shuffled:
		c.add(path, "a side of the join went through a shuffle before its last key_by: both sides must come from the source stage (key_by, then the join)")
	case c.pending != nil && right.pending != nil && !sameShuffle(c.pending, right.pending):
		c.add(path, "both sides have a key_by with parallelism: set it on one of them (they meet in one stage)")
	}
	if len(c.problems) > 0 || c.cur == nil || right.cur == nil {
		return
	}
	within := sj.Within.Milliseconds()
	var in *stream.Stream[sided]
	if c.pending == nil && right.pending == nil {
		l := stream.Map(c.cur, func(r Rec) (sided, error) { return sided{r: r}, nil })
		r := stream.Map(right.cur, func(r Rec) (sided, error) { return sided{right: true, r: r}, nil })
		in = stream.Merge(l, r)
	} else {
		opts := []stream.ShuffleOption{stream.ShuffleCodec(stream.Codec[sided](sidedCodec{}))}
		if c.pending != nil {
			opts = append(opts, c.pending.opts...)
		} else {
			opts = append(opts, right.pending.opts...)
		}
		opts = append(opts, stream.KeyDescription(joinKey(c.pending, right.pending)))
		l := c.tag(c.cur, c.pending != nil, false)
		r := c.tag(right.cur, right.pending != nil, true)
		in = stream.KeyBy(stream.Merge(l, r), func(s sided) ([]byte, error) { return s.r.key, nil }, opts...)
		c.pending = nil
	}
	c.cur = stream.Process(in, c.stateName("join"), func() stream.KeyedProcessFunction[sided, Rec] {
		return &intervalJoin{as: as, within: within}
	}, stream.WithEventTime(), c.stateSchema("join", "interval-join", "stream "+sj.Name))
	if err := c.job.Err(); err != nil {
		c.addJob(path, err)
	}
	c.joinedFields(as)
}

// joinKey describes the key of an interval join's state: each side's key
// change, or its record key.
func joinKey(left, right *pendingKey) string {
	side := func(p *pendingKey) string {
		if p == nil {
			return "record key"
		}
		return p.desc
	}
	return "join of " + side(left) + " and " + side(right)
}

// sameShuffle reports whether two pending key changes ask for the same
// shuffle options (none, in practice: parallelism is the only one).
func sameShuffle(a, b *pendingKey) bool { return len(a.opts) == 0 || len(b.opts) == 0 }

// tag tags the records of one side of an interval join for the KeyBy that
// merges both: a side with a pending key change has its new key in the
// Rec already; the other side's key is its element's current key, copied
// into the Rec (operator "join-key").
func (c *compiler) tag(s *stream.Stream[Rec], pending, right bool) *stream.Stream[sided] {
	if pending {
		return stream.Map(s, func(r Rec) (sided, error) { return sided{right: right, r: r}, nil })
	}
	return stream.Transform(s, c.opName("join-key"), func(e stream.Elem, r Rec, emit func(sided) error) error {
		r = withOrigin(e, r)
		r.key = bytes.Clone(e.Key())
		return emit(sided{right: right, r: r})
	})
}

// sided is an element of a join's input: a record of the left side (the
// pipeline's stream) or of the right side (the table, or the other
// stream), so that both sides can go through one Merge, one KeyBy and one
// keyed operator.
type sided struct {
	right bool
	r     Rec
}

// sidedCodec encodes a sided for a shuffle or for state: one byte for the
// side, then the record (recCodec).
type sidedCodec struct{}

func (sidedCodec) Append(dst []byte, v sided) ([]byte, error) {
	side := byte(0)
	if v.right {
		side = 1
	}
	return RecCodec{}.Append(append(dst, side), v.r)
}

func (sidedCodec) Decode(src []byte) (sided, error) {
	if len(src) == 0 || src[0] > 1 {
		return sided{}, errors.New("join: a shuffled record without its side")
	}
	r, err := RecCodec{}.Decode(src[1:])
	return sided{right: src[0] == 1, r: r}, err
}

// withField returns r with a copy of its object value with field set to
// x (written last if new): the output of a join. r's value is not
// modified (other operators may share it).
func withField(r Rec, field string, x any) (Rec, error) {
	r, err := r.decoded()
	if err != nil {
		return r, err
	}
	obj, ok := r.V.(map[string]any)
	if !ok {
		return r, fmt.Errorf("join: the record's value is %s, not an object: only an object can get the field %q", describe(r.V), field)
	}
	out := make(map[string]any, len(obj)+1)
	for k, e := range obj {
		out[k] = e
	}
	out[field] = x
	if r.Fields != nil && !slices.Contains(r.Fields, field) {
		r.Fields = append(slices.Clip(r.Fields), field)
	}
	r.V = out
	return r, nil
}

// tableJoin is a stream–table join: per key, the table's latest value (a
// value state "<operator>/table" holding its record, RecCodec) and, for each stream
// record, its value with field as set to the table's value.
type tableJoin struct {
	as    string
	inner bool
	table *state.ValueState[[]byte]
	buf   []byte
}

func (j *tableJoin) Open(oc stream.OpenContext) error {
	var err error
	j.table, err = state.NewValueState(oc.Backend, oc.StateName("table"), state.BytesCodec{})
	return err
}

func (j *tableJoin) ProcessElement(ctx *stream.Context[Rec], in sided) error {
	if in.right {
		var err error
		if in.r, err = in.r.decoded(); err != nil {
			return err
		}
		if in.r.V == nil { // a tombstone (or a JSON null): the key leaves the table
			return j.table.Clear()
		}
		if j.buf, err = (RecCodec{}).Append(j.buf[:0], in.r); err != nil {
			return err
		}
		return j.table.Put(j.buf)
	}
	b, ok, err := j.table.Get()
	if err != nil {
		return err
	}
	if !ok && j.inner {
		return nil
	}
	var tv any
	if ok {
		t, err := RecCodec{}.Decode(b)
		if err == nil {
			t, err = t.decoded()
		}
		if err != nil {
			return err
		}
		tv = t.V
	}
	out, err := withField(in.r, j.as, tv)
	if err != nil {
		// in.r keeps its origin (tag): the failure names the record.
		return &stream.PoisonError{Topic: in.r.Topic, Partition: in.r.Partition, Offset: in.r.Offset, Err: err}
	}
	return ctx.Emit(out)
}

// intervalJoin is a stream–stream interval join on event time: each side's
// records are buffered per key in a map state ("<operator>/left-records",
// "<operator>/right-records") keyed by (event time, sequence number), one
// entry per record, until the watermark passes their time + within; each
// record joins the other side's buffered records within `within` of it.
// The sequence numbers come from the key's own counter in value state
// ("<operator>/seq"), so that a record is one write however many share
// its key and time (appending to a per-time list rewrote it whole: O(n²)
// for n records of one key in one millisecond, which Nexmark's hot
// sellers at 10 million events/s of event time hit).
type intervalJoin struct {
	as          string
	within      int64 // ms
	left, right *state.MapState[bufKey, []byte]
	seq         *state.ValueState[int64]
	enc         []byte
	matches     []Rec
}

// bufKey is a buffered record's map key: its event time (Unix ms) and its
// key's sequence number.
type bufKey struct {
	ts  int64
	seq int64
}

// bufKeyCodec encodes a bufKey in 16 bytes that order as (ts, seq):
// each big-endian with the sign bit flipped, as state.Int64Codec.
type bufKeyCodec struct{}

func (bufKeyCodec) Append(dst []byte, k bufKey) ([]byte, error) {
	dst = binary.BigEndian.AppendUint64(dst, uint64(k.ts)^1<<63)
	return binary.BigEndian.AppendUint64(dst, uint64(k.seq)^1<<63), nil
}

func (bufKeyCodec) Decode(src []byte) (bufKey, error) {
	if len(src) != 16 {
		return bufKey{}, fmt.Errorf("join: a buffer key of %d bytes, want 16", len(src))
	}
	return bufKey{ts: int64(binary.BigEndian.Uint64(src) ^ 1<<63), seq: int64(binary.BigEndian.Uint64(src[8:]) ^ 1<<63)}, nil
}

func (j *intervalJoin) Open(oc stream.OpenContext) error {
	var err error
	if j.left, err = state.NewMapState(oc.Backend, oc.StateName("left-records"), state.Codec[bufKey](bufKeyCodec{}), state.BytesCodec{}); err != nil {
		return err
	}
	if j.right, err = state.NewMapState(oc.Backend, oc.StateName("right-records"), state.Codec[bufKey](bufKeyCodec{}), state.BytesCodec{}); err != nil {
		return err
	}
	j.seq, err = state.NewValueState(oc.Backend, oc.StateName("seq"), state.Codec[int64](state.Int64Codec{}))
	return err
}

func (j *intervalJoin) ProcessElement(ctx *stream.Context[Rec], in sided) error {
	var err error
	if in.r, err = in.r.decoded(); err != nil { // both sides' values are read
		return err
	}
	if _, ok := in.r.V.(map[string]any); !ok && !in.right {
		// The left side's value gets the joined field: one that is not an
		// object can never join. It fails here, named as the record it is,
		// before it is buffered: a buffered one would fail every later
		// match, whichever record brought it.
		return &stream.PoisonError{Topic: in.r.Topic, Partition: in.r.Partition, Offset: in.r.Offset,
			Err: fmt.Errorf("join: the record's value is %s, not an object: only an object can get the field %q", describe(in.r.V), j.as)}
	}
	ts := ctx.Timestamp().UnixMilli()
	if wm := ctx.CurrentWatermark(); !wm.IsZero() && ts < wm.UnixMilli() {
		return nil // late: the other side's records it could join may be gone
	}
	mine, other := j.left, j.right
	if in.right {
		mine, other = j.right, j.left
	}
	// Buffer the record under the key's next sequence number.
	seq, _, err := j.seq.Get()
	if err != nil {
		return err
	}
	if err := j.seq.Put(seq + 1); err != nil {
		return err
	}
	if j.enc, err = (RecCodec{}).Append(j.enc[:0], in.r); err != nil {
		return err
	}
	if err := mine.Put(bufKey{ts: ts, seq: seq}, j.enc); err != nil {
		return err
	}
	if err := ctx.RegisterEventTimeTimer(time.UnixMilli(ts + j.within + 1)); err != nil {
		return err
	}
	// Join it with the other side's records within reach.
	j.matches = j.matches[:0]
	var derr error
	err = other.RangeFrom(bufKey{ts: ts - j.within, seq: math.MinInt64}, func(k bufKey, b []byte) bool {
		if k.ts > ts+j.within {
			return false
		}
		var r Rec
		if r, derr = (RecCodec{}).Decode(b); derr == nil {
			r, derr = r.decoded()
		}
		j.matches = append(j.matches, r)
		return derr == nil
	})
	if err != nil {
		return err
	}
	if derr != nil {
		return derr
	}
	for _, m := range j.matches {
		l, r := in.r, m
		if in.right {
			l, r = m, in.r
		}
		out, err := withField(l, j.as, r.V)
		if err != nil {
			return err
		}
		if err := ctx.Emit(out); err != nil {
			return err
		}
	}
	return nil
}

// OnTimer drops, from both sides, the records the watermark has passed by
// more than within: no record on time can join them any more. A key left
// with no record on either side loses its sequence counter too.
func (j *intervalJoin) OnTimer(ctx *stream.Context[Rec], at time.Time) error {
	bound := at.UnixMilli() - j.within - 1
	empty := true
	for _, m := range []*state.MapState[bufKey, []byte]{j.left, j.right} {
		var old []bufKey
		more := false
		err := m.Range(func(k bufKey, _ []byte) bool {
			if k.ts > bound {
				more = true
				return false
			}
			old = append(old, k)
			return true
		})
		if err != nil {
			return err
		}
		for _, k := range old {
			if err := m.Remove(k); err != nil {
				return err
			}
		}
		empty = empty && !more
	}
	if empty {
		return j.seq.Clear()
	}
	return nil
}
