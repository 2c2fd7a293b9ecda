// Package replica runs one processor replica of a job (DESIGN.md section 6):
// it joins the job's membership group, holds the coordinator role when the
// group gives it, follows the control topics, and starts, stops, triggers,
// completes and aborts its local tasks as the generations and checkpoints
// on those topics say.
//
// Goroutines: Run's goroutine owns the set of local tasks and every decision
// about them; it reads control records from one tail goroutine, membership
// views from the membership package, and the input topics' partition count
// from a watcher goroutine (every kafka.metadata_max_age). The coordinator runner, when
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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/compat"
	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/coordinator"
	"github.com/weir-stream/weir/coordinator/runner"
	retrypolicy "github.com/weir-stream/weir/internal/retry"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/kafkaio/kafkaconn"
	"github.com/weir-stream/weir/kafkaio/shuffle"
	kafkasink "github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/kafkaio/source"
	"github.com/weir-stream/weir/plan"
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
	ReplicaID string
	// Fingerprint identifies the job file this replica runs. The
	// replicas of one generation all run the same file: the coordinator
	// is elected among the members of the file most replicas run
	// (runtime/membership), and places tasks only on replicas of its
	// own file; a replica of another file takes no task and waits
	// (Waiting). "" is a file like any other. It is also recorded in the
	// state schema of every checkpoint (compat.Fingerprint).
	Fingerprint string
	Logger      *slog.Logger
	Registerer  prometheus.Registerer
	// OnCommitted, if set, is called after every checkpoint this replica saw
	// complete (for `processor dev`, which prints the committed output).
	OnCommitted func(id ckpt.ID)
	// RestoreFrom, if set, is `processor run --restore-from`: a restore
	// point the job starts from, honoured once (restorefrom.go).
	RestoreFrom *checkpoint.Source
}

// Replica is one running replica.
type Replica struct {
	opts    Options
	cfg     *config.Config
	log     *slog.Logger
	conn    *kafkaconn.Conn // every Kafka client's settings, and their permanent failures
	kopts   []kgo.Opt       // conn.Opts() and the client ID
	topics  controltopic.Topics
	store   *objstore.Store
	cache   *pebble.Cache
	acks    *controltopic.AckWriter
	sinkMet *kafkasink.Metrics
	met     *metrics
	runner  *runner.Runner // created once; Run once per coordinator term

	taskMet *task.Metrics
	sinks   []stream.KafkaSink // the job's sinks with their defaults (sinkSpecs)

	// Owned by Run's goroutine.
	//
	// plan is the running generation's stages, tasks and shuffles
	// (plan.ForTasks of its assignment; before the first generation, the
	// plan made at start); inputParts the input topics' partition count
	// last read, which the coordinator places tasks for.
	plan       *plan.Plan
	inputParts int
	gen        uint64
	tasks      map[control.TaskID]*task.Task
	// shuffleCls are the producers the generation's tasks share for their
	// shuffle writes (none if no task writes one), shuffleFor each writing
	// task's; closed by stopTasks once every task stopped.
	shuffleCls []*kgo.Client
	shuffleFor map[control.TaskID]*kgo.Client
	coord      *coordRole
	lastView   membership.View
	lastGen    *control.Generation
	// failed is the job's permanent failure, from the commit topic, until
	// a resumed or generation record follows it; loggedAt is the commit
	// offset of the failure last logged, so that each is logged once.
	failed   *control.Failed
	loggedAt int64
	// check is the compatibility check of the job with its newest
	// checkpoint (compat.go).
	check restoreCheck
	// restoreReq is the --restore-from value (nil: none), sources the
	// restore points outside the job's storage that generations restored,
	// opened read-only, by location (restorefrom.go).
	restoreReq *restoreRequest
	sources    map[string]*checkpoint.Point
	// pendingRestore is the pending value, for /readyz (PendingRestore).
	pendingRestore atomic.Pointer[string]

	ready   atomic.Bool
	isCoord atomic.Bool             // while the coordinator runner runs here: Coordinator
	waiting atomic.Pointer[string]  // read by Waiting, for /readyz
	running atomic.Pointer[running] // the newest generation read, for the membership's join metadata
	heart   *Heartbeat              // Run's loop beats it: the /livez answer
	failure atomic.Pointer[Failure] // read by Failure, for /readyz
	// stopped is the job's stop (processor stop) this replica read, until
	// a resumed or generation record; stop is it for /readyz.
	stopped *control.Stopped
	stop    atomic.Pointer[Stop]
	// parked exports the input's lag while the job is failed or stopped
	// (parkLag); lag is weir_source_lag_records.
	parked *parkedLag
	lag    *prometheus.GaugeVec
}

// Failure is a job's permanent failure, as this replica read it from the
// commit topic (DESIGN.md section 11).
type Failure struct {
	control.Failed
	// CommitTopic and Offset locate the failed record.
	CommitTopic string
	Offset      int64
}

// Resume is the command that resumes the job, for people.
func (f *Failure) Resume() string {
	if !f.Record.IsZero() {
		return "fix the job (for example on_error: skip on the source or on the step that failed) and restart its replicas, then run `processor resume -c FILE`; " +
			"or skip the record with `processor resume -c FILE --skip " + f.Record.String() + "`"
	}
	return "fix the cause, then run `processor resume -c FILE`"
}

func (f *Failure) String() string {
	s := fmt.Sprintf("job failed (cause %s", f.Cause)
	if f.Task != (control.TaskID{}) {
		s += ", task " + f.Task.String()
	}
	if !f.Record.IsZero() {
		s += ", record " + f.Record.String()
	}
	return s + fmt.Sprintf(", generation %d; %s offset %d): %s", f.Gen, f.CommitTopic, f.Offset, f.Reason)
}

// Stop is a job stopped on purpose, as a replica reports it.
type Stop struct {
	control.Stopped
	// CommitTopic and Offset locate the stopped record.
	CommitTopic string
	Offset      int64
}

func (s *Stop) String() string {
	if s.Savepoint > 0 {
		return fmt.Sprintf("job stopped with savepoint %d (%s; generation %d, %s offset %d): start it again with `processor resume -c FILE`",
			s.Savepoint, s.Metadata, s.Gen, s.CommitTopic, s.Offset)
	}
	return fmt.Sprintf("job stopped (generation %d, %s offset %d): start it again with `processor resume -c FILE`", s.Gen, s.CommitTopic, s.Offset)
}

// running is the newest generation this replica read from the commit
// topic, and the job file it runs.
type running struct {
	gen         uint64
	fingerprint string
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
		topics: controltopic.NewTopics(cfg.Kafka.TopicPrefix),
		tasks:  map[control.TaskID]*task.Task{},

		loggedAt: -1,
		sinks:    sinkSpecs(opts.Job, cfg),
		heart:    newHeartbeat(),
	}
	if opts.RestoreFrom != nil {
		r.restoreReq = &restoreRequest{src: *opts.RestoreFrom, pending: true, since: -1}
	}
	conn, err := kafkaconn.New(cfg.Kafka, r.log)
	if err != nil {
		return nil, err
	}
	r.conn = conn
	r.kopts = append(conn.Opts(), kgo.ClientID(cfg.Kafka.ClientID))
	met, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	r.met = met
	met.interval.Set(cfg.Checkpoint.Interval.Seconds())
	if r.lag, err = source.LagMetric(opts.Registerer); err != nil {
		return nil, err
	}
	sm, err := kafkasink.NewMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	r.sinkMet = sm
	tm, err := task.NewMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	r.taskMet = tm
	return r, nil
}

// Ready reports whether the replica runs every task it was assigned and
// has caught up with the control topics: the /readyz answer.
func (r *Replica) Ready() bool { return r.ready.Load() }

// Waiting returns, while the running generation runs another job file than
// this replica's, why this replica takes no task ("waiting: this replica
// runs job <fp>, the generation runs <fp>"); "" otherwise. Such a replica is
// ready: it is compatible and takes its share as soon as a generation of its
// file starts (docs/deploy.md, rolling updates). Safe for use by any
// goroutine.
func (r *Replica) Waiting() string {
	if w := r.waiting.Load(); w != nil {
		return *w
	}
	return ""
}

// Failure returns the job's permanent failure, or nil while the job is not
// failed. Safe for use by any goroutine.
func (r *Replica) Failure() *Failure { return r.failure.Load() }

// Coordinator reports whether this replica holds the coordinator role
// now. Safe for use by any goroutine.
func (r *Replica) Coordinator() bool { return r.isCoord.Load() }

// Generation returns the newest generation this replica read from the
// commit topic (0: none yet). Safe for use by any goroutine.
func (r *Replica) Generation() uint64 {
	if g := r.running.Load(); g != nil {
		return g.gen
	}
	return 0
}

// KafkaOpts are the options every Kafka client of the replica starts
// from (its connection's settings and client ID).
func (r *Replica) KafkaOpts() []kgo.Opt { return slices.Clip(r.kopts) }

// ReplicaID is the replica's name in the group and in assignments.
func (r *Replica) ReplicaID() string { return r.opts.ReplicaID }

// Heartbeat is the liveness of the replica's Run loop (/livez).
func (r *Replica) Heartbeat() *Heartbeat { return r.heart }

// prepare connects to Kafka and the object store and learns the job's
// tasks. It is retried with backoff by Run.
func (r *Replica) prepare(ctx context.Context) error {
	// Metadata at most 50ms old: the checks below ask again for topics
	// just created, and kadm answers from the client's cache, which by
	// default keeps an unknown topic unknown for 5s.
	cl, err := kgo.NewClient(append(slices.Clip(r.kopts), kgo.MetadataMinAge(50*time.Millisecond))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	// Independent round trips to the broker and the object store, in
	// parallel: start-up time is what users wait for after every restart.
	// The job's plan needs the input's partition count, and its shuffle
	// topics the plan. The shuffle topics are created after the control
	// topics: a broker makes a new topic's partitions in the order the
	// topics were created, and those of a shuffle topic (one per key group)
	// take it a while, which the control topics, needed first, should not
	// wait for.
	var p *plan.Plan
	controlMade := make(chan struct{})
	start := time.Now()
	var took [4]time.Duration // control topics, plan and shuffle topics, sinks, object store
	timed := func(i int, fn func() error) func() error {
		return func() error {
			err := fn()
			took[i] = time.Since(start)
			return err
		}
	}
	err = all(
		timed(0, func() error {
			err := controltopic.EnsureTopics(ctx, adm, r.topics, int16(r.cfg.Kafka.ReplicationFactor))
			close(controlMade)
			if err != nil {
				return err
			}
			return r.awaitControlTopics(ctx, adm)
		}),
		timed(1, func() error {
			parts, err := r.inputPartitions(ctx, adm)
			if err != nil {
				return err
			}
			r.inputParts = parts
			p, err = r.planFor(parts, nil)
			<-controlMade
			if errors.Is(err, plan.ErrInvalid) {
				// Planned as at a first start, a downstream stage that
				// follows the input may exceed the key groups after
				// partitions were added; it keeps the running
				// generation's task count.
				g, herr := r.lastGeneration(ctx)
				if herr != nil {
					return herr
				}
				if g != nil {
					p, err = r.planFor(parts, g)
				}
			}
			if err != nil {
				return permanent{err} // the job and its configuration disagree
			}
			return r.ensureShuffleTopics(ctx, adm, p)
		}),
		timed(2, func() error { return r.checkSinks(ctx, adm) }),
		timed(3, func() error {
			if r.store != nil {
				return nil
			}
			st, err := objstore.Open(ctx, r.cfg.Checkpoint.Storage, r.cfg.Job.Name, objstore.Options{Logger: r.log})
			if errors.Is(err, objstore.ErrPermanent) {
				return permanent{err} // no such bucket, access denied, a bad URL
			}
			if err == nil {
				r.store = st
			}
			return err
		}),
	)
	if err != nil {
		return err
	}
	r.log.Debug("prepared", "control_topics", took[0], "plan_and_shuffle_topics", took[1], "sinks", took[2], "object_store", took[3])
	r.plan = p
	if r.acks == nil {
		a, err := controltopic.NewAckWriter(r.kopts, r.topics)
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

// planInputs are the plan's inputs from the job's settings, its stages
// under the names the last comparison with the job's newest checkpoint
// gave them (compat.Result.StageNames).
func (r *Replica) planInputs() plan.Inputs {
	return plan.Inputs{
		Parallelism: r.cfg.Job.Parallelism, MaxParallelism: r.cfg.Job.MaxParallelism, TopicPrefix: r.cfg.Kafka.TopicPrefix,
		StageNames: r.check.result.StageNames,
	}
}

// planFor plans the job for parts input partitions, its downstream stages
// keeping the task counts of the running generation g (nil: none yet,
// plan.Inputs.Running).
func (r *Replica) planFor(parts int, g *control.Generation) (*plan.Plan, error) {
	in := r.planInputs()
	in.SourcePartitions = parts
	if g != nil {
		tasks, err := g.Assignment.Tasks()
		if err != nil {
			return nil, err
		}
		in.Running = plan.Count(tasks)
	}
	return plan.Build(r.opts.Job, in)
}

// lastGeneration returns the newest generation record of the commit
// topic, or nil if there is none.
func (r *Replica) lastGeneration(ctx context.Context) (*control.Generation, error) {
	return LastGeneration(ctx, r.kopts, r.topics)
}

// LastGeneration returns the newest generation record of the commit topic
// of topics, or nil if there is none (or no commit topic: the job never
// ran). `processor plan` asks it for the running generation's task counts.
func LastGeneration(ctx context.Context, opts []kgo.Opt, topics controltopic.Topics) (*control.Generation, error) {
	hist, err := controltopic.ReadHistory(ctx, opts, topics, control.TopicCommit)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var last *control.Generation
	for _, rec := range hist.Records {
		if g, ok := rec.Msg.(control.Generation); ok {
			last = &g
		}
	}
	return last, nil
}

// sourceTasks returns the number of tasks of the job's source stage in
// generation g: the input partitions it was placed for.
func (r *Replica) sourceTasks(g *control.Generation) int {
	n := 0
	for _, ts := range g.Assignment {
		for _, t := range ts {
			if st := r.plan.Stage(t.Stage); st != nil && st.Kafka {
				n++
			}
		}
	}
	return n
}

// ensureShuffleTopics creates the shuffle topics of plan p, or checks
// those that exist.
func (r *Replica) ensureShuffleTopics(ctx context.Context, adm *kadm.Client, p *plan.Plan) error {
	if len(p.Shuffles) == 0 {
		return nil
	}
	topics := make(map[string]int, len(p.Shuffles))
	for _, sh := range p.Shuffles {
		topics[sh.Topic] = sh.Partitions
	}
	err := shuffle.EnsureTopics(ctx, adm, topics, int16(r.cfg.Kafka.ReplicationFactor))
	var ke *kerr.Error
	if errors.Is(err, shuffle.ErrTopicMismatch) || (errors.As(err, &ke) && !ke.Retriable) {
		// A wrong partition count, or one the brokers refuse (more
		// than they allow, a policy, authorization): fix the settings.
		return permanent{err}
	}
	if err != nil {
		return fmt.Errorf("shuffle topics: %w", err)
	}
	return nil
}

// inputPartitions returns the partition count of the job's input topics
// (InputPartitions).
func (r *Replica) inputPartitions(ctx context.Context, adm *kadm.Client) (int, error) {
	return InputPartitions(ctx, adm, r.opts.Job)
}

// InputPartitions returns the partition count of job's input topics, which
// must all have the same (co-partitioning): the parallelism of the job's
// source stage. A topic missing (after a moment to settle) or that the
// client may not use is a permanent error; `processor plan` asks it too.
func InputPartitions(ctx context.Context, adm *kadm.Client, job *stream.Job) (int, error) {
	srcs := job.Sources()
	if len(srcs) != 1 {
		return 0, fmt.Errorf("job %s has %d sources; one is supported", job.Name(), len(srcs))
	}
	details, err := listTopicsSettled(ctx, adm, srcs[0].Topics...)
	if err != nil {
		return 0, fmt.Errorf("describe input topics: %w", err)
	}
	parts := -1
	for _, topic := range srcs[0].Topics {
		d, ok := details[topic]
		if err := topicProblem("input", topic, d, ok); err != nil {
			return 0, err
		}
		if parts >= 0 && len(d.Partitions) != parts {
			return 0, fmt.Errorf("input topics must have the same number of partitions (co-partitioning): %s has %d, others %d", topic, len(d.Partitions), parts)
		}
		parts = len(d.Partitions)
	}
	return parts, nil
}

// topicProblem says what is wrong with topic (its description d, ok if the
// broker described it): a missing topic or one this client may not use is
// a permanent error, which a person must fix; others are retried.
// topicSettleTime is how long a topic may be missing from the metadata
// before it counts as missing: a topic created just before the job starts
// can take a moment to reach the broker that answers.
const topicSettleTime = 15 * time.Second

// listTopicsSettled describes topics, asking again for up to
// topicSettleTime while any of them is missing.
func listTopicsSettled(ctx context.Context, adm *kadm.Client, topics ...string) (kadm.TopicDetails, error) {
	deadline := time.Now().Add(topicSettleTime)
	for {
		details, err := adm.ListTopics(ctx, topics...)
		if err != nil {
			return nil, err
		}
		missing := false
		for _, topic := range topics {
			d, ok := details[topic]
			missing = missing || !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition)
		}
		if !missing || time.Now().After(deadline) {
			return details, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func topicProblem(role, topic string, d kadm.TopicDetail, ok bool) error {
	switch {
	case !ok || errors.Is(d.Err, kerr.UnknownTopicOrPartition):
		return permanent{fmt.Errorf("%s topic %s does not exist: create it, or correct the job's configuration", role, topic)}
	case errors.Is(d.Err, kerr.TopicAuthorizationFailed):
		return permanent{fmt.Errorf("%s topic %s: this replica is not authorized to use it (kafka.sasl, the topic's ACLs): %w", role, topic, d.Err)}
	case d.Err != nil:
		return fmt.Errorf("%s topic %s: %w", role, topic, d.Err)
	}
	return nil
}

// awaitControlTopics waits until the broker answers for every control
// topic: right after it created them, their metadata may not have reached
// the partitions' leaders yet (UNKNOWN_TOPIC_OR_PARTITION), which resolves
// itself within a second or so and is no reason for the session to fail.
func (r *Replica) awaitControlTopics(ctx context.Context, adm *kadm.Client) error {
	names := []string{r.topics.Trigger, r.topics.Ack, r.topics.Commit}
	// A topic just made is known to the broker within tens of
	// milliseconds, or after the partitions made before it: asked every
	// 25 ms, then up to every 100 ms (a doubling wait once cost a start
	// 400 ms of sleeping past the moment the topics were ready).
	wait := 25 * time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	for {
		offsets, err := adm.ListCommittedOffsets(ctx, names...)
		if err == nil {
			err = offsets.Error()
			for _, name := range names {
				if _, ok := offsets.Lookup(name, 0); !ok && err == nil {
					err = fmt.Errorf("control topic %s: partition 0 not in the answer", name)
				}
			}
		}
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("control topics not ready: %w", err)
		}
		r.log.Debug("waiting for the control topics' metadata", "err", err, "wait", wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// checkSinks checks that the job's output topics (sinks and dead-letter
// topics) exist, and the exactly-once sinks' transaction timeouts against
// the broker's limit and the checkpoint timing.
func (r *Replica) checkSinks(ctx context.Context, adm *kadm.Client) error {
	var outputs []string
	for _, sink := range r.sinks {
		outputs = append(outputs, sink.Topic)
	}
	for _, src := range r.opts.Job.Sources() {
		if src.DeadLetterTopic != "" && !slices.Contains(outputs, src.DeadLetterTopic) {
			outputs = append(outputs, src.DeadLetterTopic)
		}
	}
	if len(outputs) > 0 {
		details, err := listTopicsSettled(ctx, adm, outputs...)
		if err != nil {
			return fmt.Errorf("describe output topics: %w", err)
		}
		var errs []error
		for _, topic := range outputs {
			d, ok := details[topic]
			errs = append(errs, topicProblem("output", topic, d, ok))
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		if err := r.sinkRecordLimits(ctx, adm); err != nil {
			return err
		}
	}
	for _, sink := range r.sinks {
		if sink.Delivery == kafkaio.DeliveryAtLeastOnce {
			continue
		}
		if err := kafkasink.CheckTimeouts(ctx, adm, kafkasink.Timeouts{
			TransactionTimeout: sink.TransactionTimeout,
			CheckpointInterval: r.cfg.Checkpoint.Interval,
			CheckpointTimeout:  r.cfg.Checkpoint.Timeout,
		}); err != nil {
			err = fmt.Errorf("sink %s: %w", sink.Topic, err)
			if errors.Is(err, kafkasink.ErrTimeoutConfig) {
				return permanent{err} // fix the configuration
			}
			return err // the brokers could not be asked: retried
		}
	}
	return nil
}

// sinkRecordLimits sets each sink's MaxRecordBytes, where the job left it
// to the runtime, to its topic's max.message.bytes: franz-go's own default
// (1 MB) would refuse larger records, for example a dead letter of several
// MiB that the topic accepts.
func (r *Replica) sinkRecordLimits(ctx context.Context, adm *kadm.Client) error {
	var topics []string
	for _, sink := range r.sinks {
		if sink.MaxRecordBytes == 0 && !slices.Contains(topics, sink.Topic) {
			topics = append(topics, sink.Topic)
		}
	}
	if len(topics) == 0 {
		return nil
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		return fmt.Errorf("describe output topics' configuration: %w", err)
	}
	limits := map[string]int32{}
	for _, rc := range rcs {
		if rc.Err != nil {
			return fmt.Errorf("describe output topic %s's configuration: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key != "max.message.bytes" || c.Value == nil {
				continue
			}
			n, err := strconv.ParseInt(*c.Value, 10, 32)
			if err != nil || n <= 0 {
				return fmt.Errorf("output topic %s: max.message.bytes %q is not a positive size", rc.Name, *c.Value)
			}
			limits[rc.Name] = int32(n)
		}
	}
	for i := range r.sinks {
		if r.sinks[i].MaxRecordBytes == 0 {
			r.sinks[i].MaxRecordBytes = limits[r.sinks[i].Topic] // 0 if unknown: the client's default
		}
	}
	return nil
}

// sinkSpecs returns the job's sinks with the runtime's defaults filled in.
// It is the one place that does so for every sink, the pipeline's own and a
// source's dead-letter sink, of a YAML or a Go job: an exactly-once sink
// without a transaction timeout gets config's default, the least the
// checkpoint settings need (config.Config.SinkTransactionTimeout).
func sinkSpecs(job *stream.Job, cfg *config.Config) []stream.KafkaSink {
	sinks := job.Sinks()
	for i := range sinks {
		sinks[i].TransactionTimeout = cfg.SinkTransactionTimeout(sinks[i].TransactionTimeout)
	}
	return sinks
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

// Run runs the replica until ctx ends (it returns nil then) or a fatal
// error: lost output (sink.ErrTxnAborted), or another process in the
// group with this replica's ID (membership.ErrDuplicateReplicaID), refused
// for longer than two session timeouts (a crashed run of this replica can
// hold its place in the group until its session times out). It prepares (retrying with backoff while Kafka or the object store
// is unreachable), joins the group and follows the control topics. When a
// task fails, or the control topics cannot be read, the session ends —
// every local task stops, open transactions are aborted, the group is left —
// and a new session starts after a backoff. On return everything is closed.
//
// A connection failure that no retry fixes (a certificate refused, a failed
// authentication: kafkaconn.Error), met by any of the replica's Kafka
// clients, stops Run with that error.
func (r *Replica) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case <-r.conn.Failed():
			err := r.conn.Err()
			r.log.Error("cannot connect to Kafka; stopping: a person must fix the configuration, a certificate or a credential", "err", err)
			cancel(err)
		case <-ctx.Done():
		}
	}()
	err := r.run(ctx)
	if cerr := r.conn.Err(); cerr != nil && context.Cause(ctx) == cerr {
		return cerr
	}
	return err
}

func (r *Replica) run(ctx context.Context) error {
	if err := retry(ctx, r.log, r.met, r.heart, "connect", func() error { return r.connErr(r.prepare(ctx)) }); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer r.close()
	sessionBackoff := retrypolicy.Policy{Initial: time.Second, Max: 30 * time.Second}.Backoff()
	var refusedSince time.Time // first refusal as a duplicate ID, in a row
	for {
		err := r.session(ctx)
		r.stopCoordinator()
		r.stopTasks(ctx)
		r.ready.Store(false)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, kafkasink.ErrTxnAborted) {
			return err
		}
		if cerr := r.conn.Err(); cerr != nil {
			return cerr
		}
		if p := (permanent{}); errors.As(err, &p) {
			return p.err // a --restore-from location without a restore point
		}
		backoff := sessionBackoff.NextBackOff()
		var refused *RefusedError
		if errors.As(err, &refused) {
			// Stable, not a loop: the replica never joined, and checks
			// again now and then (a newer checkpoint may restore).
			r.setRefused(refused)
			backoff = refusedRecheck
		} else if errors.Is(err, membership.ErrDuplicateReplicaID) {
			// The other claimant may be this replica's own previous run,
			// killed while its join was in flight: the group keeps such a
			// member until its session times out. So a refusal is final only
			// when it lasts past two session timeouts; meanwhile this
			// replica runs nothing and joins again after a session timeout.
			if refusedSince.IsZero() {
				refusedSince = time.Now()
			}
			if time.Since(refusedSince) > 2*r.cfg.Kafka.SessionTimeout {
				return err
			}
			backoff = r.cfg.Kafka.SessionTimeout
			r.log.Warn("refused as a duplicate replica ID; joining again after a session timeout, in case the other member is a crashed run of this replica", "err", err, "backoff", backoff)
		} else {
			refusedSince = time.Time{}
			r.met.sessions.Inc()
			r.log.Error("replica session ended; starting again", "err", err, "backoff", backoff)
		}
		resume := r.heart.Wait()
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		resume()
		if ctx.Err() != nil {
			return nil
		}
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
	var hist controltopic.History
	var triggerEnd int64
	err := all(
		func() error {
			var err error
			hist, err = controltopic.ReadHistory(ctx, r.kopts, r.topics, control.TopicCommit)
			return err
		},
		func() error {
			var err error
			triggerEnd, err = controltopic.StableEnd(ctx, r.kopts, r.topics, control.TopicTrigger)
			return err
		},
	)
	if err != nil {
		return err
	}
	// The job's state is the newest generation, unless a failure came
	// after it that no resume cleared: then this replica, even if it
	// starts long after the failure, runs nothing and says why.
	for _, rec := range hist.Records {
		if g, ok := rec.Msg.(control.Generation); ok {
			r.setLastGen(g)
		}
	}
	failed, failedAt := JobFailure(hist.Records)
	r.clearFailed()
	if failed != nil {
		r.enterFailed(ctx, *failed, failedAt)
	}
	stopped, stoppedAt := JobStop(hist.Records)
	r.clearStopped()
	if stopped != nil {
		r.enterStopped(ctx, *stopped, stoppedAt)
	}
	for _, rec := range hist.Records {
		if c, ok := rec.Msg.(control.Complete); ok {
			r.noteComplete(c)
		}
	}
	r.noteRestoreHistory(hist.Records, hist.End)
	if err := r.openRestorePoint(ctx); err != nil {
		return err
	}
	// A job file that cannot restore the newest checkpoint never joins:
	// it writes nothing, and a generation of the others goes on.
	// Against the plan the next generation would run: the input's
	// partition count as last read, with the running generation's task
	// counts kept where a stage follows the input (planFor).
	next := r.plan
	if r.lastGen != nil {
		if p, err := r.planFor(r.inputParts, r.lastGen); err == nil {
			next = p
		}
	}
	if err := r.checkRestore(ctx, r.schemaOf(next)); err != nil {
		return err
	}
	r.setRefused(nil)
	tail, err := controltopic.NewTail(r.kopts, r.topics, map[control.Topic]kgo.Offset{
		control.TopicCommit:  kgo.NewOffset().At(hist.End),
		control.TopicTrigger: kgo.NewOffset().At(triggerEnd),
	}, r.log)
	if err != nil {
		return err
	}
	defer tail.Close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	recs := make(chan controltopic.Record, 256)
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
		Fingerprint: r.opts.Fingerprint, Running: r.runningGeneration,
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

	parts := make(chan int)
	go r.watchInputPartitions(runCtx, parts)

	// A replica that restarts into a running generation takes its tasks
	// back only when the coordinator says so: a membership change starts a
	// new generation, whose record arrives on the tail.
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	var coordRetry <-chan time.Time // set while the role waits to be taken again
	coordBackoff := retrypolicy.Policy{Initial: time.Second, Max: 30 * time.Second}.Backoff()
	for {
		r.heart.Beat() // back at the select: at least once a second (ticker)
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
			if err := r.onView(ctx, v); err != nil {
				return err
			}
		case rec := <-recs:
			if err := r.onRecord(ctx, rec); err != nil {
				return err
			}
		case n := <-parts:
			r.onInputPartitions(ctx, n)
		case err := <-coordDone:
			r.coord = nil
			r.isCoord.Store(false)
			if ctx.Err() != nil {
				return nil
			}
			r.log.Warn("coordinator role given up", "err", err)
			if !errors.Is(err, controltopic.ErrFenced) && r.lastView.IsCoordinator() {
				// Still the coordinator by the last view: take the role
				// again after a pause, without stopping the dispatch.
				coordRetry = time.After(coordBackoff.NextBackOff())
			}
		case <-coordRetry:
			coordRetry = nil
			if r.coord == nil && r.lastView.IsCoordinator() {
				if err := r.onView(ctx, r.lastView); err != nil {
					return err
				}
			}
		case <-ticker.C:
			if err := r.checkTasks(ctx); err != nil {
				return err
			}
		}
	}
}

// onView reacts to a new membership view: take or give up the coordinator
// role, and, as coordinator, place the tasks. It returns a *RefusedError
// if this replica's job cannot restore the newest checkpoint, which ends
// the session before the coordinator writes anything.
func (r *Replica) onView(ctx context.Context, v membership.View) error {
	r.lastView = v
	if v.Err != nil || v.Lost {
		r.log.Warn("membership lost or invalid; stopping local tasks", "err", v.Err, "lost", v.Lost)
		r.stopCoordinator()
		r.stopTasks(ctx)
		return nil
	}
	r.met.members.Set(float64(len(v.Members)))
	if !v.IsCoordinator() || ((r.failed != nil || r.stopped != nil) && r.assignRestore() == nil) {
		// A failed or stopped job has nothing to coordinate until it is
		// resumed; processor resume takes the coordinator's transactional
		// ID. A pending --restore-from starts it again.
		r.stopCoordinator()
		return nil
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
	// The tasks of the input's partition count now, read again: this
	// replica's last reading may be older than the running generation (a
	// coordinator that just took over after partitions were added). If
	// the brokers cannot say, the running generation's count: a stale
	// reading must not take tasks away.
	parts, ok := r.readInputPartitions(ctx)
	if !ok && r.lastGen != nil {
		parts = r.sourceTasks(r.lastGen)
	}
	p, err := r.planFor(parts, r.lastGen)
	if err != nil {
		r.log.Error("plan the job's tasks", "err", err)
		return nil
	}
	// The generation this placement starts restores the newest completed
	// checkpoint with this replica's job under plan p: checked first (it
	// was checked at the join, but a checkpoint may have completed since,
	// or the input grown). Its checkpoints record p's schema.
	sch := r.schemaOf(p)
	if err := r.checkRestore(ctx, sch); err != nil {
		var refused *RefusedError
		if errors.As(err, &refused) {
			r.stopCoordinator()
			return err
		}
		r.log.Error("check the job against its newest checkpoint", "err", err)
		return nil
	}
	if !samePlanNames(p, r.check.result.StageNames) {
		// The check found stages that keep the checkpoint's name: the
		// tasks are placed, and the checkpoints record, under it.
		if p, err = r.planFor(parts, r.lastGen); err != nil {
			r.log.Error("plan the job's tasks", "err", err)
			return nil
		}
		sch = r.schemaOf(p)
	}
	if r.coord == nil {
		if err := r.startCoordinator(ctx); err != nil {
			r.log.Error("start the coordinator", "err", err)
			return nil
		}
	}
	// A generation never runs two job files: the tasks go only to the
	// members of this replica's file (the leader elected this replica
	// among them); the others wait (startGeneration).
	members := slices.DeleteFunc(slices.Clone(v.Members), func(m membership.MemberInfo) bool {
		return m.Fingerprint != r.opts.Fingerprint
	})
	if len(members) < len(v.Members) {
		r.log.Info("members running another job file take no task in the next generation",
			"fingerprint", r.opts.Fingerprint, "members", len(members), "waiting", len(v.Members)-len(members))
	}
	// Each stage is placed on its own, so that every stage's tasks spread
	// over the replicas (a downstream stage's load is not a source's).
	a := control.Assignment{}
	for _, st := range p.Stages {
		var names []string
		for i := range st.Parallelism {
			names = append(names, control.TaskID{Stage: st.Name, Index: i}.String())
		}
		for rep, ts := range membership.Place(names, members, previous) {
			for _, name := range ts {
				id, err := control.ParseTaskID(name)
				if err != nil {
					r.log.Error("placement produced a bad task ID", "task", name, "err", err)
					return nil
				}
				a[rep] = append(a[rep], id)
			}
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Its checkpoints record where the state of operators renamed since
	// the checkpoint it restores is stored, so that it keeps following
	// them.
	rec := sch.WithStateNames(r.check.result.StateNames)
	if err := r.runner.Submit(sctx, coordinator.Assign{Assignment: a, Fingerprint: r.opts.Fingerprint, Schema: &rec, Restore: r.assignRestore()}); err != nil {
		r.log.Error("assign tasks", "err", err)
	}
	return nil
}

// readInputPartitions reads the input topics' partition count and keeps it
// in r.inputParts; if the brokers cannot say within a few seconds, it
// returns the count last read and false.
func (r *Replica) readInputPartitions(ctx context.Context) (int, bool) {
	cl, err := kgo.NewClient(append(slices.Clip(r.kopts), kgo.MetadataMinAge(50*time.Millisecond))...)
	if err != nil {
		r.log.Warn("read the input's partition count", "err", err)
		return r.inputParts, false
	}
	defer cl.Close()
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := InputPartitions(lctx, kadm.NewClient(cl), r.opts.Job)
	if err != nil {
		r.log.Warn("read the input's partition count", "err", err, "partitions_last_read", r.inputParts)
		return r.inputParts, false
	}
	r.inputParts = n
	return n, true
}

// onInputPartitions reacts to the input topics' partition count read by
// watchInputPartitions: the coordinator places the tasks of a new
// generation when it differs from the running generation's (partitions
// added get tasks; fewer partitions fail the restore, with cause job).
func (r *Replica) onInputPartitions(ctx context.Context, n int) {
	r.inputParts = n
	if r.coord == nil || r.failed != nil || r.stopped != nil || r.lastGen == nil || !r.lastView.IsCoordinator() {
		return
	}
	running := r.sourceTasks(r.lastGen)
	if n == running {
		return
	}
	r.log.Info("the input topics' partition count changed; a new generation places their tasks",
		"topics", strings.Join(r.opts.Job.Sources()[0].Topics, ","), "partitions", n, "running_partitions", running,
		"generation", r.lastGen.Gen)
	r.onView(ctx, r.lastView)
}

// watchInputPartitions reads the input topics' partition count every
// kafka.metadata_max_age and sends it to out, until ctx ends. Every
// replica watches (one metadata request per period), and only the
// coordinator acts on it (onInputPartitions); a placement that failed is
// tried again at the next reading.
func (r *Replica) watchInputPartitions(ctx context.Context, out chan<- int) {
	cl, err := kgo.NewClient(append(slices.Clip(r.kopts), kgo.MetadataMinAge(50*time.Millisecond))...)
	if err != nil {
		r.log.Warn("watch the input's partition count", "err", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	tick := time.NewTicker(r.cfg.Kafka.MetadataMaxAge)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		n, err := InputPartitions(ctx, adm, r.opts.Job)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("read the input's partition count", "err", err)
			}
			continue
		}
		select {
		case out <- n:
		case <-ctx.Done():
			return
		}
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
			TransactionalID: controltopic.CoordinatorTransactionalID(r.cfg.Kafka.TopicPrefix),
			Metadata:        runner.ObjectStoreMetadata{Store: r.store},
			Discarder:       runner.NewObjectStoreGC(r.store, r.log),
			PurgeInterval:   cp.PurgeInterval,
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
	r.isCoord.Store(true)
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
	r.isCoord.Store(false)
	r.met.coordinator.Set(0)
	r.log.Info("gave up the coordinator role")
}

// onRecord dispatches one control record.
func (r *Replica) onRecord(ctx context.Context, rec controltopic.Record) error {
	switch m := rec.Msg.(type) {
	case control.Generation:
		r.noteRestoreGeneration(m)
		r.setLastGen(m)
		r.clearFailed()
		r.clearStopped()
		return r.startGeneration(ctx, m)
	case control.Failed:
		r.enterFailed(ctx, m, rec.Offset)
	case control.Stopped:
		r.enterStopped(ctx, m, rec.Offset)
	case control.Resumed:
		if (r.failed == nil || r.failed.Gen != m.Gen) && (r.stopped == nil || r.stopped.Gen != m.Gen) {
			return nil
		}
		r.clearFailed()
		r.clearStopped()
		skip := make([]string, len(m.Skip))
		for i, p := range m.Skip {
			skip[i] = p.String()
		}
		r.log.Info("job resumed; a new generation starts", "generation", m.Gen, "skip", strings.Join(skip, " "))
		if r.coord == nil && r.lastView.IsCoordinator() {
			return r.onView(ctx, r.lastView)
		}
	case control.Trigger:
		if m.Gen != r.gen {
			return nil
		}
		for id, t := range r.tasks {
			if err := t.Trigger(m.Barrier()); err != nil {
				r.log.Warn("inject barrier", "task", id.String(), "checkpoint_id", m.ID, "err", err)
			}
		}
	case control.Complete:
		r.noteComplete(m)
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
	r.unparkLag() // the sources of g export the lag
	// Until every task of g runs, no trigger is passed on.
	r.gen = 0
	mine := g.Assignment[r.opts.ReplicaID]
	if g.Fingerprint != "" && g.Fingerprint != r.opts.Fingerprint {
		return r.wait(g, mine)
	}
	// A record without a fingerprint comes from a coordinator of a
	// version before fingerprints, which cannot tell files apart.
	r.waiting.Store(nil)
	r.met.waiting.Set(0)
	r.log.Info("generation", "generation", g.Gen, "restore_from", g.RestoreFrom, "restore_metadata", g.RestoreMetadata,
		"restore_location", g.RestoreLocation, "tasks", len(mine))
	start := time.Now()
	// Every replica runs the generation's plan, made from the tasks its
	// record lists, not from its own reading of the input's partitions:
	// all switch to added partitions at the same generation, and every
	// downstream task aligns on the barriers of exactly the upstream
	// tasks that run in it.
	//
	// Where g's checkpoint holds the state of operators and stages an
	// edit renamed (compat.Result.StateNames, StageNames): the same for
	// every task, and the plan's stages run under those names.
	// A restore point outside the job's storage (--restore-from) is read
	// through its own read-only store.
	var names compat.Result
	var from *checkpoint.Point
	if len(mine) > 0 {
		if err := retry(ctx, r.log, r.met, r.heart, "start_task", func() (err error) {
			if g.RestoreLocation != "" {
				if from, err = r.restoreSource(ctx, g.RestoreLocation); err != nil {
					return err
				}
			}
			names, err = r.restoreNames(ctx, g)
			return err
		}); err != nil {
			return err
		}
	} else if n, err := r.restoreNames(ctx, g); err == nil {
		// One attempt: a replica without tasks needs the names only to
		// check the generation's plan.
		names = n
	}
	all, err := g.Assignment.Tasks()
	if err == nil {
		var p *plan.Plan
		in := r.planInputs()
		in.StageNames = names.StageNames
		if p, err = plan.ForTasks(r.opts.Job, in, all); err == nil {
			r.plan = p
		}
	}
	if err != nil {
		if len(mine) > 0 {
			r.reportFailure(ctx, g.Gen, (&task.PermanentError{Cause: control.CauseJob, Err: fmt.Errorf("generation %d: %w", g.Gen, err)}).Failure(g.Gen, mine[0]))
		}
		r.log.Error("this replica's job cannot run the generation's tasks", "generation", g.Gen, "err", err)
		return nil
	}
	if err := r.openShuffleClient(mine); err != nil {
		return err
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for _, id := range mine {
		wg.Go(func() {
			var t *task.Task
			err := retry(ctx, r.log, r.met, nil, "start_task", func() error {
				var err error
				cfg := r.taskConfig(id, g)
				cfg.StateNames = names.StateNames
				if from != nil {
					cfg.RestoreStore = from.Store
				}
				t, err = task.Open(ctx, cfg)
				if errors.Is(err, kafkasink.ErrTxnAborted) || task.Permanent(err) != nil {
					// Output of a completed checkpoint is lost: never go on
					// silently (DESIGN.md invariant 5). Or the task can
					// never start: reported below.
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
			// Each task processes as soon as it is open: a source task
			// without a sink need not wait for the sinks' fencing of the
			// others (nothing it does needs them: the coordinator
			// triggers a checkpoint only once every task reports running,
			// below, and a task of a generation that fails to start is
			// stopped with the others, its output never committed).
			t.Run()
		})
	}
	// A large restore is legitimate work, not a stall of the loop.
	resume := r.heart.Wait()
	wg.Wait()
	resume()
	if ctx.Err() != nil {
		return nil
	}
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, kafkasink.ErrTxnAborted) {
			return err
		}
		var reported bool
		for _, e := range errs {
			if p := task.Permanent(e); p != nil {
				r.reportFailure(ctx, g.Gen, p.Failure(g.Gen, failedTask(e, mine)))
				reported = true
			}
		}
		if !reported {
			return err
		}
		// The job stops: the coordinator records the failure, and every
		// replica stops its tasks when it reads it. The session goes on,
		// so that the replica does not leave and rejoin in a loop.
		r.stopTasks(ctx)
		return nil
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
	r.ready.Store(true)
	return nil
}

// wait handles a generation that runs another job file than this
// replica's: the replica takes no task until a generation of its own file
// starts (the leader moves the coordinator role to its file once most
// members run it: runtime/membership), and says so once per generation.
// It is ready meanwhile, so that a rolling update goes on to the next
// replica. A generation of another file that gives this replica tasks
// breaks the rule that a generation never runs two files: the replica
// refuses them and stays not ready.
func (r *Replica) wait(g control.Generation, mine []control.TaskID) error {
	if len(mine) > 0 {
		r.waiting.Store(nil)
		r.met.waiting.Set(0)
		r.log.Error("the generation gives this replica tasks but runs another job file; running none of them (a generation never runs two job files)",
			"generation", g.Gen, "fingerprint", r.opts.Fingerprint, "generation_fingerprint", g.Fingerprint, "tasks", len(mine))
		return nil
	}
	msg := fmt.Sprintf("waiting: this replica runs job %s, the generation runs %s", r.opts.Fingerprint, g.Fingerprint)
	r.log.Info(msg, "generation", g.Gen, "fingerprint", r.opts.Fingerprint, "generation_fingerprint", g.Fingerprint)
	r.met.tasks.Set(0)
	r.met.waiting.Set(1)
	r.ready.Store(true) // before the text: a waiting replica is ready
	r.waiting.Store(&msg)
	return nil
}

// setLastGen records g as the newest generation read.
func (r *Replica) setLastGen(g control.Generation) {
	r.lastGen = &g
	r.running.Store(&running{gen: g.Gen, fingerprint: g.Fingerprint})
}

// runningGeneration is membership.Options.Running: the newest generation
// read and its job file. Called from the membership group's goroutine.
func (r *Replica) runningGeneration() (uint64, string) {
	if g := r.running.Load(); g != nil {
		return g.gen, g.fingerprint
	}
	return 0, ""
}

// openShuffleClient makes the producers that the shuffle writers of the
// tasks in mine share, if any of them writes a shuffle: shuffleProducers of
// them per replica and generation, each writing task given one in turn.
func (r *Replica) openShuffleClient(mine []control.TaskID) error {
	var writers []control.TaskID
	for _, id := range mine {
		if st := r.plan.Stage(id.Stage); st != nil && len(st.Outputs) > 0 {
			writers = append(writers, id)
		}
	}
	if len(writers) == 0 {
		return nil
	}
	n := shuffleProducers(len(writers), runtime.GOMAXPROCS(0))
	for range n {
		cl, err := shuffle.NewClient(r.kopts)
		if err != nil {
			r.closeShuffleClient()
			return err
		}
		r.shuffleCls = append(r.shuffleCls, cl)
	}
	r.shuffleFor = make(map[control.TaskID]*kgo.Client, len(writers))
	for i, id := range writers {
		r.shuffleFor[id] = r.shuffleCls[i%n]
	}
	return nil
}

// shuffleProducers is how many producers the writers of a replica's
// writing tasks share: two per core the replica may use, at most one per
// writer. Fewer producers make fewer, fuller batches, which cost the broker
// less per record (shuffle.NewClient), but the broker handles one
// connection's requests one at a time, so that a single producer bounds
// the replica's shuffle writes by one request handler (with 8 upstream
// tasks on 2 cores, one producer gave the two-stage benchmark 185 000
// records/s of processing, two 196 000, four 360 000 to 450 000, eight
// 238 000; docs/benchmarks.md).
func shuffleProducers(writers, procs int) int {
	return max(1, min(writers, 2*procs))
}

func (r *Replica) taskConfig(id control.TaskID, g control.Generation) task.Config {
	return task.Config{
		Job: r.opts.Job, ID: id, Gen: g.Gen, RestoreFrom: g.RestoreFrom, RestoreMetadata: g.RestoreMetadata, Skip: g.Skip,
		Kafka: r.kopts, Shuffle: r.shuffleFor[id], Prefix: r.cfg.Kafka.TopicPrefix, Store: r.store, BusyTime: r.cfg.HTTP.BusyTime,
		StateDir: filepath.Join(r.cfg.State.Dir, r.cfg.Job.Name, task.StateName(id)),
		Cache:    r.cache, Acks: r.acks,
		RecordCacheBytes:         cmp.Or(r.cfg.State.RecordCacheBytes, -1), // config: 0 is off
		Sinks:                    r.sinks,
		MaxConcurrentCheckpoints: r.cfg.Checkpoint.MaxConcurrent,
		SinkMetrics:              r.sinkMet,
		Plan:                     r.plan, Metrics: r.taskMet,
		Logger: r.log, Registerer: r.opts.Registerer,
	}
}

// checkTasks returns the error of a task that failed. The session then
// ends: the replica leaves the group, which starts a new generation that
// restores every task from the last completed checkpoint (Flink's global
// failover), and joins again. A permanent failure (task.PermanentError)
// does not end the session: the replica reports it to the coordinator,
// which stops the job with a failed record.
func (r *Replica) checkTasks(ctx context.Context) error {
	for id, t := range r.tasks {
		select {
		case <-t.Done():
			err := t.Err()
			if err == nil {
				continue
			}
			var p *task.PermanentError
			if !errors.As(err, &p) {
				return fmt.Errorf("%w: task %s: %w", errTaskFailed, id, err)
			}
			r.ready.Store(false)
			r.reportFailure(ctx, r.gen, p.Failure(r.gen, id))
			if err := t.Stop(ctx); err != nil {
				r.log.Warn("stop task", "task", id.String(), "err", err)
			}
			delete(r.tasks, id)
			r.met.tasks.Set(float64(len(r.tasks)))
		default:
		}
	}
	return nil
}

// failedTask returns the task of mine whose start failed with err (the
// error names it), or the first of mine.
func failedTask(err error, mine []control.TaskID) control.TaskID {
	for _, id := range mine {
		if strings.Contains(err.Error(), "start task "+id.String()+":") {
			return id
		}
	}
	return mine[0]
}

// reportFailure sends a task's permanent failure to the coordinator (the
// ack topic). If it is lost, the task's checkpoints expire, the job
// restarts, and the task fails and reports again.
func (r *Replica) reportFailure(ctx context.Context, gen uint64, f control.Failure) {
	if gen == 0 {
		return // not running a generation: nothing to report against
	}
	f.Gen = gen
	r.log.Warn("reporting a permanent task failure to the coordinator", append([]any{"task", f.Task.String(), "cause", f.Cause},
		append(recordAttrs(f.Record), "generation", gen)...)...)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.acks.Send(sctx, f); err != nil && ctx.Err() == nil {
		r.log.Warn("failure report not sent; the task's checkpoints will expire and the job restart", "task", f.Task.String(), "err", err)
	}
}

// JobFailure returns the job's permanent failure and its offset, given the
// commit topic's records in order: the newest failed record, unless a
// generation or resumed record follows it; nil if the job is not failed.
func JobFailure(commit []controltopic.Record) (*control.Failed, int64) {
	return newestUncleared[control.Failed](commit)
}

// JobStop returns the job's stop (processor stop) and its offset, given the
// commit topic's records in order: the newest stopped record, unless a
// generation or resumed record follows it; nil if the job is not stopped.
func JobStop(commit []controltopic.Record) (*control.Stopped, int64) {
	return newestUncleared[control.Stopped](commit)
}

// newestUncleared returns the newest record of type T among commit and its
// offset, unless a generation or resumed record follows it.
func newestUncleared[T control.Message](commit []controltopic.Record) (*T, int64) {
	var found *T
	var at int64 = -1
	for _, rec := range commit {
		switch rec.Msg.(type) {
		case control.Generation, control.Resumed:
			found, at = nil, -1
		}
		if m, ok := rec.Msg.(T); ok {
			found, at = &m, rec.Offset
		}
	}
	return found, at
}

// enterFailed stops the job on this replica: the failed record at offset
// of the commit topic says it failed permanently. It logs the failure once.
func (r *Replica) enterFailed(ctx context.Context, f control.Failed, offset int64) {
	r.failed = &f
	r.ready.Store(false)
	r.gen = 0
	r.stopTasks(ctx)
	r.stopCoordinator()
	fl := &Failure{Failed: f, CommitTopic: r.topics.Commit, Offset: offset}
	r.failure.Store(fl)
	r.met.setFailed(f.Cause)
	r.parkLag(ctx)
	if r.loggedAt == offset {
		return
	}
	r.loggedAt = offset
	r.log.Error("job failed permanently; this replica runs none of its tasks until the job is resumed",
		append(append([]any{"cause", f.Cause, "task", f.Task.String()}, recordAttrs(f.Record)...),
			"reason", f.Reason, "generation", f.Gen, "commit_topic", r.topics.Commit, "commit_offset", offset, "resume", fl.Resume())...)
}

// recordAttrs are the log attributes of the record a failure is about:
// none for a failure that is not about a record.
func recordAttrs(p control.Position) []any {
	if p.IsZero() {
		return nil
	}
	return []any{"record_topic", p.Topic, "record_partition", p.Partition, "record_offset", p.Offset}
}

// enterStopped stops the job on this replica: the stopped record at offset
// of the commit topic says it was stopped on purpose. Its tasks stop (their
// open transactions are aborted; a stop-with-savepoint committed
// everything before it), the coordinator role is given up, and the replica
// stays in the group, not ready, until the job is resumed.
func (r *Replica) enterStopped(ctx context.Context, s control.Stopped, offset int64) {
	r.stopped = &s
	r.ready.Store(false)
	r.gen = 0
	r.stopTasks(ctx)
	r.stopCoordinator()
	st := &Stop{Stopped: s, CommitTopic: r.topics.Commit, Offset: offset}
	r.stop.Store(st)
	r.met.stopped.Set(1)
	r.parkLag(ctx)
	r.log.Info("job stopped; this replica runs none of its tasks until the job is resumed",
		"generation", s.Gen, "savepoint", s.Savepoint, "metadata", s.Metadata,
		"commit_topic", r.topics.Commit, "commit_offset", offset, "resume", "processor resume -c FILE")
}

// clearStopped forgets the job's stop (a resumed or generation record).
func (r *Replica) clearStopped() {
	r.stopped = nil
	r.stop.Store(nil)
	r.met.stopped.Set(0)
}

// Stopped returns the job's stop this replica read, or nil while the job
// is not stopped. Safe from any goroutine.
func (r *Replica) Stopped() *Stop { return r.stop.Load() }

// clearFailed forgets the job's failure (a resumed or generation record).
func (r *Replica) clearFailed() {
	r.failed = nil
	r.failure.Store(nil)
	r.met.setFailed("")
}

var errTaskFailed = errors.New("replica: task failed")

func (r *Replica) stopTasks(ctx context.Context) {
	// The shared shuffle producer goes last: a stopping task's writers may
	// still hand it records, which the restored upstream writes again.
	defer r.closeShuffleClient()
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

// closeShuffleClient closes the generation's shared shuffle producers, failing what it has not yet written: records of a generation that is
// over, which no downstream task of a later one reads.
func (r *Replica) closeShuffleClient() {
	for _, cl := range r.shuffleCls {
		cl.Close()
	}
	r.shuffleCls, r.shuffleFor = nil, nil
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
		if !e.IsDir() {
			continue
		}
		if id, ok := task.ParseStateName(e.Name()); ok {
			out = append(out, id.String())
		}
	}
	slices.Sort(out)
	return out
}

func (r *Replica) close() {
	ctx := context.Background()
	r.unparkLag()
	r.stopCoordinator()
	r.stopTasks(ctx)
	if r.acks != nil {
		r.acks.Close()
	}
	if r.store != nil {
		_ = r.store.Close()
	}
	r.closeRestorePoint()
	r.closeSources()
	if r.cache != nil {
		r.cache.Unref()
	}
}

// retry runs fn until it succeeds or ctx ends, with the shared backoff
// (200ms doubling to 30s, jittered), counting and logging each failure: an
// unreachable Kafka or object store never makes the replica exit and lose
// its place. An error marked permanent is returned at once. heart, when
// the caller is Run's loop, is told that the backoff waits are no stall.
func retry(ctx context.Context, log *slog.Logger, met *metrics, heart *Heartbeat, what string, fn func() error) error {
	var resume func() // set during a backoff wait of Run's loop
	policy := retrypolicy.Policy{Initial: 200 * time.Millisecond, Max: 30 * time.Second}
	err := policy.Do(ctx, func() error {
		if resume != nil {
			resume()
			resume = nil
		}
		err := fn()
		var p permanent
		if errors.As(err, &p) {
			return retrypolicy.Permanent(p.err)
		}
		return err
	}, func(attempt int, err error, backoff time.Duration) {
		met.retries.WithLabelValues(what).Inc()
		log.Warn("retrying", "what", what, "attempt", attempt, "backoff", backoff, "err", err)
		if heart != nil {
			resume = heart.Wait()
		}
	})
	if resume != nil {
		resume()
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// connErr returns err, or, when one of the replica's Kafka clients met a
// connection failure no retry fixes (kafkaconn.Error), that failure marked
// permanent: err is then most likely its consequence.
func (r *Replica) connErr(err error) error {
	if err == nil {
		return nil
	}
	if cerr := r.conn.Err(); cerr != nil {
		return permanent{cerr}
	}
	return err
}

// permanent marks an error retry must not retry.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }
