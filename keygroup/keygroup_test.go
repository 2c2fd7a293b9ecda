package keygroup_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"pgregory.net/rapid"

	"github.com/weir-stream/weir/keygroup"
)

// TestOfIsKafkasDefaultPartitioner checks Of against franz-go's
// StickyKeyPartitioner, which mirrors Kafka's default partitioner for keyed
// records.
func TestOfIsKafkasDefaultPartitioner(t *testing.T) {
	p := kgo.StickyKeyPartitioner(nil)
	rapid.Check(t, func(t *rapid.T) {
		key := rapid.SliceOfN(rapid.Byte(), 1, 64).Draw(t, "key")
		n := rapid.IntRange(1, keygroup.Limit).Draw(t, "n")
		want := p.ForTopic("t").Partition(&kgo.Record{Key: key}, n)
		if got := keygroup.Of(key, n); got != want {
			t.Fatalf("Of(%x, %d) = %d; Kafka's partitioner chooses %d", key, n, got, want)
		}
	})
}

// TestKnownValues pins values computed by Kafka's Java client
// (Utils.toPositive(Utils.murmur2(key)) % n).
func TestKnownValues(t *testing.T) {
	for _, c := range []struct {
		key  string
		n    int
		want int
	}{
		// Kafka's UtilsTest: murmur2("21") = -973932308, whose
		// toPositive is 1173551340.
		{"21", 1 << 30, 1173551340 % (1 << 30)},
		{"21", 128, 1173551340 % 128},
	} {
		if got := keygroup.Of([]byte(c.key), c.n); got != c.want {
			t.Errorf("Of(%q, %d) = %d, want %d", c.key, c.n, got, c.want)
		}
	}
}

func TestRangesCoverAndOwnerInverts(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := rapid.IntRange(1, 4096).Draw(t, "max")
		p := rapid.IntRange(1, m).Draw(t, "parallelism")
		next := 0
		for i := range p {
			lo, hi := keygroup.Range(i, p, m)
			if lo != next || hi <= lo {
				t.Fatalf("task %d of %d (max %d): range [%d, %d), want it to start at %d and be non-empty", i, p, m, lo, hi, next)
			}
			if size := hi - lo; size < m/p || size > (m+p-1)/p {
				t.Fatalf("task %d: %d groups; want %d or %d", i, size, m/p, (m+p-1)/p)
			}
			for g := lo; g < hi; g++ {
				if o := keygroup.Owner(g, p, m); o != i {
					t.Fatalf("Owner(%d, %d, %d) = %d, want %d", g, p, m, o, i)
				}
			}
			next = hi
		}
		if next != m {
			t.Fatalf("ranges end at %d, want %d", next, m)
		}
	})
}
