package membership

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"pgregory.net/rapid"
)

// electHarness plays a group through rebalances as the leader's balancer
// sees it (computeViews), and the members as they behave between two:
// the elected coordinator claims the role at its next join, a restarted
// process claims nothing, and, after every rebalance, the coordinator
// appends a generation of its own file to the commit topic, which every
// member reads before the next join.
type electHarness struct {
	members map[string]joinMeta // running members by replica ID
	gen     int32               // group generation
	jobGen  uint64              // newest job generation on the commit topic
	jobFP   string              // its file
}

func newElectHarness() *electHarness { return &electHarness{members: map[string]joinMeta{}} }

// start starts replica id with job file fp: a new process, which reads the
// commit topic before it joins.
func (h *electHarness) start(id, fp string) {
	h.members[id] = joinMeta{V: wireVersion, ReplicaID: id, Instance: fmt.Sprintf("%s-%d", id, h.gen), Fingerprint: fp,
		RunningGeneration: h.jobGen, RunningFingerprint: h.jobFP}
}

// rebalance runs the leader's balancing over the running members and
// returns the coordinator and its file. With sync, the coordinator then
// writes a generation and every member reads it.
func (h *electHarness) rebalance(sync bool) (coord, fp string) {
	h.gen++
	var js []joined
	for _, id := range slices.Sorted(maps.Keys(h.members)) {
		js = append(js, joined{MemberID: "m-" + id, Meta: h.members[id]})
	}
	views := computeViews(h.gen, js)
	if len(js) == 0 {
		return "", ""
	}
	coord = views[js[0].MemberID].Coordinator
	fp = h.members[coord].Fingerprint
	for id, m := range h.members {
		m.WasCoordinator, m.CoordinatorGeneration = id == coord, 0
		if id == coord {
			m.CoordinatorGeneration = h.gen
		}
		h.members[id] = m
	}
	if sync {
		h.jobGen++
		h.jobFP = fp
		for id, m := range h.members {
			m.RunningGeneration, m.RunningFingerprint = h.jobGen, h.jobFP
			h.members[id] = m
		}
	}
	return coord, fp
}

// files describes the running members by file: "v1: a b; v2: c".
func (h *electHarness) files() string {
	by := map[string][]string{}
	for _, id := range slices.Sorted(maps.Keys(h.members)) {
		fp := h.members[id].Fingerprint
		by[fp] = append(by[fp], id)
	}
	var parts []string
	for _, fp := range slices.Sorted(maps.Keys(by)) {
		parts = append(parts, fmt.Sprintf("%s: %s", cmpOr(fp, `""`), strings.Join(by[fp], " ")))
	}
	return strings.Join(parts, "; ")
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// TestElect runs the scripts in testdata/elect: rolling updates as a
// StatefulSet does them, with kills, ties and races.
//
//	start <id> file=<fp>   a new process of replica id, running file fp
//	stop <id>              the replica leaves (SIGTERM, or kill -9 once its session expired)
//	rebalance [nosync]     the leader balances; nosync: nobody reads the generation the coordinator writes
func TestElect(t *testing.T) {
	datadriven.Walk(t, "testdata/elect", func(t *testing.T, path string) {
		h := newElectHarness()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "start":
				var fp string
				d.ScanArgs(t, "file", &fp)
				h.start(d.CmdArgs[0].Key, fp)
				return ""
			case "stop":
				id := d.CmdArgs[0].Key
				if _, ok := h.members[id]; !ok {
					d.Fatalf(t, "replica %s is not running", id)
				}
				delete(h.members, id)
				return ""
			case "rebalance":
				coord, fp := h.rebalance(!d.HasArg("nosync"))
				if coord == "" {
					return "no members\n"
				}
				return fmt.Sprintf("coordinator %s runs %s (%s)\n", coord, cmpOr(fp, `""`), h.files())
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
				return ""
			}
		})
	})
}

// TestElectProperties checks elect on random groups: the coordinator is a
// member, runs a file no other file has more members of, and is the same
// whatever the order of the members.
func TestElectProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(t, "members")
		var ms []joinMeta
		for i := range n {
			ms = append(ms, joinMeta{
				ReplicaID:             fmt.Sprintf("r%d", i),
				Fingerprint:           rapid.SampledFrom([]string{"", "v1", "v2", "v3"}).Draw(t, "fp"),
				WasCoordinator:        rapid.Bool().Draw(t, "claim"),
				CoordinatorGeneration: rapid.Int32Range(0, 3).Draw(t, "claim_gen"),
				RunningGeneration:     rapid.Uint64Range(0, 3).Draw(t, "running_gen"),
				RunningFingerprint:    rapid.SampledFrom([]string{"", "v1", "v2", "v3"}).Draw(t, "running_fp"),
			})
		}
		coord := elect(ms)
		i := slices.IndexFunc(ms, func(m joinMeta) bool { return m.ReplicaID == coord })
		if i < 0 {
			t.Fatalf("coordinator %q is not a member", coord)
		}
		count := map[string]int{}
		for _, m := range ms {
			count[m.Fingerprint]++
		}
		for fp, c := range count {
			if c > count[ms[i].Fingerprint] {
				t.Fatalf("coordinator %s runs %q (%d members), but %q has %d", coord, ms[i].Fingerprint, count[ms[i].Fingerprint], fp, c)
			}
		}
		perm := rapid.Permutation(ms).Draw(t, "perm")
		slices.SortFunc(perm, func(a, b joinMeta) int { return strings.Compare(a.ReplicaID, b.ReplicaID) })
		if again := elect(perm); again != coord {
			t.Fatalf("elect is not deterministic: %s, then %s", coord, again)
		}
	})
}

// TestRollingUpdateSwitchesOnce plays random rolling updates from v1 to v2
// as a StatefulSet does them (each replica in turn, from the highest
// ordinal: stop it, start it with v2, next once it joined), with kill -9s
// of random replicas in between, each restarted with the file it ran
// (Kubernetes restarts a killed pod with its own revision); at most one
// replica is down at a time. The job must switch from v1 to v2 once and
// never back, and run v2 at the end.
func TestRollingUpdateSwitchesOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 5).Draw(t, "replicas")
		h := newElectHarness()
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("weir-%d", i)
			h.start(ids[i], "v1")
		}
		var ran []string
		rebalance := func() {
			coord, fp := h.rebalance(true)
			if coord == "" {
				return // an empty group runs nothing
			}
			if len(ran) == 0 || ran[len(ran)-1] != fp {
				ran = append(ran, fp)
			}
		}
		rebalance()
		kill := func() {
			id := rapid.SampledFrom(slices.Sorted(maps.Keys(h.members))).Draw(t, "killed")
			fp := h.members[id].Fingerprint
			delete(h.members, id)
			rebalance()
			h.start(id, fp)
			rebalance()
		}
		for i := n - 1; i >= 0; i-- {
			if rapid.Bool().Draw(t, "kill before") {
				kill()
			}
			delete(h.members, ids[i])
			rebalance()
			h.start(ids[i], "v2")
			rebalance()
		}
		if rapid.Bool().Draw(t, "kill after") {
			kill()
		}
		if !slices.Equal(ran, []string{"v1", "v2"}) {
			t.Fatalf("the job ran %v; want v1 then v2, once", ran)
		}
	})
}
