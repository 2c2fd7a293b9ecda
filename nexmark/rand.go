package nexmark

import "math/bits"

// rng is SplitMix64 (Steele, Lea, Flood 2014; the generator behind Java's
// SplittableRandom, which the reference uses): small, fast, and good enough
// for synthetic data. Its output is fixed by its state alone, whatever the
// Go version, which is what makes the events reproducible; math/rand/v2
// promises no such stability for its distributions.
type rng struct{ s uint64 }

const golden = 0x9e3779b97f4a7c15

// mix64 is SplitMix64's output function, a bijection of uint64.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// eventRand returns the generator of event n's random draws. Like Beam's
// generator (new Random(eventId)), each event draws from its own stream,
// so event n depends on (seed, n) only, not on the events before it; the
// two mix64 keep the streams of nearby seeds and event numbers apart.
func eventRand(seed uint64, n int64) rng {
	return rng{s: mix64(mix64(seed^0x6e65786d61726b) + uint64(n)*golden)}
}

func (r *rng) next() uint64 {
	r.s += golden
	return mix64(r.s)
}

// intn returns a uniform int in [0, n), n > 0 (Lemire's multiply-shift:
// the bias, n / 2^64, is far below anything the benchmark can see).
func (r *rng) intn(n int) int {
	hi, _ := bits.Mul64(r.next(), uint64(n))
	return int(hi)
}

// int63n returns a uniform int64 in [0, n), n > 0.
func (r *rng) int63n(n int64) int64 {
	hi, _ := bits.Mul64(r.next(), uint64(n))
	return int64(hi)
}

// float64 returns a uniform float64 in [0, 1).
func (r *rng) float64() float64 {
	return float64(r.next()>>11) * 0x1p-53
}
