package source_test

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/kafkaio/source"
)

func TestDecodeTimestamp(t *testing.T) {
	kafkaTS := time.UnixMilli(42)
	for _, tc := range []struct {
		format kafkaio.TimestampFormat
		value  string
		want   int64 // Unix ms; -1: a decode error
	}{
		{kafkaio.TimestampUnixMs, `{"ts":1700000000123,"a":1}`, 1700000000123},
		{kafkaio.TimestampUnixMs, `{"a":{"ts":5},"ts":7}`, 7}, // top level only
		{kafkaio.TimestampUnixMs, `{"ts":1.5}`, 1},
		{kafkaio.TimestampUnixMs, `{"ts":-1.5}`, -2},
		{kafkaio.TimestampUnixMs, `{"ts":1e3}`, 1000},
		{kafkaio.TimestampUnixS, `{"ts":1700000000}`, 1700000000000},
		{kafkaio.TimestampUnixS, `{"ts":1700000000.25}`, 1700000000250},
		{kafkaio.TimestampRFC3339, `{"ts":"2026-12-01T19:30:00.25Z"}`, time.Date(2026, 12, 1, 19, 30, 0, 250e6, time.UTC).UnixMilli()},
		{kafkaio.TimestampRFC3339, `{"ts":"2026-12-01T20:30:00+01:00"}`, time.Date(2026, 12, 1, 19, 30, 0, 0, time.UTC).UnixMilli()},
		{kafkaio.TimestampUnixMs, `{"a":{"ts":5}}`, -1},
		{kafkaio.TimestampUnixMs, `{"ts":"1700000000123"}`, -1},
		{kafkaio.TimestampUnixMs, `{"ts":null}`, -1},
		{kafkaio.TimestampUnixMs, `[1700000000123]`, -1},
		{kafkaio.TimestampUnixS, `{"ts":9223372036854775807}`, -1},
		{kafkaio.TimestampUnixS, `{"ts":1e300}`, -1},
		{kafkaio.TimestampRFC3339, `{"ts":1700000000123}`, -1},
		{kafkaio.TimestampRFC3339, `{"ts":"yesterday"}`, -1},
		{kafkaio.TimestampRFC3339, `{}`, -1},
	} {
		d, err := source.NewDecodeTimestamp(source.DecodeJSON{}, "ts", tc.format)
		if err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Value: []byte(tc.value), Timestamp: kafkaTS}
		err = d.Decode(r)
		switch {
		case tc.want == -1 && !errors.Is(err, source.ErrDecodeTimestamp):
			t.Errorf("%s %s: Decode = %v, want ErrDecodeTimestamp", tc.format, tc.value, err)
		case tc.want == -1 && !r.Timestamp.Equal(kafkaTS):
			t.Errorf("%s %s: a rejected record's timestamp changed to %v", tc.format, tc.value, r.Timestamp)
		case tc.want != -1 && err != nil:
			t.Errorf("%s %s: Decode = %v", tc.format, tc.value, err)
		case tc.want != -1 && r.Timestamp.UnixMilli() != tc.want:
			t.Errorf("%s %s: timestamp %d, want %d", tc.format, tc.value, r.Timestamp.UnixMilli(), tc.want)
		}
	}
}

func TestDecodeTimestampKeepsNextDecodersVerdict(t *testing.T) {
	d, err := source.NewDecodeTimestamp(source.DecodeJSON{}, "ts", kafkaio.TimestampUnixMs)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Decode(&kgo.Record{Value: []byte(`{"ts":1`)}); !errors.Is(err, source.ErrDecodeInvalidJSON) {
		t.Fatalf("Decode(invalid JSON) = %v, want ErrDecodeInvalidJSON", err)
	}
	r := &kgo.Record{Timestamp: time.UnixMilli(9)}
	if err := d.Decode(r); err != nil || r.Timestamp.UnixMilli() != 9 {
		t.Fatalf("Decode(tombstone) = %v, timestamp %v: want accepted with its Kafka timestamp", err, r.Timestamp)
	}
}

func TestNewDecodeTimestampInvalid(t *testing.T) {
	if _, err := source.NewDecodeTimestamp(nil, "", kafkaio.TimestampUnixMs); !errors.Is(err, source.ErrConfig) {
		t.Errorf("empty field: %v, want ErrConfig", err)
	}
	if _, err := source.NewDecodeTimestamp(nil, "ts", "unix_ns"); !errors.Is(err, source.ErrConfig) {
		t.Errorf("format unix_ns: %v, want ErrConfig", err)
	}
}

func TestDecodeTimestampAllocatesNothing(t *testing.T) {
	for format, v := range map[kafkaio.TimestampFormat]string{
		kafkaio.TimestampUnixMs:  `{"user":"ada","n":[1,2,3],"ts":1700000000123}`,
		kafkaio.TimestampUnixS:   `{"user":"ada","ts":1700000000.5}`,
		kafkaio.TimestampRFC3339: `{"user":"ada","ts":"2026-12-01T19:30:00.25Z"}`,
	} {
		d, err := source.NewDecodeTimestamp(source.DecodeJSON{}, "ts", format)
		if err != nil {
			t.Fatal(err)
		}
		r := &kgo.Record{Value: []byte(v)}
		if n := testing.AllocsPerRun(100, func() { _ = d.Decode(r) }); n != 0 {
			t.Errorf("%s: Decode allocates %v times per record", format, n)
		}
	}
}

// TestSourceTimestampField: a source with a timestamp field delivers each
// record with its event time; a record without one follows the decode
// policy (skip here) and counts as a decode error.
func TestSourceTimestampField(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		ctx := srcCtx(t)
		topic := kafkatest.Name(t, "src")
		c.CreateTopic(t, topic, 1, nil)
		var recs []*kgo.Record
		for _, v := range []string{`{"ts":1000}`, `{"ts":"x"}`, `{"n":1}`, `{"ts":3000}`} {
			recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(v)})
		}
		srcProduce(t, ctx, srcProducer(t, c), recs...)
		dec, err := source.NewDecodeTimestamp(source.DecodeJSON{}, "ts", kafkaio.TimestampUnixMs)
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		src := srcOpen(t, ctx, c, source.Config{Topics: []string{topic}, Decoder: dec,
			OnError: kafkaio.OnErrorSkip, Registerer: reg})
		got := srcRead(t, ctx, src, 2)
		srcWantValues(t, "timestamp", got, []string{`{"ts":1000}`, `{"ts":3000}`})
		for i, want := range []int64{1000, 3000} {
			if ms := got[i].Timestamp.UnixMilli(); ms != want {
				t.Errorf("record %d: timestamp %d, want %d", i, ms, want)
			}
		}
		srcWaitCaughtUp(t, ctx, src)
		if n := srcMetric(t, reg, source.MetricDecodeErrs, map[string]string{"topic": topic, "policy": "skip"}); n != 2 {
			t.Fatalf("decode errors counted %v, want 2", n)
		}
	})
}
