package stream

import "github.com/weir-stream/weir/state"

// Codec turns record values (and state values) into Go values and back. It
// is package state's codec, so the same codec serves a source, a sink and
// keyed state: Append appends the encoding of v to dst and returns the
// extended slice; Decode decodes src.
//
// A Codec is shared by every task of a job and must be safe for concurrent
// use (the built-in ones are stateless).
type Codec[T any] = state.Codec[T]

// Built-in codecs, from package state (JSON, strings, order-preserving
// numbers; see there).
type (
	// JSONCodec encodes values with encoding/json.
	JSONCodec[T any] = state.JSONCodec[T]
	// StringCodec encodes a string as its bytes.
	StringCodec = state.StringCodec
	// Int64Codec encodes an int64 in 8 order-preserving bytes.
	Int64Codec = state.Int64Codec
	// Uint64Codec encodes a uint64 in 8 big-endian bytes.
	Uint64Codec = state.Uint64Codec
	// Float64Codec encodes a float64 in 8 order-preserving bytes.
	Float64Codec = state.Float64Codec
	// BytesCodec stores a []byte as is; Decode copies. Use it for []byte
	// keyed state; use RawCodec for record values.
	BytesCodec = state.BytesCodec
)

// RawCodec passes record values through as []byte, without copying: Decode
// returns src itself. It is the zero-allocation codec of sources and sinks
// whose functions work on bytes.
//
// A value decoded by RawCodec aliases the input record: it is valid while
// the record is being processed (during the user function's call, and the
// calls it makes downstream). A function that keeps it longer, in a Go
// variable or a channel, must copy it; keyed state copies what it stores.
// Do not use RawCodec as a state codec: use BytesCodec there.
type RawCodec struct{}

// Append appends v to dst.
func (RawCodec) Append(dst []byte, v []byte) ([]byte, error) { return append(dst, v...), nil }

// Decode returns src, not a copy.
func (RawCodec) Decode(src []byte) ([]byte, error) { return src, nil }
