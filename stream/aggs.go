package stream

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/weir-stream/weir/state"
)

// The built-in window aggregates: CountAgg with an int64 accumulator
// (Int64Codec), and SumAgg, MinAgg, MaxAgg and AvgAgg over a float64 that
// a function reads from each record, with a NumAcc accumulator
// (NumAccCodec). Each is an AggregateFunc, so it works with every window
// kind.

// CountAgg counts the records of a window.
func CountAgg[T any]() AggregateFunc[T, int64, int64] { return countWindowAgg[T]{} }

type countWindowAgg[T any] struct{ countAgg[T] }

func (countWindowAgg[T]) Merge(a, b int64) int64 { return a + b }

// NumAcc is the accumulator of SumAgg, MinAgg, MaxAgg and AvgAgg: the
// number of records N and their sum, minimum or maximum V.
type NumAcc struct {
	N int64
	V float64
}

// NumAccCodec encodes a NumAcc in 16 bytes.
type NumAccCodec struct{}

// Append implements Codec.
func (NumAccCodec) Append(dst []byte, a NumAcc) ([]byte, error) {
	dst = binary.BigEndian.AppendUint64(dst, uint64(a.N))
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(a.V)), nil
}

// Decode implements Codec.
func (NumAccCodec) Decode(src []byte) (NumAcc, error) {
	if len(src) != 16 {
		return NumAcc{}, fmt.Errorf("%w: numeric accumulator of %d bytes", state.ErrCorruptValue, len(src))
	}
	return NumAcc{N: int64(binary.BigEndian.Uint64(src)), V: math.Float64frombits(binary.BigEndian.Uint64(src[8:]))}, nil
}

// numAgg is a float64 aggregate: add folds a value into V.
type numAgg[T any] struct {
	f      func(T) float64
	add    func(acc, v float64) float64
	result func(NumAcc) float64
}

func (numAgg[T]) CreateAccumulator() NumAcc { return NumAcc{} }

func (a numAgg[T]) Add(acc NumAcc, in T) NumAcc {
	v := a.f(in)
	if acc.N == 0 {
		return NumAcc{N: 1, V: v}
	}
	return NumAcc{N: acc.N + 1, V: a.add(acc.V, v)}
}

func (a numAgg[T]) Merge(x, y NumAcc) NumAcc {
	switch {
	case x.N == 0:
		return y
	case y.N == 0:
		return x
	}
	return NumAcc{N: x.N + y.N, V: a.add(x.V, y.V)}
}

func (a numAgg[T]) Result(acc NumAcc) float64 { return a.result(acc) }

func sum(a, b float64) float64 { return a + b }
func value(a NumAcc) float64   { return a.V }

// SumAgg sums f over the records of a window.
func SumAgg[T any](f func(T) float64) AggregateFunc[T, NumAcc, float64] {
	return numAgg[T]{f: f, add: sum, result: value}
}

// MinAgg is the minimum of f over the records of a window.
func MinAgg[T any](f func(T) float64) AggregateFunc[T, NumAcc, float64] {
	return numAgg[T]{f: f, add: math.Min, result: value}
}

// MaxAgg is the maximum of f over the records of a window.
func MaxAgg[T any](f func(T) float64) AggregateFunc[T, NumAcc, float64] {
	return numAgg[T]{f: f, add: math.Max, result: value}
}

// AvgAgg is the mean of f over the records of a window.
func AvgAgg[T any](f func(T) float64) AggregateFunc[T, NumAcc, float64] {
	return numAgg[T]{f: f, add: sum, result: func(a NumAcc) float64 {
		if a.N == 0 {
			return 0
		}
		return a.V / float64(a.N)
	}}
}
