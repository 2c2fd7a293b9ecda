package membership

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// MemberInfo is one member of the group as the view lists it.
type MemberInfo struct {
	// ReplicaID is the member's stable, configured identity.
	ReplicaID string `json:"replica_id"`
	// LocalTasks are the task IDs the replica said, when it joined, that it
	// holds local state for. They are a hint for placement (Place), never
	// a promise.
	LocalTasks []string `json:"local_tasks,omitempty"`
	// Instance and Incarnation identify the member's current session:
	// a restarted process has a new Instance, a member that lost its
	// membership and rejoined a new Incarnation. A view whose members
	// all have the same identity as in the member's previous view is not
	// published (nothing changed for anyone: see Member.Views).
	Instance    string `json:"instance,omitempty"`
	Incarnation int    `json:"incarnation,omitempty"`
	// Fingerprint identifies the job file the member runs ("" for a
	// member of an older version). The coordinator places tasks only on
	// the members whose Fingerprint is its own.
	Fingerprint string `json:"fingerprint,omitempty"`
}

// View is the group as one completed rebalance left it: the same for every
// member of that rebalance, except Self and Err.
//
// A view with Err != nil places nothing: the runtime stops every task and
// waits for the next view. That covers Lost views too.
type View struct {
	// GroupGeneration is the Kafka group generation the view belongs to.
	// It grows with every rebalance; it is not the job's generation,
	// which the coordinator keeps in the commit topic.
	GroupGeneration int32
	// Members are the placeable members, sorted by ReplicaID.
	Members []MemberInfo
	// Coordinator is the ReplicaID of the member that holds the
	// coordinator role, or "" when no member can hold it.
	Coordinator string
	// Self is this member's ReplicaID.
	Self string
	// Rejected lists replica IDs of members that joined but were
	// refused, because another member already claimed the same ID. The
	// admitted member with that ID is in Members.
	Rejected []string
	// Err says why this member is not placed in this view:
	// a *DuplicateReplicaError, a *PlacementError, or, with Lost, a
	// *LostError. It is nil in a view the runtime may run.
	Err error
	// Lost says the member lost its membership (session expired, fenced,
	// coordinator unreachable): another member may already run what this
	// one ran. Stop every task at once. The member keeps trying to rejoin;
	// a new view follows when it has.
	Lost bool
}

// Fingerprint returns the job file of replica id in v, and whether v lists
// it.
func (v View) Fingerprint(id string) (string, bool) {
	i := slices.IndexFunc(v.Members, func(m MemberInfo) bool { return m.ReplicaID == id })
	if i < 0 {
		return "", false
	}
	return v.Members[i].Fingerprint, true
}

// IsCoordinator reports whether this member holds the coordinator role in v.
func (v View) IsCoordinator() bool {
	return v.Err == nil && !v.Lost && v.Coordinator != "" && v.Coordinator == v.Self
}

// Sentinels for errors.Is on View.Err.
var (
	// ErrDuplicateReplicaID: another member of the group, admitted
	// before this one, uses the same replica ID. This member is refused
	// (placed nowhere); the other one goes on undisturbed.
	ErrDuplicateReplicaID = errors.New("membership: duplicate replica id")
	// ErrLost: the member lost its membership.
	ErrLost = errors.New("membership: membership lost")
	// ErrNotPlaced: the leader could not place the member (bad metadata,
	// or a view that does not list it).
	ErrNotPlaced = errors.New("membership: member not placed")
)

// DuplicateReplicaError is View.Err of a member that was refused because
// another member of the group claims the same replica ID and was admitted.
type DuplicateReplicaError struct {
	ReplicaID string
	// Since is the group generation since which the admitted member has
	// been a member; 0 when both joined at the same time.
	Since int32
}

func (e *DuplicateReplicaError) Error() string {
	since := "it joined at the same time as this one and was admitted"
	if e.Since > 0 {
		since = fmt.Sprintf("it has been a member since group generation %d", e.Since)
	}
	return fmt.Sprintf("membership: a replica with id %q is already a member of the group (%s); this one is refused: "+
		"give every replica its own id (process.replica_id), or stop the other process first", e.ReplicaID, since)
}

// Unwrap makes errors.Is(err, ErrDuplicateReplicaID) true.
func (e *DuplicateReplicaError) Unwrap() error { return ErrDuplicateReplicaID }

// PlacementError is View.Err when the leader could not place this member for
// another reason than a duplicate ID.
type PlacementError struct {
	Code    string
	Message string
}

func (e *PlacementError) Error() string {
	return fmt.Sprintf("membership: not placed (%s): %s", e.Code, e.Message)
}

// Unwrap makes errors.Is(err, ErrNotPlaced) true.
func (e *PlacementError) Unwrap() error { return ErrNotPlaced }

// LostError is View.Err of a Lost view.
type LostError struct {
	// Cause is what kgo's group management loop failed with, for example
	// UNKNOWN_MEMBER_ID after the session expired.
	Cause error
}

func (e *LostError) Error() string {
	return "membership: membership lost: " + strings.TrimPrefix(fmt.Sprint(e.Cause), "membership: ")
}

// Is makes errors.Is(err, ErrLost) true; Unwrap exposes the cause.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Unwrap returns the cause.
func (e *LostError) Unwrap() error { return e.Cause }

// joined is one member of a JoinGroup response, as the leader sees it.
type joined struct {
	MemberID string
	Meta     joinMeta
	Err      error // metadata could not be decoded
}

// computeViews is the leader's balancing: given every member that joined and
// the generation being formed, it returns each member's assignment, by member
// ID. It is pure: the same input (in any order) gives the same output.
//
// Members with undecodable metadata get an error view. Of the members that
// claim one replica ID, one is admitted and the others are refused with a
// duplicate error view: the one placed most recently (the largest
// MemberSince; a member that was never placed has 0), then the smallest
// instance and member ID. So a process started with the ID of a running
// replica is refused and the running one goes on; a member that lost its
// membership (MemberSince reset) does not displace one placed after it. A
// crashed member never rejoins, and the broker drops every member that did
// not rejoin when the rebalance's join phase ends, so it is never in
// members: a process restarted with its ID is not refused. The others get a
// view that lists only admitted members. The coordinator is elected among
// the members of the majority's job file, and is sticky within it (elect).
func computeViews(gen int32, members []joined) map[string]wireView {
	admitted := make(map[string]joined) // replica ID -> its admitted member
	claims := make(map[string]int)
	for _, m := range members {
		if m.Err != nil {
			continue
		}
		id := m.Meta.ReplicaID
		claims[id]++
		if cur, ok := admitted[id]; !ok || admitsBefore(m, cur) {
			admitted[id] = m
		}
	}
	var rejected []string
	valid := make([]joinMeta, 0, len(admitted))
	for id, m := range admitted {
		if claims[id] > 1 {
			rejected = append(rejected, id)
		}
		valid = append(valid, m.Meta)
	}
	slices.Sort(rejected)
	slices.SortFunc(valid, func(a, b joinMeta) int { return cmp.Compare(a.ReplicaID, b.ReplicaID) })

	infos := make([]MemberInfo, len(valid))
	for i, m := range valid {
		local := slices.Clone(m.LocalTasks)
		slices.Sort(local)
		infos[i] = MemberInfo{ReplicaID: m.ReplicaID, LocalTasks: slices.Compact(local), Instance: m.Instance, Incarnation: m.Incarnation,
			Fingerprint: m.Fingerprint}
	}
	coordinator := elect(valid)

	base := wireView{GroupGeneration: gen, Members: infos, Coordinator: coordinator, Rejected: rejected}
	out := make(map[string]wireView, len(members))
	for _, m := range members {
		v := base
		switch {
		case m.Err != nil:
			v.Error = &wireError{Code: codeInvalidMetadata, Message: m.Err.Error()}
		case admitted[m.Meta.ReplicaID].MemberID != m.MemberID:
			a := admitted[m.Meta.ReplicaID]
			v.Error = &wireError{Code: codeDuplicate, ReplicaID: m.Meta.ReplicaID, Since: a.Meta.MemberSince,
				Message: fmt.Sprintf("%d members claim replica id %q; member %s (instance %s) is admitted",
					claims[m.Meta.ReplicaID], m.Meta.ReplicaID, a.MemberID, a.Meta.Instance)}
		}
		out[m.MemberID] = v
	}
	return out
}

// admitsBefore reports whether a, rather than b, is admitted when both claim
// one replica ID: the member placed most recently, then the smallest
// instance and member ID (deterministic when both are new).
func admitsBefore(a, b joined) bool {
	if a.Meta.MemberSince != b.Meta.MemberSince {
		return a.Meta.MemberSince > b.Meta.MemberSince
	}
	if c := cmp.Compare(a.Meta.Instance, b.Meta.Instance); c != 0 {
		return c < 0
	}
	return a.MemberID < b.MemberID
}

// viewFor turns the assignment this member received into its View.
func viewFor(self string, w wireView) View {
	v := View{
		GroupGeneration: w.GroupGeneration,
		Members:         w.Members,
		Coordinator:     w.Coordinator,
		Self:            self,
		Rejected:        w.Rejected,
		Err:             w.Error.err(),
	}
	if v.Err == nil && !slices.ContainsFunc(w.Members, func(m MemberInfo) bool { return m.ReplicaID == self }) {
		v.Err = &PlacementError{Code: "not_listed", Message: fmt.Sprintf("the view of generation %d does not list replica %q", w.GroupGeneration, self)}
	}
	return v
}
