package membership

import (
	"cmp"
	"slices"
)

// Place spreads tasks over the members of a view, for the coordinator. It is
// pure and deterministic: the same sets in, in any order, give the same
// assignment out.
//
// previous is the assignment of the job's last generation (replica ID → task
// IDs), as the newest generation record of the commit topic holds it; nil for
// a job that never ran. The result maps every member's replica ID, including
// members that get no task, to its tasks, sorted. It is empty when there are
// no members. Duplicate task or member IDs count once.
//
// Placement is
//   - even: every member gets ⌊n/m⌋ or ⌈n/m⌉ of the n tasks;
//   - sticky: a task stays on the member that held it in previous whenever
//     evenness allows, and the number of tasks that leave a member still in
//     the group is the smallest evenness allows (the ⌈n/m⌉ quotas go to the
//     members that would otherwise have to give up a task). So when a member
//     leaves, only its tasks move; when one joins, only as many tasks as it
//     gets move, each from a member over its new quota;
//   - local second: a task that must move (or is new) goes, when one has
//     room, to a member that lists it in LocalTasks;
//   - then balanced: any other task goes to the member with the most room
//     left (the smallest replica ID among equals).
//
// A task previous lists under several members still in the group counts as
// held by the one with the smallest replica ID.
func Place(tasks []string, members []MemberInfo, previous map[string][]string) map[string][]string {
	ids := make([]string, 0, len(members))
	local := make(map[string][]string) // task → members that list it, sorted
	for _, mi := range members {
		ids = append(ids, mi.ReplicaID)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	out := make(map[string][]string, len(ids))
	if len(ids) == 0 {
		return out
	}

	ts := slices.Clone(tasks)
	slices.Sort(ts)
	ts = slices.Compact(ts)
	isTask := make(map[string]bool, len(ts))
	for _, t := range ts {
		isTask[t] = true
	}
	for _, mi := range members {
		for _, t := range mi.LocalTasks {
			if isTask[t] {
				local[t] = append(local[t], mi.ReplicaID)
			}
		}
	}
	for t, ms := range local {
		slices.Sort(ms)
		local[t] = slices.Compact(ms)
	}

	// owner: the member still in the group that held the task before.
	owner := make(map[string]string)
	for _, id := range ids { // ascending: the smallest ID wins a task listed twice
		for _, t := range previous[id] {
			if _, taken := owner[t]; isTask[t] && !taken {
				owner[t] = id
			}
		}
	}
	kept := make(map[string][]string, len(ids))
	var free []string
	for _, t := range ts { // ascending, so each kept list is sorted
		if o, ok := owner[t]; ok {
			kept[o] = append(kept[o], t)
		} else {
			free = append(free, t)
		}
	}

	// Quotas: ⌈n/m⌉ first to the members that hold more than ⌊n/m⌋,
	// since only they would otherwise give tasks up.
	base, extra := len(ts)/len(ids), len(ts)%len(ids)
	order := slices.Clone(ids)
	slices.SortStableFunc(order, func(a, b string) int {
		return cmp.Compare(min(len(kept[b]), base+1), min(len(kept[a]), base+1))
	})
	quota := make(map[string]int, len(ids))
	for i, id := range order {
		quota[id] = base
		if i < extra {
			quota[id]++
		}
	}

	for _, id := range ids {
		k := kept[id]
		if q := quota[id]; len(k) > q {
			free = append(free, k[q:]...)
			k = k[:q]
		}
		out[id] = slices.Clip(k)
	}
	slices.Sort(free)

	room := func(id string) int { return quota[id] - len(out[id]) }
	// most room first, then the smallest ID; "" when nobody in ms has room
	pick := func(ms []string) string {
		best := ""
		for _, id := range ms {
			if r := room(id); r > 0 && (best == "" || r > room(best)) {
				best = id
			}
		}
		return best
	}
	var rest []string
	for _, t := range free {
		if id := pick(local[t]); id != "" {
			out[id] = append(out[id], t)
		} else {
			rest = append(rest, t)
		}
	}
	for _, t := range rest {
		id := pick(ids) // never "": the quotas add up to len(ts)
		out[id] = append(out[id], t)
	}
	for _, id := range ids {
		if out[id] == nil {
			out[id] = []string{}
		}
		slices.Sort(out[id])
	}
	return out
}
