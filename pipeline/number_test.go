package pipeline

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
)

// TestJSONNumberMatchesEncodingJSON compares AppendJSONNumber with
// encoding/json on edge cases and random float64s.
func TestJSONNumberMatchesEncodingJSON(t *testing.T) {
	cases := []float64{0, math.Copysign(0, -1), 1, -1, 1.5, 100, 1e20, 1e21, 1e-6, 1e-7, 123456789012345680000, 0.1 + 0.2,
		math.MaxFloat64, math.SmallestNonzeroFloat64, -2.5e-9, 1 << 53, 1<<53 + 1}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		cases = append(cases, math.Float64frombits(r.Uint64()))
	}
	for _, f := range cases {
		if math.IsInf(f, 0) || math.IsNaN(f) {
			if got := string(AppendJSONNumber(nil, f)); got != "null" {
				t.Fatalf("%v: %s, want null", f, got)
			}
			continue
		}
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendJSONNumber(nil, f); string(got) != string(want) {
			t.Fatalf("%v: %s, want %s", f, got, want)
		}
	}
}

// TestNumberFieldAllocatesNothing: the check and the read of a valid value
// run per record.
func TestNumberFieldAllocatesNothing(t *testing.T) {
	f := newNumberField("v")
	v, _, err := DecodeJSON([]byte(`{"page":"/a","ref":{"v":"x"},"v":-12.5e1}`))
	if err != nil {
		t.Fatal(err)
	}
	r := Rec{V: v}
	if n := f.value(r); n != -125 {
		t.Fatalf("value: %v", n)
	}
	if a := testing.AllocsPerRun(100, func() {
		if ok, err := f.check(r); !ok || err != nil {
			t.Fatal(err)
		}
		_ = f.value(r)
	}); a != 0 {
		t.Fatalf("%v allocations per record", a)
	}
}
