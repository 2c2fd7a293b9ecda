// Package observe reads a job's view (package jobview) from Kafka and the
// object store, for the REST API of every replica and for `processor
// status` and `processor checkpoints list`: Load reads the control topics'
// history once; an Observer reads it and then follows the topics, so that
// any replica answers for the whole job. It also holds the Reporter, which
// publishes this replica's own figures on the ack topic for the others to
// read (control.ReplicaReport).
//
// It only reads the control topics and _metadata objects; it never writes
// to the commit or trigger topic and never decides anything about the job.
//
// Goroutines: an Observer's Run goroutine owns the tail and feeds the fold;
// the fold is guarded by the Observer's mutex, which its readers (HTTP
// handlers) take briefly. A Reporter's Run goroutine owns its samples.
package observe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/jobview"
	"github.com/weir-stream/weir/kafkaio/controltopic"
	"github.com/weir-stream/weir/state/objstore"
)

// ErrNeverRan reports a job whose control topics do not exist: no replica
// ever started it.
var ErrNeverRan = errors.New("observe: the job's control topics do not exist (the job never ran)")

// recentWindow is how many of the trigger and ack topics' newest offsets
// Load reads.
const recentWindow = 200_000

// metadataWindow is how many of the newest checkpoints get their figures
// from _metadata when the topics no longer hold their trigger or acks.
const metadataWindow = 50

// Load reads the job's history from the commit, trigger and ack topics
// (in that order: the generation first, then what refers to it; of the
// trigger and ack topics their newest recentWindow offsets) and the
// _metadata of the newest completed checkpoints that need it (store may be
// nil: then none). It returns the fold and each topic's end, where a tail
// continues.
func Load(ctx context.Context, opts []kgo.Opt, topics controltopic.Topics, store *objstore.Store, name string) (*jobview.Fold, map[control.Topic]int64, error) {
	f := jobview.New(name)
	ends := map[control.Topic]int64{}
	for _, t := range []control.Topic{control.TopicCommit, control.TopicTrigger, control.TopicAck} {
		read := controltopic.ReadHistory
		if t != control.TopicCommit {
			// A day of every task's acks, and the triggers and aborts of
			// the trigger topic's active segment (compaction leaves it
			// alone, up to a week), can be millions of records: the
			// newest recentWindow hold the recent checkpoints' and the
			// replicas' last reports; older completed checkpoints take
			// their trigger time and tasks from _metadata.
			read = func(ctx context.Context, opts []kgo.Opt, ts controltopic.Topics, t control.Topic) (controltopic.History, error) {
				return controltopic.ReadRecent(ctx, opts, ts, t, recentWindow)
			}
		}
		h, err := read(ctx, opts, topics, t)
		if errors.Is(err, kerr.UnknownTopicOrPartition) {
			return nil, nil, ErrNeverRan
		}
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", topics.Name(t), err)
		}
		for _, rec := range h.Records {
			f.Apply(rec.Msg)
		}
		ends[t] = h.End
	}
	if store != nil {
		readMetadata(ctx, f, store, metadataWindow, nil)
	}
	return f, ends, nil
}

// readMetadata folds in the _metadata of the completed checkpoints among
// the newest n that need it. A _metadata that cannot be read (released by
// retention) is skipped; lock, if set, guards f.
func readMetadata(ctx context.Context, f *jobview.Fold, store *objstore.Store, n int, lock sync.Locker) {
	if lock != nil {
		lock.Lock()
	}
	need := f.NeedsMetadata(n)
	if lock != nil {
		lock.Unlock()
	}
	for _, c := range need {
		md, err := checkpoint.ReadCompleted(ctx, store, control.Complete{ID: c.ID, Gen: c.Gen, Metadata: c.Metadata})
		if err != nil {
			continue
		}
		if lock != nil {
			lock.Lock()
		}
		f.ApplyMetadata(md)
		if lock != nil {
			lock.Unlock()
		}
	}
}

// Options configure an Observer.
type Options struct {
	Kafka  []kgo.Opt
	Topics controltopic.Topics
	// Store is the job's checkpoint storage, for _metadata; nil: none.
	Store *objstore.Store
	Job   string
	// ReportTTL is how old a replica's report may be and still count: a
	// few report intervals.
	ReportTTL time.Duration
	Logger    *slog.Logger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Observer follows a job's control topics and answers for the whole job.
type Observer struct {
	opts Options

	mu     sync.Mutex
	fold   *jobview.Fold // nil until the history is read
	loaded chan struct{}
}

// New returns an Observer; Run reads and follows the topics.
func New(opts Options) *Observer {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Observer{opts: opts, loaded: make(chan struct{})}
}

// ErrLoading reports that the Observer has not read the job's history yet.
var ErrLoading = errors.New("observe: reading the job's control topics")

// Run reads the topics' history, then follows them until ctx ends,
// starting again after an error (with a pause).
func (o *Observer) Run(ctx context.Context) error {
	for {
		err := o.run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		pause := 2 * time.Second
		if errors.Is(err, ErrNeverRan) {
			// The replica beside creates them in a moment.
			pause = 200 * time.Millisecond
		} else {
			o.opts.Logger.Warn("following the control topics for the job's view; starting again", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
	}
}

func (o *Observer) run(ctx context.Context) error {
	f, ends, err := Load(ctx, o.opts.Kafka, o.opts.Topics, o.opts.Store, o.opts.Job)
	if err != nil {
		return err
	}
	o.mu.Lock()
	first := o.fold == nil
	o.fold = f
	o.mu.Unlock()
	if first {
		close(o.loaded)
	}
	from := map[control.Topic]kgo.Offset{}
	for t, end := range ends {
		from[t] = kgo.NewOffset().At(end)
	}
	tail, err := controltopic.NewTail(o.opts.Kafka, o.opts.Topics, from, o.opts.Logger)
	if err != nil {
		return err
	}
	defer tail.Close()
	for {
		rec, err := tail.Next(ctx)
		if err != nil {
			return err
		}
		o.mu.Lock()
		f.Apply(rec.Msg)
		o.mu.Unlock()
		if _, ok := rec.Msg.(control.Complete); ok && o.opts.Store != nil {
			// Only when the acks were not read (a tail that started
			// after them): the fold says which.
			readMetadata(ctx, f, o.opts.Store, 1, &o.mu)
		}
	}
}

// SetStore sets the checkpoint storage the Observer reads _metadata from,
// before Run.
func (o *Observer) SetStore(s *objstore.Store) { o.opts.Store = s }

// Loaded is closed once the history has been read.
func (o *Observer) Loaded() <-chan struct{} { return o.loaded }

func (o *Observer) with(fn func(f *jobview.Fold, nowMS int64)) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fold == nil {
		return ErrLoading
	}
	fn(o.fold, o.opts.Now().UnixMilli())
	return nil
}

// Job returns the job's view.
func (o *Observer) Job() (j jobview.Job, err error) {
	err = o.with(func(f *jobview.Fold, now int64) { j = f.Job(now, o.opts.ReportTTL.Milliseconds()) })
	return j, err
}

// Figures returns the tasks' newest figures.
func (o *Observer) Figures() (fs map[control.TaskID]jobview.Figures, err error) {
	err = o.with(func(f *jobview.Fold, now int64) { fs = f.Figures(now, o.opts.ReportTTL.Milliseconds()) })
	return fs, err
}

// Checkpoints returns the newest limit checkpoints, newest first.
func (o *Observer) Checkpoints(limit int) (cs []jobview.Checkpoint, err error) {
	err = o.with(func(f *jobview.Fold, now int64) { cs = f.CheckpointsAt(limit, now) })
	return cs, err
}

// Checkpoint returns checkpoint id, and false if the history does not
// hold it.
func (o *Observer) Checkpoint(id ckpt.ID) (c jobview.Checkpoint, ok bool, err error) {
	err = o.with(func(f *jobview.Fold, now int64) { c, ok = f.Checkpoint(id, now) })
	return c, ok, err
}

// Generation returns the job's newest generation record, or nil.
func (o *Observer) Generation() (g *control.Generation, err error) {
	err = o.with(func(f *jobview.Fold, _ int64) { g = f.Generation() })
	return g, err
}
