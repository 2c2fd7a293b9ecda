package compat_test

import (
	"maps"
	"testing"

	"github.com/weir-stream/weir/compat"
)

// TestStateFollowsAcrossEdits: the state of a derived operator renamed by
// an edit is stored under its first name, which every later checkpoint
// records (Operator.State), so that the next restore of the same job, and
// of a later edit, finds it.
func TestStateFollowsAcrossEdits(t *testing.T) {
	v1 := schemaOf(t, routeAll, 4, "", nil)
	v2 := schemaOf(t, routeEvenAll, 4, "", nil)

	res := compat.Compare(1, v1, v2)
	want := map[string]string{"aggregate-2": "aggregate", "aggregate": "aggregate#2"}
	if !maps.Equal(res.StateNames, want) || !res.Allowed(false) {
		t.Fatalf("v1 → v2: state names %v, want %v\n%s", res.StateNames, want, res.Report())
	}
	// v2's checkpoints record where its state is.
	rec := v2.WithStateNames(res.StateNames)
	if err := rec.Validate(); err != nil {
		t.Fatal(err)
	}
	if o := rec.Operator("aggregate-2"); o.StateName() != "aggregate" {
		t.Fatalf("aggregate-2 is stored as %q", o.StateName())
	}

	// v2 restarted on its own checkpoint: the same names, nothing else.
	again := compat.Compare(2, &rec, v2)
	if !maps.Equal(again.StateNames, want) || len(again.Differences) != 0 {
		t.Fatalf("v2 → v2: state names %v, want %v\n%s", again.StateNames, want, again.Report())
	}

	// v3 removes the even stream: all's aggregate is "aggregate" again,
	// whose state is stored as "aggregate"; even's is dropped.
	v3 := schemaOf(t, routeAll, 4, "", nil)
	back := compat.Compare(3, &rec, v3)
	if len(back.StateNames) != 0 || back.Allowed(false) || !back.Allowed(true) {
		t.Fatalf("v2 → v3: state names %v, want none; allowed only with the flag\n%s", back.StateNames, back.Report())
	}
	if drops := back.Of(compat.Drops); len(drops) != 1 || drops[0].Operator != "aggregate" || drops[0].Site != "job.streams.even[0].aggregate" {
		t.Fatalf("v2 → v3: drops %v, want the even stream's aggregate", drops)
	}
}

// TestDerivedOnlyFollowsDerived: an operator with a given name (a Go
// operator, a YAML step with id:) never takes over the state of another
// by its definition, nor gives its own away.
func TestDerivedOnlyFollowsDerived(t *testing.T) {
	op := func(id string, derived bool) compat.Operator {
		return compat.Operator{ID: id, Derived: derived, Kind: "aggregate", Stage: "main", Key: "record key", Encoding: "aggregate"}
	}
	for _, tc := range []struct {
		name     string
		old, cur compat.Operator
		follows  bool
	}{
		{"both derived", op("aggregate", true), op("aggregate-2", true), true},
		{"the job's given", op("aggregate", true), op("totals", false), false},
		{"the checkpoint's given", op("totals", false), op("aggregate", true), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := &compat.Schema{V: compat.Version, Operators: []compat.Operator{tc.old}}
			cur := &compat.Schema{V: compat.Version, Operators: []compat.Operator{tc.cur}}
			res := compat.Compare(1, old, cur)
			if got := res.StateNames[tc.cur.ID] == tc.old.ID; got != tc.follows {
				t.Fatalf("follows: %v, want %v\n%s", got, tc.follows, res.Report())
			}
			if res.Allowed(false) != tc.follows {
				t.Fatalf("allowed without the flag: %v\n%s", res.Allowed(false), res.Report())
			}
		})
	}
}
