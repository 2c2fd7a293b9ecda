package membership

import "slices"

// elect chooses, among the admitted members (sorted by replica ID), the
// replica that holds the coordinator role, and so the job file the next
// generation runs: the coordinator runs its own file and places tasks only
// on the members that run the same file (a generation never runs two job
// files: DESIGN.md invariant 7). It returns "" for an empty group. It is
// pure and deterministic.
//
// The file that runs is the majority's: the fingerprint the most members
// run. On a tie it is, in this order, the file of the member that holds the
// coordinator role (sticky: it is the newest decision), the file of the
// newest generation any member read from the commit topic (it survives the
// coordinator's crash, so a kill -9 of the coordinator in the middle of a
// rolling update does not switch the job back to the file it left), and the
// file of the member with the smallest replica ID. So during a rolling
// update (docs/deploy.md) the old file keeps running until the new one has
// more members, and the job switches once; it switches back only if so
// many members of the new file fail at once that the old file has more
// members than the new one.
//
// Within that file, the coordinator is sticky: the member of the file that
// claims the role from the newest group generation (then the smallest
// replica ID) keeps it; without a claim, the smallest replica ID takes it.
// A member of another file never holds the role.
func elect(members []joinMeta) string {
	if len(members) == 0 {
		return ""
	}
	count := make(map[string]int, 2)
	most := 0
	for _, m := range members {
		count[m.Fingerprint]++
		most = max(most, count[m.Fingerprint])
	}
	tied := func(fp string) bool { return count[fp] == most }
	ties := 0
	for _, n := range count {
		if n == most {
			ties++
		}
	}

	// The first member of a tied file stands for the default: the
	// smallest replica ID's file.
	file := members[slices.IndexFunc(members, func(m joinMeta) bool { return tied(m.Fingerprint) })].Fingerprint
	if ties > 1 {
		if c := newestClaim(members, func(joinMeta) bool { return true }); c != nil && tied(c.Fingerprint) {
			file = c.Fingerprint
		} else if r := newestRunning(members); r != nil && tied(r.RunningFingerprint) {
			file = r.RunningFingerprint
		}
	}

	ofFile := func(m joinMeta) bool { return m.Fingerprint == file }
	if c := newestClaim(members, ofFile); c != nil {
		return c.ReplicaID
	}
	return members[slices.IndexFunc(members, ofFile)].ReplicaID
}

// newestClaim returns the member among those keep accepts that claims the
// coordinator role from the newest group generation, the smallest replica
// ID on a tie (members is sorted), or nil.
func newestClaim(members []joinMeta, keep func(joinMeta) bool) *joinMeta {
	var c *joinMeta
	for i := range members {
		m := &members[i]
		if m.WasCoordinator && keep(*m) && (c == nil || m.CoordinatorGeneration > c.CoordinatorGeneration) {
			c = m
		}
	}
	return c
}

// newestRunning returns the member that read the newest job generation
// from the commit topic, or nil if none read one.
func newestRunning(members []joinMeta) *joinMeta {
	var r *joinMeta
	for i := range members {
		m := &members[i]
		if m.RunningGeneration > 0 && (r == nil || m.RunningGeneration > r.RunningGeneration) {
			r = m
		}
	}
	return r
}
