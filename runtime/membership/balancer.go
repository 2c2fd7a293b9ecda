package membership

import (
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// balancer is the group's kgo.GroupBalancer. kgo calls it from its group
// management goroutine; it reads the member's state through m (under m.mu)
// and hands the decoded view back to m.
type balancer struct {
	m *Member
}

var _ kgo.GroupBalancer = (*balancer)(nil)

func (b *balancer) ProtocolName() string { return protocolName }

// IsCooperative is false: the group owns no partitions, so there is nothing
// to keep consuming across a rebalance, and every rebalance is a new view.
func (b *balancer) IsCooperative() bool { return false }

// JoinGroupMetadata ignores kgo's topic interests and owned partitions: the
// group consumes nothing.
func (b *balancer) JoinGroupMetadata([]string, map[string][]int32, int32) []byte {
	return encodeJoinMeta(b.m.joinMeta())
}

// ParseSyncAssignment decodes this member's view, keeps it for
// OnPartitionsAssigned to publish, and assigns no partitions. A view that
// does not decode becomes an error view rather than an error: an error would
// make kgo leave the session and retry the same join in a loop.
func (b *balancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	w, err := decodeView(assignment)
	var v View
	if err != nil {
		v = View{Self: b.m.opts.ReplicaID, Err: &PlacementError{Code: codeInvalidMetadata, Message: err.Error()}}
	} else {
		v = viewFor(b.m.opts.ReplicaID, w)
	}
	b.m.synced(v)
	return map[string][]int32{}, nil
}

// MemberBalancer decodes every member's metadata. It returns no topics, so
// kgo loads no topic metadata before balancing.
func (b *balancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	js := make([]joined, 0, len(members))
	seen := make(map[string]bool, len(members))
	for _, mem := range members {
		if seen[mem.MemberID] { // a broken broker could list one twice
			continue
		}
		seen[mem.MemberID] = true
		meta, err := decodeJoinMeta(mem.ProtocolMetadata)
		js = append(js, joined{MemberID: mem.MemberID, Meta: meta, Err: err})
	}
	return &memberBalancer{b: b, members: js}, map[string]struct{}{}, nil
}

// memberBalancer balances one generation. kgo sets the generation through
// SetBalanceInfo before it calls Balance.
type memberBalancer struct {
	b       *balancer
	members []joined
	gen     int32
}

var (
	_ kgo.GroupMemberBalancer     = (*memberBalancer)(nil)
	_ kgo.GroupMemberBalancerInfo = (*memberBalancer)(nil)
)

func (mb *memberBalancer) SetBalanceInfo(info kgo.BalanceInfo) { mb.gen = info.Generation }

func (mb *memberBalancer) Balance(map[string]int32) kgo.IntoSyncAssignment {
	views := computeViews(mb.gen, mb.members)
	mb.b.m.balanced(mb.gen, mb.members, views)
	return syncAssignment(views)
}

// syncAssignment is a balance plan: one encoded view per member ID.
type syncAssignment map[string]wireView

func (s syncAssignment) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment {
	out := make([]kmsg.SyncGroupRequestGroupAssignment, 0, len(s))
	for _, id := range slices.Sorted(maps.Keys(s)) {
		a := kmsg.NewSyncGroupRequestGroupAssignment()
		a.MemberID = id
		a.MemberAssignment = encodeView(s[id])
		out = append(out, a)
	}
	return out
}
