package kafkaio_test

import (
	"errors"
	"testing"
	"time"

	"github.com/weir-stream/weir/kafkaio"
)

func TestParseStart(t *testing.T) {
	for in, want := range map[string]string{
		"":                            "earliest",
		"earliest":                    "earliest",
		"latest":                      "latest",
		"2026-11-29T10:00:00Z":        "2026-11-29T10:00:00Z",
		"2026-11-29T10:00:00.5+01:00": "2026-11-29T10:00:00.5+01:00",
	} {
		s, err := kafkaio.ParseStart(in)
		if err != nil || s.String() != want || !s.Valid() {
			t.Errorf("ParseStart(%q) = %v, %v; want %s", in, s, err, want)
		}
	}
	for _, in := range []string{"newest", "Earliest", "2026-11-29"} {
		if _, err := kafkaio.ParseStart(in); !errors.Is(err, kafkaio.ErrUnknown) {
			t.Errorf("ParseStart(%q) = %v, want ErrUnknown", in, err)
		}
	}
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	if s := kafkaio.StartAt(at); s.Kind != kafkaio.StartTimestamp || !s.Time.Equal(at) {
		t.Errorf("StartAt = %+v", s)
	}
	if s := (kafkaio.Start{Kind: 7}); s.Valid() || s.String() != "StartKind(7)" {
		t.Errorf("Start{Kind: 7}: valid %v, %s", s.Valid(), s)
	}
	if (kafkaio.Start{}) != (kafkaio.Start{Kind: kafkaio.StartEarliest}) {
		t.Error("the zero Start is not StartEarliest")
	}
}

// TestParseRoundTrips: every listed value parses to itself, empty to the
// default (the zero value), and anything else is ErrUnknown.
func TestParseRoundTrips(t *testing.T) {
	check := func(what, in, got string, err error, want string) {
		t.Helper()
		if err != nil || got != want {
			t.Errorf("%s(%q) = %q, %v; want %q", what, in, got, err, want)
		}
	}
	for _, p := range kafkaio.OnErrors() {
		got, err := kafkaio.ParseOnError(string(p))
		check("ParseOnError", string(p), string(got), err, string(p))
	}
	got, err := kafkaio.ParseOnError("")
	check("ParseOnError", "", string(got), err, string(kafkaio.OnErrorFail))
	for _, f := range kafkaio.TimestampFormats() {
		got, err := kafkaio.ParseTimestampFormat(string(f))
		check("ParseTimestampFormat", string(f), string(got), err, string(f))
	}
	gotF, err := kafkaio.ParseTimestampFormat("")
	check("ParseTimestampFormat", "", string(gotF), err, string(kafkaio.TimestampUnixMs))
	for _, d := range kafkaio.Deliveries() {
		got, err := kafkaio.ParseDelivery(string(d))
		check("ParseDelivery", string(d), string(got), err, string(d))
	}
	gotD, err := kafkaio.ParseDelivery("")
	check("ParseDelivery", "", string(gotD), err, string(kafkaio.DeliveryExactlyOnce))

	for _, bad := range []struct {
		what string
		err  error
	}{
		{"ParseOnError(dlq)", second(kafkaio.ParseOnError("dlq"))},
		{"ParseOnError(Skip)", second(kafkaio.ParseOnError("Skip"))},
		{"ParseTimestampFormat(unix_ns)", second(kafkaio.ParseTimestampFormat("unix_ns"))},
		{"ParseDelivery(exactly_once)", second(kafkaio.ParseDelivery("exactly_once"))},
	} {
		if !errors.Is(bad.err, kafkaio.ErrUnknown) {
			t.Errorf("%s = %v, want ErrUnknown", bad.what, bad.err)
		}
	}
}

func second[T any](_ T, err error) error { return err }
