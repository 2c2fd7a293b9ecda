package input

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/weir-stream/weir/barrier"
	"github.com/weir-stream/weir/checkpoint/ckpt"
)

// Sentinel errors; test with errors.Is. Each but ErrConfig reports a shuffle
// stream that broke the protocol: the task must fail.
var (
	// ErrConfig: no partitions, partitions not ascending, no upstream tasks.
	ErrConfig = errors.New("input: invalid config")
	// ErrPartition: a record of a partition the task does not read.
	ErrPartition = errors.New("input: partition not read by this task")
	// ErrUpstream: a record of the task's generation whose upstream task
	// index is outside [0, Upstreams).
	ErrUpstream = errors.New("input: no such upstream task")
	// ErrBarrierOrder: a barrier of the task's generation not above the
	// previous one of its upstream task on its partition (upstream tasks
	// write barriers in increasing order).
	ErrBarrierOrder = errors.New("input: barrier out of order")
	// ErrBarrierKind is returned by Step for a barrier whose kind or target
	// differs from another upstream task's barrier of the same checkpoint:
	// the upstream tasks were triggered differently.
	ErrBarrierKind = errors.New("input: barriers of one checkpoint disagree")
)

// Config describes what a task reads.
type Config struct {
	// Partitions are the shuffle partitions the task reads (its key-group
	// range), ascending.
	Partitions []int32
	// Upstreams is the number of upstream tasks writing to every partition.
	Upstreams int
	// Gen is the task's generation: records of any other are dropped.
	Gen uint64
	// Start is where reading starts per partition (restored positions); a
	// partition absent starts at 0. No record below its start is delivered.
	Start map[int32]int64
}

// Event is one record read from a shuffle partition.
type Event struct {
	Partition int32
	Offset    int64
	// Barrier is the barrier of a barrier record (ID > 0), as its headers
	// and timestamp say (shuffle.Parser.ParseRecord); zero for any other.
	Barrier ckpt.Barrier
	// Watermark marks a watermark record. Step decides it exactly as a data
	// record of its (partition, upstream): Deliver or Drop, never Taken, so
	// that a watermark is re-read with the records it follows after a seek
	// back, and delivered once per offset. (Barrier and Watermark exclude
	// each other, as in shuffle.Meta; an event with both is a barrier.)
	Watermark bool
	// Upstream and Gen come from the record's weir-task and weir-gen headers.
	Upstream int
	Gen      uint64
}

// Decision says what to do with a record.
type Decision uint8

const (
	// Deliver: hand the data record to the operator chain (a watermark
	// record: to the task's watermark valve).
	Deliver Decision = iota + 1
	// Drop: skip it (older generation, replayed duplicate, record of a held
	// input which will be re-read, or fetched before a seek took effect).
	Drop
	// Taken: the record was a barrier and the core took it; its effects are
	// in Actions. Nothing goes to the chain.
	Taken
)

var decisionNames = [...]string{Deliver: "deliver", Drop: "drop", Taken: "taken"}

// String returns the lower-case name of d.
func (d Decision) String() string {
	if int(d) < len(decisionNames) && decisionNames[d] != "" {
		return decisionNames[d]
	}
	return fmt.Sprintf("Decision(%d)", uint8(d))
}

// ActionKind says what the task or its reader must do.
type ActionKind uint8

const (
	// Snapshot: take the synchronous snapshot of checkpoint ID now, record
	// Positions as the task's shuffle positions, then forward barrier ID to
	// every output, before the next record goes to the chain.
	Snapshot ActionKind = iota + 1
	// Abort: checkpoint ID is given up here (aborted by the coordinator, or
	// subsumed by a newer barrier): drop its partial snapshot, decline it if
	// not acknowledged.
	Abort
	// Seek: the reader must read Partition from Offset next.
	Seek
	// Pause: the reader should stop fetching Partition (every writer of it
	// is held). Records it still passes are dropped and re-read later.
	Pause
	// Resume: the reader fetches Partition again: from the Seek of it
	// listed before, if any, else from the offset after the last record of
	// it passed to Step (a reader whose client dropped buffered records on
	// Pause must seek there itself).
	Resume
)

var actionNames = [...]string{Snapshot: "snapshot", Abort: "abort", Seek: "seek", Pause: "pause", Resume: "resume"}

// String returns the lower-case name of k.
func (k ActionKind) String() string {
	if int(k) < len(actionNames) && actionNames[k] != "" {
		return actionNames[k]
	}
	return fmt.Sprintf("ActionKind(%d)", uint8(k))
}

// Action is one thing to do, in the order Actions lists them.
type Action struct {
	Kind ActionKind
	// ID is the checkpoint, for Snapshot and Abort.
	ID ckpt.ID
	// Barrier is, for Snapshot, checkpoint ID's barrier: the first of its
	// barrier records the core read (every upstream task writes the same
	// barrier; its Timestamp is the earliest record's).
	Barrier ckpt.Barrier
	// Partition and Offset, for Seek, Pause and Resume (Partition only).
	Partition int32
	Offset    int64
	// Positions is, for Snapshot, the restart position per partition.
	Positions map[int32]int64
	// Align is, for Snapshot and Abort, the time from the first barrier of
	// ID to this action.
	Align time.Duration
}

// String renders the action for logs and tests.
func (a Action) String() string {
	switch a.Kind {
	case Snapshot:
		var b []byte
		for i, p := range sortedKeys(a.Positions) {
			if i > 0 {
				b = append(b, ' ')
			}
			b = fmt.Appendf(b, "%d:%d", p, a.Positions[p])
		}
		kind := ""
		if k := a.Barrier.Kind; k != ckpt.KindCheckpoint && k != "" {
			kind = fmt.Sprintf(" %s", a.Barrier)
		}
		return fmt.Sprintf("snapshot %d%s (align %v) positions %s", a.ID, kind, a.Align, b)
	case Abort:
		return fmt.Sprintf("abort %d (align %v)", a.ID, a.Align)
	case Seek:
		return fmt.Sprintf("seek %d to %d", a.Partition, a.Offset)
	case Pause, Resume:
		return fmt.Sprintf("%s %d", a.Kind, a.Partition)
	}
	return a.Kind.String()
}

func sortedKeys(m map[int32]int64) []int32 {
	keys := make([]int32, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Stats counts dropped records, for metrics.
type Stats struct {
	// Delivered data records (watermark records excluded).
	Delivered uint64
	// Watermarks counts delivered watermark records.
	Watermarks uint64
	// Stale records of another generation.
	Stale uint64
	// Replayed records already handled, read again after a seek back.
	Replayed uint64
	// Skipped records of a held input, or fetched before a seek took
	// effect: they are read again.
	Skipped uint64
}

// none marks an unset rewind or seek guard.
const none = -1

// Core is the input core of one task over one shuffle topic. It reads no
// clock, does no I/O and is not safe for concurrent use.
type Core struct {
	parts []int32
	// dense: parts are consecutive (a key-group range), so a partition's
	// slot is p - parts[0].
	dense bool
	u     int
	gen   uint64
	al    *barrier.Aligner
	// By aligner input (slot·U + upstream): the offset after the last
	// record of that upstream on that partition delivered or counted.
	next []int64
	// lastBarrier is, by aligner input, the ID of the last barrier counted.
	lastBarrier []ckpt.ID
	// latest is the barrier of the highest checkpoint ID read: the only one
	// the aligner may still snapshot (an older one is overtaken).
	latest ckpt.Barrier

	// By slot (a partition's index in parts):
	// read is the offset after the last record passed on the partition
	// (where the reader stands), or where the last Seek put it.
	read []int64
	// rewind is the lowest offset of a dropped record of a held input, or
	// none.
	rewind []int64
	// guard is, after a Seek that has not taken effect yet, where the
	// partition stood when it was given (records at or above it were
	// fetched before the seek), or none.
	guard []int64
	// heldCount counts the partition's held writers; paused says a Pause
	// was given and no Resume yet.
	heldCount []int
	paused    []bool
	// released is scratch for apply: the slots released by one call.
	released []bool

	stats Stats
	out   []Action
}

// New returns the core for cfg.
func New(cfg Config) (*Core, error) {
	if len(cfg.Partitions) == 0 {
		return nil, fmt.Errorf("%w: no partitions", ErrConfig)
	}
	if cfg.Partitions[0] < 0 {
		return nil, fmt.Errorf("%w: partition %d", ErrConfig, cfg.Partitions[0])
	}
	for i := 1; i < len(cfg.Partitions); i++ {
		if cfg.Partitions[i] <= cfg.Partitions[i-1] {
			return nil, fmt.Errorf("%w: partitions %v not strictly ascending", ErrConfig, cfg.Partitions)
		}
	}
	if cfg.Upstreams < 1 {
		return nil, fmt.Errorf("%w: %d upstream tasks", ErrConfig, cfg.Upstreams)
	}
	for p, off := range cfg.Start {
		if _, ok := slices.BinarySearch(cfg.Partitions, p); !ok || off < 0 {
			return nil, fmt.Errorf("%w: start %d of partition %d (partitions %v)", ErrConfig, off, p, cfg.Partitions)
		}
	}
	n := len(cfg.Partitions)
	al, err := barrier.New(n * cfg.Upstreams)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	inputs := n * cfg.Upstreams
	c := &Core{parts: slices.Clone(cfg.Partitions), u: cfg.Upstreams, gen: cfg.Gen, al: al,
		next: make([]int64, inputs), lastBarrier: make([]ckpt.ID, inputs),
		read: make([]int64, n), rewind: make([]int64, n), guard: make([]int64, n),
		heldCount: make([]int, n), paused: make([]bool, n), released: make([]bool, n)}
	c.dense = int(c.parts[n-1]-c.parts[0]) == n-1
	for s, p := range c.parts {
		start := cfg.Start[p]
		c.read[s], c.rewind[s], c.guard[s] = start, none, none
		for u := range c.u {
			c.next[s*c.u+u] = start
		}
	}
	return c, nil
}

// Step handles one record read. Its actions, if any, are in Actions. An
// error is a protocol violation: the task must fail.
func (c *Core) Step(ev Event, now time.Time) (Decision, error) {
	s, ok := c.slot(ev.Partition)
	if !ok {
		return 0, fmt.Errorf("%w: partition %d (reading %v)", ErrPartition, ev.Partition, c.parts)
	}
	if g := c.guard[s]; g != none {
		if ev.Offset >= g {
			c.stats.Skipped++ // fetched before the seek
			return Drop, nil
		}
		c.guard[s] = none
	}
	c.read[s] = ev.Offset + 1
	if ev.Gen != c.gen {
		c.stats.Stale++
		return Drop, nil
	}
	if ev.Upstream < 0 || ev.Upstream >= c.u {
		return 0, fmt.Errorf("%w: upstream task %d of %d on partition %d offset %d",
			ErrUpstream, ev.Upstream, c.u, ev.Partition, ev.Offset)
	}
	in := s*c.u + ev.Upstream
	if ev.Offset < c.next[in] {
		c.stats.Replayed++
		return Drop, nil
	}
	if c.al.IsHeld(in) {
		if r := c.rewind[s]; r == none || ev.Offset < r {
			c.rewind[s] = ev.Offset
		}
		c.stats.Skipped++
		return Drop, nil
	}
	b := ev.Barrier
	if b.ID == 0 {
		c.next[in] = ev.Offset + 1
		if ev.Watermark {
			c.stats.Watermarks++
		} else {
			c.stats.Delivered++
		}
		return Deliver, nil
	}
	if b.ID <= c.lastBarrier[in] {
		return 0, fmt.Errorf("%w: barrier %d after barrier %d from upstream task %d on partition %d offset %d",
			ErrBarrierOrder, b.ID, c.lastBarrier[in], ev.Upstream, ev.Partition, ev.Offset)
	}
	switch {
	case b.ID > c.latest.ID:
		c.latest = b
	case b.ID == c.latest.ID && (b.Kind != c.latest.Kind || b.Target != c.latest.Target):
		return 0, fmt.Errorf("%w: upstream task %d on partition %d offset %d has %s where another had %s",
			ErrBarrierKind, ev.Upstream, ev.Partition, ev.Offset, b, c.latest)
	case b.ID == c.latest.ID && b.Timestamp < c.latest.Timestamp:
		c.latest.Timestamp = b.Timestamp
	}
	c.next[in], c.lastBarrier[in] = ev.Offset+1, b.ID
	acts, err := c.al.Barrier(in, b.ID, now)
	if err != nil {
		return 0, fmt.Errorf("input: partition %d offset %d upstream %d: %w", ev.Partition, ev.Offset, ev.Upstream, err)
	}
	c.apply(acts)
	return Taken, nil
}

// slot returns p's index in parts.
func (c *Core) slot(p int32) (int, bool) {
	if c.dense {
		s := int(p) - int(c.parts[0])
		return s, s >= 0 && s < len(c.parts)
	}
	return slices.BinarySearch(c.parts, p)
}

// Abort handles checkpoint id aborted by the coordinator (the trigger
// topic). Its actions, if any, are in Actions.
func (c *Core) Abort(id ckpt.ID, now time.Time) {
	c.apply(c.al.Abort(id, now))
}

// Actions returns the actions of the calls since the last Actions, in
// order, and forgets them. The slice is valid until the next Step or Abort.
func (c *Core) Actions() []Action {
	out := c.out
	c.out = c.out[:0]
	return out
}

// Positions returns the current restart position of every partition: the
// positions a snapshot taken now would record.
func (c *Core) Positions() map[int32]int64 {
	m := make(map[int32]int64, len(c.parts))
	for s, p := range c.parts {
		m[p] = c.read[s]
		if c.rewind[s] != none {
			m[p] = c.rewind[s]
		}
	}
	return m
}

// Stats returns the record counters.
func (c *Core) Stats() Stats { return c.stats }

// Aligning returns the checkpoint being aligned, or 0.
func (c *Core) Aligning() ckpt.ID { return c.al.Aligning() }

// apply turns the aligner's actions into the core's, in order; the seeks
// and resumes of released partitions follow the aligner's releases.
func (c *Core) apply(acts []barrier.Action) {
	anyReleased := false
	for _, a := range acts {
		switch a.Kind {
		case barrier.Snapshot:
			b := c.latest
			if b.ID != a.ID { // cannot be: the aligner snapshots only the latest
				b = ckpt.Barrier{ID: a.ID, Kind: ckpt.KindCheckpoint}
			}
			c.out = append(c.out, Action{Kind: Snapshot, ID: a.ID, Barrier: b, Positions: c.Positions(), Align: a.Alignment})
		case barrier.Abort:
			c.out = append(c.out, Action{Kind: Abort, ID: a.ID, Align: a.Alignment})
		case barrier.Hold:
			s := a.Input / c.u
			c.heldCount[s]++
			if c.heldCount[s] == c.u && !c.paused[s] {
				c.paused[s] = true
				c.out = append(c.out, Action{Kind: Pause, Partition: c.parts[s]})
			}
		case barrier.Release:
			s := a.Input / c.u
			c.heldCount[s]--
			c.released[s] = true
			anyReleased = true
		}
	}
	if !anyReleased {
		return
	}
	for s, p := range c.parts {
		if !c.released[s] {
			continue
		}
		c.released[s] = false
		if r := c.rewind[s]; r != none {
			c.out = append(c.out, Action{Kind: Seek, Partition: p, Offset: r})
			c.guard[s], c.read[s], c.rewind[s] = c.read[s], r, none
		}
		if c.paused[s] && c.heldCount[s] < c.u {
			c.paused[s] = false
			c.out = append(c.out, Action{Kind: Resume, Partition: p})
		}
	}
}
