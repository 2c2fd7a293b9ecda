package shuffle

import (
	"errors"
	"fmt"
	"math"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

// The headers the writer adds to every shuffle record.
const (
	HeaderBarrier = "weir-barrier" // checkpoint ID, decimal; on barrier records only
	// HeaderBarrierKind and HeaderBarrierTarget follow weir-barrier on the
	// barrier record of a savepoint (ckpt.Barrier's Kind and Target, the
	// latter only if set). A periodic checkpoint's barrier record has
	// neither, so that it reads the same to every Weir version.
	HeaderBarrierKind   = "weir-barrier-kind"
	HeaderBarrierTarget = "weir-barrier-target"
	HeaderTask          = "weir-task" // "<stage>/<index>" of the writing task
	HeaderGen           = "weir-gen"  // generation of the writing task, decimal
	// HeaderWatermark is on watermark records only: the writing task's
	// watermark, decimal Unix milliseconds (signed), or "idle".
	HeaderWatermark = "weir-watermark"
)

// WatermarkIdle is the weir-watermark value of a task whose inputs are all
// idle.
const WatermarkIdle = "idle"

// ErrMalformed is the error, for errors.Is, of a record whose weir- headers
// are missing or malformed: the shuffle topic was written by something other
// than a Weir shuffle writer of the expected stage.
var ErrMalformed = errors.New("shuffle: malformed shuffle record")

// MetaHeaders is the number of headers Writer.Write appends to a record
// (weir-task, weir-gen): a caller that allocates a record's headers with
// this much room to spare saves the writer an allocation.
const MetaHeaders = 2

// Meta is what a shuffle record's weir- headers say.
type Meta struct {
	// Barrier is the barrier, if the record is a barrier record (IsBarrier):
	// its ID, Kind and Target. Its Timestamp is the record's timestamp,
	// which Parse does not see: ParseRecord fills it in.
	Barrier ckpt.Barrier
	// Watermark marks a watermark record: the writing task's watermark is
	// WatermarkMs (Unix ms), or, if Idle, every input of the writing task is
	// idle (WatermarkMs is then 0).
	Watermark   bool
	Idle        bool
	WatermarkMs int64
	Upstream    int    // index of the writing task in its stage
	Gen         uint64 // generation of the writing task
}

// Parser reads the weir- headers of the records of one shuffle topic, all
// written by tasks of one upstream stage. It is the one reader of those
// headers. The zero Parser accepts no record.
type Parser struct {
	Stage string // the upstream stage: the stage part of every weir-task
}

// IsBarrier reports whether the record is a barrier record.
func (m Meta) IsBarrier() bool { return m.Barrier.ID > 0 }

// ParseRecord is Parse of r's headers, with the barrier's Timestamp, for a
// barrier record, taken from r's timestamp (the writer sets it to the
// trigger's time).
func (p Parser) ParseRecord(r *kgo.Record) (Meta, error) {
	m, err := p.Parse(r.Headers)
	if err == nil && m.IsBarrier() {
		m.Barrier.Timestamp = r.Timestamp.UnixMilli()
	}
	return m, err
}

// Parse returns what hs, the headers of a shuffle record, say. A record
// without the writer's trailing headers, or with malformed ones, or written
// by a task of another stage, is an error wrapping ErrMalformed. Parse does
// not allocate unless it fails, or reads a savepoint's barrier record.
//
// A barrier record's headers are weir-task, weir-gen, weir-barrier, then,
// for a savepoint only, weir-barrier-kind and weir-barrier-target (if it
// has a target). The first form is the only one Weir wrote before barriers
// had kinds: both read.
func (p Parser) Parse(hs []kgo.RecordHeader) (Meta, error) {
	n := len(hs)
	if n < 2 {
		return Meta{}, malformed(hs, "the weir-task and weir-gen headers are missing")
	}
	var m Meta
	task, gen := n-2, n-1
	switch hs[n-1].Key {
	case HeaderBarrier, HeaderBarrierKind, HeaderBarrierTarget:
		b, err := parseBarrier(hs)
		if err != nil {
			return Meta{}, err
		}
		m.Barrier = b
		task, gen = 0, 1
	case HeaderWatermark:
		if n != 3 {
			return Meta{}, malformed(hs, "a watermark record has exactly the headers weir-task, weir-gen, weir-watermark")
		}
		m.Watermark = true
		if v := hs[n-1].Value; string(v) == WatermarkIdle {
			m.Idle = true
		} else if ms, ok := parseInt(v); ok {
			m.WatermarkMs = ms
		} else {
			return Meta{}, malformed(hs, `weir-watermark is neither a decimal number nor "idle"`)
		}
		task, gen = 0, 1
	}
	if hs[task].Key != HeaderTask || hs[gen].Key != HeaderGen {
		return Meta{}, malformed(hs, "the last headers are not weir-task, weir-gen")
	}
	g, ok := parseUint(hs[gen].Value)
	if !ok {
		return Meta{}, malformed(hs, "weir-gen is not a decimal number")
	}
	m.Gen = g
	v := hs[task].Value
	if len(v) <= len(p.Stage) || p.Stage == "" || string(v[:len(p.Stage)]) != p.Stage || v[len(p.Stage)] != '/' {
		return Meta{}, malformed(hs, fmt.Sprintf("weir-task is not a task of stage %q", p.Stage))
	}
	u, ok := parseUint(v[len(p.Stage)+1:])
	if !ok || u > math.MaxInt32 {
		return Meta{}, malformed(hs, "the index of weir-task is not a decimal number")
	}
	m.Upstream = int(u)
	return m, nil
}

// UserHeaders returns hs without the headers the writer added: a reslice of
// hs, which it does not copy. Headers without the writer's trailing ones are
// returned whole.
func UserHeaders(hs []kgo.RecordHeader) []kgo.RecordHeader {
	n := len(hs)
	switch {
	case n >= 3 && (hs[2].Key == HeaderBarrier || hs[2].Key == HeaderWatermark) && hs[0].Key == HeaderTask && hs[1].Key == HeaderGen &&
		(hs[n-1].Key == HeaderBarrier || hs[n-1].Key == HeaderBarrierKind || hs[n-1].Key == HeaderBarrierTarget || n == 3):
		return hs[:0]
	case n >= 2 && hs[n-2].Key == HeaderTask && hs[n-1].Key == HeaderGen:
		return hs[:n-2]
	}
	return hs
}

// parseBarrier reads the barrier of a barrier record's headers hs: exactly
// weir-task, weir-gen, weir-barrier, optionally followed by
// weir-barrier-kind and then weir-barrier-target.
func parseBarrier(hs []kgo.RecordHeader) (ckpt.Barrier, error) {
	const form = "a barrier record has the headers weir-task, weir-gen, weir-barrier, and, for a savepoint, weir-barrier-kind and weir-barrier-target"
	n := len(hs)
	if n < 3 || n > 5 || hs[0].Key != HeaderTask || hs[1].Key != HeaderGen || hs[2].Key != HeaderBarrier {
		return ckpt.Barrier{}, malformed(hs, form)
	}
	id, ok := parseUint(hs[2].Value)
	if !ok || id == 0 {
		return ckpt.Barrier{}, malformed(hs, "weir-barrier is not a checkpoint ID (a decimal number from 1)")
	}
	b := ckpt.Barrier{ID: ckpt.ID(id), Kind: ckpt.KindCheckpoint}
	if n == 3 {
		return b, nil
	}
	if hs[3].Key != HeaderBarrierKind || (n == 5 && hs[4].Key != HeaderBarrierTarget) {
		return ckpt.Barrier{}, malformed(hs, form)
	}
	b.Kind = ckpt.Kind(hs[3].Value)
	if !b.Kind.Valid() {
		return ckpt.Barrier{}, malformed(hs, "weir-barrier-kind is not checkpoint, savepoint or stop")
	}
	if n == 5 {
		b.Target = string(hs[4].Value)
	}
	return b, nil
}

// barrierHeaders returns the headers of b's barrier record after weir-task
// and weir-gen (the inverse of parseBarrier).
func barrierHeaders(b ckpt.Barrier) []kgo.RecordHeader {
	hs := []kgo.RecordHeader{{Key: HeaderBarrier, Value: []byte(b.ID.String())}}
	if b.Kind == "" || b.Kind == ckpt.KindCheckpoint && b.Target == "" {
		return hs
	}
	hs = append(hs, kgo.RecordHeader{Key: HeaderBarrierKind, Value: []byte(b.Kind)})
	if b.Target != "" {
		hs = append(hs, kgo.RecordHeader{Key: HeaderBarrierTarget, Value: []byte(b.Target)})
	}
	return hs
}

// parseUint parses a decimal number without sign or leading zeros.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 || (len(b) > 1 && b[0] == '0') {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// parseInt parses a decimal number with an optional minus sign and without
// leading zeros ("-0" is malformed), into the whole range of int64.
func parseInt(b []byte) (int64, bool) {
	if len(b) == 0 || b[0] != '-' {
		u, ok := parseUint(b)
		return int64(u), ok && u <= math.MaxInt64
	}
	u, ok := parseUint(b[1:])
	if !ok || u == 0 || u > 1<<63 {
		return 0, false
	}
	return int64(-u), true
}

// malformed describes a record the parser rejects, with its weir- headers.
func malformed(hs []kgo.RecordHeader, why string) error {
	var weir []string
	for _, h := range hs {
		if len(h.Key) >= 5 && h.Key[:5] == "weir-" {
			weir = append(weir, fmt.Sprintf("%s=%q", h.Key, h.Value))
		}
	}
	return fmt.Errorf("%w: %s (weir- headers: %v)", ErrMalformed, why, weir)
}
