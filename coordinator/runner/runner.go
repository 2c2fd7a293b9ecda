// Package runner drives the pure checkpoint coordinator (coordinator.Core)
// over Kafka: it is the loop of the replica that holds the coordinator role.
//
// It fences any older coordinator by taking over the job's coordinator
// transactional ID, rebuilds the core from the commit topic and the newest
// trigger record (event sourcing), follows the ack topic, and carries out each
// Ready in the order the coordinator package documents: control records in
// one Kafka transaction, _metadata objects with a conditional put, then
// notifications, discards and metrics.
//
// With a Discarder it also keeps the object store down to what the job's
// checkpoints need: it rebuilds the shared-file registry at the start of
// each term, registers every completed checkpoint, releases those beyond
// the retained count, and collects unreferenced leftovers after each
// generation it starts (gc.go).
//
// It also purges the job's shuffle topics: the core asks for DeleteRecords
// below the positions of the retained checkpoints (Ready.Purges), and a
// Purger (KafkaPurger by default) carries it out (purge.go).
//
// Goroutines: Run's goroutine owns the core and every Kafka writer; one
// goroutine reads the ack topic and hands records to Run over a channel;
// one goroutine (purgeLoop) owns the Purger and deletes shuffle records
// from a queue that keeps only the highest offset per partition; one
// goroutine (gcLoop) owns the Discarder and carries out registrations,
// discards and collections in order, from an unbounded queue, so that slow
// deletes never hold up the core's loop. The queue stays short all the same:
// before every Tick, Run tells the core how many discards are queued or
// running (coordinator.GCBacklog), and the core triggers no periodic
// checkpoint while they exceed max_concurrent. Other goroutines talk to the
// core only through Submit.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/coordinator"
	"github.com/weir-stream/weir/kafkaio/controltopic"
)

// MetadataStore writes checkpoint metadata objects.
type MetadataStore interface {
	// WriteMetadata stores m as its checkpoint's _metadata object with a
	// conditional put (it must not overwrite an existing object) and
	// returns the object's location.
	WriteMetadata(ctx context.Context, m control.Metadata) (string, error)
}

// MetadataReader reads a _metadata object back. A MetadataStore that also
// implements it (ObjectStoreMetadata does) tells a new coordinator the
// shuffle positions of the checkpoints it retains (coordinator.MetadataRead);
// without it, shuffle topics are purged only once every checkpoint retained
// at the start of the term is released.
type MetadataReader interface {
	ReadMetadata(ctx context.Context, location string) (control.Metadata, error)
}

// Options configure a Runner.
type Options struct {
	// Core is the coordinator's configuration. Its Random may be nil: the
	// runner then seeds one from the runtime's random source.
	Core coordinator.Config
	// Kafka are the client options (seed brokers, TLS, SASL, ...).
	Kafka []kgo.Opt
	// Topics are the job's control topics; they must exist.
	Topics controltopic.Topics
	// TransactionalID is the coordinator's transactional ID,
	// controltopic.CoordinatorTransactionalID(prefix).
	TransactionalID string
	// Metadata writes _metadata objects. Required.
	Metadata MetadataStore
	// Discarder keeps the object store down to what the checkpoints need
	// (NewObjectStoreGC). The product always sets it; nil keeps every
	// object and only logs what would go (tests of the protocol alone).
	Discarder Discarder
	// Purger deletes shuffle records below the retained checkpoints'
	// positions; nil: a KafkaPurger on a client of the Kafka options.
	Purger Purger
	// PurgeInterval is the least time between two purges; what the
	// checkpoints completed meanwhile release is purged together. 0
	// purges after every completed checkpoint. Each purge is a
	// DeleteRecords of every shuffle partition, and the broker writes a
	// checkpoint file for each partition whose start moves: Kafka Streams
	// purges its repartition topics every 30s by default for the same
	// reason (repartition.purge.interval.ms).
	PurgeInterval time.Duration
	// OnNotification, if set, is called from Run's goroutine for every
	// completed or aborted checkpoint, after its records are durable.
	OnNotification func(coordinator.Notification)
	// TickInterval is how often the core is told the time; default 100ms.
	TickInterval time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Logger and Registerer are required.
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Runner runs the coordinator role. Create it with New, run it with Run.
type Runner struct {
	opts    Options
	events  chan submitted
	metrics *metrics
}

type submitted struct {
	ev   coordinator.Event
	done chan error
}

// ErrStopped is returned by Submit when Run is not running.
var ErrStopped = errors.New("runner: coordinator not running")

// New checks opts and registers the runner's metrics.
func New(opts Options) (*Runner, error) {
	if opts.Metadata == nil {
		return nil, errors.New("runner: Options.Metadata is required")
	}
	if opts.Logger == nil || opts.Registerer == nil {
		return nil, errors.New("runner: Options.Logger and Options.Registerer are required")
	}
	if opts.TickInterval <= 0 {
		opts.TickInterval = 100 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Core.Random == nil {
		opts.Core.Random = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	if err := opts.Core.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Runner{opts: opts, events: make(chan submitted), metrics: m}, nil
}

// Submit hands an event to the core (an Assign from placement, a
// TaskRunning, a RequestSavepoint) and returns the core's answer. It waits
// until Run takes it or ctx ends; it fails with ErrStopped if Run is not
// running and does not start before ctx ends.
func (r *Runner) Submit(ctx context.Context, ev coordinator.Event) error {
	s := submitted{ev: ev, done: make(chan error, 1)}
	select {
	case r.events <- s:
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrStopped, ctx.Err())
	}
	select {
	case err := <-s.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run holds the coordinator role until ctx ends (it returns nil then) or a
// step fails. An error wrapping controltopic.ErrFenced means a newer coordinator
// took over: the caller must not run another one unless it is elected again.
// Any other error means the role was given up: a new Run rebuilds everything
// from the durable records.
func (r *Runner) Run(ctx context.Context) error {
	log := r.opts.Logger.With("component", "coordinator")
	w, err := controltopic.NewWriter(ctx, r.opts.Kafka, r.opts.Topics, r.opts.TransactionalID)
	if err != nil {
		return fmt.Errorf("take the coordinator role: %w", err)
	}
	defer w.Close()

	core, ackEnd, history, err := r.restore(ctx)
	if err != nil {
		return err
	}
	r.readRetained(ctx, log, core)
	st := core.Status()
	log.Info("coordinator elected", "generation", st.Gen, "last_checkpoint_id", st.LastID,
		"last_completed_id", st.LastCompleted, "retained", len(st.Completed))
	r.metrics.observeStatus(st)

	// Acks are read from the end as it was before this coordinator wrote
	// anything: it starts a new generation, which aborts whatever was
	// pending, so older acks cannot matter, and every ack of its own
	// generation comes after that end.
	tail, err := controltopic.NewTail(r.opts.Kafka, r.opts.Topics,
		map[control.Topic]kgo.Offset{control.TopicAck: kgo.NewOffset().At(ackEnd)}, log)
	if err != nil {
		return err
	}
	defer tail.Close()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	acks := make(chan control.Message, 1024)
	ackErr := make(chan error, 1)
	go func() {
		for {
			rec, err := tail.Next(runCtx)
			if err != nil {
				ackErr <- err
				return
			}
			select {
			case acks <- rec.Msg:
			case <-runCtx.Done():
				ackErr <- runCtx.Err()
				return
			}
		}
	}()
	gc := newGCQueue(r.metrics.gcBacklog)
	gate := &gcGate{q: gc, log: log, limit: r.opts.Core.MaxConcurrent}
	if r.opts.Discarder != nil {
		gc.push(gcWork{kind: gcRebuild, completed: retainedCompletes(history, st.Completed)})
		// The gc goroutine outlives the term briefly: on the way out it
		// finishes what the term decided (every release follows a durable
		// Complete, so that is safe even after another coordinator took
		// over), for at most gcDrainTimeout. What it leaves, the next term's
		// rebuild and collection find.
		gcCtx, gcCancel := context.WithCancel(context.WithoutCancel(ctx))
		gcDone := make(chan struct{})
		go func() {
			defer close(gcDone)
			r.gcLoop(gcCtx, log, gc)
		}()
		defer func() {
			gc.close()
			timer := time.AfterFunc(gcDrainTimeout, gcCancel)
			<-gcDone
			timer.Stop()
			gcCancel()
		}()
	}

	purger := r.opts.Purger
	if purger == nil {
		p, closeClient, err := newKafkaPurger(r.opts.Kafka)
		if err != nil {
			return err
		}
		defer closeClient()
		purger = p
	}
	purges := newPurgeQueue()
	purgeCtx, stopPurging := context.WithCancel(ctx)
	purgeDone := make(chan struct{})
	go func() {
		defer close(purgeDone)
		r.purgeLoop(purgeCtx, log, purger, purges)
	}()
	defer func() { stopPurging(); <-purgeDone }()

	ticker := time.NewTicker(r.opts.TickInterval)
	defer ticker.Stop()
	// due fires when the next periodic trigger is due, if that comes
	// before the next tick: a trigger left to the tick would come up to a
	// tick late, and every checkpoint interval would grow by that much
	// (the next one is due an interval after the trigger).
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Info("coordinator stopping", "reason", ctx.Err())
			return nil
		case err := <-ackErr:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("read the ack topic: %w", err)
		case s := <-r.events:
			// The core knows only the time it is told: tell it before each
			// event, so that completion times and durations are exact
			// rather than rounded to the tick.
			gate.tick(core, r.opts.Now())
			s.done <- core.Step(s.ev)
		case m := <-acks:
			gate.tick(core, r.opts.Now())
			r.stepAck(core, m)
		case <-ticker.C:
			gate.tick(core, r.opts.Now())
		case <-due.C:
			gate.tick(core, r.opts.Now())
		case <-gc.progress:
			// A discard finished: a periodic trigger held back for the
			// backlog may go now.
			gate.tick(core, r.opts.Now())
		}
		for core.HasReady() {
			rd := core.Ready()
			if err := r.carryOut(ctx, log, core, w, rd, gc, purges); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			core.Advance(rd)
		}
		if next, ok := core.NextTrigger(); ok {
			// A trigger already due (the last checkpoint took longer than
			// the interval and completed just now) fires at once: no event
			// may come to tick the core until the next tick.
			if d := next.Sub(r.opts.Now()); d < r.opts.TickInterval {
				due.Reset(max(d, 0))
			}
		}
	}
}

// restore rebuilds the core from the commit topic and the newest record of
// the trigger topic, and returns the ack topic's end, where the ack tail
// starts, and the records replayed. The three reads are independent and run
// in parallel; they follow the fencing, so no zombie writes behind them.
func (r *Runner) restore(ctx context.Context) (*coordinator.Core, int64, []control.Message, error) {
	var commits, triggers controltopic.History
	var ackEnd int64
	var errs [3]error
	var wg sync.WaitGroup
	wg.Go(func() {
		commits, errs[0] = controltopic.ReadHistory(ctx, r.opts.Kafka, r.opts.Topics, control.TopicCommit)
		if errs[0] != nil {
			errs[0] = fmt.Errorf("read the commit topic: %w", errs[0])
		}
	})
	wg.Go(func() {
		triggers, errs[1] = controltopic.ReadHistory(ctx, r.opts.Kafka, r.opts.Topics, control.TopicTrigger)
		if errs[1] != nil {
			errs[1] = fmt.Errorf("read the trigger topic: %w", errs[1])
		}
	})
	wg.Go(func() {
		ackEnd, errs[2] = controltopic.StableEnd(ctx, r.opts.Kafka, r.opts.Topics, control.TopicAck)
		if errs[2] != nil {
			errs[2] = fmt.Errorf("read the ack topic's end: %w", errs[2])
		}
	})
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		return nil, 0, nil, err
	}
	history := make([]control.Message, 0, len(commits.Records)+1)
	for _, rec := range commits.Records {
		history = append(history, rec.Msg)
	}
	if n := len(triggers.Records); n > 0 {
		history = append(history, triggers.Records[n-1].Msg)
	}
	core, err := coordinator.Restore(r.opts.Core, r.opts.Now(), history)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("rebuild the coordinator from %d records: %w", len(history), err)
	}
	return core, ackEnd, history, nil
}

// readRetainedTimeout bounds the reads of the retained checkpoints'
// _metadata at the start of a term: an unreachable store only delays
// purging.
const readRetainedTimeout = 30 * time.Second

// readRetained gives the core the _metadata of each retained periodic
// checkpoint (their shuffle positions), if the MetadataStore can read. One
// that cannot be read is logged; its checkpoint holds the purge back until
// it is released.
func (r *Runner) readRetained(ctx context.Context, log *slog.Logger, core *coordinator.Core) {
	mr, ok := r.opts.Metadata.(MetadataReader)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, readRetainedTimeout)
	defer cancel()
	for _, k := range core.Status().Completed {
		if k.Kind != ckpt.KindCheckpoint || k.ShuffleKnown {
			continue
		}
		md, err := mr.ReadMetadata(ctx, k.Metadata)
		if err == nil && md.ID != k.ID {
			err = fmt.Errorf("%s is the metadata of checkpoint %d", k.Metadata, md.ID)
		}
		if err == nil {
			err = core.Step(coordinator.MetadataRead{Metadata: md})
		}
		if err != nil {
			log.Warn("retained checkpoint's metadata not read: shuffle topics are not purged until it is released",
				"checkpoint_id", k.ID, "metadata", k.Metadata, "err", err)
		}
	}
}

func (r *Runner) stepAck(core *coordinator.Core, m control.Message) {
	var err error
	switch a := m.(type) {
	case control.Ack:
		err = core.Step(coordinator.Acknowledge{Ack: a})
	case control.Decline:
		err = core.Step(coordinator.Decline{Decline: a})
	case control.Running:
		r.opts.Logger.Debug("task running", "component", "coordinator", "task", a.Task, "generation", a.Gen)
		err = core.Step(coordinator.TaskRunning{Gen: a.Gen, Task: a.Task})
	case control.Failure:
		err = core.Step(coordinator.TaskFailed{Failure: a})
	case control.SavepointRequest:
		r.opts.Logger.Info("savepoint requested", "component", "coordinator", "request", a.Request, "kind", a.Kind, "target", a.Target)
		if err := core.Step(coordinator.RequestSavepoint{Kind: a.Kind, Target: a.Target, Request: a.Request}); err != nil {
			// The requester sees no trigger for its request and says why
			// from the commit topic; the reason is logged here.
			r.opts.Logger.Warn("savepoint request refused", "component", "coordinator", "request", a.Request, "target", a.Target, "err", err)
		}
		return
	default:
		return // another record type on the ack topic is no business of ours
	}
	if err != nil {
		r.opts.Logger.Warn("ack refused by the coordinator core", "err", err)
	}
}

// carryOut does what rd says, in the documented order.
func (r *Runner) carryOut(ctx context.Context, log *slog.Logger, core *coordinator.Core, w *controltopic.Writer,
	rd coordinator.Ready, gc *gcQueue, purges *purgeQueue) error {
	// 0. Before a new generation: the object store's clock and the highest
	// checkpoint ID so far. Everything written before that time, and
	// everything under chk-<n>/ up to that ID, that is not registered is
	// garbage once the Generation record is durable: it aborts every
	// pending checkpoint, and tasks of the new generation upload only after
	// they read it, for higher IDs.
	var collectBefore time.Time
	var deadUpTo ckpt.ID
	if r.opts.Discarder != nil && slices.ContainsFunc(rd.Records, isGeneration) {
		deadUpTo = core.Status().LastID
		// (A trigger of the new generation comes only after its tasks
		// report running, in a later Ready; should one follow the
		// Generation record here, it is alive.)
		gen := slices.IndexFunc(rd.Records, isGeneration)
		for _, m := range rd.Records[gen:] {
			if trg, ok := m.(control.Trigger); ok {
				deadUpTo = min(deadUpTo, trg.ID-1)
			}
		}
		cctx, cancel := context.WithTimeout(ctx, clockTimeout)
		t, err := r.opts.Discarder.Clock(cctx)
		cancel()
		if err != nil {
			r.metrics.gcFailures.WithLabelValues("collect").Inc()
			log.Warn("garbage collection skipped for this generation: no object-store clock", "err", err)
		}
		collectBefore = t
	}
	// 1. Control records, in one transaction.
	if len(rd.Records) > 0 {
		if err := w.Append(ctx, rd.Records...); err != nil {
			return fmt.Errorf("append %d control records: %w", len(rd.Records), err)
		}
		for _, m := range rd.Records {
			switch rec := m.(type) {
			case control.Trigger:
				log.Debug("checkpoint triggered", "checkpoint_id", rec.ID, "kind", rec.Kind, "generation", rec.Gen)
			case control.Generation:
				log.Info("generation started", "generation", rec.Gen, "restore_from", rec.RestoreFrom)
			case control.Failed:
				// Every replica logs the failure as an error when it reads
				// this record; the coordinator only says it wrote it.
				log.Info("job failure recorded on the commit topic", "generation", rec.Gen, "task", rec.Task.String(),
					"cause", rec.Cause)
			case control.Complete:
				if r.opts.Discarder != nil {
					// Registered before the discards its completion decided.
					gc.push(gcWork{kind: gcRegister, completed: []control.Complete{rec}})
				}
			}
		}
	}
	// 2. _metadata objects: their results go back into the core, which puts
	// the complete records into a later Ready.
	for _, m := range rd.Metadata {
		loc, err := r.opts.Metadata.WriteMetadata(ctx, m)
		if err != nil {
			log.Warn("checkpoint metadata not written", "checkpoint_id", m.ID, "err", err)
			if serr := core.Step(coordinator.MetadataFailed{ID: m.ID, Reason: err.Error()}); serr != nil {
				return serr
			}
			continue
		}
		if err := core.Step(coordinator.MetadataWritten{ID: m.ID, Location: loc}); err != nil {
			return err
		}
	}
	// 3. Notifications.
	for _, n := range rd.Notifications {
		if n.Completed {
			log.Info("checkpoint complete", "checkpoint_id", n.ID, "kind", n.Kind, "duration", n.Duration,
				"tasks", n.Tasks, "state_bytes", n.StateBytes, "uploaded_bytes", n.UploadedBytes)
		} else {
			log.Warn("checkpoint aborted", "checkpoint_id", n.ID, "kind", n.Kind, "reason", n.Reason,
				"detail", n.Detail, "acked", n.Acked, "tasks", n.Tasks)
		}
		r.metrics.observeNotification(n)
		if r.opts.OnNotification != nil {
			r.opts.OnNotification(n)
		}
	}
	// 4. Discards: the records they depend on are durable (step 1). Then
	// the collection after a new generation.
	for _, d := range rd.Discards {
		if r.opts.Discarder == nil {
			log.Debug("state no longer needed", "checkpoint_id", d.ID, "reason", d.Reason)
			continue
		}
		gc.push(gcWork{kind: gcDiscard, discard: d})
	}
	if !collectBefore.IsZero() {
		gc.push(gcWork{kind: gcCollect, olderThan: collectBefore, deadUpTo: deadUpTo})
	}
	// 5. Purges: the Complete that moved the oldest retained checkpoint is
	// durable (step 1).
	if len(rd.Purges) > 0 {
		purges.add(rd.Purges, true)
	}
	// 6. Restart: the Generation record is already written.
	if rd.Restart != nil {
		log.Error("job restarts from the last completed checkpoint", "reason", rd.Restart.Reason, "failures", rd.Restart.Failures)
	}
	// 7. Metrics.
	r.metrics.observe(rd.Metrics)
	return nil
}

// gcDrainTimeout bounds how long a term that ends keeps deleting what it
// released (a slow object store can be a few checkpoints behind; what is
// left is collected after the next generation).
const gcDrainTimeout = 10 * time.Second

// clockTimeout bounds the object-store clock read before a new generation:
// an unreachable store skips one collection rather than delay the job.
const clockTimeout = 5 * time.Second

func isGeneration(m control.Message) bool {
	_, ok := m.(control.Generation)
	return ok
}
