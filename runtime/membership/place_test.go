package membership

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// genIDs draws a set of distinct IDs with the given prefix.
func genIDs(t *rapid.T, label, prefix string, maxN int) []string {
	n := rapid.IntRange(0, maxN).Draw(t, label+"_n")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return ids
}

// genPrevious draws an earlier assignment without duplicates: every task of
// tasks (plus some that no longer exist) on a random replica among old.
func genPrevious(t *rapid.T, tasks, old []string) map[string][]string {
	prev := make(map[string][]string)
	if len(old) == 0 {
		return prev
	}
	all := append(slices.Clone(tasks), "gone-1", "gone-2")
	for _, task := range all {
		if rapid.IntRange(0, 9).Draw(t, "unassigned") == 0 {
			continue
		}
		r := rapid.SampledFrom(old).Draw(t, "holder")
		prev[r] = append(prev[r], task)
	}
	return prev
}

func checkEvenAndComplete(t *rapid.T, tasks []string, members []MemberInfo, got map[string][]string) {
	if len(members) == 0 {
		if len(got) != 0 {
			t.Fatalf("no members but placed %v", got)
		}
		return
	}
	if len(got) != len(members) {
		t.Fatalf("got %d members in the placement, want %d: %v", len(got), len(members), got)
	}
	seen := make(map[string]string)
	lo, hi := len(tasks), 0
	for _, mi := range members {
		ts, ok := got[mi.ReplicaID]
		if !ok {
			t.Fatalf("member %s missing from placement", mi.ReplicaID)
		}
		if !slices.IsSorted(ts) {
			t.Fatalf("tasks of %s not sorted: %v", mi.ReplicaID, ts)
		}
		lo, hi = min(lo, len(ts)), max(hi, len(ts))
		for _, task := range ts {
			if other, dup := seen[task]; dup {
				t.Fatalf("task %s placed on %s and %s", task, other, mi.ReplicaID)
			}
			seen[task] = mi.ReplicaID
		}
	}
	if hi-lo > 1 {
		t.Fatalf("sizes from %d to %d: not even", lo, hi)
	}
	if len(seen) != len(tasks) {
		t.Fatalf("placed %d tasks, want %d", len(seen), len(tasks))
	}
	for _, task := range tasks {
		if _, ok := seen[task]; !ok {
			t.Fatalf("task %s not placed", task)
		}
	}
}

// minMoves is the fewest tasks that must leave a member still in the group,
// computed independently of Place: a member holding k > ⌊n/m⌋ tasks gives up
// k-⌊n/m⌋ of them, one fewer if it gets one of the n mod m larger quotas.
func minMoves(tasks []string, ids []string, prev map[string][]string) int {
	isTask := make(map[string]bool)
	for _, task := range tasks {
		isTask[task] = true
	}
	if len(ids) == 0 {
		return 0
	}
	base, extra := len(tasks)/len(ids), len(tasks)%len(ids)
	total, over := 0, 0
	for _, id := range ids {
		k := 0
		for _, task := range prev[id] {
			if isTask[task] {
				k++
			}
		}
		if k > base {
			total += k - base
			over++
		}
	}
	return total - min(extra, over)
}

func moves(ids []string, prev, got map[string][]string) int {
	holder := make(map[string]string)
	for id, ts := range got {
		for _, task := range ts {
			holder[task] = id
		}
	}
	n := 0
	for _, id := range ids {
		for _, task := range prev[id] {
			if h, ok := holder[task]; ok && h != id {
				n++
			}
		}
	}
	return n
}

func infos(ids []string) []MemberInfo {
	ms := make([]MemberInfo, len(ids))
	for i, id := range ids {
		ms[i] = MemberInfo{ReplicaID: id}
	}
	return ms
}

func TestPlaceProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tasks := genIDs(t, "tasks", "task-", 40)
		old := genIDs(t, "old", "r", 8)
		prev := genPrevious(t, tasks, old)
		// The new member set: some old replicas stay, some new ones join.
		var ids []string
		for _, id := range old {
			if rapid.Bool().Draw(t, "stays") {
				ids = append(ids, id)
			}
		}
		for i := range rapid.IntRange(0, 4).Draw(t, "joiners") {
			ids = append(ids, fmt.Sprintf("new%02d", i))
		}
		members := infos(ids)
		for i := range members {
			if len(tasks) > 0 && rapid.Bool().Draw(t, "has_local") {
				members[i].LocalTasks = rapid.SliceOfDistinct(rapid.SampledFrom(tasks), rapid.ID[string]).Draw(t, "local")
			}
		}

		got := Place(tasks, members, prev)
		checkEvenAndComplete(t, tasks, members, got)
		if want, n := minMoves(tasks, ids, prev), moves(ids, prev, got); n != want {
			t.Fatalf("%d tasks left a member still in the group, the fewest possible is %d\nprev %v\ngot  %v", n, want, prev, got)
		}

		// Deterministic, and independent of input order.
		again := Place(rapid.Permutation(tasks).Draw(t, "tasks_perm"), rapid.Permutation(members).Draw(t, "members_perm"), maps.Clone(prev))
		if !reflect.DeepEqual(got, again) {
			t.Fatalf("not deterministic:\n%v\n%v", got, again)
		}
	})
}

// TestPlaceGarbagePrevious: a previous assignment that lists tasks twice,
// unknown replicas and unknown tasks still gives an even, complete placement.
func TestPlaceGarbagePrevious(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tasks := genIDs(t, "tasks", "task-", 30)
		ids := genIDs(t, "members", "r", 6)
		prev := rapid.MapOf(rapid.StringMatching(`r0[0-9]`), rapid.SliceOf(rapid.StringMatching(`task-[0-3][0-9]`))).Draw(t, "prev")
		checkEvenAndComplete(t, tasks, infos(ids), Place(tasks, infos(ids), prev))
	})
}

// A member that leaves: only its tasks move.
func TestPlaceLeaveMovesOnlyItsTasks(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tasks := genIDs(t, "tasks", "task-", 50)
		ids := genIDs(t, "members", "r", 8)
		if len(ids) < 2 {
			ids = []string{"r00", "r01"}
		}
		prev := Place(tasks, infos(ids), nil)
		gone := rapid.SampledFrom(ids).Draw(t, "gone")
		rest := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == gone })
		got := Place(tasks, infos(rest), prev)
		checkEvenAndComplete(t, tasks, infos(rest), got)
		for _, id := range rest {
			for _, task := range prev[id] {
				if !slices.Contains(got[id], task) {
					t.Fatalf("%s moved off %s although only %s left", task, id, gone)
				}
			}
		}
	})
}

// A member that joins: it gets ⌊n/m⌋ or ⌈n/m⌉ tasks, and those are the only
// ones that move.
func TestPlaceJoinMovesOnlyTheNewcomersShare(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tasks := genIDs(t, "tasks", "task-", 50)
		ids := genIDs(t, "members", "r", 8)
		if len(ids) == 0 {
			ids = []string{"r00"}
		}
		prev := Place(tasks, infos(ids), nil)
		all := append(slices.Clone(ids), "zz-new")
		got := Place(tasks, infos(all), prev)
		checkEvenAndComplete(t, tasks, infos(all), got)
		if n, share := moves(ids, prev, got), len(got["zz-new"]); n != share {
			t.Fatalf("%d tasks moved, but the newcomer got %d", n, share)
		}
	})
}

// Tasks that must move go to a member that holds their state when it has room.
func TestPlaceLocalTasksPreferred(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tasks := genIDs(t, "tasks", "task-", 40)
		ids := genIDs(t, "members", "r", 6)
		if len(ids) == 0 {
			return
		}
		// Disjoint local sets of at most ⌊n/m⌋ tasks, no previous.
		base := len(tasks) / len(ids)
		perm := rapid.Permutation(tasks).Draw(t, "perm")
		members := infos(ids)
		for i := range members {
			k := rapid.IntRange(0, base).Draw(t, "k")
			members[i].LocalTasks, perm = perm[:k], perm[k:]
		}
		got := Place(tasks, members, nil)
		checkEvenAndComplete(t, tasks, members, got)
		for _, mi := range members {
			for _, task := range mi.LocalTasks {
				if !slices.Contains(got[mi.ReplicaID], task) {
					t.Fatalf("%s has local state on %s but went elsewhere: %v", task, mi.ReplicaID, got)
				}
			}
		}
	})
}

func TestPlaceExamples(t *testing.T) {
	tasks := []string{"a-0", "a-1", "a-2", "a-3", "a-4", "a-5", "a-6"}
	for _, tc := range []struct {
		name    string
		members []MemberInfo
		prev    map[string][]string
		want    map[string][]string
	}{{
		name:    "no members",
		members: nil,
		want:    map[string][]string{},
	}, {
		name:    "fresh start",
		members: infos([]string{"r2", "r1", "r3"}),
		want:    map[string][]string{"r1": {"a-0", "a-1", "a-4"}, "r2": {"a-2", "a-5"}, "r3": {"a-3", "a-6"}},
	}, {
		name:    "r3 left",
		members: infos([]string{"r1", "r2"}),
		prev:    map[string][]string{"r1": {"a-0", "a-3", "a-6"}, "r2": {"a-1", "a-4"}, "r3": {"a-2", "a-5"}},
		want:    map[string][]string{"r1": {"a-0", "a-2", "a-3", "a-6"}, "r2": {"a-1", "a-4", "a-5"}},
	}, {
		name:    "r4 joined and holds a-5 locally",
		members: []MemberInfo{{ReplicaID: "r1"}, {ReplicaID: "r2"}, {ReplicaID: "r3"}, {ReplicaID: "r4", LocalTasks: []string{"a-5", "zz"}}},
		prev:    map[string][]string{"r1": {"a-0", "a-3", "a-6"}, "r2": {"a-1", "a-4"}, "r3": {"a-2", "a-5"}},
		want:    map[string][]string{"r1": {"a-0", "a-3"}, "r2": {"a-1", "a-4"}, "r3": {"a-2", "a-5"}, "r4": {"a-6"}},
	}, {
		name:    "more members than tasks",
		members: infos([]string{"r1", "r2"}),
		prev:    map[string][]string{"r2": {"a-0"}},
		want:    map[string][]string{"r1": {"a-1", "a-3", "a-5"}, "r2": {"a-0", "a-2", "a-4", "a-6"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Place(tasks, tc.members, tc.prev); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %v\nwant %v", got, tc.want)
			}
		})
	}
}
