package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

// TestJSONLogsStrict runs one replica of the count job with JSON logs at
// debug level until a few checkpoints completed, and parses every line
// with a decoder that rejects what strict JSON parsers reject: a key twice
// in one object. It also requires every duration to be a string with a
// unit ("1.5s"), never a bare integer of nanoseconds.
func TestJSONLogsStrict(t *testing.T) {
	cfg, _, _ := countJob(t, "logs")
	cfg.Log.Format = "json"
	logs := &lockedBuffer{}
	runUntilCheckpoints(t, 3, func(ctx context.Context, logOut io.Writer, onCommitted func(ckpt.ID)) error {
		return serve(ctx, cfg, nil, io.MultiWriter(logOut, logs), onCommitted)
	}, nil)

	lines, durations := 0, 0
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		lines++
		if err := strictJSON(line); err != nil {
			t.Errorf("log line %d is not strict JSON: %v\n%s", lines, err, line)
			continue
		}
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		for k, v := range m {
			if !durationKey(k) {
				continue
			}
			durations++
			s, ok := v.(string)
			if !ok {
				t.Errorf("log line %d: duration %s is %v (%T), not a string with a unit\n%s", lines, k, v, v, line)
				continue
			}
			if strings.TrimLeft(s, "0123456789.-") == "" {
				t.Errorf("log line %d: duration %s=%q has no unit\n%s", lines, k, s, line)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if lines < 50 || durations == 0 {
		t.Fatalf("only %d log lines with %d durations: the test saw too little to judge", lines, durations)
	}
	t.Logf("%d JSON log lines, %d durations, every one strict", lines, durations)
}

// durationKey reports whether a log key names a duration in Weir's logs.
func durationKey(k string) bool {
	for _, s := range []string{"duration", "timeout", "interval", "backoff", "wait", "send", "age", "elapsed"} {
		if k == s || strings.HasSuffix(k, "_"+s) {
			return true
		}
	}
	return false
}

// strictJSON checks that b is one JSON value in which no object has a key
// twice. encoding/json accepts duplicates (the last one wins), so the check
// walks the tokens itself.
func strictJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := strictValue(dec); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("trailing data after the value: %v", err)
	}
	return nil
}

func strictValue(dec *json.Decoder) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		seen := map[string]bool{}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key := k.(string)
			if seen[key] {
				return fmt.Errorf("key %q appears twice in one object", key)
			}
			seen[key] = true
			if err := strictValue(dec); err != nil {
				return err
			}
		}
		_, err := dec.Token() // '}'
		return err
	case json.Delim('['):
		for dec.More() {
			if err := strictValue(dec); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	}
	return nil
}

func TestStrictJSON(t *testing.T) {
	for _, c := range []struct {
		in string
		ok bool
	}{
		{`{"a":1,"b":{"a":2}}`, true},
		{`{"a":[{"x":1},{"x":2}]}`, true},
		{`{"task":"main/1","task":"main-1"}`, false},
		{`{"a":{"b":1,"b":2}}`, false},
		{`{"a":1} {}`, false},
	} {
		if err := strictJSON([]byte(c.in)); (err == nil) != c.ok {
			t.Errorf("strictJSON(%s) = %v, want ok=%v", c.in, err, c.ok)
		}
	}
}
