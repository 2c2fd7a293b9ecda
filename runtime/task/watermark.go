package task

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/eventtime"
	"github.com/weir-stream/weir/stream"
)

// watermarks is a task's event time (DESIGN.md section 10): the watermark
// of each of its inputs, their minimum over the active ones (an
// eventtime.Valve), and what the task last gave its operator chain and
// wrote to its shuffle outputs. A source task's inputs are its partitions,
// one per input topic, each with a Generator fed with the records'
// timestamps; a downstream task's inputs are its (shuffle partition,
// upstream task) pairs, index (p-lo)*upstreams+u, fed with the watermark
// records the input core delivers. Only the task goroutine uses it.
type watermarks struct {
	interval time.Duration
	valve    *eventtime.Valve

	// A source task's: gens[i] is the generator of topics[i]'s partition.
	topics    []string
	partition int32
	gens      []*eventtime.Generator
	last      int // index of the topic of the last record observed

	// A downstream task's: its first partition and the upstream count.
	lo        int32
	upstreams int

	// current is the chain's watermark: the valve's output the task last
	// passed to AdvanceWatermark. sent/sentIdle are what it last wrote to
	// its shuffle outputs (MinWatermark, false: nothing yet).
	current  int64
	sent     int64
	sentIdle bool
	// started: the restored watermark was given to the chain.
	started bool
	// moved: a downstream task's valve has moved past current (or its
	// idleness changed) since the task last advanced: the task advances
	// at once, not at its next interval, so that a window closes one hop
	// after its upstream tasks' watermarks pass it, not up to an interval
	// later in every stage.
	moved bool
}

// watermarkState is a task's watermarks in its operator state: the valve,
// a source task's generators by partition, and the chain's watermark.
type watermarkState struct {
	Current    int64                     `json:"current"`
	Valve      eventtime.ValveState      `json:"valve"`
	Generators []partitionGeneratorState `json:"generators,omitempty"`
}

// partitionGeneratorState is the generator of one source partition.
type partitionGeneratorState struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	eventtime.GeneratorState
}

func newWatermarks(spec stream.WatermarkSpec) *watermarks {
	w := &watermarks{interval: spec.Interval, current: eventtime.MinWatermark, sent: eventtime.MinWatermark}
	if w.interval <= 0 {
		w.interval = stream.DefaultWatermarkInterval
	}
	return w
}

// newSourceWatermarks returns the watermarks of a source task reading one
// partition of each of topics.
func newSourceWatermarks(spec stream.WatermarkSpec, topics []string, partition int32, now time.Time) (*watermarks, error) {
	w := newWatermarks(spec)
	w.topics, w.partition = topics, partition
	for range topics {
		g, err := eventtime.NewGenerator(spec.MaxOutOfOrderness, spec.IdleTimeout, now)
		if err != nil {
			return nil, fmt.Errorf("source watermark: %w", err)
		}
		w.gens = append(w.gens, g)
	}
	w.valve = eventtime.NewValve(len(topics))
	return w, nil
}

// newShuffleWatermarks returns the watermarks of a downstream task reading
// partitions [lo, hi) written by upstreams tasks.
func newShuffleWatermarks(spec stream.WatermarkSpec, lo, hi int32, upstreams int) *watermarks {
	w := newWatermarks(spec)
	w.lo, w.upstreams = lo, upstreams
	w.valve = eventtime.NewValve(int(hi-lo) * upstreams)
	return w
}

// observe feeds a source batch's timestamps to its partitions' generators.
// The records of a batch come partition by partition, so the topic is
// looked up only when it changes.
func (w *watermarks) observe(recs []*kgo.Record, now time.Time) {
	for _, r := range recs {
		if r.Topic != w.topics[w.last] {
			w.last = w.topicIndex(r.Topic)
			if w.last < 0 {
				w.last = 0
				continue // not an input partition of the task: cannot happen
			}
		}
		w.gens[w.last].Observe(r.Timestamp.UnixMilli(), now)
	}
}

func (w *watermarks) topicIndex(topic string) int {
	for i, t := range w.topics {
		if t == topic {
			return i
		}
	}
	return -1
}

// pair is the valve input of shuffle partition p's upstream task u.
func (w *watermarks) pair(p int32, u int) int { return int(p-w.lo)*w.upstreams + u }

// shuffleWatermark takes a delivered watermark record of partition p from
// upstream task u.
func (w *watermarks) shuffleWatermark(p int32, u int, ms int64, idle bool) {
	i := w.pair(p, u)
	if idle {
		w.valve.SetIdle(i, true)
	} else {
		w.valve.Advance(i, ms)
	}
	if wm, idle := w.valve.Output(); wm > w.current || idle != w.sentIdle {
		w.moved = true
	}
}

// shuffleData takes a delivered data record of partition p from upstream
// task u: an idle pair is active again, at its last watermark.
func (w *watermarks) shuffleData(p int32, u int) {
	i := w.pair(p, u)
	if _, idle := w.valve.Input(i); idle {
		w.valve.SetIdle(i, false)
	}
}

// output brings a source task's generators into the valve (an idle
// partition is set idle, any other advances to its generator's watermark)
// and returns the valve's output.
func (w *watermarks) output(now time.Time) (int64, bool) {
	for i, g := range w.gens {
		if g.Idle(now) {
			// The valve knows what the partition reached before it goes
			// idle: a flush (every input idle) raises the output to it.
			if in, _ := w.valve.Input(i); g.Watermark() > in {
				w.valve.Advance(i, g.Watermark())
			}
			w.valve.SetIdle(i, true)
		} else {
			w.valve.Advance(i, g.Watermark())
		}
	}
	return w.valve.Output()
}

// idleInputs counts the inputs that are idle now.
func (w *watermarks) idleInputs() int {
	n := 0
	for i := range w.valve.Len() {
		if _, idle := w.valve.Input(i); idle {
			n++
		}
	}
	return n
}

// snapshot returns the state to keep in the checkpoint.
func (w *watermarks) snapshot() *watermarkState {
	s := &watermarkState{Current: w.current, Valve: w.valve.Snapshot()}
	for i, g := range w.gens {
		s.Generators = append(s.Generators, partitionGeneratorState{Topic: w.topics[i], Partition: w.partition, GeneratorState: g.Snapshot()})
	}
	return s
}

// restore takes a checkpoint's state: nothing goes backwards (a generator
// or the valve restored below what it has keeps what it has). A
// generator's partition is matched by topic; a topic the task no longer
// reads is ignored, a new one starts with nothing known.
func (w *watermarks) restore(s *watermarkState) error {
	if err := w.valve.Restore(s.Valve); err != nil {
		return err
	}
	for _, gs := range s.Generators {
		if i := w.topicIndex(gs.Topic); i >= 0 && gs.Partition == w.partition {
			w.gens[i].Restore(gs.GeneratorState)
		}
	}
	w.current = max(w.current, s.Current)
	return nil
}
