// Package replica runs one processor replica of a job (DESIGN.md section 6):
// it joins the job's membership group, holds the coordinator role when the
// group gives it, follows the control topics, and starts, stops, triggers,
// completes and aborts its local tasks as the generations and checkpoints
// on those topics say.
//
// Goroutines: Run's goroutine owns the set of local tasks and every decision
// about them; it reads control records from one tail goroutine and
// membership views from the membership package. The coordinator runner, when
// this replica holds the role, runs on a goroutine of its own and is fed
// through its Submit method. Tasks run their own goroutines (package task).
package replica

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/coordinator"
	"github.com/weir-stream/weir/coordinator/runner"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/runtime/membership"
	"github.com/weir-stream/weir/runtime/task"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

// Options configure a replica.
type Options struct {
	Config *config.Config
	Job    *stream.Job
	// ReplicaID names this replica in the group and in assignments; it must
	// be stable across restarts (a pod name) for local recovery to work.
	ReplicaID  string
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// OnCommitted, if set, is called after every checkpoint this replica saw
	// complete (for `processor dev`, which prints the committed output).
	OnCommitted func(id uint64)
}

// Replica is one running replica.
type Replica struct {
	opts    Options
	cfg     *config.Config
	log     *slog.Logger
	kopts   []kgo.Opt
	topics  kafkaio.ControlTopics
	store   *objstore.Store
	cache   *pebble.Cache
	acks    *kafkaio.AckWriter
	sinkMet *kafkaio.SinkMetrics
	met     *metrics
	runner  *runner.Runner // created once; Run once per coordinator term

	taskIDs []control.TaskID // every task of the job, fixed at start

	// Owned by Run's goroutine.
	gen      uint64
	tasks    map[control.TaskID]*task.Task
	coord    *coordRole
	lastView membership.View
	lastGen  *control.Generation

	ready atomic.Bool
}

// coordRole is the coordinator runner while this replica holds the role.
type coordRole struct {
	cancel context.CancelFunc
	done   chan error
}

// New prepares a replica: it checks the job against Kafka (input topics and
// their partitions) and creates the control topics if missing. It retries
// nothing: Run does.
func New(ctx context.Context, opts Options) (*Replica, error) {
	cfg := opts.Config
	r := &Replica{
		opts: opts, cfg: cfg,
		log:    opts.Logger.With("replica_id", opts.ReplicaID, "job", cfg.Job.Name),
		topics: kafkaio.NewControlTopics(cfg.Kafka.TopicPrefix),
		tasks:  map[control.TaskID]*task.Task{},
	}
	r.kopts = []kgo.Opt{kgo.SeedBrokers(cfg.Kafka.Brokers...), kgo.ClientID(cfg.Kafka.ClientID)}
	met, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	r.met = met
	sm, err := kafkaio.NewSinkMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	r.sinkMet = sm
	return r, nil
}

// Ready reports whether the replica runs every task it was assigned and
// has caught up with the control topics: the /readyz answer.
func (r *Replica) Ready() bool { return r.ready.Load() }

// prepare connects to Kafka and the object store and learns the job's
// tasks. It is retried with backoff by Run.
func (r *Replica) prepare(ctx context.Context) error {
	cl, err := kgo.NewClient(r.kopts...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// Three independent round trips to the broker: in parallel, start-up
	// time is what users wait for after every restart.
	var parts int
	err = all(
		func() error {
			return kafkaio.EnsureControlTopics(ctx, adm, r.topics, int16(r.cfg.Kafka.ReplicationFactor))
		},
		func() error {
			var err error
			parts, err = r.inputPartitions(ctx, adm)
			return err
		},
		func() error { return r.checkSinks(ctx, adm) },
	)
	if err != nil {
		return err
	}
	r.taskIDs = r.taskIDs[:0]
	for i := range parts {
		r.taskIDs = append(r.taskIDs, control.TaskID{Stage: stageName, Index: i})
	}
	if r.store == nil {
		st, err := objstore.Open(ctx, r.cfg.Checkpoint.Storage, r.cfg.Job.Name, objstore.Options{Logger: r.log})
		if err != nil {
			return err
		}
		r.store = st
	}
	if r.acks == nil {
		a, err := kafkaio.NewAckWriter(r.kopts, r.topics)
		if err != nil {
			return err
		}
		r.acks = a
	}
	if r.cache == nil {
		r.cache = pebble.NewCache(r.cfg.State.BlockCacheBytes)
	}
	return nil
}

// inputPartitions returns the partition count of the job's input topics,
// which must all have the same (co-partitioning).
func (r *Replica) inputPartitions(ctx context.Context, adm *kadm.Client) (int, error) {
	srcs := r.opts.Job.Sources()
	if len(srcs) != 1 {
		return 0, fmt.Errorf("job %s has %d sources; one is supported", r.opts.Job.Name(), len(srcs))
	}
	details, err := adm.ListTopics(ctx, srcs[0].Topics...)
	if err != nil {
		return 0, fmt.Errorf("describe input topics: %w", err)
	}
	parts := -1
	for _, topic := range srcs[0].Topics {
		d, ok := details[topic]
		if !ok || d.Err != nil {
			return 0, fmt.Errorf("input topic %s: %w", topic, errors.Join(d.Err, errMissing(ok)))
		}
		if parts >= 0 && len(d.Partitions) != parts {
			return 0, fmt.Errorf("input topics must have the same number of partitions (co-partitioning): %s has %d, others %d", topic, len(d.Partitions), parts)
		}
		parts = len(d.Partitions)
	}
	return parts, nil
}

// checkSinks checks the exactly-once sinks' transaction timeouts against
// the broker's limit and the checkpoint timing.
func (r *Replica) checkSinks(ctx context.Context, adm *kadm.Client) error {
	for _, sink := range r.opts.Job.Sinks() {
		if sink.Delivery == stream.DeliveryAtLeastOnce {
			continue
		}
		if err := kafkaio.SinkCheckTimeouts(ctx, adm, kafkaio.SinkTimeouts{
			TransactionTimeout: sink.TransactionTimeout,
			CheckpointInterval: r.cfg.Checkpoint.Interval,
			CheckpointTimeout:  r.cfg.Checkpoint.Timeout,
		}); err != nil {
			err = fmt.Errorf("sink %s: %w", sink.Topic, err)
			if errors.Is(err, kafkaio.ErrSinkTimeoutConfig) {
				return permanent{err} // fix the configuration
			}
			return err // the brokers could not be asked: retried
		}
	}
	return nil
}

// all runs fns concurrently and returns their errors, joined.
func all(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stageName names the job's only stage (task IDs are "<stage>/<index>").
const stageName = "main"

func errMissing(ok bool) error {
	if ok {
		return nil
	}
	return errors.New("does not exist")
}

// Run runs the replica until ctx ends (it returns nil then) or a fatal
// error: lost output (kafkaio.ErrSinkTxnAborted), or another process in the
// group with this replica's ID (membership.ErrDuplicateReplicaID). It prepares (retrying with backoff while Kafka or the object store
// is unreachable), joins the group and follows the control topics. When a
// task fails, or the control topics cannot be read, the session ends —
// every local task stops, open transactions are aborted, the group is left —
// and a new session starts after a backoff. On return everything is closed.
func (r *Replica) Run(ctx context.Context) error {
	if err := retry(ctx, r.log, r.met, "connect", func() error { return r.prepare(ctx) }); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer r.close()
	backoff := time.Second
	for {
		err := r.session(ctx)
		r.stopCoordinator()
		r.stopTasks(ctx)
		r.ready.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, kafkaio.ErrSinkTxnAborted) || errors.Is(err, membership.ErrDuplicateReplicaID) {
			return err
		}
		r.met.sessions.Inc()
		r.log.Error("replica session ended; starting again", "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// session is one membership of the group: it ends with an error, or nil
// when ctx ends.
func (r *Replica) session(ctx context.Context) error {

	// Where this replica stands (the newest generation in the history) and
	// where triggers start: two independent reads, in parallel. Both come
	// before the join: the generation that this replica's joining starts
	// must arrive on the tail, so the tail's start is fixed first; and a
	// replica that cannot follow the control topics must not join (each
	// join and leave would restart every replica's tasks).
	var hist kafkaio.ControlHistory
	var triggerEnd int64
	err := all(
		func() error {
			var err error
			hist, err = kafkaio.ReadControlHistory(ctx, r.kopts, r.topics, control.TopicCommit)
			return err
		},
		func() error {
			var err error
			triggerEnd, err = kafkaio.StableEnd(ctx, r.kopts, r.topics, control.TopicTrigger)
			return err
		},
	)
	if err != nil {
		return err
	}
	for _, rec := range hist.Records {
		switch m := rec.Msg.(type) {
		case control.Generation:
			g := m
			r.lastGen = &g
		}
	}
	tail, err := kafkaio.NewControlTail(r.kopts, r.topics, map[control.Topic]kgo.Offset{
		control.TopicCommit:  kgo.NewOffset().At(hist.End),
		control.TopicTrigger: kgo.NewOffset().At(triggerEnd),
	}, r.log)
	if err != nil {
		return err
	}
	defer tail.Close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	recs := make(chan kafkaio.ControlRecord, 256)
	tailErr := make(chan error, 1)
	go func() {
		for {
			rec, err := tail.Next(runCtx)
			if err != nil {
				tailErr <- err
				return
			}
			select {
			case recs <- rec:
			case <-runCtx.Done():
				return
			}
		}
	}()

	member, err := membership.Join(ctx, membership.Options{
		Kafka: r.kopts, Group: r.cfg.Kafka.TopicPrefix + "members", Topic: r.topics.Commit,
		ReplicaID: r.opts.ReplicaID, LocalTasks: r.localTaskNames,
		SessionTimeout: r.cfg.Kafka.SessionTimeout, Logger: r.log, Registerer: r.opts.Registerer,
	})
	if err != nil {
		return fmt.Errorf("join the replicas' group: %w", err)
	}
	defer func() {
		lctx, lcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer lcancel()
		if err := member.Leave(lctx); err != nil {
			r.log.Warn("leave group", "err", err)
		}
	}()

	// A replica that restarts into a running generation takes its tasks
	// back only when the coordinator says so: a membership change starts a
	// new generation, whose record arrives on the tail.
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	var coordRetry <-chan time.Time // set while the role waits to be taken again
	for {
		var coordDone chan error
		if r.coord != nil {
			coordDone = r.coord.done
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-tailErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("follow the control topics: %w", err)
		case v := <-member.Views():
			if errors.Is(v.Err, membership.ErrDuplicateReplicaID) {
				// Another process runs with this replica ID: exit
				// rather than disturb it (docs/membership.md).
				return fmt.Errorf("replica %s: %w", r.opts.ReplicaID, v.Err)
			}
			r.onView(ctx, v)
		case rec := <-recs:
			if err := r.onRecord(ctx, rec); err != nil {
				return err
			}
		case err := <-coordDone:
			r.coord = nil
			if ctx.Err() != nil {
				return nil
			}
			r.log.Warn("coordinator role given up", "err", err)
			if !errors.Is(err, kafkaio.ErrFenced) && r.lastView.IsCoordinator() {
				// Still the coordinator by the last view: take the role
				// again after a pause, without stopping the dispatch.
				coordRetry = time.After(time.Second)
			}
		case <-coordRetry:
			coordRetry = nil
			if r.coord == nil && r.lastView.IsCoordinator() {
				r.onView(ctx, r.lastView)
			}
		case <-ticker.C:
			if err := r.checkTasks(); err != nil {
				return err
			}
		}
	}
}

// onView reacts to a new membership view: take or give up the coordinator
// role, and, as coordinator, place the tasks.
func (r *Replica) onView(ctx context.Context, v membership.View) {
	r.lastView = v
	if v.Err != nil || v.Lost {
		r.log.Warn("membership lost or invalid; stopping local tasks", "err", v.Err, "lost", v.Lost)
		r.stopCoordinator()
		r.stopTasks(ctx)
		return
	}
	r.met.members.Set(float64(len(v.Members)))
	if !v.IsCoordinator() {
		r.stopCoordinator()
		return
	}
	if r.coord == nil {
		if err := r.startCoordinator(ctx); err != nil {
			r.log.Error("start the coordinator", "err", err)
			return
		}
	}
	var previous map[string][]string
	if r.lastGen != nil {
		previous = map[string][]string{}
		for rep, ts := range r.lastGen.Assignment {
			for _, t := range ts {
				previous[rep] = append(previous[rep], t.String())
			}
		}
	}
	names := make([]string, len(r.taskIDs))
	for i, t := range r.taskIDs {
		names[i] = t.String()
	}
	placed := membership.Place(names, v.Members, previous)
	a := control.Assignment{}
	for rep, ts := range placed {
		for _, name := range ts {
			id, err := control.ParseTaskID(name)
			if err != nil {
				r.log.Error("placement produced a bad task ID", "task", name, "err", err)
				return
			}
			a[rep] = append(a[rep], id)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.runner.Submit(sctx, coordinator.Assign{Assignment: a}); err != nil {
		r.log.Error("assign tasks", "err", err)
	}
}

func (r *Replica) startCoordinator(ctx context.Context) error {
	if r.runner == nil {
		cp := r.cfg.Checkpoint
		run, err := runner.New(runner.Options{
			Core: coordinator.Config{
				Interval: cp.Interval, Timeout: cp.Timeout, MinPause: min(cp.MinPause, cp.Interval),
				MaxConcurrent: cp.MaxConcurrent, TolerableFailures: cp.TolerableFailures, Retained: cp.Retained,
			},
			Kafka: r.kopts, Topics: r.topics,
			TransactionalID: kafkaio.CoordinatorTransactionalID(r.cfg.Kafka.TopicPrefix),
			Metadata:        runner.ObjectStoreMetadata{Store: r.store},
			Logger:          r.log,
			Registerer:      r.opts.Registerer,
		})
		if err != nil {
			return err
		}
		r.runner = run
	}
	cctx, cancel := context.WithCancel(ctx)
	role := &coordRole{cancel: cancel, done: make(chan error, 1)}
	go func() { role.done <- r.runner.Run(cctx) }()
	r.coord = role
	r.met.coordinator.Set(1)
	r.log.Info("holding the coordinator role")
	return nil
}

func (r *Replica) stopCoordinator() {
	if r.coord == nil {
		return
	}
	r.coord.cancel()
	<-r.coord.done
	r.coord = nil
	r.met.coordinator.Set(0)
	r.log.Info("gave up the coordinator role")
}

// onRecord dispatches one control record.
func (r *Replica) onRecord(ctx context.Context, rec kafkaio.ControlRecord) error {
	switch m := rec.Msg.(type) {
	case control.Generation:
		g := m
		r.lastGen = &g
		return r.startGeneration(ctx, g)
	case control.Trigger:
		if m.Gen != r.gen {
			return nil
		}
		for id, t := range r.tasks {
			if err := t.Trigger(m.ID); err != nil {
				r.log.Warn("inject barrier", "task", id.String(), "checkpoint_id", m.ID, "err", err)
			}
		}
	case control.Complete:
		if m.Gen != r.gen {
			return nil
		}
		// Each task's commit is a round trip per sink: run them together.
		var wg sync.WaitGroup
		for id, t := range r.tasks {
			wg.Go(func() {
				if err := t.Complete(ctx, m.ID); err != nil {
					// A pre-committed transaction that cannot be committed:
					// the sink has failed, so the task fails and the next
					// generation's recovery commits it, or stops loudly.
					r.log.Error("checkpoint completion failed", "task", id.String(), "checkpoint_id", m.ID, "err", err)
				}
			})
		}
		wg.Wait()
		r.met.lastCompleted.Set(float64(m.ID))
		if r.opts.OnCommitted != nil {
			r.opts.OnCommitted(m.ID)
		}
	case control.Abort:
		if m.Gen != r.gen {
			return nil
		}
		for _, t := range r.tasks {
			t.Abort(ctx, m.ID)
		}
	}
	return nil
}

// startGeneration stops every local task and starts the ones generation g
// assigns to this replica, restored from g's checkpoint.
func (r *Replica) startGeneration(ctx context.Context, g control.Generation) error {
	r.ready.Store(false)
	r.stopTasks(ctx)
	r.gen = 0 // until every task of g runs, no trigger is passed on
	mine := g.Assignment[r.opts.ReplicaID]
	r.log.Info("generation", "generation", g.Gen, "restore_from", g.RestoreFrom, "tasks", len(mine))
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for _, id := range mine {
		wg.Go(func() {
			var t *task.Task
			err := retry(ctx, r.log, r.met, "start_task", func() error {
				var err error
				t, err = task.Open(ctx, r.taskConfig(id, g))
				if errors.Is(err, kafkaio.ErrSinkTxnAborted) {
					// Output of a completed checkpoint is lost: never go on
					// silently (DESIGN.md invariant 5).
					return permanent{err}
				}
				return err
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			r.tasks[id] = t
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.gen = g.Gen
	r.met.restoreSeconds.Observe(time.Since(start).Seconds())
	r.met.tasks.Set(float64(len(r.tasks)))
	if len(mine) > 0 {
		running := make([]control.Message, len(mine))
		for i, id := range mine {
			running[i] = control.Running{Gen: g.Gen, Task: id}
		}
		sent := time.Now()
		if err := r.acks.SendAll(ctx, running...); err != nil {
			return fmt.Errorf("report %d tasks running: %w", len(mine), err)
		}
		r.log.Debug("reported tasks running", "generation", g.Gen, "tasks", len(mine), "send", time.Since(sent))
	}
	// Every task is open: all start processing now.
	for _, id := range mine {
		r.tasks[id].Run()
	}
	r.ready.Store(true)
	return nil
}

func (r *Replica) taskConfig(id control.TaskID, g control.Generation) task.Config {
	return task.Config{
		Job: r.opts.Job, ID: id, Gen: g.Gen, RestoreFrom: g.RestoreFrom,
		Kafka: r.kopts, Prefix: r.cfg.Kafka.TopicPrefix, Store: r.store,
		StateDir: filepath.Join(r.cfg.State.Dir, r.cfg.Job.Name, task.StateName(id)),
		Cache:    r.cache, Acks: r.acks,
		RecordCacheBytes:         cmp.Or(r.cfg.State.RecordCacheBytes, -1), // config: 0 is off
		MaxConcurrentCheckpoints: r.cfg.Checkpoint.MaxConcurrent,
		SinkMetrics:              r.sinkMet,
		Logger:                   r.log, Registerer: r.opts.Registerer,
	}
}

// checkTasks returns the error of a task that failed. The session then
// ends: the replica leaves the group, which starts a new generation that
// restores every task from the last completed checkpoint (Flink's global
// failover), and joins again.
func (r *Replica) checkTasks() error {
	for id, t := range r.tasks {
		select {
		case <-t.Done():
			if err := t.Err(); err != nil {
				return fmt.Errorf("%w: task %s: %w", errTaskFailed, id, err)
			}
		default:
		}
	}
	return nil
}

var errTaskFailed = errors.New("replica: task failed")

func (r *Replica) stopTasks(ctx context.Context) {
	if len(r.tasks) == 0 {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Process.GracePeriod)
	defer cancel()
	var wg sync.WaitGroup
	for id, t := range r.tasks {
		wg.Go(func() {
			if err := t.Stop(sctx); err != nil {
				r.log.Warn("stop task", "task", id.String(), "err", err)
			}
		})
	}
	wg.Wait()
	clear(r.tasks)
	r.met.tasks.Set(0)
}

// localTaskNames lists the tasks whose state directory exists on this
// replica's disk: a hint for sticky placement, valid across restarts. It is
// called from the membership group's goroutine, so it reads only the disk.
func (r *Replica) localTaskNames() []string {
	entries, err := os.ReadDir(filepath.Join(r.cfg.State.Dir, r.cfg.Job.Name))
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		stage, idx, ok := strings.Cut(e.Name(), "-")
		if !e.IsDir() || !ok {
			continue
		}
		if id, err := control.ParseTaskID(stage + "/" + idx); err == nil {
			out = append(out, id.String())
		}
	}
	slices.Sort(out)
	return out
}

func (r *Replica) close() {
	ctx := context.Background()
	r.stopCoordinator()
	r.stopTasks(ctx)
	if r.acks != nil {
		r.acks.Close()
	}
	if r.store != nil {
		_ = r.store.Close()
	}
	if r.cache != nil {
		r.cache.Unref()
	}
}

// retry runs fn until it succeeds or ctx ends, with exponential backoff
// from 200ms to 30s, counting and logging each failure: an unreachable
// Kafka or object store never makes the replica exit and lose its place.
func retry(ctx context.Context, log *slog.Logger, met *metrics, what string, fn func() error) error {
	backoff := 200 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var p permanent
		if errors.As(err, &p) {
			return p.err
		}
		met.retries.WithLabelValues(what).Inc()
		log.Warn("retrying", "what", what, "attempt", attempt, "backoff", backoff, "err", err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// permanent marks an error retry must not retry.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }
