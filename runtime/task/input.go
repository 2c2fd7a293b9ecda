package task

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/kafkaio/source"
	"github.com/weir-stream/weir/stream"
)

// A taskInput is where a task's records come from, and where its barriers
// are: the job's Kafka source partitions (sourceInput), or the partitions
// of a shuffle topic written by the upstream stage (shuffleInput). The
// input decides where in its stream a barrier goes: a source where the
// coordinator's trigger arrives, a shuffle input where barrier n has
// arrived from every upstream task (alignment). The task goroutine is the
// only caller of next; trigger, abort, complete and caughtUp may be called
// from the replica's control dispatcher.
type taskInput interface {
	// next returns the next batch of records, or a barrier. It blocks until
	// there is one or ctx ends.
	next(ctx context.Context) (element, error)
	// trigger is the coordinator's trigger of barrier b for this task: a
	// source input queues it; a shuffle input ignores it (its barriers come
	// through the topic).
	trigger(b ckpt.Barrier) error
	// abort forgets checkpoint n.
	abort(n ckpt.ID)
	// complete is `complete n`: bookkeeping for people (committed offsets).
	complete(ctx context.Context, n ckpt.ID) error
	// caughtUp reports whether the input has read everything there is.
	caughtUp() bool
	close()
}

// element is a batch of records or a barrier.
type element struct {
	records []*kgo.Record
	barrier *mark
}

// mark is a barrier as an input delivers it: the barrier and the input's
// part of the snapshot.
type mark struct {
	barrier ckpt.Barrier
	// offsets are a source's next offsets at the barrier.
	offsets source.Offsets
	// shuffle are a shuffle input's restart positions at the barrier.
	shuffle []control.Position
	// align is how long the barrier took to arrive from every upstream
	// task (0 for a source).
	align time.Duration
}

// sourceInput reads the job's Kafka source partitions of the task, and
// places the coordinator's barriers in their stream: trigger queues
// checkpoint n (from the control dispatcher), and next returns barrier n
// between two batches, waking a poll that waits on idle partitions (see
// triggers). The source reads; the input decides where barriers go.
type sourceInput struct {
	src      *source.Source
	triggers triggers
	// wm, if the job uses event time, observes each batch's timestamps.
	wm  *watermarks
	now func() time.Time
}

func newSourceInput(src *source.Source, wm *watermarks, now func() time.Time) *sourceInput {
	return &sourceInput{src: src, wm: wm, now: now}
}

// next returns barrier n when trigger n is pending, else the next batch.
// A trigger that arrives while the source waits for records wakes it: the
// poll's context is cancelled, and next places the barrier at once.
func (s *sourceInput) next(ctx context.Context) (element, error) {
	for {
		b, pollCtx, cancel := s.triggers.poll(ctx)
		if n := b.ID; n > 0 {
			// On an error of ctx's, n stays pending: the next call
			// places it.
			offsets, err := s.src.Barrier(ctx, n)
			if err != nil {
				return element{}, err
			}
			if !s.triggers.placed(n) {
				s.src.Abort(n) // aborted meanwhile: forget its offsets again
				continue
			}
			return element{barrier: &mark{barrier: b, offsets: offsets}}, nil
		}
		recs, err := s.src.Next(pollCtx)
		// Whether the poll was interrupted (a trigger, or ctx), asked
		// before cancel, which would say yes to every error.
		interrupted := pollCtx.Err() != nil
		cancel()
		if err != nil && interrupted {
			if ctx.Err() != nil {
				// ctx's own error, even if a trigger cancelled the poll
				// as well: the task loop tells a timer deadline from a
				// stop by it.
				return element{}, ctx.Err()
			}
			continue // a trigger woke the poll
		}
		if s.wm != nil && len(recs) > 0 {
			s.wm.observe(recs, s.now())
		}
		return element{records: recs}, err
	}
}

func (s *sourceInput) trigger(b ckpt.Barrier) error { return s.triggers.add(b) }

func (s *sourceInput) abort(n ckpt.ID) {
	s.triggers.drop(n)
	s.src.Abort(n)
}

func (s *sourceInput) caughtUp() bool { return s.src.CaughtUp() }

func (s *sourceInput) close() {
	s.triggers.close()
	s.src.Close()
}

func (s *sourceInput) complete(ctx context.Context, n ckpt.ID) error {
	return s.src.Complete(ctx, n)
}

// openSource creates the task's source input, restored to offsets; added
// (a partition added since the checkpoint) starts it at the earliest
// offset instead of the configured start.
func (t *Task) openSource(ctx context.Context, offsets source.Offsets, added bool) (taskInput, error) {
	cfg := t.cfg
	sources := cfg.Job.Sources()
	if len(sources) != 1 {
		return nil, fmt.Errorf("job %s has %d sources; this runtime runs exactly one", cfg.Job.Name(), len(sources))
	}
	srcCfg, err := sourceConfig(sources[0])
	if err != nil {
		return nil, err
	}
	if srcCfg.OnError == kafkaio.OnErrorDeadLetter {
		// The records the source's format check rejects go to the job's
		// exactly-once sink of the dead-letter topic, as those its codec
		// rejects do (stream.KafkaSource.DeadLetterTopic): they commit with
		// the checkpoint of their epoch, so a restore never writes one twice.
		idx := slices.IndexFunc(cfg.Sinks, func(k stream.KafkaSink) bool { return k.Topic == srcCfg.DeadLetterTopic })
		if idx < 0 {
			return nil, fmt.Errorf("source: the job has no sink for the dead-letter topic %s", srcCfg.DeadLetterTopic)
		}
		srcCfg.DeadLetter = sinkDeadLetters{t: t, sink: idx}
	}
	srcCfg.ClientOpts = cfg.Kafka
	srcCfg.Partition = int32(cfg.ID.Index)
	srcCfg.Restored = offsets
	if added {
		srcCfg.Start = kafkaio.Start{Kind: kafkaio.StartEarliest}
	}
	srcCfg.Skip = cfg.Skip
	srcCfg.Group = source.GroupName(cfg.Prefix)
	srcCfg.Name = cfg.ID.String()
	srcCfg.Logger = t.log
	srcCfg.Registerer = cfg.Registerer
	src, err := source.New(ctx, srcCfg)
	if err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	return newSourceInput(src, t.wm, cfg.Now), nil
}

// sourceConfig translates the job's source into the source's settings.
func sourceConfig(s stream.KafkaSource) (source.Config, error) {
	dec, err := source.DecoderForFormat(s.Format)
	if err != nil {
		return source.Config{}, err
	}
	if vd := s.ValueDecoder; vd != nil {
		// The value is converted first (Avro into JSON, say), then checked
		// as the format says, and its timestamp read.
		next := dec
		dec = source.DecodeFunc(func(r *kgo.Record) error {
			v, err := vd.DecodeValue(r.Value)
			if err != nil {
				return err
			}
			orig := r.Value
			r.Value = v
			if err := next.Decode(r); err != nil {
				r.Value = orig // a dead letter keeps the bytes read
				return err
			}
			return nil
		})
	}
	if kd := s.KeyDecoder; kd != nil {
		// The key is converted before the value, so that a dead letter
		// keeps both as they were read.
		next := dec
		dec = source.DecodeFunc(func(r *kgo.Record) error {
			k, err := kd.DecodeValue(r.Key)
			if err != nil {
				return fmt.Errorf("the key: %w", err)
			}
			orig := r.Key
			r.Key = k
			if err := next.Decode(r); err != nil {
				r.Key = orig
				return err
			}
			return nil
		})
	}
	if ts := s.Timestamp; ts.Field != "" {
		// The event time from a JSON field, read by the decoder step, so
		// that a record without one follows OnError like any undecodable
		// record.
		if s.Format != stream.FormatJSON {
			return source.Config{}, fmt.Errorf("source: timestamp field %q needs format json, not %q", ts.Field, s.Format)
		}
		format := ts.Format
		if format == "" {
			format = kafkaio.TimestampUnixMs
		}
		if dec, err = source.NewDecodeTimestamp(dec, ts.Field, format); err != nil {
			return source.Config{}, err
		}
	}
	return source.Config{
		Topics: s.Topics, Start: s.Start, Decoder: dec,
		OnError: s.OnError, DeadLetterTopic: s.DeadLetterTopic,
	}, nil
}

// sinkDeadLetters is the source's DeadLetterWriter of a task: it adds each
// dead letter to the task's sink of the dead-letter topic, on the task
// goroutine (the source calls it from Next), so that the record belongs to
// the open epoch's transaction. It needs no flush of its own: the barrier
// that follows pre-commits every sink, and the checkpoint commits it.
type sinkDeadLetters struct {
	t    *Task
	sink int // index in Job.Sinks
}

func (d sinkDeadLetters) WriteDeadLetter(ctx context.Context, r *kgo.Record) error {
	out := d.t.outs.sink(d.sink)
	if out == nil {
		return fmt.Errorf("dead-letter sink %d: the task's stage has no such sink", d.sink)
	}
	return out.write(ctx, r)
}

func (sinkDeadLetters) FlushDeadLetters(context.Context) error { return nil }
