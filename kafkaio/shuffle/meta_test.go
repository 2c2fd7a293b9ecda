package shuffle

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

// headersOf returns the headers a writer of task stage/u in generation gen
// gives a data record with user headers user, or barrier b's record if b
// has an ID. They are spelt out here, not made by barrierHeaders, so that a
// change of the wire form shows.
func headersOf(user []kgo.RecordHeader, stage string, u int, gen uint64, b ckpt.Barrier) []kgo.RecordHeader {
	hs := append([]kgo.RecordHeader(nil), user...)
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderTask, Value: []byte(stage + "/" + strconv.Itoa(u))},
		kgo.RecordHeader{Key: HeaderGen, Value: strconv.AppendUint(nil, gen, 10)})
	if b.ID > 0 {
		hs = append(hs, kgo.RecordHeader{Key: "weir-barrier", Value: strconv.AppendUint(nil, uint64(b.ID), 10)})
		if b.Kind != ckpt.KindCheckpoint {
			hs = append(hs, kgo.RecordHeader{Key: "weir-barrier-kind", Value: []byte(b.Kind)})
			if b.Target != "" {
				hs = append(hs, kgo.RecordHeader{Key: "weir-barrier-target", Value: []byte(b.Target)})
			}
		}
	}
	return hs
}

// chk is periodic checkpoint id's barrier.
func chk(id ckpt.ID) ckpt.Barrier { return ckpt.Barrier{ID: id, Kind: ckpt.KindCheckpoint} }

func TestParseRoundTrip(t *testing.T) {
	user := []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: HeaderBarrier, Value: []byte("7")}, {Key: HeaderTask, Value: []byte("x/1")}}
	for _, tc := range []struct {
		name    string
		user    []kgo.RecordHeader
		u       int
		gen     uint64
		barrier ckpt.Barrier
	}{
		{name: "data", u: 3, gen: 12},
		{name: "data with user headers", user: user[:1], u: 0, gen: 0},
		// Headers a record carried from its input, even weir- ones, stay
		// user headers: only the trailing ones are the writer's.
		{name: "data with weir- user headers", user: user, u: 127, gen: math.MaxUint64},
		{name: "barrier", u: 5, gen: 2, barrier: chk(41)},
		{name: "barrier max", u: math.MaxInt32, gen: math.MaxUint64, barrier: chk(math.MaxUint64)},
		{name: "savepoint", u: 1, gen: 3, barrier: ckpt.Barrier{ID: 7, Kind: ckpt.KindSavepoint, Target: "s3://b/savepoints/before-upgrade"}},
		{name: "savepoint without target", u: 1, gen: 3, barrier: ckpt.Barrier{ID: 8, Kind: ckpt.KindSavepoint}},
		{name: "stop", u: 0, gen: 1, barrier: ckpt.Barrier{ID: 9, Kind: ckpt.KindStop, Target: "nightly"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hs := headersOf(tc.user, "enrich", tc.u, tc.gen, tc.barrier)
			m, err := Parser{Stage: "enrich"}.Parse(hs)
			if err != nil {
				t.Fatal(err)
			}
			want := Meta{Barrier: tc.barrier, Upstream: tc.u, Gen: tc.gen}
			if m != want {
				t.Fatalf("Parse = %+v, want %+v", m, want)
			}
			got := UserHeaders(hs)
			if len(got) != len(tc.user) || (len(got) > 0 && &got[0] != &hs[0]) {
				t.Fatalf("UserHeaders = %v, want a reslice of the %d user headers", got, len(tc.user))
			}
			if tc.barrier.ID > 0 {
				// What the writer writes is what a reader reads.
				w := append(headersOf(nil, "enrich", tc.u, tc.gen, ckpt.Barrier{})[:2], barrierHeaders(tc.barrier)...)
				if fmtHeaders(w) != fmtHeaders(hs) {
					t.Fatalf("barrierHeaders(%+v) = %s, want %s", tc.barrier, fmtHeaders(w), fmtHeaders(hs))
				}
			}
		})
	}
}

func fmtHeaders(hs []kgo.RecordHeader) string {
	var s string
	for _, h := range hs {
		s += fmt.Sprintf("%s=%q ", h.Key, h.Value)
	}
	return s
}

// TestParseRecordTimestamp: a barrier's Timestamp is its record's.
func TestParseRecordTimestamp(t *testing.T) {
	ts := time.UnixMilli(1764612345678)
	r := &kgo.Record{Timestamp: ts, Headers: headersOf(nil, "up", 2, 5, chk(12))}
	m, err := Parser{Stage: "up"}.ParseRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	if want := (ckpt.Barrier{ID: 12, Kind: ckpt.KindCheckpoint, Timestamp: ts.UnixMilli()}); m.Barrier != want {
		t.Fatalf("ParseRecord = %+v, want barrier %+v", m, want)
	}
	r = &kgo.Record{Timestamp: ts, Headers: headersOf(nil, "up", 2, 5, ckpt.Barrier{})}
	if m, err := (Parser{Stage: "up"}).ParseRecord(r); err != nil || m.IsBarrier() || m.Barrier.Timestamp != 0 {
		t.Fatalf("ParseRecord(data) = %+v, %v", m, err)
	}
}

func TestParseMalformed(t *testing.T) {
	h := func(kv ...string) []kgo.RecordHeader {
		var hs []kgo.RecordHeader
		for i := 0; i < len(kv); i += 2 {
			hs = append(hs, kgo.RecordHeader{Key: kv[i], Value: []byte(kv[i+1])})
		}
		return hs
	}
	for name, hs := range map[string][]kgo.RecordHeader{
		"none":                    nil,
		"user only":               h("a", "b", "c", "d"),
		"gen missing":             h(HeaderTask, "up/1"),
		"task missing":            h("a", "b", HeaderGen, "1"),
		"swapped":                 h(HeaderGen, "1", HeaderTask, "up/1"),
		"other stage":             h(HeaderTask, "down/1", HeaderGen, "1"),
		"stage prefix":            h(HeaderTask, "upper/1", HeaderGen, "1"),
		"no index":                h(HeaderTask, "up/", HeaderGen, "1"),
		"no slash":                h(HeaderTask, "up", HeaderGen, "1"),
		"index leading zero":      h(HeaderTask, "up/01", HeaderGen, "1"),
		"index negative":          h(HeaderTask, "up/-1", HeaderGen, "1"),
		"index too large":         h(HeaderTask, "up/2147483648", HeaderGen, "1"),
		"gen empty":               h(HeaderTask, "up/1", HeaderGen, ""),
		"gen not decimal":         h(HeaderTask, "up/1", HeaderGen, "0x1"),
		"gen overflow":            h(HeaderTask, "up/1", HeaderGen, "18446744073709551616"),
		"gen plus":                h(HeaderTask, "up/1", HeaderGen, "+1"),
		"barrier not decimal":     h(HeaderTask, "up/1", HeaderGen, "1", HeaderBarrier, "x"),
		"barrier with user hdr":   h("a", "b", HeaderTask, "up/1", HeaderGen, "1", HeaderBarrier, "3"),
		"barrier alone":           h(HeaderBarrier, "3"),
		"barrier first":           h(HeaderBarrier, "3", HeaderTask, "up/1", HeaderGen, "1")[:1],
		"barrier zero":            h(HeaderTask, "up/1", HeaderGen, "1", HeaderBarrier, "0"),
		"kind unknown":            h(HeaderTask, "up/1", HeaderGen, "1", HeaderBarrier, "3", HeaderBarrierKind, "snapshot"),
		"kind alone":              h(HeaderTask, "up/1", HeaderGen, "1", HeaderBarrierKind, "savepoint"),
		"target without kind":     h(HeaderTask, "up/1", HeaderGen, "1", HeaderBarrier, "3", HeaderBarrierTarget, "x"),
		"kind and target swapped": h(HeaderTask, "up/1", HeaderGen, "1", HeaderBarrier, "3", HeaderBarrierTarget, "x", HeaderBarrierKind, "savepoint"),
		"savepoint with user hdr": h("a", "b", HeaderTask, "up/1", HeaderGen, "1", HeaderBarrier, "3", HeaderBarrierKind, "savepoint"),
	} {
		t.Run(name, func(t *testing.T) {
			m, err := Parser{Stage: "up"}.Parse(hs)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Parse(%v) = %+v, %v; want ErrMalformed", hs, m, err)
			}
		})
	}
	if _, err := (Parser{}).Parse(headersOf(nil, "up", 1, 1, ckpt.Barrier{})); !errors.Is(err, ErrMalformed) {
		t.Fatalf("the zero Parser accepted a record: %v", err)
	}
}

func TestParseDoesNotAllocate(t *testing.T) {
	p := Parser{Stage: "enrich"}
	data := headersOf([]kgo.RecordHeader{{Key: "a"}}, "enrich", 17, 9, ckpt.Barrier{})
	barrier := headersOf(nil, "enrich", 17, 9, chk(123456))
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := p.Parse(data); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Parse(barrier); err != nil {
			t.Fatal(err)
		}
		_ = UserHeaders(data)
	})
	if allocs != 0 {
		t.Fatalf("Parse allocates %v times per call", allocs)
	}
}

// FuzzParseMeta checks that Parse never panics, that what it accepts is
// exactly what a writer writes (re-encoding the Meta gives the same
// headers), and that UserHeaders strips exactly the writer's headers.
func FuzzParseMeta(f *testing.F) {
	f.Add([]byte("a"), []byte("up/3"), []byte("7"), []byte(""), false)
	f.Add([]byte(""), []byte("up/0"), []byte("0"), []byte("12"), true)
	f.Add([]byte("x"), []byte("up/01"), []byte("18446744073709551615"), []byte("1"), true)
	f.Fuzz(func(t *testing.T, user, task, gen, id []byte, barrier bool) {
		hs := []kgo.RecordHeader{{Key: "u", Value: user}, {Key: HeaderTask, Value: task}, {Key: HeaderGen, Value: gen}}
		if barrier {
			hs = append(hs[1:], kgo.RecordHeader{Key: HeaderBarrier, Value: id})
		}
		m, err := Parser{Stage: "up"}.Parse(hs)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		if m.IsBarrier() != barrier {
			t.Fatalf("Barrier = %+v for %v", m.Barrier, hs)
		}
		want := headersOf(nil, "up", m.Upstream, m.Gen, m.Barrier)
		if !barrier {
			want = headersOf(hs[:1], "up", m.Upstream, m.Gen, ckpt.Barrier{})
		}
		if len(want) != len(hs) {
			t.Fatalf("re-encoded %+v as %v, parsed from %v", m, want, hs)
		}
		for i := range want {
			if want[i].Key != hs[i].Key || string(want[i].Value) != string(hs[i].Value) {
				t.Fatalf("re-encoded %+v as %v, parsed from %v", m, want, hs)
			}
		}
		if n := len(UserHeaders(hs)); (barrier && n != 0) || (!barrier && n != 1) {
			t.Fatalf("UserHeaders(%v) kept %d headers", hs, n)
		}
	})
}

// watermarkHeaders returns the headers of a watermark record of task
// stage/u in generation gen whose weir-watermark is v.
func watermarkHeaders(stage string, u int, gen uint64, v string) []kgo.RecordHeader {
	return append(headersOf(nil, stage, u, gen, ckpt.Barrier{}), kgo.RecordHeader{Key: HeaderWatermark, Value: []byte(v)})
}

func TestParseWatermark(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want Meta
	}{
		{"1764612345678", Meta{Watermark: true, WatermarkMs: 1764612345678}},
		{"0", Meta{Watermark: true}},
		{"-1", Meta{Watermark: true, WatermarkMs: -1}},
		{"-9223372036854775808", Meta{Watermark: true, WatermarkMs: math.MinInt64}},
		{"9223372036854775807", Meta{Watermark: true, WatermarkMs: math.MaxInt64}},
		{"idle", Meta{Watermark: true, Idle: true}},
	} {
		t.Run(tc.v, func(t *testing.T) {
			hs := watermarkHeaders("enrich", 4, 7, tc.v)
			m, err := Parser{Stage: "enrich"}.Parse(hs)
			if err != nil {
				t.Fatal(err)
			}
			tc.want.Upstream, tc.want.Gen = 4, 7
			if m != tc.want {
				t.Fatalf("Parse = %+v, want %+v", m, tc.want)
			}
			if got := UserHeaders(hs); len(got) != 0 {
				t.Fatalf("UserHeaders = %v, want none", got)
			}
		})
	}
	for _, v := range []string{"", "-", "-0", "01", "+1", "1.5", "Idle", "idle ", " 1",
		"9223372036854775808", "-9223372036854775809", "18446744073709551616"} {
		t.Run("malformed "+strconv.Quote(v), func(t *testing.T) {
			if m, err := (Parser{Stage: "enrich"}).Parse(watermarkHeaders("enrich", 4, 7, v)); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Parse(weir-watermark %q) = %+v, %v; want ErrMalformed", v, m, err)
			}
		})
	}
	// A watermark record has nothing but the writer's headers: one with a
	// user header first is not one a writer wrote.
	hs := append([]kgo.RecordHeader{{Key: "a"}}, watermarkHeaders("enrich", 4, 7, "5")...)
	if m, err := (Parser{Stage: "enrich"}).Parse(hs); !errors.Is(err, ErrMalformed) {
		t.Fatalf("Parse(user header + watermark) = %+v, %v; want ErrMalformed", m, err)
	}
	if got := UserHeaders(hs); len(got) != len(hs) {
		t.Fatalf("UserHeaders(%v) = %v, want them whole", hs, got)
	}
	wm := watermarkHeaders("enrich", 4, 7, "-123")
	if allocs := testing.AllocsPerRun(100, func() {
		if _, err := (Parser{Stage: "enrich"}).Parse(wm); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("Parse of a watermark record allocates %v times per call", allocs)
	}
}

// FuzzParseWatermark checks that a weir-watermark value is accepted exactly
// when it is what a writer writes: "idle" or strconv.FormatInt of the Meta.
func FuzzParseWatermark(f *testing.F) {
	for _, s := range []string{"idle", "0", "-1", "12", "-0", "01", "9223372036854775808", "-9223372036854775808"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		m, err := Parser{Stage: "up"}.Parse(watermarkHeaders("up", 1, 2, string(v)))
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			if n, perr := strconv.ParseInt(string(v), 10, 64); perr == nil && strconv.FormatInt(n, 10) == string(v) {
				t.Fatalf("rejected %q, which a writer writes: %v", v, err)
			}
			return
		}
		if !m.Watermark || m.Upstream != 1 || m.Gen != 2 {
			t.Fatalf("Parse(%q) = %+v", v, m)
		}
		want := strconv.FormatInt(m.WatermarkMs, 10)
		if m.Idle {
			want = WatermarkIdle
		}
		if want != string(v) {
			t.Fatalf("Parse(%q) = %+v, which a writer writes as %q", v, m, want)
		}
	})
}
