package replica

import "testing"

func TestShuffleProducers(t *testing.T) {
	for _, c := range []struct{ writers, procs, want int }{
		{0, 2, 1}, // not called without writers; never zero
		{1, 2, 1},
		{3, 2, 3},
		{8, 2, 4},
		{8, 1, 2},
		{8, 16, 8},
		{64, 16, 32},
	} {
		if got := shuffleProducers(c.writers, c.procs); got != c.want {
			t.Errorf("shuffleProducers(%d writers, %d procs) = %d, want %d", c.writers, c.procs, got, c.want)
		}
	}
}
