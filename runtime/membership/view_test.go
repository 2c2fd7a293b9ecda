package membership

import (
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"pgregory.net/rapid"
)

func meta(id string, wasCoord bool, gen int32, local ...string) joinMeta {
	return joinMeta{V: wireVersion, ReplicaID: id, WasCoordinator: wasCoord, CoordinatorGeneration: gen, LocalTasks: local}
}

func since(m joinMeta, gen int32, instance string) joinMeta {
	m.MemberSince, m.Instance = gen, instance
	return m
}

func TestComputeViews(t *testing.T) {
	for _, tc := range []struct {
		name     string
		members  []joined
		coord    string
		listed   []string
		rejected []string
		errs     map[string]error // member ID → wanted errors.Is target
	}{{
		name:    "smallest id without a coordinator",
		members: []joined{{MemberID: "m1", Meta: meta("c", false, 0)}, {MemberID: "m2", Meta: meta("a", false, 0)}, {MemberID: "m3", Meta: meta("b", false, 0)}},
		coord:   "a", listed: []string{"a", "b", "c"},
	}, {
		name:    "sticky coordinator",
		members: []joined{{MemberID: "m1", Meta: meta("c", true, 4)}, {MemberID: "m2", Meta: meta("a", false, 0)}},
		coord:   "c", listed: []string{"a", "c"},
	}, {
		name:    "two claims: the newest generation wins",
		members: []joined{{MemberID: "m1", Meta: meta("a", true, 3)}, {MemberID: "m2", Meta: meta("b", true, 7)}},
		coord:   "b", listed: []string{"a", "b"},
	}, {
		name:    "two claims of one generation: the smallest id wins",
		members: []joined{{MemberID: "m1", Meta: meta("b", true, 3)}, {MemberID: "m2", Meta: meta("a", true, 3)}},
		coord:   "a", listed: []string{"a", "b"},
	}, {
		name: "a duplicate is refused; the member placed before it goes on",
		members: []joined{{MemberID: "m1", Meta: since(meta("a", true, 3), 3, "i1")}, {MemberID: "m2", Meta: since(meta("a", false, 0), 0, "i0")},
			{MemberID: "m3", Meta: since(meta("b", false, 0), 5, "i3")}},
		coord: "a", listed: []string{"a", "b"}, rejected: []string{"a"},
		errs: map[string]error{"m2": ErrDuplicateReplicaID},
	}, {
		name:    "duplicates that join together: the smallest instance is admitted",
		members: []joined{{MemberID: "m1", Meta: since(meta("a", false, 0), 0, "y")}, {MemberID: "m2", Meta: since(meta("a", false, 0), 0, "x")}},
		coord:   "a", listed: []string{"a"}, rejected: []string{"a"},
		errs: map[string]error{"m1": ErrDuplicateReplicaID},
	}, {
		name: "a member that lost its membership does not displace the one placed after it",
		members: []joined{{MemberID: "m1", Meta: since(meta("a", false, 0), 0, "old")},
			{MemberID: "m2", Meta: since(meta("a", true, 7), 7, "new")}},
		coord: "a", listed: []string{"a"}, rejected: []string{"a"},
		errs: map[string]error{"m1": ErrDuplicateReplicaID},
	}, {
		name:    "unreadable metadata",
		members: []joined{{MemberID: "m1", Err: errors.New("bad")}, {MemberID: "m2", Meta: meta("b", false, 0)}},
		coord:   "b", listed: []string{"b"},
		errs: map[string]error{"m1": ErrNotPlaced},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			views := computeViews(9, tc.members)
			if len(views) != len(tc.members) {
				t.Fatalf("%d views for %d members", len(views), len(tc.members))
			}
			for _, j := range tc.members {
				w := views[j.MemberID]
				// Through the wire, as a member receives it.
				w, err := decodeView(encodeView(w))
				if err != nil {
					t.Fatal(err)
				}
				v := viewFor(j.Meta.ReplicaID, w)
				if v.GroupGeneration != 9 || v.Coordinator != tc.coord || !slices.Equal(memberIDs(v.Members), tc.listed) || !slices.Equal(v.Rejected, tc.rejected) {
					t.Fatalf("member %s: view %+v; want coordinator %q, members %v, rejected %v", j.MemberID, v, tc.coord, tc.listed, tc.rejected)
				}
				if want := tc.errs[j.MemberID]; want == nil && v.Err != nil || want != nil && !errors.Is(v.Err, want) {
					t.Fatalf("member %s: err %v, want %v", j.MemberID, v.Err, want)
				}
				if v.IsCoordinator() != (v.Err == nil && j.Meta.ReplicaID == tc.coord) {
					t.Fatalf("member %s: IsCoordinator %v", j.MemberID, v.IsCoordinator())
				}
			}
		})
	}
}

// Every member gets the same members and coordinator, whatever the order in
// which the broker lists them.
func TestComputeViewsOrderIndependent(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 8).Draw(t, "n")
		var members []joined
		for i := range n {
			id := rapid.SampledFrom([]string{"a", "b", "c", "d", "e", "f"}).Draw(t, "id")
			members = append(members, joined{MemberID: string(rune('A' + i)), Meta: meta(id, rapid.Bool().Draw(t, "was"),
				rapid.Int32Range(0, 3).Draw(t, "gen"), rapid.SliceOf(rapid.StringMatching(`t[0-9]`)).Draw(t, "local")...)})
			members[i].Meta = since(members[i].Meta, rapid.Int32Range(0, 2).Draw(t, "since"), rapid.SampledFrom([]string{"", "x", "y"}).Draw(t, "instance"))
		}
		a := computeViews(5, members)
		b := computeViews(5, rapid.Permutation(members).Draw(t, "perm"))
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("order changed the views:\n%v\n%v", a, b)
		}
		var first *wireView
		for _, w := range a {
			w.Error = nil
			if first == nil {
				first = &w
			} else if !reflect.DeepEqual(*first, w) {
				t.Fatalf("members got different views:\n%v\n%v", *first, w)
			}
		}
	})
}

func TestWireRejectsUnknownVersions(t *testing.T) {
	for _, in := range []string{`{"v":2,"replica_id":"a"}`, `{"replica_id":"a"}`, `{"v":1}`, `not json`} {
		if _, err := decodeJoinMeta([]byte(in)); err == nil {
			t.Errorf("decodeJoinMeta(%s) accepted", in)
		}
	}
	for _, in := range []string{`{"v":2,"members":[]}`, `{}`, `[`} {
		if _, err := decodeView([]byte(in)); err == nil {
			t.Errorf("decodeView(%s) accepted", in)
		}
	}
	if _, err := decodeJoinMeta([]byte(`{"v":2,"replica_id":"a"}`)); err == nil || !strings.Contains(err.Error(), "unsupported version 2") {
		t.Errorf("error does not name the version: %v", err)
	}
}

// The balancer through kgo's interfaces: metadata in, one assignment per
// member out, none of them assigning partitions.
func TestBalancerRoundTrip(t *testing.T) {
	ms := []*Member{}
	var resp []kmsg.JoinGroupResponseMember
	for i, id := range []string{"r2", "r1", "r3"} {
		m := &Member{opts: Options{ReplicaID: id, LocalTasks: func() []string { return []string{"t2", "t1", "t1"} }}}
		m.log = slog.New(slog.DiscardHandler)
		ms = append(ms, m)
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = string(rune('a' + i))
		jm.ProtocolMetadata = (&balancer{m: m}).JoinGroupMetadata([]string{"topic"}, nil, -1)
		resp = append(resp, jm)
	}
	b := &balancer{m: ms[0]}
	mb, topics, err := b.MemberBalancer(resp)
	if err != nil || len(topics) != 0 {
		t.Fatalf("MemberBalancer: topics %v, err %v", topics, err)
	}
	mb.(kgo.GroupMemberBalancerInfo).SetBalanceInfo(kgo.BalanceInfo{Generation: 4})
	plan := mb.Balance(nil).IntoSyncAssignment()
	if len(plan) != 3 {
		t.Fatalf("plan for %d members", len(plan))
	}
	for i, a := range plan {
		m := ms[i] // plan is sorted by member ID a, b, c, as ms
		assigned, err := (&balancer{m: m}).ParseSyncAssignment(a.MemberAssignment)
		if err != nil || len(assigned) != 0 {
			t.Fatalf("ParseSyncAssignment: %v, %v", assigned, err)
		}
		v := *m.pending
		if v.Err != nil || v.GroupGeneration != 4 || v.Coordinator != "r1" || v.Self != m.opts.ReplicaID ||
			!slices.Equal(memberIDs(v.Members), []string{"r1", "r2", "r3"}) || !slices.Equal(v.Members[0].LocalTasks, []string{"t1", "t2"}) {
			t.Fatalf("view of %s: %+v", m.opts.ReplicaID, v)
		}
	}
}
