package state

import (
	"fmt"
	"slices"
	"testing"

	"github.com/weir-stream/weir/keygroup"
)

// TestValueStateScanKeys: ScanKeys lists the keys and values of one value
// state (not of another state, not another key group's), the writes still
// in the record cache included, in the legacy layout and by key group.
func TestValueStateScanKeys(t *testing.T) {
	for _, m := range []int{0, 4} {
		b, _ := newLayoutBackend(t, m)
		a, err := NewValueState(b, "op/a", Codec[string](StringCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		other, err := NewValueState(b, "op/ab", Codec[string](StringCodec{}))
		if err != nil {
			t.Fatal(err)
		}
		want := map[int][]string{}
		for i := range 20 {
			k := fmt.Sprintf("k%02d", i)
			b.SetCurrentKey([]byte(k))
			if err := a.Put("v" + k); err != nil {
				t.Fatal(err)
			}
			if err := other.Put("other"); err != nil {
				t.Fatal(err)
			}
			g := 0
			if m > 0 {
				g = keygroup.Of([]byte(k), m)
			}
			want[g] = append(want[g], k+"=v"+k)
		}
		groups := max(m, 1)
		for g := range groups {
			var got []string
			err := a.ScanKeys(g, func(k, v []byte) error { got = append(got, string(k)+"="+string(v)); return nil })
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(want[g])
			if !slices.Equal(got, want[g]) {
				t.Errorf("max parallelism %d, group %d: %q, want %q", m, g, got, want[g])
			}
		}
		if m > 0 {
			if err := a.ScanKeys(m, func(k, v []byte) error { return nil }); err == nil {
				t.Errorf("max parallelism %d: group %d accepted", m, m)
			}
		}
	}
}
