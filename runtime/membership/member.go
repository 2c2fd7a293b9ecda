package membership

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-stream/weir/internal/promreg"
)

// GroupName returns the membership group of a job whose control topics and
// groups use prefix (DESIGN.md section 6): "<prefix>members".
func GroupName(prefix string) string { return prefix + "members" }

// Defaults of the timing options.
const (
	DefaultSessionTimeout = 10 * time.Second
	// maxHeartbeatInterval caps the default heartbeat interval: a member
	// learns that a rebalance started only at its next heartbeat.
	maxHeartbeatInterval = 3 * time.Second
)

// Options configure a Member.
type Options struct {
	// Kafka are the client options: seed brokers, TLS, SASL, dialer,
	// logger. Join adds the group options itself; Kafka must not set
	// kgo.InstanceID (static members would not produce a new view when a
	// replica restarts, and a duplicate would fence instead of being
	// reported) or kgo.Rack (kgo would rewrite the member metadata).
	Kafka []kgo.Opt
	// Group is the consumer group, GroupName(prefix). Required.
	Group string
	// Topic is an existing topic the group subscribes to, because Kafka
	// requires one; for example the job's commit topic. The group never
	// fetches from it. Required.
	Topic string
	// ReplicaID is this replica's stable identity (a pod name, a host
	// name). Required, and unique among the replicas of the job.
	ReplicaID string
	// LocalTasks, if not nil, returns the task IDs this replica holds
	// local state for. It is called from kgo's group goroutine at every
	// join: it must be safe for concurrent use and must not block.
	LocalTasks func() []string
	// Fingerprint identifies the job file this replica runs (a hex
	// digest). The group's leader elects the coordinator among the
	// members of the file most members run (docs/membership.md).
	Fingerprint string
	// Running, if not nil, returns the newest job generation this
	// replica read from the commit topic (0: none) and the fingerprint
	// that generation's record carries. It breaks a tie between two job
	// files when the coordinator is gone. It is called from kgo's group
	// goroutine at every join: it must be safe for concurrent use and
	// must not block.
	Running func() (gen uint64, fingerprint string)
	// SessionTimeout is how long the group waits for a silent member
	// before removing it (default DefaultSessionTimeout). It must lie
	// within the broker's group.min.session.timeout.ms (6s by default)
	// and group.max.session.timeout.ms.
	SessionTimeout time.Duration
	// HeartbeatInterval (default SessionTimeout/5, at most 3s) bounds how
	// long a member takes to notice that a rebalance began.
	HeartbeatInterval time.Duration
	// RebalanceTimeout (default SessionTimeout) is how long the group
	// waits for its members to rejoin once a rebalance began.
	RebalanceTimeout time.Duration
	// Logger receives the package's logs (default: discarded). It should
	// already name the replica (runtime/replica adds "replica_id"); the
	// member adds only "group".
	Logger *slog.Logger
	// Registerer receives the package's metrics (default: a private
	// registry nobody reads).
	Registerer prometheus.Registerer
}

// validate reports every problem, each named by its field. It runs after
// withDefaults, so that a default cannot be inconsistent with a setting.
func (o Options) validate() error {
	var errs []error
	if o.Group == "" {
		errs = append(errs, errors.New("options: Group is empty"))
	}
	if o.Topic == "" {
		errs = append(errs, errors.New("options: Topic is empty"))
	}
	if o.ReplicaID == "" {
		errs = append(errs, errors.New("options: ReplicaID is empty"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"SessionTimeout", o.SessionTimeout}, {"HeartbeatInterval", o.HeartbeatInterval}, {"RebalanceTimeout", o.RebalanceTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v is negative", d.name, d.v))
		}
		if d.v%time.Millisecond != 0 {
			errs = append(errs, fmt.Errorf("%s %v is not a whole number of milliseconds (Kafka counts in ms)", d.name, d.v))
		}
	}
	if o.HeartbeatInterval >= o.SessionTimeout {
		errs = append(errs, fmt.Errorf("HeartbeatInterval %v is not shorter than SessionTimeout %v", o.HeartbeatInterval, o.SessionTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("membership: invalid options: %w", err)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.SessionTimeout == 0 {
		o.SessionTimeout = DefaultSessionTimeout
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = min((o.SessionTimeout / 5).Truncate(time.Millisecond), maxHeartbeatInterval)
	}
	if o.RebalanceTimeout == 0 {
		o.RebalanceTimeout = o.SessionTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	return o
}

// Member is this replica's membership of the group. See the package comment
// for which goroutine owns what.
type Member struct {
	opts     Options
	instance string // random, drawn by Join: identifies this Member in views
	log      *slog.Logger
	met      *metrics
	cl       *kgo.Client
	views    chan View // capacity 1; only publishLocked sends, under mu

	pollDone  chan struct{}
	stopWatch chan struct{} // closed by Leave: stops watch
	watchDone chan struct{}

	leaveOnce sync.Once
	leaveErr  error

	mu sync.Mutex
	// Guarded by mu:
	pending     *View // decoded by ParseSyncAssignment, published by onAssigned
	last        View  // newest published view
	published   bool  // whether last is set
	wasCoord    bool  // last named us coordinator (cleared by a loss)
	coordGen    int32 // last's generation when wasCoord
	incarnation int   // number of losses, sent in the join metadata
	memberSince int32 // generation of the first view that placed us since Join or the last loss; 0 if none
	closed      bool  // views is closed
	// The lease: while a session runs (armed), the member counts itself
	// a member until renewed+SessionTimeout. renewed is when the newest
	// answered Heartbeat or SyncGroup request began, which is no later
	// than when the broker received it and restarted the session timer.
	armed   bool
	renewed time.Time
}

// Join makes this replica a member of the group and returns at once; views
// arrive on Views. ctx bounds only the start (the check that Topic exists),
// not the membership, which lasts until Leave: call Leave to end it and free
// its goroutines and connections.
func Join(ctx context.Context, opts Options) (*Member, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	// Registered before any client can call back into m (the callbacks
	// update the metrics); undone if Join fails.
	met := newMetrics()
	undo, err := met.register(opts.Registerer)
	if err != nil {
		return nil, fmt.Errorf("membership: register metrics: %w", err)
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		undo()
		return nil, fmt.Errorf("membership: instance token: %w", err)
	}
	m := &Member{
		opts:      opts,
		instance:  hex.EncodeToString(rnd[:]),
		log:       opts.Logger.With("group", opts.Group),
		met:       met,
		views:     make(chan View, 1),
		pollDone:  make(chan struct{}),
		stopWatch: make(chan struct{}),
		watchDone: make(chan struct{}),
	}
	kopts := append(slices.Clone(opts.Kafka),
		kgo.ConsumerGroup(opts.Group),
		kgo.ConsumeTopics(opts.Topic),
		kgo.GroupProtocol(protocolType),
		kgo.Balancers(&balancer{m: m}),
		kgo.SessionTimeout(opts.SessionTimeout),
		kgo.HeartbeatInterval(opts.HeartbeatInterval),
		kgo.RebalanceTimeout(opts.RebalanceTimeout),
		kgo.DisableAutoCommit(),
		kgo.OnPartitionsAssigned(m.onAssigned),
		kgo.OnPartitionsRevoked(m.onRevoked),
		kgo.OnPartitionsLost(func(context.Context, *kgo.Client, map[string][]int32) {}), // see manageErrorHook
		kgo.WithHooks(manageErrorHook{m}, leaseHook{m}),
	)
	// Inspect the caller's options on a client that joins nothing.
	probe, err := kgo.NewClient(opts.Kafka...)
	if err != nil {
		undo()
		return nil, fmt.Errorf("membership: kafka client: %w", err)
	}
	static, rack := probe.OptValues(kgo.InstanceID)[1].(bool), probe.OptValue(kgo.Rack).(string)
	probe.Close()
	if static || rack != "" {
		undo()
		return nil, errors.New("membership: the Kafka options must not set kgo.InstanceID or kgo.Rack")
	}
	// The balancer reads only m.opts, m.log and the fields under m.mu,
	// never m.cl, so kgo may call it before NewClient returns.
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		undo()
		return nil, fmt.Errorf("membership: kafka client: %w", err)
	}
	m.cl = cl
	if err := m.checkTopic(ctx); err != nil {
		cl.Close()
		undo()
		return nil, err
	}
	go m.drain()
	go m.watch()
	m.log.Info("joining membership group", "topic", opts.Topic, "session_timeout", opts.SessionTimeout,
		"heartbeat_interval", opts.HeartbeatInterval, "rebalance_timeout", opts.RebalanceTimeout)
	return m, nil
}

// checkTopic fails Join when Topic does not exist: kgo joins the group only
// once it has seen the topic's partitions, so it would wait forever.
func (m *Member) checkTopic(ctx context.Context) error {
	tds, err := kadm.NewClient(m.cl).ListTopics(ctx, m.opts.Topic)
	if err != nil {
		return fmt.Errorf("membership: look up topic %s: %w", m.opts.Topic, err)
	}
	td, ok := tds[m.opts.Topic]
	if !ok || td.Err != nil || len(td.Partitions) == 0 {
		cause := errors.New("not listed")
		if td.Err != nil {
			cause = td.Err
		}
		return fmt.Errorf("membership: topic %s, which the group subscribes to, must exist: %w", m.opts.Topic, cause)
	}
	return nil
}

// drain polls the client so that errors kgo queues for polling do not pile
// up. The group is assigned no partitions, so a poll never returns records;
// drain logs it loudly if one ever does.
func (m *Member) drain() {
	defer close(m.pollDone)
	for {
		fs := m.cl.PollFetches(context.Background())
		if fs.IsClientClosed() {
			return
		}
		if n := fs.NumRecords(); n > 0 {
			m.log.Error("the membership group fetched records; it must consume nothing", "records", n)
		}
		fs.EachError(func(topic string, partition int32, err error) {
			m.log.Debug("membership client poll error", "topic", topic, "partition", partition, "err", err)
		})
	}
}

// Views returns the channel of views. A new view arrives after every
// completed rebalance, and a view with Lost when the membership is lost. The
// channel holds only the newest view: a reader that falls behind misses
// intermediate views, which is harmless because every view supersedes all
// earlier ones. Leave closes the channel.
func (m *Member) Views() <-chan View { return m.views }

// Leave leaves the group at once, so that the others rebalance without
// waiting for the session timeout, and closes the client and Views. ctx
// bounds the wait for the broker; when it expires, Leave returns ctx's error
// and the group notices the departure at the session timeout instead. Leave
// is idempotent; later calls return the first result.
//
// Do not call Leave from a goroutine kgo is waiting on (none of this
// package's callers is one).
func (m *Member) Leave(ctx context.Context) error {
	m.leaveOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		close(m.views)
		m.mu.Unlock()
		m.met.members.Set(0)
		m.met.isCoordinator.Set(0)

		close(m.stopWatch)
		<-m.watchDone

		start := time.Now()
		m.leaveErr = m.cl.LeaveGroupContext(ctx)
		m.cl.Close() // quick: the group is left, or the leave was abandoned with ctx
		<-m.pollDone
		if m.leaveErr != nil {
			m.leaveErr = fmt.Errorf("membership: leave group %s: %w", m.opts.Group, m.leaveErr)
			m.log.Warn("leaving the membership group failed; the group will notice at the session timeout", "err", m.leaveErr)
			return
		}
		m.log.Info("left membership group", "duration", time.Since(start))
	})
	return m.leaveErr
}

// joinMeta is this member's join metadata; the balancer calls it at every
// join.
func (m *Member) joinMeta() joinMeta {
	var local []string
	if m.opts.LocalTasks != nil {
		local = slices.Clone(m.opts.LocalTasks())
		slices.Sort(local)
		local = slices.Compact(local)
	}
	var runGen uint64
	var runFP string
	if m.opts.Running != nil {
		runGen, runFP = m.opts.Running()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	meta := joinMeta{ReplicaID: m.opts.ReplicaID, Incarnation: m.incarnation, Instance: m.instance,
		MemberSince: m.memberSince, LocalTasks: local, Fingerprint: m.opts.Fingerprint,
		RunningGeneration: runGen, RunningFingerprint: runFP}
	if m.wasCoord {
		meta.WasCoordinator, meta.CoordinatorGeneration = true, m.coordGen
	}
	return meta
}

// synced keeps the view ParseSyncAssignment decoded until onAssigned
// publishes it.
func (m *Member) synced(v View) {
	m.mu.Lock()
	m.pending = &v
	m.mu.Unlock()
}

// balanced logs the leader's decision.
func (m *Member) balanced(gen int32, members []joined, views map[string]wireView) {
	for _, j := range members {
		if j.Err != nil {
			m.log.Error("membership group member sent metadata this replica cannot read", "member_id", j.MemberID, "err", j.Err)
		}
	}
	for _, v := range views {
		m.log.Info("balanced membership group as leader", "group_generation", gen, "members", len(v.Members),
			"coordinator", v.Coordinator, "rejected", v.Rejected)
		break
	}
}

// onAssigned runs after every completed join and sync (kgo calls it even when
// no partition is assigned, as here) and publishes the view that sync
// delivered.
func (m *Member) onAssigned(context.Context, *kgo.Client, map[string][]int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.pending
	m.pending = nil
	if v == nil {
		return
	}
	m.armed = true // the SyncGroup that delivered v renewed the lease
	if m.published && !m.last.Lost && m.last.Err == nil && v.Err == nil && m.last.GroupGeneration == v.GroupGeneration {
		// A rejoin the broker answered without a rebalance: nothing
		// changed.
		return
	}
	if v.Err == nil && m.memberSince == 0 {
		m.memberSince = v.GroupGeneration
	}
	m.met.rebalances.Inc()
	m.met.generation.Set(float64(v.GroupGeneration))
	if m.published && m.last.Err == nil && v.Err == nil && sameSessions(m.last, *v) {
		// A rebalance that changed nobody's session: a process that
		// was refused joined or left. Publishing it would make the
		// coordinator start a new generation, restarting every task,
		// for nothing.
		if m.wasCoord {
			m.coordGen = v.GroupGeneration
		}
		if len(v.Rejected) > 0 {
			m.log.Warn("membership group refused a member with a replica id already in use; this view changes nothing",
				"group_generation", v.GroupGeneration, "rejected", v.Rejected)
		}
		return
	}
	m.wasCoord = v.IsCoordinator()
	if m.wasCoord {
		m.coordGen = v.GroupGeneration
	}
	m.met.members.Set(float64(len(v.Members)))
	m.met.isCoordinator.Set(b2f(m.wasCoord))
	if v.Err != nil {
		m.log.Error("membership view places this replica nowhere; it must run no task until the next view",
			"group_generation", v.GroupGeneration, "err", v.Err)
	} else {
		m.log.Info("membership view", "group_generation", v.GroupGeneration, "members", memberIDs(v.Members),
			"coordinator", v.Coordinator, "is_coordinator", m.wasCoord, "rejected", v.Rejected)
	}
	m.publishLocked(*v)
}

// onRevoked runs when a rebalance begins (or the member leaves). The broker
// keeps a member that is rejoining in the group, and this member sends no
// heartbeats until the rebalance completes, so the lease rests until the
// next view.
func (m *Member) onRevoked(context.Context, *kgo.Client, map[string][]int32) {
	m.mu.Lock()
	m.armed = false
	m.mu.Unlock()
	m.log.Debug("membership group rebalancing or leaving")
}

// lost handles the end of a group session by an error: the member may no
// longer be in the group (session expired, fenced) or cannot tell (the
// coordinator is unreachable). kgo rejoins after a backoff.
func (m *Member) lost(cause error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lostLocked(cause)
}

func (m *Member) lostLocked(cause error) {
	m.incarnation++
	m.memberSince = 0
	m.armed = false
	m.wasCoord = false
	m.met.members.Set(0)
	m.met.isCoordinator.Set(0)
	m.log.Warn("membership lost; rejoining", "err", cause, "incarnation", m.incarnation)
	if m.published && m.last.Lost {
		return // still lost: kgo's rejoin failed again
	}
	m.met.lost.Inc()
	m.publishLocked(View{GroupGeneration: m.last.GroupGeneration, Self: m.opts.ReplicaID, Lost: true, Err: &LostError{Cause: cause}})
}

// publishLocked replaces any unread view with v. It never blocks: it is the
// only sender, and it holds mu.
func (m *Member) publishLocked(v View) {
	m.last, m.published = v, true
	if m.closed {
		return
	}
	select {
	case <-m.views:
	default:
	}
	m.views <- v
}

// ErrSessionExpired is the cause in a Lost view that the member published
// on its own, because no Heartbeat was answered for a session timeout (less
// one check period, a quarter second at most): the broker is about to remove
// it, or has.
var ErrSessionExpired = errors.New("membership: no heartbeat answered within the session timeout")

// watch publishes a Lost view as soon as the lease runs out, without waiting
// for kgo: kgo learns of the loss only when a request fails, which, when the
// network drops packets instead of refusing them, takes its request timeout
// (10s by default) after the broker has already given the member's work to
// others. It then makes kgo rejoin; the new incarnation in the metadata makes
// that rejoin a rebalance.
func (m *Member) watch() {
	defer close(m.watchDone)
	period := min(m.opts.HeartbeatInterval/2, 250*time.Millisecond)
	tick := time.NewTicker(period)
	defer tick.Stop()
	// Checking a period early makes the Lost view come before the
	// broker's deadline, never after it.
	limit := m.opts.SessionTimeout - period
	for {
		select {
		case <-m.stopWatch:
			return
		case <-tick.C:
		}
		m.mu.Lock()
		expired := m.armed && time.Since(m.renewed) >= limit
		if expired {
			m.lostLocked(fmt.Errorf("%w (last answered %v ago, session timeout %v)", ErrSessionExpired,
				time.Since(m.renewed).Round(time.Millisecond), m.opts.SessionTimeout))
		}
		m.mu.Unlock()
		if expired {
			m.cl.ForceRebalance()
		}
	}
}

// leaseHook renews the lease when a Heartbeat or SyncGroup request is
// answered: the broker restarts a member's session timer when it receives
// either. kgo calls it from its connection goroutines.
type leaseHook struct{ m *Member }

var _ kgo.HookBrokerE2E = leaseHook{}

func (h leaseHook) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if e2e.Err() != nil || (kmsg.Key(key) != kmsg.Heartbeat && kmsg.Key(key) != kmsg.SyncGroup) {
		return
	}
	began := time.Now().Add(-e2e.DurationE2E())
	h.m.mu.Lock()
	if began.After(h.m.renewed) {
		h.m.renewed = began
	}
	h.m.mu.Unlock()
}

// manageErrorHook learns why kgo's group session ended. kgo calls
// OnGroupManageError right after OnPartitionsLost, for every error except the
// member's own leaving.
type manageErrorHook struct{ m *Member }

var _ kgo.HookGroupManageError = manageErrorHook{}

func (h manageErrorHook) OnGroupManageError(err error) { h.m.lost(err) }

// sameSessions reports whether views a and b have the same coordinator and
// the same members in the same sessions (replica ID, instance and
// incarnation). Local tasks are hints and do not count.
func sameSessions(a, b View) bool {
	return a.Coordinator == b.Coordinator && slices.EqualFunc(a.Members, b.Members, func(x, y MemberInfo) bool {
		// A member of an older version sends no instance: its restart
		// could not be told apart, so its views always count as new.
		return x.Instance != "" && x.ReplicaID == y.ReplicaID && x.Instance == y.Instance && x.Incarnation == y.Incarnation &&
			x.Fingerprint == y.Fingerprint
	})
}

func memberIDs(ms []MemberInfo) []string {
	ids := make([]string, len(ms))
	for i, mi := range ms {
		ids[i] = mi.ReplicaID
	}
	return ids
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

type metrics struct {
	rebalances, lost                   prometheus.Counter
	members, isCoordinator, generation prometheus.Gauge
}

func newMetrics() *metrics {
	o := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "weir", Subsystem: "membership", Name: name, Help: help}
	}
	m := &metrics{
		rebalances:    prometheus.NewCounter(prometheus.CounterOpts(o("rebalances_total", "Completed rebalances of the membership group this replica took part in (views received)."))),
		lost:          prometheus.NewCounter(prometheus.CounterOpts(o("lost_total", "Times this replica lost its membership (session expired, fenced, coordinator unreachable); failed rejoins while lost do not count."))),
		members:       prometheus.NewGauge(prometheus.GaugeOpts(o("members", "Placeable members in this replica's newest view; 0 while not a member."))),
		isCoordinator: prometheus.NewGauge(prometheus.GaugeOpts(o("is_coordinator", "1 while this replica's newest view gives it the coordinator role."))),
		generation:    prometheus.NewGauge(prometheus.GaugeOpts(o("group_generation", "Kafka group generation of this replica's newest view."))),
	}
	return m
}

// register registers every metric. A collector registered already (an
// earlier Join of this process, with the same Registerer: a replica joins
// again after every session) is adopted, so its counts go on; any other
// conflict unregisters what this call registered and fails. undo
// unregisters what this call registered (not what it adopted).
func (m *metrics) register(reg prometheus.Registerer) (undo func(), err error) {
	g := promreg.NewGroup(reg)
	m.rebalances = promreg.Add(g, m.rebalances)
	m.lost = promreg.Add(g, m.lost)
	m.members = promreg.Add(g, m.members)
	m.isCoordinator = promreg.Add(g, m.isCoordinator)
	m.generation = promreg.Add(g, m.generation)
	if err := g.Err(); err != nil {
		g.Undo()
		return nil, err
	}
	return g.Undo, nil
}
