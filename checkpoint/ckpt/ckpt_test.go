package ckpt

import (
	"encoding/json"
	"fmt"
	"testing"
)

func TestKind(t *testing.T) {
	for _, c := range []struct {
		k                  Kind
		valid, isSavepoint bool
	}{
		{KindCheckpoint, true, false},
		{KindSavepoint, true, true},
		{KindStop, true, true},
		{"", false, false},
		{"Savepoint", false, false},
	} {
		if c.k.Valid() != c.valid || c.k.IsSavepoint() != c.isSavepoint {
			t.Errorf("%q: Valid=%v IsSavepoint=%v, want %v %v", c.k, c.k.Valid(), c.k.IsSavepoint(), c.valid, c.isSavepoint)
		}
	}
}

// TestEncoding: an ID and a Kind encode as the plain integer and string
// they were before they had types of their own (control records,
// manifests, barrier headers and object keys depend on it).
func TestEncoding(t *testing.T) {
	b, err := json.Marshal(struct {
		ID   ID   `json:"id"`
		Kind Kind `json:"kind"`
	}{ID: 18446744073709551615, Kind: KindStop})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"id":18446744073709551615,"kind":"stop"}`; got != want {
		t.Errorf("JSON %s, want %s", got, want)
	}
	for _, id := range []ID{1, 42, 18446744073709551615} {
		want := fmt.Sprintf("%d", uint64(id))
		if got := id.String(); got != want {
			t.Errorf("ID(%s).String() = %q", want, got)
		}
		if got := fmt.Sprint(id); got != want {
			t.Errorf("fmt.Sprint(ID(%s)) = %q", want, got)
		}
	}
}
