package membership

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// These tests run every scenario on kfake and on the real broker. Session
// timeouts: the real broker's group.min.session.timeout.ms is 6s, the
// minimum Weir can use there; kfake's minimum is lowered so that its runs are
// quick.
const (
	kfakeSession = 3 * time.Second
	realSession  = 6 * time.Second
)

// env is one scenario's broker, group and topic.
type env struct {
	t       *testing.T
	c       *kafkatest.Cluster
	session time.Duration
	wait    time.Duration // the longest any view may take
	group   string
	topic   string
	logs    *syncBuffer
	// fetches counts Fetch, ListOffsets and OffsetFetch requests sent by
	// any member: the group must never send one.
	fetches atomic.Int64
}

// eachBroker runs fn on kfake and on the real broker, as kafkatest.Each does,
// with a session timeout each broker accepts.
func eachBroker(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Run(string(kafkatest.Kfake), func(t *testing.T) {
		t.Parallel()
		fn(t, newEnv(t, kafkatest.NewKfake(t, kfake.GroupMinSessionTimeout(500*time.Millisecond)), kfakeSession))
	})
	t.Run(string(kafkatest.Real), func(t *testing.T) {
		t.Parallel()
		fn(t, newEnv(t, kafkatest.NewReal(t), realSession))
	})
}

func newEnv(t *testing.T, c *kafkatest.Cluster, session time.Duration) *env {
	e := &env{t: t, c: c, session: session, wait: 4*session + 10*time.Second,
		group: kafkatest.Name(t, "members"), topic: kafkatest.Name(t, "commit"), logs: &syncBuffer{}}
	c.CreateTopic(t, e.topic, 1, nil)
	// Records the group could fetch if it were assigned the partition.
	prod := c.Client(t, kgo.DefaultProduceTopic(e.topic))
	for i := range 10 {
		if err := prod.ProduceSync(context.Background(), kgo.StringRecord("r"+strconv.Itoa(i))).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("member logs:\n%s", e.logs.String())
		}
		if n := e.fetches.Load(); n != 0 {
			t.Errorf("members sent %d Fetch/ListOffsets/OffsetFetch requests; the group must consume nothing", n)
		}
	})
	return e
}

func (e *env) options(id string) Options {
	return Options{
		Kafka:          []kgo.Opt{kgo.SeedBrokers(e.c.Brokers...), kgo.WithHooks(fetchCounter{&e.fetches})},
		Group:          e.group,
		Topic:          e.topic,
		ReplicaID:      id,
		SessionTimeout: e.session,
		Logger:         slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// join starts an in-process member; the test's end makes it leave.
func (e *env) join(id string, edit ...func(*Options)) *Member {
	e.t.Helper()
	o := e.options(id)
	o.Registerer = prometheus.NewRegistry()
	for _, f := range edit {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := Join(ctx, o)
	if err != nil {
		e.t.Fatalf("join %s: %v", id, err)
	}
	e.t.Cleanup(func() { m.Leave(context.Background()) })
	return m
}

// next returns m's first view for which ok holds, skipping others.
func (e *env) next(m *Member, what string, ok func(View) bool) View {
	e.t.Helper()
	deadline := time.After(e.wait)
	for {
		select {
		case v, open := <-m.Views():
			if !open {
				e.t.Fatalf("%s: views closed while waiting for %s", m.opts.ReplicaID, what)
			}
			if ok(v) {
				return v
			}
			e.t.Logf("%s: skipping view %s while waiting for %s", m.opts.ReplicaID, describe(v), what)
		case <-deadline:
			e.t.Fatalf("%s: no view with %s within %v", m.opts.ReplicaID, what, e.wait)
		}
	}
}

func members(ids ...string) func(View) bool {
	return func(v View) bool { return v.Err == nil && slices.Equal(memberIDs(v.Members), ids) }
}

func describe(v View) string {
	return fmt.Sprintf("{gen %d members %v coordinator %q rejected %v lost %v err %v}", v.GroupGeneration, memberIDs(v.Members), v.Coordinator, v.Rejected, v.Lost, v.Err)
}

// sameView checks that the views are one view: generation, members and
// coordinator, with exactly one member holding the coordinator role.
func sameView(t *testing.T, vs ...View) {
	t.Helper()
	coords := 0
	for _, v := range vs {
		if v.GroupGeneration != vs[0].GroupGeneration || v.Coordinator != vs[0].Coordinator || !slices.Equal(memberIDs(v.Members), memberIDs(vs[0].Members)) {
			t.Fatalf("members disagree: %s vs %s", describe(v), describe(vs[0]))
		}
		if v.IsCoordinator() {
			coords++
		}
	}
	if coords != 1 {
		t.Fatalf("%d members hold the coordinator role in %s", coords, describe(vs[0]))
	}
}

func TestJoinLeaveAndStickyCoordinator(t *testing.T) {
	eachBroker(t, func(t *testing.T, e *env) {
		// r3 joins first and becomes coordinator; it stays coordinator
		// although r1 and r2 have smaller IDs.
		var r3Leaves atomic.Int64
		r3 := e.join("r3", func(o *Options) { o.Kafka = append(o.Kafka, kgo.WithHooks(leaveCounter{&r3Leaves})) })
		v := e.next(r3, "r3 alone", members("r3"))
		if !v.IsCoordinator() || v.Self != "r3" {
			t.Fatalf("alone, r3 got %s", describe(v))
		}
		r1, r2 := e.join("r1"), e.join("r2")
		three := members("r1", "r2", "r3")
		v1, v2, v3 := e.next(r1, "three members", three), e.next(r2, "three members", three), e.next(r3, "three members", three)
		sameView(t, v1, v2, v3)
		if v3.Coordinator != "r3" {
			t.Fatalf("coordinator moved off r3: %s", describe(v3))
		}

		gen3 := v3.GroupGeneration
		r4 := e.join("r4", func(o *Options) { o.LocalTasks = func() []string { return []string{"t2", "t1"} } })
		four := members("r1", "r2", "r3", "r4")
		v1, v2, v3, v4 := e.next(r1, "four", four), e.next(r2, "four", four), e.next(r3, "four", four), e.next(r4, "four", four)
		sameView(t, v1, v2, v3, v4)
		if v4.Coordinator != "r3" || !slices.Equal(v4.Members[3].LocalTasks, []string{"t1", "t2"}) || v4.GroupGeneration <= gen3 {
			t.Fatalf("after r4 joined: %s, local tasks %v", describe(v4), v4.Members[3].LocalTasks)
		}

		// A member that is not coordinator leaves: the coordinator stays.
		start := time.Now()
		if err := r1.Leave(context.Background()); err != nil {
			t.Fatalf("leave r1: %v", err)
		}
		rest := members("r2", "r3", "r4")
		v2, v3, v4 = e.next(r2, "r1 gone", rest), e.next(r3, "r1 gone", rest), e.next(r4, "r1 gone", rest)
		t.Logf("after r1's Leave, the others had their view in %v (session timeout %v)", time.Since(start), e.session)
		sameView(t, v2, v3, v4)
		if v2.Coordinator != "r3" {
			t.Fatalf("coordinator moved although r3 stayed: %s", describe(v2))
		}
		if _, open := <-r1.Views(); open {
			t.Fatal("r1's views still open after Leave")
		}

		// The coordinator leaves: the smallest ID takes over.
		start = time.Now()
		if err := r3.Leave(context.Background()); err != nil {
			t.Fatalf("leave r3: %v", err)
		}
		rest = members("r2", "r4")
		v2, v4 = e.next(r2, "r3 gone", rest), e.next(r4, "r3 gone", rest)
		elapsed := time.Since(start)
		t.Logf("after coordinator r3's Leave, the others had their view in %v", elapsed)
		sameView(t, v2, v4)
		if v2.Coordinator != "r2" || !v2.IsCoordinator() {
			t.Fatalf("after the coordinator left: %s", describe(v2))
		}
		// Prompt: Leave sent LeaveGroup, rather than letting the session
		// expire (the time is logged above; on a loaded machine it is no
		// proof either way).
		t.Logf("r3 sent %d LeaveGroup request(s)", r3Leaves.Load())
		if n := r3Leaves.Load(); n == 0 {
			t.Errorf("r3's Leave sent no LeaveGroup request: the others removed it only when its session expired (%v after Leave)", elapsed)
		}

		for name, want := range map[string]float64{"weir_membership_members": 2, "weir_membership_is_coordinator": 1} {
			if got := metric(t, r2, name); got != want {
				t.Errorf("%s = %v, want %v", name, got, want)
			}
		}
		if got := metric(t, r2, "weir_membership_rebalances_total"); got < 3 {
			t.Errorf("weir_membership_rebalances_total = %v, want at least 3", got)
		}
		if got := metric(t, r4, "weir_membership_is_coordinator"); got != 0 {
			t.Errorf("r4 weir_membership_is_coordinator = %v", got)
		}
	})
}

// metric reads a counter or gauge from m's registry.
func metric(t *testing.T, m *Member, name string) float64 {
	t.Helper()
	mfs, err := m.opts.Registerer.(*prometheus.Registry).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			x := mf.GetMetric()[0]
			if x.GetCounter() != nil {
				return x.GetCounter().GetValue()
			}
			return x.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A replica joins again, in the same process and with the same
// Registerer, after every session it ends: the second Join must succeed and
// carry the metrics on (it once failed with a duplicate registration, so a
// replica whose session ended once could never rejoin).
func TestRejoinWithSameRegisterer(t *testing.T) {
	eachBroker(t, func(t *testing.T, e *env) {
		reg := prometheus.NewRegistry()
		same := func(o *Options) { o.Registerer = reg }
		first := e.join("r1", same)
		e.next(first, "r1 alone", members("r1"))
		if err := first.Leave(context.Background()); err != nil {
			t.Fatalf("leave: %v", err)
		}
		before := metric(t, first, "weir_membership_rebalances_total")
		second := e.join("r1", same)
		v := e.next(second, "r1 alone again", members("r1"))
		if !v.IsCoordinator() {
			t.Fatalf("after rejoining: %s", describe(v))
		}
		if got := metric(t, second, "weir_membership_rebalances_total"); got <= before {
			t.Errorf("weir_membership_rebalances_total = %v after the rejoin, want more than %v (the counter goes on)", got, before)
		}
		if got := metric(t, second, "weir_membership_is_coordinator"); got != 1 {
			t.Errorf("weir_membership_is_coordinator = %v after the rejoin, want 1", got)
		}
	})
}

// A Registerer that holds another kind of collector under a membership
// metric's name fails Join, and Join leaves nothing registered behind.
func TestJoinRegistrationConflict(t *testing.T) {
	c := kafkatest.NewKfake(t)
	e := newEnv(t, c, 6*time.Second)
	reg := prometheus.NewRegistry()
	// The same name and help as the counter, but a gauge: Register calls
	// it the same collector, and Join must still refuse it.
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "weir", Subsystem: "membership", Name: "lost_total",
		Help: "Times this replica lost its membership (session expired, fenced, coordinator unreachable); failed rejoins while lost do not count."}))
	o := e.options("r1")
	o.Registerer = reg
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := Join(ctx, o)
	if err == nil {
		m.Leave(context.Background())
		t.Fatal("Join succeeded over a conflicting registration")
	}
	mfs, gerr := reg.Gather()
	if gerr != nil {
		t.Fatal(gerr)
	}
	for _, mf := range mfs {
		if mf.GetName() != "weir_membership_lost_total" {
			t.Errorf("Join failed (%v) but left %s registered", err, mf.GetName())
		}
	}
}

// TestDuplicateReplicaID starts a second member with the replica ID of a
// running one: it is refused with an error naming the ID, and the running
// members publish no new view (the coordinator would start a new
// generation, restarting every task), neither when it joins nor when it
// leaves.
func TestDuplicateReplicaID(t *testing.T) {
	eachBroker(t, func(t *testing.T, e *env) {
		a := e.join("a")
		e.next(a, "a alone", members("a"))
		d1 := e.join("dup")
		va := e.next(a, "dup placed", members("a", "dup"))
		vd := e.next(d1, "dup placed", members("a", "dup"))
		gen := va.GroupGeneration

		d2 := e.join("dup")
		v := e.next(d2, "a duplicate error", func(v View) bool { return v.Err != nil })
		var de *DuplicateReplicaError
		if !errors.As(v.Err, &de) || !errors.Is(v.Err, ErrDuplicateReplicaID) || de.ReplicaID != "dup" || de.Since != vd.GroupGeneration || v.IsCoordinator() {
			t.Fatalf("duplicate got %s", describe(v))
		}
		if msg := v.Err.Error(); !strings.Contains(msg, `"dup"`) || !strings.Contains(msg, "already a member") {
			t.Fatalf("duplicate's error does not say which id is already a member: %v", msg)
		}
		t.Logf("the duplicate's error: %v", v.Err)
		if v.GroupGeneration <= gen {
			t.Fatalf("the duplicate's view has generation %d, not after %d", v.GroupGeneration, gen)
		}
		// The rebalance reached a and d1 (their generation gauge moved)
		// but gave them nothing to publish.
		e.quiet(v.GroupGeneration, a, d1)

		if err := d2.Leave(context.Background()); err != nil {
			t.Fatal(err)
		}
		e.quiet(v.GroupGeneration+1, a, d1)

		// A real change still shows: d1 leaves.
		if err := d1.Leave(context.Background()); err != nil {
			t.Fatal(err)
		}
		e.next(a, "dup gone", members("a"))
	})
}

// quiet waits until every member's group generation reached gen, then
// checks, a heartbeat interval later, that none of them published a view.
func (e *env) quiet(gen int32, ms ...*Member) {
	e.t.Helper()
	deadline := time.Now().Add(e.wait)
	for _, m := range ms {
		for metric(e.t, m, "weir_membership_group_generation") < float64(gen) {
			if time.Now().After(deadline) {
				e.t.Fatalf("%s never reached group generation %d", m.opts.ReplicaID, gen)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	time.Sleep(ms[0].opts.HeartbeatInterval)
	for _, m := range ms {
		select {
		case v := <-m.Views():
			e.t.Fatalf("%s published %s, though no member's session changed", m.opts.ReplicaID, describe(v))
		default:
		}
	}
}

// TestRestartAfterCrashNotRefused kills a member's process with SIGKILL
// and at once starts another with the same replica ID, while the broker
// still counts the dead one as a member: the new one is not refused as a
// duplicate, and the others see it as a new instance.
func TestRestartAfterCrashNotRefused(t *testing.T) {
	eachBroker(t, func(t *testing.T, e *env) {
		a := e.join("a")
		e.next(a, "a alone", members("a"))
		child := e.startChild("r0")
		two := members("a", "r0")
		before := e.next(a, "r0 placed", two)
		child.next("r0 placed", two)

		child.signal(syscall.SIGKILL)
		start := time.Now()
		r0 := e.join("r0")
		v := e.next(r0, "the restarted r0 placed", func(v View) bool { return v.Err != nil || members("a", "r0")(v) })
		if v.Err != nil {
			t.Fatalf("the restarted r0 was refused: %v", v.Err)
		}
		after := e.next(a, "the restarted r0", two)
		t.Logf("the restarted member was placed %v after the crash (session timeout %v)", time.Since(start), e.session)
		if before.Members[1].Instance == "" || before.Members[1].Instance == after.Members[1].Instance {
			t.Fatalf("r0's instance before the crash %q, after %q: the restart must show as a new instance",
				before.Members[1].Instance, after.Members[1].Instance)
		}
	})
}

// TestLostWhenFenced removes a member from the group behind its back, as the
// broker does when its session expires: the member publishes a Lost view,
// rejoins, and every member gets a new view.
func TestLostWhenFenced(t *testing.T) {
	eachBroker(t, func(t *testing.T, e *env) {
		a, b := e.join("a"), e.join("b")
		e.next(a, "both", members("a", "b"))
		vb := e.next(b, "both", members("a", "b"))

		memberID, _ := b.cl.GroupMetadata()
		req := kmsg.NewPtrLeaveGroupRequest()
		req.Group = e.group
		lm := kmsg.NewLeaveGroupRequestMember()
		lm.MemberID = memberID
		req.Members = append(req.Members, lm)
		resp, err := req.RequestWith(context.Background(), e.c.Client(t))
		if err == nil {
			err = kerr.ErrorForCode(resp.ErrorCode)
		}
		if err == nil && len(resp.Members) == 1 {
			err = kerr.ErrorForCode(resp.Members[0].ErrorCode)
		}
		if err != nil {
			t.Fatalf("remove b from the group: %v", err)
		}

		lost := e.next(b, "a lost view", func(v View) bool { return v.Lost })
		if !errors.Is(lost.Err, ErrLost) || lost.IsCoordinator() {
			t.Fatalf("lost view %s", describe(lost))
		}
		t.Logf("b's lost view: %v", lost.Err)
		va, vb2 := e.next(a, "b back", members("a", "b")), e.next(b, "b back", members("a", "b"))
		sameView(t, va, vb2)
		if vb2.GroupGeneration <= vb.GroupGeneration {
			t.Fatalf("b back in generation %d, not after %d", vb2.GroupGeneration, vb.GroupGeneration)
		}
		if got := metric(t, b, "weir_membership_lost_total"); got != 1 {
			t.Errorf("weir_membership_lost_total = %v, want 1", got)
		}
	})
}

// TestCrashedMemberRemoved kills a member's process with SIGKILL: it neither
// leaves nor heartbeats, and the others get a view without it after the
// session timeout. The killed member held the coordinator role.
func TestCrashedMemberRemoved(t *testing.T) {
	eachBroker(t, func(t *testing.T, e *env) {
		child := e.startChild("r0")
		v := child.next("r0 alone", members("r0"))
		if !v.IsCoordinator() {
			t.Fatalf("r0 alone: %s", describe(v))
		}
		a, b := e.join("a"), e.join("b")
		three := members("a", "b", "r0")
		va, vb, vc := e.next(a, "three", three), e.next(b, "three", three), child.next("three", three)
		sameView(t, va, vb, vc)

		start := time.Now()
		child.signal(syscall.SIGKILL)
		two := members("a", "b")
		va, vb = e.next(a, "r0 gone", two), e.next(b, "r0 gone", two)
		elapsed := time.Since(start)
		t.Logf("after SIGKILL of the coordinator's process, the others had a view in %v (session timeout %v)", elapsed, e.session)
		sameView(t, va, vb)
		if va.Coordinator != "a" {
			t.Fatalf("after the crash: %s", describe(va))
		}
		if elapsed < e.session/2 {
			t.Errorf("the crash showed after %v, before the session timeout %v could expire", elapsed, e.session)
		}
	})
}

// TestPausedMemberLost stops a member's process (SIGSTOP) for longer than the
// session timeout: the others get a view without it; when it resumes it
// publishes a Lost view, rejoins, and everyone gets a view with it again.
func TestPausedMemberLost(t *testing.T) {
	eachBroker(t, func(t *testing.T, e *env) {
		a := e.join("a")
		e.next(a, "a alone", members("a"))
		child := e.startChild("b")
		two := members("a", "b")
		e.next(a, "two", two)
		vb := child.next("two", two)
		if vb.IsCoordinator() {
			t.Fatalf("b took the coordinator role from a: %s", describe(vb))
		}

		child.signal(syscall.SIGSTOP)
		start := time.Now()
		e.next(a, "b gone", members("a"))
		t.Logf("paused member removed after %v (session timeout %v)", time.Since(start), e.session)
		child.signal(syscall.SIGCONT)

		lost := child.next("a lost view", func(v View) bool { return v.Lost })
		t.Logf("resumed member's lost view came %v after the pause began: %v", time.Since(start), lost.Err)
		va, vb2 := e.next(a, "b back", two), child.next("b back", two)
		if va.GroupGeneration != vb2.GroupGeneration || va.Coordinator != "a" || vb2.Coordinator != "a" {
			t.Fatalf("after b came back: a %s, b %s", describe(va), describe(vb2))
		}
	})
}

func TestJoinChecksOptionsAndTopic(t *testing.T) {
	if _, err := Join(context.Background(), Options{SessionTimeout: time.Second, HeartbeatInterval: 2 * time.Second}); err == nil ||
		!strings.Contains(err.Error(), "Group is empty") || !strings.Contains(err.Error(), "ReplicaID is empty") ||
		!strings.Contains(err.Error(), "HeartbeatInterval 2s is not shorter than SessionTimeout 1s") {
		t.Fatalf("Join with bad options: %v", err)
	}
	c := kafkatest.NewKfake(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reg := prometheus.NewRegistry()
	_, err := Join(ctx, Options{Kafka: []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, Group: "g", Topic: "missing", ReplicaID: "a", Registerer: reg})
	if err == nil || !strings.Contains(err.Error(), "must exist") {
		t.Fatalf("Join on a missing topic: %v", err)
	}
	// A failed Join leaves no metric registered.
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
		t.Fatalf("after a failed Join the registry holds %d metric families (%v)", len(mfs), err)
	}
	c.CreateTopic(t, "present", 1, nil)

	// The fetch counter the scenarios rely on does see a consumer's fetches.
	var n atomic.Int64
	if err := c.Client(t).ProduceSync(ctx, &kgo.Record{Topic: "present", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if fs := c.Client(t, kgo.ConsumeTopics("present"), kgo.WithHooks(fetchCounter{&n})).PollFetches(ctx); fs.NumRecords() != 1 || n.Load() == 0 {
		t.Fatalf("a consumer polled %d records with %d fetch requests counted", fs.NumRecords(), n.Load())
	}
	_, err = Join(ctx, Options{Kafka: []kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.InstanceID("x")}, Group: "g", Topic: "present", ReplicaID: "a"})
	if err == nil || !strings.Contains(err.Error(), "InstanceID") {
		t.Fatalf("Join with an instance ID: %v", err)
	}
}

// fetchCounter counts requests a member that consumes nothing must never
// send.
type fetchCounter struct{ n *atomic.Int64 }

var _ kgo.HookBrokerWrite = fetchCounter{}

func (f fetchCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, _ error) {
	switch kmsg.Key(key) {
	case kmsg.Fetch, kmsg.ListOffsets, kmsg.OffsetFetch:
		f.n.Add(1)
	}
}

// leaveCounter counts the LeaveGroup requests a member sends.
type leaveCounter struct{ n *atomic.Int64 }

var _ kgo.HookBrokerWrite = leaveCounter{}

func (l leaveCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if kmsg.Key(key) == kmsg.LeaveGroup && err == nil {
		l.n.Add(1)
	}
}

// syncBuffer collects the logs of a scenario's members.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ---- members in child processes, for crash tests ----

// Environment of a child process: TestMain runs runChild instead of the tests
// when envChild names a replica.
const (
	envChild   = "WEIR_MEMBERSHIP_CHILD_REPLICA"
	envBrokers = "WEIR_MEMBERSHIP_CHILD_BROKERS"
	envGroup   = "WEIR_MEMBERSHIP_CHILD_GROUP"
	envTopic   = "WEIR_MEMBERSHIP_CHILD_TOPIC"
	envSession = "WEIR_MEMBERSHIP_CHILD_SESSION"
)

func TestMain(m *testing.M) {
	if id := os.Getenv(envChild); id != "" {
		os.Exit(runChild(id))
	}
	os.Exit(m.Run())
}

// childView is a view as a child prints it, one JSON object per line.
type childView struct {
	Gen         int32    `json:"gen"`
	Members     []string `json:"members"`
	Coordinator string   `json:"coordinator"`
	Self        string   `json:"self"`
	Lost        bool     `json:"lost"`
	Err         string   `json:"err,omitempty"`
}

// runChild is a member in its own process: it prints its views on stdout and
// leaves when stdin closes.
func runChild(id string) int {
	session, err := time.ParseDuration(os.Getenv(envSession))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	m, err := Join(ctx, Options{
		Kafka:          []kgo.Opt{kgo.SeedBrokers(strings.Split(os.Getenv(envBrokers), ",")...)},
		Group:          os.Getenv(envGroup),
		Topic:          os.Getenv(envTopic),
		ReplicaID:      id,
		SessionTimeout: session,
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		io.Copy(io.Discard, os.Stdin)
		m.Leave(context.Background())
	}()
	enc := json.NewEncoder(os.Stdout)
	for v := range m.Views() {
		cv := childView{Gen: v.GroupGeneration, Members: memberIDs(v.Members), Coordinator: v.Coordinator, Self: v.Self, Lost: v.Lost}
		if v.Err != nil {
			cv.Err = v.Err.Error()
		}
		enc.Encode(cv)
	}
	return 0
}

type child struct {
	e     *env
	id    string
	cmd   *exec.Cmd
	views chan View
}

// startChild starts a member in a child process: the test binary itself,
// running no test (TestMain sees envChild).
func (e *env) startChild(id string) *child {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envChild+"="+id,
		envBrokers+"="+strings.Join(e.c.Brokers, ","),
		envGroup+"="+e.group,
		envTopic+"="+e.topic,
		envSession+"="+e.session.String(),
	)
	cmd.Stderr = e.logs
	stdin, err := cmd.StdinPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatalf("start child %s: %v", id, err)
	}
	c := &child{e: e, id: id, cmd: cmd, views: make(chan View, 100)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(c.views)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var cv childView
			if err := json.Unmarshal(sc.Bytes(), &cv); err != nil {
				fmt.Fprintf(e.logs, "child %s printed %q: %v\n", id, sc.Text(), err)
				continue
			}
			v := View{GroupGeneration: cv.Gen, Coordinator: cv.Coordinator, Self: cv.Self, Lost: cv.Lost}
			for _, m := range cv.Members {
				v.Members = append(v.Members, MemberInfo{ReplicaID: m})
			}
			if cv.Err != "" {
				v.Err = errors.New(cv.Err)
			}
			c.views <- v
		}
	}()
	e.t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Signal(syscall.SIGCONT)
		t := time.AfterFunc(10*time.Second, func() { cmd.Process.Kill() })
		<-done
		cmd.Wait()
		t.Stop()
	})
	return c
}

func (c *child) signal(sig syscall.Signal) {
	c.e.t.Helper()
	if err := c.cmd.Process.Signal(sig); err != nil {
		c.e.t.Fatalf("signal %v to child %s: %v", sig, c.id, err)
	}
}

func (c *child) next(what string, ok func(View) bool) View {
	c.e.t.Helper()
	deadline := time.After(c.e.wait)
	for {
		select {
		case v, open := <-c.views:
			if !open {
				c.e.t.Fatalf("child %s exited while waiting for %s", c.id, what)
			}
			if ok(v) {
				return v
			}
			c.e.t.Logf("child %s: skipping view %s while waiting for %s", c.id, describe(v), what)
		case <-deadline:
			c.e.t.Fatalf("child %s: no view with %s within %v", c.id, what, c.e.wait)
		}
	}
}

// TestPartitionedMemberLost cuts a member off the broker without closing its
// connections (a black hole, as a network partition looks): the others get a
// view without it after the session timeout, and the member publishes a Lost
// view on its own, without hearing from the broker. Healed, it rejoins.
func TestPartitionedMemberLost(t *testing.T) {
	eachBroker(t, func(t *testing.T, e *env) {
		a := e.join("a")
		e.next(a, "a alone", members("a"))
		p := newProxy(t, e.c.Brokers[0])
		b := e.join("b", func(o *Options) { o.Kafka = append(o.Kafka, kgo.Dialer(p.dial)) })
		two := members("a", "b")
		e.next(a, "two", two)
		e.next(b, "two", two)

		// b's Lost view first: it is timed. a's view waits in its channel
		// meanwhile (a newer view replaces an unread one).
		start := time.Now()
		p.cut(true)
		lost := e.next(b, "a lost view", func(v View) bool { return v.Lost })
		lostAfter := time.Since(start)
		t.Logf("partitioned member published Lost %v after the cut (session timeout %v): %v", lostAfter, e.session, lost.Err)
		if !errors.Is(lost.Err, ErrSessionExpired) || lostAfter > e.session+2*time.Second {
			t.Errorf("the partitioned member should have noticed by its lease, within the session timeout: %v after the cut: %v", lostAfter, lost.Err)
		}
		e.next(a, "b gone", members("a"))
		t.Logf("partitioned member removed by the group %v after the cut (session timeout %v)", time.Since(start), e.session)

		p.cut(false)
		e.next(a, "b back", two)
		e.next(b, "b back", two)
	})
}

// proxy forwards TCP connections to one broker and can black-hole them: while
// cut, it accepts and reads but forwards nothing; healing closes every
// connection that lived through the cut, whose byte streams are now broken.
type proxy struct {
	t        *testing.T
	ln       net.Listener
	upstream string

	mu     sync.Mutex
	isCut  bool
	conns  []net.Conn
	broken []net.Conn
}

func newProxy(t *testing.T, upstream string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, upstream: upstream}
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	go p.accept()
	return p
}

// dial is a kgo.Dialer that sends every connection through the proxy.
func (p *proxy) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, p.ln.Addr().String())
}

func (p *proxy) accept() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, down, up)
		if p.isCut {
			p.broken = append(p.broken, down, up)
		}
		p.mu.Unlock()
		go p.pipe(down, up)
		go p.pipe(up, down)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			dst.Close()
			return
		}
		p.mu.Lock()
		cut := p.isCut
		p.mu.Unlock()
		if cut {
			continue // black hole
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			src.Close()
			return
		}
	}
}

func (p *proxy) cut(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isCut = on
	if on {
		p.broken = append(p.broken, p.conns...)
		return
	}
	for _, c := range p.broken {
		c.Close()
	}
	p.broken = nil
}
