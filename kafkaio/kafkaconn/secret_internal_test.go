package kafkaconn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretFileReadAgain: a secret file is read again when it changes
// (in place or swapped in by a rename, as a Kubernetes Secret volume does),
// its line break dropped; a file gone or unreadable mid-rotation keeps the
// last value; a file missing at start is an error naming the key.
func TestSecretFileReadAgain(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "password")
	write := func(s string) {
		t.Helper()
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
	}
	want := func(s *secret, v string) {
		t.Helper()
		got, err := s.get()
		if err != nil || got != v {
			t.Fatalf("get() = %q, %v; want %q", got, err, v)
		}
	}
	write("first\n")
	s, err := newSecret("kafka.sasl.password", "", p)
	if err != nil {
		t.Fatal(err)
	}
	want(s, "first")
	write("second-longer\r\n")
	want(s, "second-longer")
	write("third-longer!") // same size as before would still differ in mtime or file
	want(s, "third-longer!")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	want(s, "third-longer!")

	_, err = newSecret("kafka.sasl.password", "", filepath.Join(dir, "missing"))
	if err == nil || !strings.Contains(err.Error(), "kafka.sasl.password_file") {
		t.Fatalf("missing file: %v", err)
	}
	inline, err := newSecret("kafka.sasl.password", "inline-value", "")
	if err != nil {
		t.Fatal(err)
	}
	want(inline, "inline-value")
}
