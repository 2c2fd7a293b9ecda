package task

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio/shuffle"
	"github.com/weir-stream/weir/runtime/input"
)

// shuffleInput reads a downstream task's key groups of its stage's shuffle
// topic: partitions [lo, hi), which every upstream task writes to. The pure
// input core (runtime/input) decides about each record: it drops records of
// older generations (DESIGN.md invariant 6) and replays, aligns barrier n
// over every (partition, upstream task) pair, and says when to pause a
// partition, seek one back to re-read what a held input skipped, and
// snapshot. No record is held in memory while an input is blocked: Kafka
// keeps them.
type shuffleInput struct {
	topic  string
	rd     *shuffle.Reader
	core   *input.Core
	parser shuffle.Parser
	met    *stageMetrics
	wm     *watermarks // nil: the job does not use event time

	polled []*kgo.Record // the rest of the last poll, from pos
	pos    int
	seeked map[int32]bool // partitions sent back since the last poll
	batch  []*kgo.Record
	mark   *mark // a snapshot the core asked for, returned after batch

	mu         sync.Mutex
	aborts     []ckpt.ID
	pollCancel context.CancelFunc
	idle       bool // the last poll returned nothing
}

// openShuffleInput creates the input of a downstream task, restored to the
// positions of its snapshot (nil: the log start of every partition).
func (t *Task) openShuffleInput(ctx context.Context, restored []control.Position) (taskInput, error) {
	cfg := t.cfg
	st := cfg.Plan.Stage(cfg.ID.Stage)
	sh := st.Input
	lo, hi := cfg.Plan.KeyGroups(cfg.ID)
	start := make(map[int32]int64)
	for _, p := range restored {
		if p.Topic != sh.Topic && cfg.RestoreStore != nil {
			// Another job's restore point (run --restore-from under
			// another job name or prefix): its positions are in that
			// job's shuffle topic, whose records up to them the
			// restore point holds processed, and whose later ones this
			// job's upstream tasks write again from the restored source
			// offsets. This job's topic is read from its start, every
			// record of an older generation dropped by the filter.
			t.log.Info("restore point of another job: its shuffle positions are in its own shuffle topic; this task reads its job's from the start",
				"restore_point_topic", p.Topic, "topic", sh.Topic, "checkpoint_id", cfg.RestoreFrom)
			clear(start)
			break
		}
		if p.Topic != sh.Topic {
			return nil, fmt.Errorf("checkpoint %d has a position in %s; the task reads %s (was the stage renamed?)", cfg.RestoreFrom, p.Topic, sh.Topic)
		}
		if int(p.Partition) >= lo && int(p.Partition) < hi {
			start[p.Partition] = p.Offset
		}
	}
	parts := make([]int32, 0, hi-lo)
	for p := lo; p < hi; p++ {
		parts = append(parts, int32(p))
	}
	core, err := input.New(input.Config{Partitions: parts, Upstreams: sh.Writers, Gen: cfg.Gen, Start: start})
	if err != nil {
		return nil, err
	}
	rd, err := shuffle.NewReader(ctx, shuffle.ReaderConfig{
		ClientOpts: cfg.Kafka, Topic: sh.Topic, Lo: int32(lo), Hi: int32(hi), Start: start,
		Logger: t.log, Metrics: cfg.Metrics.shuffleMetrics(),
	})
	if err != nil {
		return nil, fmt.Errorf("shuffle input %s: %w", sh.Topic, err)
	}
	return &shuffleInput{
		topic: sh.Topic, rd: rd, core: core, parser: shuffle.Parser{Stage: sh.From},
		met: cfg.Metrics.forStage(cfg.ID.Stage), seeked: make(map[int32]bool), wm: t.wm,
	}, nil
}

func (s *shuffleInput) next(ctx context.Context) (element, error) {
	for {
		if err := s.takeAborts(); err != nil {
			return element{}, err
		}
		if m := s.mark; m != nil && len(s.batch) == 0 {
			s.mark = nil
			return element{barrier: m}, nil
		}
		s.batch = s.batch[:0]
		now := time.Now()
		for s.mark == nil && s.pos < len(s.polled) {
			r := s.polled[s.pos]
			s.polled[s.pos] = nil
			s.pos++
			if s.seeked[r.Partition] {
				continue // re-read from the seek's offset
			}
			meta, err := s.parser.ParseRecord(r)
			if err != nil {
				return element{}, fmt.Errorf("shuffle %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			d, err := s.core.Step(input.Event{
				Partition: r.Partition, Offset: r.Offset,
				Barrier: meta.Barrier, Upstream: meta.Upstream, Gen: meta.Gen,
				Watermark: meta.Watermark,
			}, now)
			if err != nil {
				return element{}, fmt.Errorf("shuffle %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
			}
			switch {
			case d != input.Deliver || meta.IsBarrier():
			case meta.Watermark:
				if s.wm != nil {
					s.wm.shuffleWatermark(r.Partition, meta.Upstream, meta.WatermarkMs, meta.Idle)
				}
			default:
				if s.wm != nil {
					s.wm.shuffleData(r.Partition, meta.Upstream)
				}
				r.Headers = shuffle.UserHeaders(r.Headers)
				s.batch = append(s.batch, r)
			}
			s.apply(s.core.Actions())
		}
		if len(s.batch) > 0 {
			return element{records: s.batch}, nil
		}
		if s.mark != nil {
			continue
		}
		if s.wm != nil && s.wm.moved {
			return element{}, nil // the task advances its watermark now
		}
		// Published before each poll, not after it: a poll of an idle
		// input ends by ctx's deadline, and what the last records did
		// (all dropped as stale, say) must not wait for the next record.
		s.met.publish(s.core.Stats())
		clear(s.seeked)
		pollCtx, cancel := context.WithCancel(ctx)
		s.mu.Lock()
		s.pollCancel = cancel
		s.mu.Unlock()
		recs, err := s.rd.Poll(pollCtx)
		s.mu.Lock()
		s.pollCancel = nil
		s.idle = len(recs) == 0
		s.mu.Unlock()
		// Whether the poll was interrupted, asked before cancel, which
		// would say yes to every error.
		interrupted := pollCtx.Err() != nil
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return element{}, ctx.Err()
			}
			if !interrupted {
				return element{}, fmt.Errorf("shuffle %s: %w", s.topic, err)
			}
			// Woken by an abort.
		}
		s.polled, s.pos = recs, 0
	}
}

// apply carries out the core's actions on the reader.
func (s *shuffleInput) apply(acts []input.Action) {
	for _, a := range acts {
		switch a.Kind {
		case input.Seek:
			s.rd.Seek(a.Partition, a.Offset)
			s.seeked[a.Partition] = true
		case input.Pause:
			s.rd.Pause(a.Partition)
		case input.Resume:
			s.rd.Resume(a.Partition)
		case input.Abort:
			// Aborted by the coordinator, or overtaken by a newer barrier:
			// nothing was snapshotted, and the coordinator aborts it.
		case input.Snapshot:
			pos := make([]control.Position, 0, len(a.Positions))
			for p, off := range a.Positions {
				pos = append(pos, control.Position{Topic: s.topic, Partition: p, Offset: off})
			}
			slices.SortFunc(pos, func(a, b control.Position) int { return int(a.Partition - b.Partition) })
			s.mark = &mark{barrier: a.Barrier, shuffle: pos, align: a.Align}
			s.met.observeAlignment(a.Align)
		}
	}
}

func (s *shuffleInput) takeAborts() error {
	s.mu.Lock()
	aborts := s.aborts
	s.aborts = nil
	s.mu.Unlock()
	now := time.Now()
	for _, n := range aborts {
		s.core.Abort(n, now)
		s.apply(s.core.Actions())
		if s.mark != nil && s.mark.barrier.ID == n {
			s.mark = nil
		}
	}
	return nil
}

// trigger does nothing: a downstream task learns of a checkpoint's barrier
// from the barrier records of its upstream tasks.
func (s *shuffleInput) trigger(ckpt.Barrier) error { return nil }

// abort releases an alignment of n in progress (on the task goroutine,
// which it wakes).
func (s *shuffleInput) abort(n ckpt.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.aborts = append(s.aborts, n)
	if s.pollCancel != nil {
		s.pollCancel()
	}
}

func (s *shuffleInput) complete(context.Context, ckpt.ID) error { return nil }

func (s *shuffleInput) caughtUp() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idle
}

func (s *shuffleInput) close() { s.rd.Close() }

// shuffleOutput writes an upstream task's records to a shuffle topic, and
// barrier b to every partition of it at pre-commit b.
type shuffleOutput struct {
	w     *shuffle.Writer
	topic string
}

func (o *shuffleOutput) write(ctx context.Context, r *kgo.Record) error { return o.w.Write(ctx, r) }
func (o *shuffleOutput) complete(context.Context, ckpt.ID) error        { return nil }
func (o *shuffleOutput) abort(ckpt.ID)                                  {}
func (o *shuffleOutput) close(context.Context) error                    { o.w.Close(); return nil }
func (o *shuffleOutput) String() string                                 { return "shuffle " + o.topic }

func (o *shuffleOutput) preCommit(ctx context.Context, b ckpt.Barrier) (pending, error) {
	p, err := o.w.Barrier(ctx, b)
	if err != nil {
		return nil, err
	}
	return shufflePending{p}, nil
}

type shufflePending struct{ p *shuffle.Pending }

func (p shufflePending) wait(ctx context.Context, _ *operatorState) error { return p.p.Wait(ctx) }
