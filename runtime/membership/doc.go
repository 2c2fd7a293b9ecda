// Package membership makes processor replicas members of the job's Kafka
// consumer group `<prefix>members` (DESIGN.md section 6) and tells each
// replica, after every rebalance, the group's view: which replicas are
// members, what local state each says it holds, and which one holds the
// coordinator role. It also provides Place, the pure function the
// coordinator replica uses to spread tasks over a view's members.
//
// It owns: the group's liveness (session timeout, heartbeats, leaving), the
// choice of the coordinator replica (among the members of the job file most
// members run, so that a generation never runs two files; sticky: it stays
// where it is while that replica is a member of that file: elect), and the
// detection of duplicate replica IDs.
//
// It must not: place tasks itself (the coordinator does, with Place, from a
// view and the job's durable history in the commit topic), start or stop
// tasks, write any control topic, or consume records: the group subscribes to
// one topic only because Kafka requires it, and is assigned no partitions, so
// kgo never fetches (membership_test.go checks that no Fetch, OffsetFetch or
// ListOffsets request is ever sent).
//
// # How it works
//
// The group uses kgo's classic consumer-group machinery with this package's
// kgo.GroupBalancer, protocol type "weir" and protocol "membership-v1". Each
// member sends in its JoinGroup metadata a versioned JSON object: its replica
// ID, whether its newest view made it coordinator (and that view's
// generation), an incarnation count, a random instance token, the
// generation since which it has been placed, its local tasks, the
// fingerprint of its job file, and the newest job generation it read from
// the commit topic with that generation's file (a tie-break of elect). Of two
// members claiming one replica ID the leader admits the one placed most
// recently and refuses the other; a member does not publish a view in
// which every member's session (ID, instance, incarnation) and the
// coordinator are as in its previous one, so a refused duplicate's joining
// and leaving restart nothing. The group leader's
// balancer computes one view for everybody and sends it, as JSON, as every
// member's assignment; each member decodes it in ParseSyncAssignment, which
// returns no partitions, and publishes it when kgo calls OnPartitionsAssigned.
// A member that loses its session publishes a Lost view and rejoins with a
// new incarnation, which changes its metadata and so always forces a new
// group generation. It notices the loss from kgo (a request answered with
// UNKNOWN_MEMBER_ID, or failing for longer than its retry timeout) or, first
// when the network drops packets, from its own lease: it counts itself a
// member only until a session timeout after the newest answered heartbeat
// began, which is never later than the broker's own deadline for it.
//
// # Goroutines
//
//   - kgo's group management goroutine calls the balancer (JoinGroupMetadata,
//     MemberBalancer, Balance, ParseSyncAssignment), OnPartitionsRevoked and
//     the group-error hook; a goroutine kgo starts per session calls
//     OnPartitionsAssigned. They
//     never run at the same time as each other, but run concurrently with the
//     caller's goroutines.
//   - Member.mu guards everything they share with the caller: the view
//     waiting to be published, the newest published view, the coordinator
//     claim, the incarnation, the lease, and whether Views is closed. Only
//     publishLocked sends on Views, under mu, and never blocks: the channel
//     holds one view, and a newer view replaces an unread one.
//   - kgo's connection goroutines call the lease hook (OnBrokerE2E), which
//     renews the lease under mu when a Heartbeat or SyncGroup is answered.
//   - Two goroutines per Member: drain polls the client until it is closed,
//     so that errors kgo queues for polling do not pile up; watch checks the
//     lease a few times a second and, when no heartbeat was answered for a
//     session timeout, publishes a Lost view and makes kgo rejoin.
//   - Leave may be called from any goroutine; it closes Views, stops watch,
//     leaves the group, closes the client and waits for drain.
//
// There is no package-level mutable state: metrics go to the injected
// prometheus.Registerer and logs to the injected *slog.Logger.
package membership
