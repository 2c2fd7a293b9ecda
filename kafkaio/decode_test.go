package kafkaio_test

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/kafkaio"
)

func TestDecodeJSON(t *testing.T) {
	for _, tc := range []struct {
		value []byte
		ok    bool
	}{
		{[]byte(`{"a":1}`), true},
		{[]byte(`[1, 2]`), true},
		{[]byte(`"s"`), true},
		{nil, true}, // a tombstone
		{[]byte(``), false},
		{[]byte(`{"a":`), false},
		{[]byte(`not json`), false},
		{[]byte(`{} {}`), false},
	} {
		err := kafkaio.DecodeJSON{}.Decode(&kgo.Record{Value: tc.value})
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, kafkaio.ErrDecodeInvalidJSON)) {
			t.Errorf("DecodeJSON(%q) = %v, want ok %v", tc.value, err, tc.ok)
		}
	}
}

func TestDecodeJSONValidAllocatesNothing(t *testing.T) {
	r := &kgo.Record{Value: []byte(`{"user":"ada","n":[1,2,3],"ok":true}`)}
	var d kafkaio.Decoder = kafkaio.DecodeJSON{}
	// Only the error path (encoding/json's syntax error) may allocate.
	if n := testing.AllocsPerRun(100, func() { _ = d.Decode(r) }); n != 0 {
		t.Fatalf("DecodeJSON allocates %v times per record", n)
	}
}

func TestDecoderForFormat(t *testing.T) {
	for format, want := range map[string]kafkaio.Decoder{
		"": kafkaio.DecodeRaw{}, "raw": kafkaio.DecodeRaw{}, "bytes": kafkaio.DecodeRaw{}, "json": kafkaio.DecodeJSON{},
	} {
		if got, err := kafkaio.DecoderForFormat(format); err != nil || got != want {
			t.Errorf("DecoderForFormat(%q) = %T, %v; want %T", format, got, err, want)
		}
	}
	if _, err := kafkaio.DecoderForFormat("avro"); !errors.Is(err, kafkaio.ErrSourceConfig) {
		t.Errorf("DecoderForFormat(avro) = %v, want ErrSourceConfig", err)
	}
}

func TestParseDecodePolicy(t *testing.T) {
	for in, want := range map[string]kafkaio.DecodePolicy{
		"": kafkaio.DecodeFail, "fail": kafkaio.DecodeFail, "skip": kafkaio.DecodeSkip, "dead-letter": kafkaio.DecodeDeadLetter,
	} {
		if got, err := kafkaio.ParseDecodePolicy(in); err != nil || got != want {
			t.Errorf("ParseDecodePolicy(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := kafkaio.ParseDecodePolicy("dlq"); !errors.Is(err, kafkaio.ErrSourceConfig) {
		t.Errorf("ParseDecodePolicy(dlq) = %v, want ErrSourceConfig", err)
	}
}
