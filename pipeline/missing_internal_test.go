package pipeline

import "testing"

// TestFieldWatchAllocs: counting a record's missing fields allocates
// nothing, on a decoded value and on scanned texts.
func TestFieldWatchAllocs(t *testing.T) {
	var n int
	inc := func() { n++ }
	w := &fieldWatch{fields: []string{"amount", "vip"}, missing: []func(){inc, inc}}
	v := map[string]any{"amount": int64(3)}
	src := []string{"", "vip", "amount"}
	texts := [][]byte{nil, nil, []byte("3")}
	if a := testing.AllocsPerRun(100, func() {
		w.check(v)
		w.checkTexts(src, texts)
	}); a != 0 {
		t.Fatalf("%v allocations per record", a)
	}
	if n != 2*101 { // vip, once per check; AllocsPerRun runs once more to warm up
		t.Fatalf("counted %d, want %d", n, 2*101)
	}
}
