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

// TestStageFollowsItsFirstStep: an aggregate inserted before the key_by
// renames the aggregate after it (aggregate → aggregate-2), which names
// its stage. The stage keeps the checkpoint's name, under which its tasks,
// shuffle topic and sinks run; the job's checkpoints record both names, so
// that the next restore of the same file runs it so again without a word,
// and a later edit that removes the inserted aggregate finds the stage
// under its own name.
func TestStageFollowsItsFirstStep(t *testing.T) {
	const (
		v1YAML = src + "    - key_by: {expr: key}\n" + aggs + sink
		v2YAML = src + "    - aggregate: {n: {count: true}}\n    - key_by: {expr: key}\n" + aggs + sink
	)
	v1 := schemaOf(t, v1YAML, 4, "", nil)
	v2 := schemaOf(t, v2YAML, 4, "", nil)

	res := compat.Compare(1, v1, v2)
	wantStages := map[string]string{"aggregate-2": "aggregate"}
	wantState := map[string]string{"aggregate-2": "aggregate", "aggregate": "aggregate#2"}
	if !maps.Equal(res.StageNames, wantStages) || !maps.Equal(res.StateNames, wantState) || !res.Allowed(false) {
		t.Fatalf("v1 → v2: stages %v (want %v), state %v (want %v)\n%s", res.StageNames, wantStages, res.StateNames, wantState, res.Report())
	}
	// v2 runs its stage under the checkpoint's name: the sinks' transactional
	// IDs are the checkpoint's, and the checkpoints record both names.
	ran := schemaUnder(t, v2YAML, 4, "", nil, res.StageNames)
	rec := ran.WithStateNames(res.StateNames)
	if err := rec.Validate(); err != nil {
		t.Fatal(err)
	}
	st := rec.Stage("aggregate")
	if st == nil || st.Defined != "aggregate-2" || st.NamedAfter != "aggregate-2" {
		t.Fatalf("recorded stages %+v", rec.Stages)
	}
	if v1.Sinks[0].TransactionalIDPrefix != rec.Sinks[0].TransactionalIDPrefix {
		t.Fatalf("sink transactional IDs %q, the checkpoint's %q", rec.Sinks[0].TransactionalIDPrefix, v1.Sinks[0].TransactionalIDPrefix)
	}
	if again := compat.Compare(1, v1, ran); !maps.Equal(again.StageNames, wantStages) {
		t.Fatalf("v1 → v2 as it runs: stages %v\n%s", again.StageNames, again.Report())
	}

	// v2 restarted on its own checkpoint, from either form of its schema:
	// the same names, nothing said.
	for _, cur := range []*compat.Schema{v2, ran} {
		again := compat.Compare(2, &rec, cur)
		if !maps.Equal(again.StageNames, wantStages) || !maps.Equal(again.StateNames, wantState) || len(again.Differences) != 0 {
			t.Fatalf("v2 → v2: stages %v, state %v\n%s", again.StageNames, again.StateNames, again.Report())
		}
	}

	// v3 is v1 again: its stage has the name it runs under, the inserted
	// aggregate's state is dropped (with the flag).
	v3 := schemaOf(t, v1YAML, 4, "", nil)
	back := compat.Compare(3, &rec, v3)
	if len(back.StageNames) != 0 || len(back.StateNames) != 0 || back.Allowed(false) || !back.Allowed(true) {
		t.Fatalf("v2 → v3: stages %v, state %v, want none; allowed only with the flag\n%s", back.StageNames, back.StateNames, back.Report())
	}
}
