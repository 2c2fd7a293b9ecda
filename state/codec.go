package state

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
)

// Codec encodes values of type T for storage. Append appends the encoding of
// v to dst and returns the extended slice (so that the caller can reuse one
// buffer and a put does not allocate); Decode decodes src, which is only
// valid during the call: a decoded value must not alias it.
//
// Encodings used as map keys (MapState) should be deterministic; the
// built-in number codecs also preserve order, so that map iteration is in key
// order.
type Codec[T any] interface {
	Append(dst []byte, v T) ([]byte, error)
	Decode(src []byte) (T, error)
}

// BytesCodec stores a []byte as is. Decode returns a copy.
type BytesCodec struct{}

func (BytesCodec) Append(dst []byte, v []byte) ([]byte, error) { return append(dst, v...), nil }
func (BytesCodec) Decode(src []byte) ([]byte, error)           { return append([]byte(nil), src...), nil }

// StringCodec stores a string as its bytes.
type StringCodec struct{}

func (StringCodec) Append(dst []byte, v string) ([]byte, error) { return append(dst, v...), nil }
func (StringCodec) Decode(src []byte) (string, error)           { return string(src), nil }

// JSONCodec stores values as JSON (encoding/json).
type JSONCodec[T any] struct{}

func (JSONCodec[T]) Append(dst []byte, v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, fmt.Errorf("state: json encode: %w", err)
	}
	return append(dst, b...), nil
}

func (JSONCodec[T]) Decode(src []byte) (T, error) {
	var v T
	if err := json.Unmarshal(src, &v); err != nil {
		return v, fmt.Errorf("state: json decode: %w", err)
	}
	return v, nil
}

// Int64Codec stores an int64 in 8 bytes, big-endian with the sign bit
// flipped, so that byte order is numeric order.
type Int64Codec struct{}

func (Int64Codec) Append(dst []byte, v int64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63)), nil
}

func (Int64Codec) Decode(src []byte) (int64, error) {
	if len(src) != 8 {
		return 0, fmt.Errorf("%w: int64 needs 8 bytes, got %d", ErrCorruptValue, len(src))
	}
	return int64(binary.BigEndian.Uint64(src) ^ (1 << 63)), nil
}

// Uint64Codec stores a uint64 in 8 bytes, big-endian.
type Uint64Codec struct{}

func (Uint64Codec) Append(dst []byte, v uint64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(dst, v), nil
}

func (Uint64Codec) Decode(src []byte) (uint64, error) {
	if len(src) != 8 {
		return 0, fmt.Errorf("%w: uint64 needs 8 bytes, got %d", ErrCorruptValue, len(src))
	}
	return binary.BigEndian.Uint64(src), nil
}

// Float64Codec stores a float64 in 8 bytes so that byte order is numeric
// order (negative numbers have every bit flipped, others the sign bit).
type Float64Codec struct{}

func (Float64Codec) Append(dst []byte, v float64) ([]byte, error) {
	u := math.Float64bits(v)
	if u&(1<<63) != 0 {
		u = ^u
	} else {
		u |= 1 << 63
	}
	return binary.BigEndian.AppendUint64(dst, u), nil
}

func (Float64Codec) Decode(src []byte) (float64, error) {
	if len(src) != 8 {
		return 0, fmt.Errorf("%w: float64 needs 8 bytes, got %d", ErrCorruptValue, len(src))
	}
	u := binary.BigEndian.Uint64(src)
	if u&(1<<63) != 0 {
		u &^= 1 << 63
	} else {
		u = ^u
	}
	return math.Float64frombits(u), nil
}
