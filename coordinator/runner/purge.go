package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/control"
)

// Purger deletes the records of shuffle topics that no retained checkpoint
// reads any more (coordinator.Ready.Purges).
type Purger interface {
	// Purge deletes, in each partition of below, every record before its
	// Offset (Kafka's DeleteRecords). Deleting below an offset already
	// purged changes nothing. A failure may have purged some partitions.
	Purge(ctx context.Context, below []control.Position) error
}

// KafkaPurger is the Purger of a Kafka cluster: DeleteRecords with kadm.
type KafkaPurger struct {
	Admin *kadm.Client
}

// Purge implements Purger: one DeleteRecords request, sharded by kadm to
// each partition's leader.
func (p KafkaPurger) Purge(ctx context.Context, below []control.Position) error {
	offsets := make(kadm.Offsets)
	for _, b := range below {
		if offsets[b.Topic] == nil {
			offsets[b.Topic] = make(map[int32]kadm.Offset)
		}
		offsets[b.Topic][b.Partition] = kadm.Offset{Topic: b.Topic, Partition: b.Partition, At: b.Offset}
	}
	resps, err := p.Admin.DeleteRecords(ctx, offsets)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range resps.Sorted() {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("%s/%d below %d: %w", r.Topic, r.Partition, offsets[r.Topic][r.Partition].At, r.Err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("delete shuffle records: %w", err)
	}
	return nil
}

// purgeTimeout bounds one DeleteRecords request; a purge that times out is
// retried with the next.
const purgeTimeout = 30 * time.Second

type topicPartition struct {
	topic string
	part  int32
}

// purgeQueue hands purges from Run's goroutine to purgeLoop. It holds, per
// partition, the highest offset not yet purged, so that a slow or failing
// DeleteRecords never holds up the core, and a failed purge is retried with
// the next one (the core asks for a partition only when its offset rises).
type purgeQueue struct {
	mu    sync.Mutex
	below map[topicPartition]int64 // guarded by mu
	wake  chan struct{}            // one slot: a purge is waiting
}

func newPurgeQueue() *purgeQueue { return &purgeQueue{wake: make(chan struct{}, 1)} }

// add merges ps into the queue (the higher offset of a partition wins);
// wake says whether purgeLoop should run now.
func (q *purgeQueue) add(ps []control.Position, wake bool) {
	q.mu.Lock()
	if q.below == nil {
		q.below = make(map[topicPartition]int64)
	}
	for _, p := range ps {
		k := topicPartition{p.Topic, p.Partition}
		if off, ok := q.below[k]; !ok || p.Offset > off {
			q.below[k] = p.Offset
		}
	}
	q.mu.Unlock()
	if wake {
		signal(q.wake)
	}
}

// take empties the queue and returns what it held, sorted.
func (q *purgeQueue) take() []control.Position {
	q.mu.Lock()
	below := q.below
	q.below = nil
	q.mu.Unlock()
	ps := make([]control.Position, 0, len(below))
	for k, off := range below {
		ps = append(ps, control.Position{Topic: k.topic, Partition: k.part, Offset: off})
	}
	slices.SortFunc(ps, control.Position.Compare)
	return ps
}

// purgeLoop carries out the queued purges until ctx ends. A failure is
// logged at warn, counted, and put back to go with the next purge: the
// topics only grow a little longer meanwhile.
//
// Purges are at least Options.PurgeInterval apart: the queue merges what
// arrives meanwhile.
func (r *Runner) purgeLoop(ctx context.Context, log *slog.Logger, p Purger, q *purgeQueue) {
	var last time.Time // the start of the latest purge
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.wake:
		}
		if wait := r.opts.PurgeInterval - r.opts.Now().Sub(last); !last.IsZero() && wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		ps := q.take()
		if len(ps) == 0 {
			continue
		}
		last = r.opts.Now()
		pctx, cancel := context.WithTimeout(ctx, purgeTimeout)
		err := p.Purge(pctx, ps)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.metrics.purgeErrors.Inc()
			log.Warn("shuffle records not purged; retried with the next purge", "partitions", len(ps), "err", err)
			q.add(ps, false)
			continue
		}
		r.metrics.purged.Add(float64(len(ps)))
		log.Debug("shuffle records purged", "partitions", len(ps), "first", ps[0].String())
	}
}

// newKafkaPurger returns the purger of the job's cluster and its client's
// Close. The client connects only when a purge needs it.
func newKafkaPurger(opts []kgo.Opt) (Purger, func(), error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client for purging shuffle topics: %w", err)
	}
	return KafkaPurger{Admin: kadm.NewClient(cl)}, cl.Close, nil
}
