package source

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/kafkaio"
)

// ErrDecodeTimestamp is wrapped by every error of DecodeTimestamp: the
// record's value has no usable event time in its timestamp field. Under
// the source's policy it is a decode error like any other (fail, skip or
// dead-letter), counted in weir_source_decode_errors_total.
var ErrDecodeTimestamp = errors.New("source: no event time")

// DecodeTimestamp is the Decoder step that sets a record's event time
// (kgo.Record.Timestamp, which everything downstream carries) from a
// top-level field of its JSON value. Next runs first (it checks that the
// value is JSON). The field is found by a scan of the top level (gjson),
// without unmarshalling the value; a valid record allocates nothing for a
// number format, nor for an RFC 3339 time in UTC. A nil value (a
// tombstone) keeps its Kafka timestamp: it is absence, not malformed
// input.
type DecodeTimestamp struct {
	next   Decoder
	field  string
	path   string
	format kafkaio.TimestampFormat
}

// NewDecodeTimestamp returns the Decoder that runs next (nil: DecodeRaw)
// and then sets each record's timestamp from field, in format.
func NewDecodeTimestamp(next Decoder, field string, format kafkaio.TimestampFormat) (*DecodeTimestamp, error) {
	if field == "" {
		return nil, fmt.Errorf("%w: timestamp: field is empty", ErrConfig)
	}
	switch format {
	case kafkaio.TimestampUnixMs, kafkaio.TimestampUnixS, kafkaio.TimestampRFC3339:
	default:
		return nil, fmt.Errorf("%w: timestamp: unknown format %q (want unix_ms, unix_s or rfc3339)", ErrConfig, format)
	}
	if next == nil {
		next = DecodeRaw{}
	}
	return &DecodeTimestamp{next: next, field: field, path: gjson.Escape(field), format: format}, nil
}

// Decode runs the next decoder, then sets r.Timestamp.
func (d *DecodeTimestamp) Decode(r *kgo.Record) error {
	if err := d.next.Decode(r); err != nil {
		return err
	}
	if r.Value == nil {
		return nil
	}
	// gjson reads a string; viewing the value as one copies nothing. The
	// value is not modified while it is read.
	res := gjson.Get(unsafe.String(unsafe.SliceData(r.Value), len(r.Value)), d.path)
	if !res.Exists() {
		return fmt.Errorf("%w: the value has no top-level field %q", ErrDecodeTimestamp, d.field)
	}
	ms, err := d.millis(res)
	if err != nil {
		return fmt.Errorf("%w: field %q: %v", ErrDecodeTimestamp, d.field, err)
	}
	r.Timestamp = time.UnixMilli(ms)
	return nil
}

// millis reads res as d.format, in Unix milliseconds.
func (d *DecodeTimestamp) millis(res gjson.Result) (int64, error) {
	switch d.format {
	case kafkaio.TimestampRFC3339:
		if res.Type != gjson.String {
			return 0, fmt.Errorf("%s %s is not an RFC 3339 string", jsonKind(res), res.Raw)
		}
		t, err := time.Parse(time.RFC3339Nano, res.Str)
		if err != nil {
			return 0, fmt.Errorf("not RFC 3339: %w", err)
		}
		return t.UnixMilli(), nil
	}
	if res.Type != gjson.Number {
		return 0, fmt.Errorf("%s %s is not a number of %s", jsonKind(res), res.Raw, d.unit())
	}
	scale := int64(1)
	if d.format == kafkaio.TimestampUnixS {
		scale = 1000
	}
	if isInteger(res.Raw) {
		n, err := strconv.ParseInt(res.Raw, 10, 64)
		if err != nil || n > math.MaxInt64/scale || n < math.MinInt64/scale {
			return 0, fmt.Errorf("%s %s is out of range", d.unit(), res.Raw)
		}
		return n * scale, nil
	}
	f := math.Floor(res.Num * float64(scale))
	// ±2^63 as a float64: a wider value does not fit in int64.
	if math.IsNaN(f) || f >= math.MaxInt64 || f < math.MinInt64 {
		return 0, fmt.Errorf("%s %s is out of range", d.unit(), res.Raw)
	}
	return int64(f), nil
}

// isInteger reports whether a JSON number is written as an integer (no
// fraction, no exponent): asked first, so that a fraction costs no
// strconv error.
func isInteger(raw string) bool {
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; (c < '0' || c > '9') && !(i == 0 && c == '-') {
			return false
		}
	}
	return true
}

func (d *DecodeTimestamp) unit() string {
	if d.format == kafkaio.TimestampUnixS {
		return "seconds"
	}
	return "milliseconds"
}

// jsonKind names res's JSON type for errors.
func jsonKind(res gjson.Result) string {
	switch {
	case res.Type == gjson.String:
		return "the string"
	case res.Type == gjson.Number:
		return "the number"
	case res.Type == gjson.Null:
		return "the value"
	case res.Type == gjson.True, res.Type == gjson.False:
		return "the boolean"
	case res.IsArray():
		return "the array"
	}
	return "the object"
}
