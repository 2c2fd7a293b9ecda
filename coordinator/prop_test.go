package coordinator

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"pgregory.net/rapid"
)

var universe = []control.TaskID{{Stage: "a", Index: 0}, {Stage: "a", Index: 1}, {Stage: "b", Index: 0}, {Stage: "b", Index: 1}}

var stranger = control.TaskID{Stage: "z", Index: 9}

// categories of emitted items, in the order Ready lists them.
var categories = []string{"records", "metadata", "discards", "purges", "restart", "outcomes"}

func category(s string) string {
	switch first, _, _ := strings.Cut(s, " "); first {
	case "trigger", "abort", "complete", "generation":
		return "records"
	case "metadata":
		return "metadata"
	case "discard":
		return "discards"
	case "purge":
		return "purges"
	case "restart":
		return "restart"
	}
	return "outcomes"
}

// readyStrings formats what a Ready holds like the model does.
func readyStrings(rd Ready) map[string][]string {
	out := map[string][]string{}
	add := func(format string, args ...any) {
		s := fmt.Sprintf(format, args...)
		out[category(s)] = append(out[category(s)], s)
	}
	for _, r := range rd.Records {
		switch r := r.(type) {
		case control.Trigger:
			add("trigger %d %s gen=%d", r.ID, r.Kind, r.Gen)
		case control.Abort:
			add("abort %d gen=%d %s last=%d", r.ID, r.Gen, r.Reason, r.Last)
		case control.Complete:
			add("complete %d %s gen=%d metadata=%s", r.ID, r.Kind, r.Gen, r.Metadata)
		case control.Generation:
			ts, _ := r.Assignment.Tasks()
			add("generation %d restore_from=%d tasks=%v", r.Gen, r.RestoreFrom, ts)
		}
	}
	for _, m := range rd.Metadata {
		add("metadata %d", m.ID)
	}
	for _, d := range rd.Discards {
		if d.Metadata != "" {
			add("discard %d %s metadata=%s", d.ID, d.Reason, d.Metadata)
		} else {
			add("discard %d %s %v", d.ID, d.Reason, d.Handles)
		}
	}
	for _, p := range rd.Purges {
		add("purge %s", p)
	}
	if rd.Restart != nil {
		add("restart")
	}
	for _, o := range rd.Outcomes {
		add("%s %d %s: %s", o.Type, o.ID, o.Task, o.Result)
	}
	return out
}

// propRun drives a Core and a model with the same random events.
type propRun struct {
	cfg     Config
	c       *Core
	m       *model
	log     []control.Message // for rebuilds
	targets int               // savepoint targets handed out: each request has its own

	// invariant bookkeeping
	maxTrigger   ckpt.ID
	genOf        map[ckpt.ID]uint64 // checkpoint -> generation
	tasksOf      map[uint64]int     // generation -> number of tasks
	successAcks  map[ckpt.ID]int    // checkpoint -> SUCCESS acks
	metadataDone map[ckpt.ID]bool
	released     map[ckpt.ID]bool
	// purged is the last purge offset of each shuffle partition, over
	// every core of the run; termPurged over the current core only.
	purged, termPurged map[control.Position]int64
	// written are the _metadata objects asked for, by ID.
	written map[ckpt.ID]control.Metadata
	// kindOf is the kind of every triggered checkpoint; savepoints the
	// completed savepoints (and stops) with their _metadata locations;
	// stoppedBy the stop-with-savepoint that stopped the job, 0 while
	// it runs.
	kindOf     map[ckpt.ID]ckpt.Kind
	savepoints map[ckpt.ID]string
	stoppedBy  ckpt.ID
}

func newPropRun(cfg Config, c *Core) *propRun {
	return &propRun{cfg: cfg, c: c, genOf: map[ckpt.ID]uint64{}, tasksOf: map[uint64]int{},
		successAcks: map[ckpt.ID]int{}, metadataDone: map[ckpt.ID]bool{}, released: map[ckpt.ID]bool{},
		purged: map[control.Position]int64{}, termPurged: map[control.Position]int64{},
		written: map[ckpt.ID]control.Metadata{}, kindOf: map[ckpt.ID]ckpt.Kind{}, savepoints: map[ckpt.ID]string{}}
}

// shufflePartitions are the partitions of the shuffle topic the tasks of
// the property tests read: task i of universe reads partition i.
const shuffleTopic = "s"

// drawShuffle draws task's positions: none, or one in its partition at an
// offset from base up to base+9.
func drawShuffle(t *rapid.T, task control.TaskID, base int64) []control.Position {
	i := slices.Index(universe, task)
	if i < 0 || rapid.IntRange(0, 5).Draw(t, "no_shuffle") == 0 {
		return nil
	}
	return []control.Position{{Topic: shuffleTopic, Partition: int32(i),
		Offset: base + rapid.Int64Range(0, 9).Draw(t, "offset")}}
}

// partitionKey is a Position with its offset cleared: a map key per
// partition.
func partitionKey(p control.Position) control.Position { p.Offset = 0; return p }

func (r *propRun) compare(t *rapid.T, what string, errC, errM error) {
	if (errC == nil) != (errM == nil) || (errM != nil && !errors.Is(errC, errM)) {
		t.Fatalf("%s: core error %v, model error %v", what, errC, errM)
	}
	rd := r.c.Ready()
	r.c.Advance(rd)
	got := readyStrings(rd)
	want := map[string][]string{}
	for _, s := range r.m.out {
		want[category(s)] = append(want[category(s)], s)
	}
	r.m.out = nil
	for _, cat := range categories {
		if !slices.Equal(got[cat], want[cat]) {
			t.Fatalf("%s: %s differ\ncore:  %q\nmodel: %q", what, cat, got[cat], want[cat])
		}
	}
	r.log = append(r.log, rd.Records...)
	r.checkInvariants(t, what, rd)

	// State that Ready does not show.
	var pc, pm []string
	for _, p := range r.c.pending {
		pc = append(pc, fmt.Sprintf("%d:%s:%d:%v", p.id, p.kind, p.remaining, p.finalizing))
	}
	for _, id := range r.m.pendingIDs() {
		p := r.m.pending[id]
		pm = append(pm, fmt.Sprintf("%d:%s:%d:%v", id, p.kind, len(r.m.tasks)-len(p.acked), p.final))
	}
	if !slices.Equal(pc, pm) {
		t.Fatalf("%s: pending differ\ncore:  %v\nmodel: %v", what, pc, pm)
	}
	var kc, km []ckpt.ID
	for _, k := range r.c.completed {
		kc = append(kc, k.id)
	}
	for _, k := range r.m.retained {
		km = append(km, k.id)
	}
	if !slices.Equal(kc, km) || r.c.lastID != r.m.lastID || r.c.gen != r.m.gen ||
		r.c.phase.String() != r.m.phase || r.c.failures != r.m.failures {
		t.Fatalf("%s: state differs: core completed=%v last=%d gen=%d phase=%s failures=%d; model %v %d %d %s %d",
			what, kc, r.c.lastID, r.c.gen, r.c.phase, r.c.failures, km, r.m.lastID, r.m.gen, r.m.phase, r.m.failures)
	}
	// Liveness: the owner ticks at NextTrigger (at once if it has passed)
	// and relies on events otherwise; a due trigger it is not told of
	// would wait for a tick that may be an hour away.
	atC, okC := r.c.NextTrigger()
	atM, okM := r.m.dueAt()
	if okC != okM || okC && !atC.Equal(atM) {
		t.Fatalf("%s: next trigger differs: core %s %v, model %s %v", what, rel(atC), okC, rel(atM), okM)
	}
	// Event sourcing: the records so far rebuild the same durable state.
	rebuilt, err := Restore(r.cfg, r.c.Now(), r.log)
	if err != nil {
		t.Fatalf("%s: restore: %v", what, err)
	}
	if diff := durableDiff(r.c, rebuilt); diff != "" {
		t.Fatalf("%s: rebuilt core differs: %s", what, diff)
	}
}

func (r *propRun) checkInvariants(t *rapid.T, what string, rd Ready) {
	for _, rec := range rd.Records {
		switch rec := rec.(type) {
		case control.Generation:
			ts, _ := rec.Assignment.Tasks()
			r.tasksOf[rec.Gen] = len(ts)
		case control.Trigger:
			if r.stoppedBy != 0 {
				t.Fatalf("%s: trigger %d %s after stop-with-savepoint %d stopped the job", what, rec.ID, rec.Kind, r.stoppedBy)
			}
			r.kindOf[rec.ID] = rec.Kind
			if rec.ID <= r.maxTrigger {
				t.Fatalf("%s: trigger %d after trigger %d: IDs must strictly increase", what, rec.ID, r.maxTrigger)
			}
			r.maxTrigger = rec.ID
			r.genOf[rec.ID] = rec.Gen
		case control.Complete:
			if !r.metadataDone[rec.ID] {
				t.Fatalf("%s: complete %d before its _metadata was written", what, rec.ID)
			}
			if n := r.tasksOf[r.genOf[rec.ID]]; r.successAcks[rec.ID] != n || n == 0 {
				t.Fatalf("%s: complete %d with %d of %d acks", what, rec.ID, r.successAcks[rec.ID], n)
			}
			if rec.Kind.IsSavepoint() {
				r.savepoints[rec.ID] = rec.Metadata
			}
		case control.Abort:
			if rec.Reason == control.AbortSubsumed && r.kindOf[rec.ID].IsSavepoint() {
				t.Fatalf("%s: %s %d subsumed", what, r.kindOf[rec.ID], rec.ID)
			}
		case control.Stopped:
			r.stoppedBy = rec.Savepoint
		}
	}
	for _, o := range rd.Outcomes {
		if o.Type == control.TypeAck && o.Result == AckSuccess {
			r.successAcks[o.ID]++
		}
	}
	retainedCkpts := 0
	for _, k := range r.c.completed {
		if k.kind == ckpt.KindCheckpoint {
			retainedCkpts++
		}
	}
	if retainedCkpts > r.cfg.Retained {
		t.Fatalf("%s: %d checkpoints retained, config says %d", what, retainedCkpts, r.cfg.Retained)
	}
	for _, d := range rd.Discards {
		if d.Reason != DiscardReleased {
			continue
		}
		r.released[d.ID] = true
		if d.ID == r.c.lastCompleted {
			t.Fatalf("%s: released %d, the restore point", what, d.ID)
		}
	}
	for _, k := range r.c.completed {
		if r.released[k.id] {
			t.Fatalf("%s: checkpoint %d released but still retained", what, k.id)
		}
		if k.kind.IsSavepoint() && r.released[k.id] {
			t.Fatalf("%s: savepoint %d released", what, k.id)
		}
	}
	// A completed savepoint belongs to the person who asked for it: no
	// discard, whatever its reason, names it or its _metadata.
	for _, d := range rd.Discards {
		if loc, ok := r.savepoints[d.ID]; ok {
			t.Fatalf("%s: discard %d %s of completed %s %d (_metadata %s)", what, d.ID, d.Reason, r.kindOf[d.ID], d.ID, loc)
		}
		for id, loc := range r.savepoints {
			if d.Metadata == loc {
				t.Fatalf("%s: discard %d %s names the _metadata %s of completed savepoint %d", what, d.ID, d.Reason, loc, id)
			}
		}
	}
	for _, d := range rd.Discards {
		for _, k := range r.c.completed {
			if k.id == d.ID && (d.Metadata == k.metadata) {
				t.Fatalf("%s: discarded the _metadata of retained %d", what, k.id)
			}
		}
	}
	for _, m := range rd.Metadata {
		r.written[m.ID] = m
	}
	// A purge never deletes what a retained checkpoint may read, and a
	// partition's purge offset never decreases (and rises with every purge
	// of one core).
	for _, p := range rd.Purges {
		key := partitionKey(p)
		for _, k := range r.c.completed {
			if k.kind != ckpt.KindCheckpoint {
				continue
			}
			if !k.known {
				t.Fatalf("%s: purge %s while the positions of retained %d are unknown", what, p, k.id)
			}
			for _, q := range r.written[k.id].Tasks {
				for _, pos := range q.Shuffle {
					if partitionKey(pos) == key && pos.Offset < p.Offset {
						t.Fatalf("%s: purge %s above %s of retained checkpoint %d (task %s)", what, p, pos, k.id, q.Task)
					}
				}
			}
		}
		if last, ok := r.termPurged[key]; ok && p.Offset <= last {
			t.Fatalf("%s: purge %s after a purge at %d by the same core", what, p, last)
		}
		if p.Offset < r.purged[key] {
			t.Fatalf("%s: purge %s below the earlier purge at %d", what, p, r.purged[key])
		}
		r.purged[key], r.termPurged[key] = p.Offset, p.Offset
	}
}

func drawConfig(t *rapid.T) Config {
	interval := time.Duration(rapid.IntRange(5, 20).Draw(t, "interval_s")) * time.Second
	return Config{
		Interval:          interval,
		Timeout:           time.Duration(rapid.IntRange(5, 60).Draw(t, "timeout_s")) * time.Second,
		MinPause:          time.Duration(rapid.Int64Range(0, int64(interval)).Draw(t, "min_pause")),
		MaxConcurrent:     rapid.IntRange(1, 3).Draw(t, "max_concurrent"),
		TolerableFailures: rapid.IntRange(0, 3).Draw(t, "tolerable"),
		Retained:          rapid.IntRange(1, 3).Draw(t, "retained"),
		Random:            fixedSource(rapid.Int64Range(0, int64(20*time.Second)).Draw(t, "jitter")),
	}
}

// TestPropertyCoreMatchesModel drives the core and the reference model with
// random event sequences; they must emit the same records, metadata
// requests, discards, restarts and ack outcomes, and the invariants hold:
// trigger IDs strictly increase, a checkpoint completes only with every ack
// and after its _metadata, nothing released is still retained, no
// savepoint is subsumed and no discard ever names a completed savepoint,
// no trigger follows a completed stop-with-savepoint, a shuffle
// purge never exceeds the position of any retained checkpoint and never
// decreases, and the records rebuild the same durable state at every step.
func TestPropertyCoreMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		c, err := New(cfg, t0)
		if err != nil {
			t.Fatal(err)
		}
		r := newPropRun(cfg, c)
		r.m = newModel(cfg, t0)
		pendingID := func(t *rapid.T) ckpt.ID {
			ids := r.m.pendingIDs()
			if len(ids) == 0 || rapid.IntRange(0, 9).Draw(t, "stray") == 0 {
				return idRange(0, r.m.lastID+2).Draw(t, "id")
			}
			return rapid.SampledFrom(ids).Draw(t, "pending")
		}
		drawGen := func(t *rapid.T) uint64 {
			switch rapid.IntRange(0, 9).Draw(t, "gen_choice") {
			case 0:
				return r.m.gen - min(r.m.gen, 1)
			case 1:
				return r.m.gen + 1
			}
			return r.m.gen
		}
		ack := func(t *rapid.T, id ckpt.ID, task control.TaskID) {
			// Positions at random: the core must keep the purge rules
			// whatever the tasks report.
			a := control.Ack{ID: id, Gen: drawGen(t), Task: task, Handle: fmt.Sprintf("h%d-%s", id, task),
				Shuffle: drawShuffle(t, task, rapid.Int64Range(0, 90).Draw(t, "base"))}
			if control.Validate(a) == nil { // what the ack topic can carry
				r.log = append(r.log, a)
			}
			r.m.ack(a)
			r.compare(t, fmt.Sprintf("ack %+v", a), r.c.Step(Acknowledge{a}), nil)
		}
		t.Repeat(map[string]func(*rapid.T){
			"tick": func(t *rapid.T) {
				now := r.c.Now().Add(time.Duration(rapid.IntRange(0, 25_000).Draw(t, "ms")) * time.Millisecond)
				r.m.tick(now)
				r.c.Tick(now)
				r.compare(t, "tick "+rel(now), nil, nil)
			},
			"ack": func(t *rapid.T) {
				ack(t, pendingID(t), rapid.SampledFrom(append(slices.Clone(universe), stranger)).Draw(t, "task"))
			},
			"ackAll": func(t *rapid.T) {
				id := pendingID(t)
				for _, task := range r.m.sortedTasks() {
					ack(t, id, task)
				}
			},
			"decline": func(t *rapid.T) {
				d := control.Decline{ID: pendingID(t), Gen: drawGen(t),
					Task: rapid.SampledFrom(append(slices.Clone(universe), stranger)).Draw(t, "task"), Reason: "x"}
				r.m.decline(d)
				r.compare(t, fmt.Sprintf("decline %+v", d), r.c.Step(Decline{d}), nil)
			},
			"metadata": func(t *rapid.T) {
				id := pendingID(t)
				loc := fmt.Sprintf("m%d", id)
				errM := r.m.metadataWritten(id, loc)
				if errM == nil && r.m.lastCompleted == id {
					r.metadataDone[id] = true
				}
				if p := r.c.find(id); p != nil && p.finalizing {
					r.metadataDone[id] = true
				}
				r.compare(t, fmt.Sprintf("metadata %d", id), r.c.Step(MetadataWritten{ID: id, Location: loc}), errM)
			},
			"metadataFailed": func(t *rapid.T) {
				id := pendingID(t)
				errM := r.m.metadataFailed(id)
				r.compare(t, fmt.Sprintf("metadata-failed %d", id), r.c.Step(MetadataFailed{ID: id, Reason: "x"}), errM)
			},
			"savepoint": func(t *rapid.T) {
				kind := rapid.SampledFrom([]ckpt.Kind{ckpt.KindSavepoint, ckpt.KindStop}).Draw(t, "kind")
				errM := r.m.savepoint(kind)
				// A target of its own: one in use is refused
				// (savepoint_restore.txt), which the model does not know.
				r.targets++
				r.compare(t, "savepoint "+string(kind), r.c.Step(RequestSavepoint{Kind: kind, Target: fmt.Sprintf("t%d", r.targets)}), errM)
			},
			"assign": func(t *rapid.T) {
				tasks := rapid.SliceOfNDistinct(rapid.SampledFrom(universe), 1, len(universe),
					func(x control.TaskID) control.TaskID { return x }).Draw(t, "tasks")
				split := rapid.IntRange(0, len(tasks)).Draw(t, "split")
				a := control.Assignment{"r0": tasks[:split], "r1": tasks[split:]}
				var unplaced []control.TaskID
				if rapid.IntRange(0, 4).Draw(t, "incomplete") == 0 {
					for _, u := range universe {
						if !slices.Contains(tasks, u) {
							unplaced = append(unplaced, u)
						}
					}
				}
				errM := r.m.assign(a, unplaced)
				r.compare(t, fmt.Sprintf("assign %v unplaced=%v", a, unplaced), r.c.Step(Assign{Assignment: a, Unplaced: unplaced}), errM)
			},
			"running": func(t *rapid.T) {
				tasks := r.m.sortedTasks()
				if rapid.Bool().Draw(t, "one") && len(tasks) > 0 {
					tasks = []control.TaskID{rapid.SampledFrom(tasks).Draw(t, "task")}
				}
				gen := drawGen(t)
				for _, task := range tasks {
					r.m.running(gen, task)
					r.compare(t, fmt.Sprintf("running %d %s", gen, task), r.c.Step(TaskRunning{Gen: gen, Task: task}), nil)
				}
			},
			"gcBacklog": func(t *rapid.T) {
				n := rapid.IntRange(0, 4).Draw(t, "gc_backlog")
				r.m.gcBacklog = n
				r.compare(t, fmt.Sprintf("gc-backlog %d", n), r.c.Step(GCBacklog{Discards: n}), nil)
			},
			"rebuild": func(t *rapid.T) {
				// A failover that replays the whole history: the rebuilt
				// core takes over and must go on like the model.
				c, err := Restore(r.cfg, r.c.Now(), r.log)
				if err != nil {
					t.Fatal(err)
				}
				if diff := durableDiff(r.c, c); diff != "" {
					t.Fatalf("rebuild: %s", diff)
				}
				// Volatile state is not in the records; carry it over as
				// the owner would by starting from the same point.
				c.phase, c.notRunning, c.waitingFor = r.c.phase, r.c.notRunning, r.c.waitingFor
				c.scheduled, c.nextTrigger = r.c.scheduled, r.c.nextTrigger
				c.gcBacklog = r.c.gcBacklog
				c.purged = r.c.purged
				r.c = c
			},
		})
	})
}

// TestPropertyFailoverNeverReusesIDs: a coordinator that fails over at
// random points, rebuilt from what a new coordinator really reads (the
// commit topic, the newest trigger-topic record, the acks after it) and
// starting a new generation at once (none after a stop-with-savepoint:
// the rebuilt core refuses, and triggers nothing), never repeats a
// checkpoint ID,
// completes only fully acknowledged checkpoints of its own generation, and
// keeps the retention rules; its purges never exceed the position of a
// retained checkpoint (none while it has not read one's _metadata) and,
// with tasks that read forward, never decrease across coordinators.
func TestPropertyFailoverNeverReusesIDs(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		c, err := New(cfg, t0)
		if err != nil {
			t.Fatal(err)
		}
		assignment := control.Assignment{"r0": universe[:2], "r1": universe[2:]}
		var commit []control.Message
		var lastTrigger control.Message
		var acksAfter []control.Message
		r := newPropRun(cfg, c)
		advance := func(t *rapid.T, what string) {
			rd := r.c.Ready()
			r.c.Advance(rd)
			for _, rec := range rd.Records {
				switch topic, _ := control.TopicOf(rec); topic {
				case control.TopicCommit:
					commit = append(commit, rec)
				case control.TopicTrigger:
					lastTrigger, acksAfter = rec, nil
				}
			}
			r.checkInvariants(t, what, rd)
		}
		start := func(t *rapid.T) {
			err := r.c.Step(Assign{Assignment: assignment})
			if r.stoppedBy != 0 {
				// Stopped with a savepoint: the new coordinator refuses
				// to start a generation, and triggers nothing.
				if !errors.Is(err, ErrStopped) {
					t.Fatalf("assign after stop-with-savepoint %d: %v, want ErrStopped", r.stoppedBy, err)
				}
				advance(t, "start")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, task := range universe {
				if err := r.c.Step(TaskRunning{Gen: r.c.gen, Task: task}); err != nil {
					t.Fatal(err)
				}
			}
			advance(t, "start")
		}
		start(t)
		t.Repeat(map[string]func(*rapid.T){
			"tick": func(t *rapid.T) {
				r.c.Tick(r.c.Now().Add(time.Duration(rapid.IntRange(0, 25_000).Draw(t, "ms")) * time.Millisecond))
				advance(t, "tick")
			},
			"ack": func(t *rapid.T) {
				if len(r.c.pending) == 0 {
					return
				}
				p := rapid.SampledFrom(r.c.pending).Draw(t, "pending")
				task := rapid.SampledFrom(universe).Draw(t, "task")
				// Tasks read forward: a later checkpoint's positions are
				// not below an earlier one's.
				a := control.Ack{ID: p.id, Gen: p.gen, Task: task, Handle: "h", Shuffle: drawShuffle(t, task, int64(p.id)*10)}
				acksAfter = append(acksAfter, a)
				_ = r.c.Step(Acknowledge{a})
				advance(t, "ack")
			},
			"ackAll": func(t *rapid.T) {
				if len(r.c.pending) == 0 {
					return
				}
				p := rapid.SampledFrom(r.c.pending).Draw(t, "pending")
				for _, task := range universe {
					a := control.Ack{ID: p.id, Gen: p.gen, Task: task, Handle: "h", Shuffle: drawShuffle(t, task, int64(p.id)*10)}
					acksAfter = append(acksAfter, a)
					_ = r.c.Step(Acknowledge{a})
				}
				advance(t, "ackAll")
			},
			"metadata": func(t *rapid.T) {
				for _, p := range r.c.pending {
					if p.finalizing {
						r.metadataDone[p.id] = true
						_ = r.c.Step(MetadataWritten{ID: p.id, Location: fmt.Sprint("m", p.id)})
						break
					}
				}
				advance(t, "metadata")
			},
			"savepoint": func(t *rapid.T) {
				// Stops rarely, so that most runs go on after one.
				kind := ckpt.KindSavepoint
				if rapid.IntRange(0, 4).Draw(t, "stop") == 0 {
					kind = ckpt.KindStop
				}
				r.targets++
				err := r.c.Step(RequestSavepoint{Kind: kind, Target: fmt.Sprintf("t%d", r.targets)})
				if r.stoppedBy != 0 && !errors.Is(err, ErrStopped) {
					t.Fatalf("%s request after stop-with-savepoint %d: %v, want ErrStopped", kind, r.stoppedBy, err)
				}
				advance(t, "savepoint")
			},
			"failover": func(t *rapid.T) {
				history := slices.Clone(commit)
				if lastTrigger != nil {
					history = append(history, lastTrigger)
				}
				history = append(history, acksAfter...)
				c, err := Restore(cfg, r.c.Now(), history)
				if err != nil {
					t.Fatal(err)
				}
				if c.lastID < r.maxTrigger {
					t.Fatalf("rebuilt core would reuse IDs: last %d, used %d", c.lastID, r.maxTrigger)
				}
				if c.lastCompleted != r.c.lastCompleted {
					t.Fatalf("rebuilt restore point %d, want %d", c.lastCompleted, r.c.lastCompleted)
				}
				// The new coordinator reads the _metadata objects of the
				// retained checkpoints, some of which it may fail to read.
				for _, k := range c.Status().Completed {
					if md, ok := r.written[k.ID]; ok && rapid.IntRange(0, 3).Draw(t, "read_metadata") > 0 {
						if err := c.Step(MetadataRead{Metadata: md}); err != nil {
							t.Fatal(err)
						}
					}
				}
				r.c = c
				r.termPurged = map[control.Position]int64{}
				start(t)
			},
		})
	})
}

// idRange draws a checkpoint ID in [lo, hi], as rapid.Uint64Range does.
func idRange(lo, hi ckpt.ID) *rapid.Generator[ckpt.ID] {
	return rapid.Map(rapid.Uint64Range(uint64(lo), uint64(hi)), func(v uint64) ckpt.ID { return ckpt.ID(v) })
}
