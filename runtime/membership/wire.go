package membership

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Wire formats. Both are versioned JSON objects (DESIGN.md section 4's
// convention): kafka-consumer-groups.sh and kcat show them as text. The
// version also lives in the group protocol name (protocolName): a future v2
// replica offers both protocols and the broker picks the newest one every
// member speaks, so a rolling upgrade never hands a v1 replica a v2 view.
const (
	// protocolType is the group's protocol type. It is not "consumer":
	// brokers, kadm and kafka-consumer-groups.sh would try to decode the
	// metadata and assignments of a "consumer" group as Kafka's consumer
	// protocol. Kafka Connect does the same with "connect".
	protocolType = "weir"
	// protocolName names the one balancing protocol of this version.
	protocolName = "membership-v1"
	wireVersion  = 1
)

// joinMeta is what each member sends in its JoinGroup request.
type joinMeta struct {
	V         int    `json:"v"`
	ReplicaID string `json:"replica_id"`
	// WasCoordinator says the member's newest view named it coordinator
	// and it has not lost its membership since. CoordinatorGeneration is
	// that view's group generation; it breaks a tie between two claims.
	WasCoordinator        bool  `json:"was_coordinator"`
	CoordinatorGeneration int32 `json:"coordinator_generation,omitempty"`
	// Incarnation counts the times this member lost its membership. It
	// changes the metadata after a loss, and the broker rebalances
	// whenever a member rejoins with changed metadata: so every loss ends
	// in a new group generation, even when the broker still knew the
	// member.
	Incarnation int `json:"incarnation"`
	// Instance is random, drawn when the member is created: a process
	// restarted after a crash, with the same replica ID, is another
	// instance. Views list it, so that every member sees the restart as
	// a change even when the same replica IDs are members before and
	// after it.
	Instance string `json:"instance,omitempty"`
	// MemberSince is the group generation of the first view that placed
	// this member since it was created or last lost its membership; 0
	// while it has not been placed. Of two members claiming one replica
	// ID, the leader keeps the one placed most recently and refuses the
	// other (computeViews).
	MemberSince int32    `json:"member_since,omitempty"`
	LocalTasks  []string `json:"local_tasks,omitempty"`
	// Fingerprint identifies the job file this member runs. The
	// coordinator is elected among the members of one file (elect) and
	// places tasks only on members of its own file, so that a generation
	// never runs two job files. An older member sends none: "" is a file
	// of its own.
	Fingerprint string `json:"fingerprint,omitempty"`
	// RunningGeneration is the newest job generation this member read
	// from the commit topic (0: none), RunningFingerprint the job file
	// that generation runs. They break a tie between two files when the
	// coordinator is gone (elect).
	RunningGeneration  uint64 `json:"running_generation,omitempty"`
	RunningFingerprint string `json:"running_fingerprint,omitempty"`
}

// wireView is what the leader sends each member as its assignment.
type wireView struct {
	V               int          `json:"v"`
	GroupGeneration int32        `json:"group_generation"`
	Members         []MemberInfo `json:"members"`
	Coordinator     string       `json:"coordinator"`
	Rejected        []string     `json:"rejected,omitempty"`
	// Error is set only in the assignment of a member the leader could
	// not place.
	Error *wireError `json:"error,omitempty"`
}

type wireError struct {
	Code      string `json:"code"`
	ReplicaID string `json:"replica_id,omitempty"`
	// Since is, for a refused duplicate, the group generation since which
	// the admitted member with the same replica ID has been a member (0:
	// it joined at the same time).
	Since   int32  `json:"since,omitempty"`
	Message string `json:"message"`
}

const (
	codeDuplicate       = "duplicate_replica_id"
	codeInvalidMetadata = "invalid_metadata"
)

func encodeJoinMeta(m joinMeta) []byte {
	m.V = wireVersion
	b, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("membership: encode join metadata: %v", err)) // only strings, ints and bools
	}
	return b
}

func decodeJoinMeta(b []byte) (joinMeta, error) {
	var m joinMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return joinMeta{}, fmt.Errorf("decode member metadata: %w", err)
	}
	if m.V != wireVersion {
		return joinMeta{}, fmt.Errorf("decode member metadata: unsupported version %d (this replica speaks %d)", m.V, wireVersion)
	}
	if m.ReplicaID == "" {
		return joinMeta{}, errors.New("decode member metadata: empty replica_id")
	}
	return m, nil
}

func encodeView(v wireView) []byte {
	v.V = wireVersion
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("membership: encode view: %v", err))
	}
	return b
}

func decodeView(b []byte) (wireView, error) {
	var v wireView
	if err := json.Unmarshal(b, &v); err != nil {
		return wireView{}, fmt.Errorf("decode view: %w", err)
	}
	if v.V != wireVersion {
		return wireView{}, fmt.Errorf("decode view: unsupported version %d (this replica speaks %d)", v.V, wireVersion)
	}
	return v, nil
}

// err returns the typed error a wire error stands for.
func (e *wireError) err() error {
	if e == nil {
		return nil
	}
	switch e.Code {
	case codeDuplicate:
		return &DuplicateReplicaError{ReplicaID: e.ReplicaID, Since: e.Since}
	default:
		return &PlacementError{Code: e.Code, Message: e.Message}
	}
}
