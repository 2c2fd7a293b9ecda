// Package keygroup maps record keys to key groups and key groups to tasks
// (DESIGN.md section 9). A key group is the unit in which keyed state and
// shuffle partitions move when a stage's parallelism changes: a stage with
// maximum parallelism M has M key groups, a shuffle topic has one partition
// per key group, and task i of P owns a contiguous range of them, as in
// Flink's KeyGroupRangeAssignment.
//
// The key group of a key is the partition Kafka's default partitioner
// chooses for it among M partitions (murmur2, sign bit cleared, modulo M),
// so that a shuffle topic is co-partitioned with any Kafka topic of M
// partitions keyed the same way.
package keygroup

// DefaultMaxParallelism is the number of key groups of a job that does not
// set job.max_parallelism: Flink's default lower bound, enough to scale a
// stage to 128 tasks, at the cost of 128 shuffle partitions per shuffle.
const DefaultMaxParallelism = 128

// Limit is the largest maximum parallelism: key groups are stored in two
// bytes, and Flink's limit is the same.
const Limit = 1 << 15

// Of returns the key group of key among maxParallelism (> 0) groups: the
// partition Kafka's default partitioner would choose among maxParallelism
// partitions. A nil key hashes as an empty one.
func Of(key []byte, maxParallelism int) int {
	return int(murmur2(key)&0x7fffffff) % maxParallelism
}

// Range returns the key groups [lo, hi) that task index of parallelism owns
// among maxParallelism groups (0 <= index < parallelism <= maxParallelism).
// The ranges of a stage's tasks are contiguous, disjoint and cover every
// group; their sizes differ by at most one.
func Range(index, parallelism, maxParallelism int) (lo, hi int) {
	lo = (index*maxParallelism + parallelism - 1) / parallelism
	hi = ((index+1)*maxParallelism + parallelism - 1) / parallelism
	return lo, hi
}

// Owner returns the index of the task of parallelism that owns group: the
// inverse of Range.
func Owner(group, parallelism, maxParallelism int) int {
	return group * parallelism / maxParallelism
}

// murmur2 is the 32-bit MurmurHash2 with Kafka's seed, as Kafka's
// Utils.murmur2 (and franz-go's StickyKeyPartitioner, which does not
// export it) computes it.
func murmur2(b []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	h := seed ^ uint32(len(b))
	for ; len(b) >= 4; b = b[4:] {
		k := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h = h*m ^ k
	}
	switch len(b) {
	case 3:
		h ^= uint32(b[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(b[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(b[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
