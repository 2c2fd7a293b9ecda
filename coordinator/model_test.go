package coordinator

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
)

// model is a small, naive reference implementation of the coordinator
// protocol, written independently of Core (maps, no event sourcing, no
// index tricks) from the rules in DESIGN.md sections 4-6 and doc.go. The
// property tests step both with the same events and compare everything
// they emit.
type model struct {
	cfg Config
	now time.Time

	gen        uint64
	assignment control.Assignment
	tasks      map[control.TaskID]bool
	phase      string // waiting, starting, running, stopped
	notRunning map[control.TaskID]bool

	lastID, lastCompleted ckpt.ID
	pending               map[ckpt.ID]*mPending
	retained              []mCompleted     // by ID
	recent                []finished       // last 16 finished, this generation
	savepoints            map[ckpt.ID]bool // every savepoint ever completed
	failures              int
	restartDue            bool
	lastCompletion        time.Time
	nextTrigger           time.Time
	scheduled             bool
	gcBacklog             int              // the last GCBacklog report
	purged                map[string]int64 // "topic/partition" -> last purge offset

	out []string // everything emitted, formatted
}

type mPending struct {
	kind    ckpt.Kind
	ts      time.Time
	acked   map[control.TaskID]string // task -> handle
	shuffle []control.Position        // every acked task's positions
	final   bool
}

type mCompleted struct {
	id       ckpt.ID
	kind     ckpt.Kind
	metadata string
	shuffle  []control.Position
}

func newModel(cfg Config, now time.Time) *model {
	return &model{cfg: cfg, now: now, phase: "waiting", pending: map[ckpt.ID]*mPending{},
		savepoints: map[ckpt.ID]bool{}, tasks: map[control.TaskID]bool{}, purged: map[string]int64{}}
}

func (m *model) emit(format string, args ...any) { m.out = append(m.out, fmt.Sprintf(format, args...)) }

func (m *model) sortedTasks() []control.TaskID {
	var ts []control.TaskID
	for t := range m.tasks {
		ts = append(ts, t)
	}
	slices.SortFunc(ts, control.TaskID.Compare)
	return ts
}

func (m *model) pendingIDs() []ckpt.ID {
	var ids []ckpt.ID
	for id := range m.pending {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

func (m *model) pushRecent(id ckpt.ID, completed bool) {
	m.recent = append(m.recent, finished{id: id, completed: completed})
	if len(m.recent) > 16 {
		m.recent = m.recent[1:]
	}
}

func (m *model) abort(id ckpt.ID, reason control.AbortReason) {
	p := m.pending[id]
	delete(m.pending, id)
	m.emit("abort %d gen=%d %s last=%d", id, m.gen, reason, m.lastID)
	m.pushRecent(id, false)
	if reason.CountsAsFailure() && p.kind == ckpt.KindCheckpoint && id > m.lastCompleted {
		m.failures++
		if m.failures > m.cfg.TolerableFailures {
			m.restartDue = true
		}
	}
	var hs []string
	for _, t := range m.sortedTasks() {
		if h, ok := p.acked[t]; ok {
			hs = append(hs, h)
		}
	}
	if len(hs) > 0 {
		m.emit("discard %d aborted %v", id, hs)
	}
}

func (m *model) abortAll(reason control.AbortReason) {
	for _, id := range m.pendingIDs() {
		m.abort(id, reason)
	}
}

func (m *model) newGeneration(a control.Assignment) {
	m.gen++
	m.assignment = a
	m.tasks = map[control.TaskID]bool{}
	m.notRunning = map[control.TaskID]bool{}
	for _, ts := range a {
		for _, t := range ts {
			m.tasks[t] = true
			m.notRunning[t] = true
		}
	}
	m.emit("generation %d restore_from=%d tasks=%v", m.gen, m.lastCompleted, m.sortedTasks())
	m.pending = map[ckpt.ID]*mPending{}
	m.recent = nil
	m.failures = 0
	m.phase = "starting"
	m.scheduled = false
}

func (m *model) maybeRestart() {
	if !m.restartDue {
		return
	}
	m.restartDue = false
	if m.failures <= m.cfg.TolerableFailures || m.phase == "stopped" || m.phase == "waiting" {
		return
	}
	m.abortAll(control.AbortGeneration)
	m.newGeneration(m.assignment)
	m.emit("restart")
}

func (m *model) trigger(kind ckpt.Kind) {
	m.lastID++
	m.pending[m.lastID] = &mPending{kind: kind, ts: m.now, acked: map[control.TaskID]string{}}
	if kind == ckpt.KindCheckpoint {
		m.nextTrigger, m.scheduled = m.now.Add(m.cfg.Interval), true
	}
	m.emit("trigger %d %s gen=%d", m.lastID, kind, m.gen)
}

func (m *model) tick(now time.Time) {
	if now.After(m.now) {
		m.now = now
	}
	if m.phase == "stopped" {
		return
	}
	for _, id := range m.pendingIDs() {
		if !m.now.Before(m.pending[id].ts.Add(m.cfg.Timeout)) {
			m.abort(id, control.AbortExpired)
		}
	}
	m.maybeRestart()
	if m.phase != "running" || !m.scheduled || m.now.Before(m.nextTrigger) ||
		m.now.Before(m.lastCompletion.Add(m.cfg.MinPause)) {
		return
	}
	periodic := 0
	for _, p := range m.pending {
		if p.kind == ckpt.KindStop {
			return
		}
		if p.kind == ckpt.KindCheckpoint {
			periodic++
		}
	}
	// Flink's CheckpointRequestDecider: no periodic trigger while more
	// than max_concurrent checkpoints are being cleaned up.
	if periodic < m.cfg.MaxConcurrent && m.gcBacklog <= m.cfg.MaxConcurrent {
		m.trigger(ckpt.KindCheckpoint)
	}
}

// dueAt is when the owner must tell the model the time for the next
// periodic trigger to fire, if only time holds it back: the trigger is
// scheduled, the job runs, fewer than max_concurrent periodic checkpoints
// and no stop-with-savepoint are pending, and the gc backlog is within
// max_concurrent. Then it fires at the scheduled time, but never within
// min_pause of the last completion.
func (m *model) dueAt() (time.Time, bool) {
	if m.phase != "running" || !m.scheduled || m.gcBacklog > m.cfg.MaxConcurrent {
		return time.Time{}, false
	}
	periodic := 0
	for _, p := range m.pending {
		if p.kind == ckpt.KindStop {
			return time.Time{}, false
		}
		if p.kind == ckpt.KindCheckpoint {
			periodic++
		}
	}
	if periodic >= m.cfg.MaxConcurrent {
		return time.Time{}, false
	}
	at := m.nextTrigger
	if end := m.lastCompletion.Add(m.cfg.MinPause); at.Before(end) {
		at = end
	}
	return at, true
}

// gone classifies an ID of this generation that is not pending.
func (m *model) gone(id ckpt.ID) AckResult {
	for _, k := range m.retained {
		if k.id == id {
			return AckDuplicate
		}
	}
	if m.savepoints[id] {
		return AckDuplicate
	}
	for _, f := range m.recent {
		if f.id == id {
			if f.completed {
				return AckDuplicate
			}
			return AckDiscarded
		}
	}
	if id == 0 || id > m.lastID {
		return AckUnknown
	}
	return AckDiscarded
}

func (m *model) ack(a control.Ack) {
	defer m.maybeRestart()
	if a.Gen != m.gen || m.gen == 0 {
		m.emit("ack %d %s: %s", a.ID, a.Task, AckStale)
		return
	}
	p := m.pending[a.ID]
	if p == nil {
		r := m.gone(a.ID)
		m.emit("ack %d %s: %s", a.ID, a.Task, r)
		if r == AckUnknown {
			m.emit("discard %d unknown_ack %v", a.ID, []string{a.Handle})
		} else if r == AckDiscarded {
			m.emit("discard %d late_ack %v", a.ID, []string{a.Handle})
		}
		return
	}
	if !m.tasks[a.Task] {
		m.emit("ack %d %s: %s", a.ID, a.Task, AckUnknown)
		m.emit("discard %d unknown_ack %v", a.ID, []string{a.Handle})
		return
	}
	if _, dup := p.acked[a.Task]; dup {
		m.emit("ack %d %s: %s", a.ID, a.Task, AckDuplicate)
		return
	}
	p.acked[a.Task] = a.Handle
	p.shuffle = append(p.shuffle, a.Shuffle...)
	m.emit("ack %d %s: %s", a.ID, a.Task, AckSuccess)
	if len(p.acked) == len(m.tasks) {
		p.final = true
		m.emit("metadata %d", a.ID)
	}
}

func (m *model) decline(d control.Decline) {
	defer m.maybeRestart()
	if d.Gen != m.gen || m.gen == 0 {
		m.emit("decline %d %s: %s", d.ID, d.Task, AckStale)
		return
	}
	if m.pending[d.ID] == nil {
		m.emit("decline %d %s: %s", d.ID, d.Task, m.gone(d.ID))
		return
	}
	if !m.tasks[d.Task] {
		m.emit("decline %d %s: %s", d.ID, d.Task, AckUnknown)
		return
	}
	m.emit("decline %d %s: %s", d.ID, d.Task, AckSuccess)
	m.abort(d.ID, control.AbortDeclined)
}

func (m *model) metadataWritten(id ckpt.ID, loc string) error {
	defer m.maybeRestart()
	p := m.pending[id]
	if p == nil {
		if m.gone(id) != AckDuplicate {
			m.emit("discard %d aborted metadata=%s", id, loc)
		}
		return nil
	}
	if !p.final {
		return ErrInvalidEvent
	}
	for _, q := range m.pendingIDs() {
		if q < id && m.pending[q].kind == ckpt.KindCheckpoint {
			m.abort(q, control.AbortSubsumed)
		}
	}
	delete(m.pending, id)
	m.emit("complete %d %s gen=%d metadata=%s", id, p.kind, m.gen, loc)
	m.retained = append(m.retained, mCompleted{id: id, kind: p.kind, metadata: loc, shuffle: p.shuffle})
	sort.Slice(m.retained, func(i, j int) bool { return m.retained[i].id < m.retained[j].id })
	m.lastCompleted = max(m.lastCompleted, id)
	m.failures = 0
	m.lastCompletion = m.now
	m.pushRecent(id, true)
	if p.kind.IsSavepoint() {
		m.savepoints[id] = true
	}
	// Release the oldest checkpoints beyond the retained count.
	for {
		n := 0
		for _, k := range m.retained {
			if k.kind == ckpt.KindCheckpoint {
				n++
			}
		}
		if n <= m.cfg.Retained {
			break
		}
		i := slices.IndexFunc(m.retained, func(k mCompleted) bool { return k.kind == ckpt.KindCheckpoint })
		m.emit("discard %d released metadata=%s", m.retained[i].id, m.retained[i].metadata)
		m.retained = slices.Delete(m.retained, i, i+1)
	}
	// Forget savepoints older than the oldest retained checkpoint.
	if i := slices.IndexFunc(m.retained, func(k mCompleted) bool { return k.kind == ckpt.KindCheckpoint }); i >= 0 {
		oldest := m.retained[i].id
		m.retained = slices.DeleteFunc(m.retained, func(k mCompleted) bool {
			return k.kind != ckpt.KindCheckpoint && k.id < oldest
		})
	}
	m.purge()
	if p.kind == ckpt.KindStop {
		m.abortAll(control.AbortStopped)
		m.phase = "stopped"
		m.scheduled = false
	}
	return nil
}

func (m *model) metadataFailed(id ckpt.ID) error {
	defer m.maybeRestart()
	p := m.pending[id]
	if p == nil {
		return nil
	}
	if !p.final {
		return ErrInvalidEvent
	}
	m.abort(id, control.AbortFinalizeFailed)
	return nil
}

func (m *model) assign(a control.Assignment, unplaced []control.TaskID) error {
	defer m.maybeRestart()
	if m.phase == "stopped" {
		return ErrStopped
	}
	if len(unplaced) > 0 {
		m.abortAll(control.AbortIncomplete)
		m.phase = "waiting"
		m.scheduled = false
		return nil
	}
	m.abortAll(control.AbortGeneration)
	m.newGeneration(a)
	return nil
}

func (m *model) running(gen uint64, t control.TaskID) {
	defer m.maybeRestart()
	if m.phase != "starting" || gen != m.gen || !m.notRunning[t] {
		return
	}
	delete(m.notRunning, t)
	if len(m.notRunning) > 0 {
		return
	}
	m.phase = "running"
	span := int64(m.cfg.Interval - m.cfg.MinPause)
	d := min(max(m.cfg.Random.Int64N(span+1), 0), span)
	m.nextTrigger = m.now.Add(m.cfg.MinPause + time.Duration(d))
	m.scheduled = true
}

func (m *model) savepoint(kind ckpt.Kind) error {
	defer m.maybeRestart()
	switch m.phase {
	case "stopped":
		return ErrStopped
	case "running":
	default:
		return ErrNotRunning
	}
	if kind == ckpt.KindStop {
		for _, p := range m.pending {
			if p.kind == ckpt.KindStop {
				return ErrStopPending
			}
		}
	}
	m.trigger(kind)
	return nil
}

// purge emits, for each shuffle partition, the lowest offset any retained
// periodic checkpoint holds, where it is above the last purge.
func (m *model) purge() {
	low := map[string]control.Position{}
	for _, k := range m.retained {
		if k.kind != ckpt.KindCheckpoint {
			continue
		}
		for _, p := range k.shuffle {
			key := fmt.Sprintf("%s/%d", p.Topic, p.Partition)
			if q, ok := low[key]; !ok || p.Offset < q.Offset {
				low[key] = p
			}
		}
	}
	var out []control.Position
	for key, p := range low {
		if p.Offset > m.purged[key] {
			m.purged[key] = p.Offset
			out = append(out, p)
		}
	}
	slices.SortFunc(out, control.Position.Compare)
	for _, p := range out {
		m.emit("purge %s", p)
	}
}
