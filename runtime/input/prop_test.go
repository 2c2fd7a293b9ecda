package input

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

// rec is one record of a simulated shuffle partition log.
type rec struct {
	u       int
	gen     uint64
	barrier bool
	id      ckpt.ID
	// wm marks a watermark record: it is numbered with the data records,
	// since the core must decide it exactly as one.
	wm bool
	// seq numbers the data and watermark records of upstream u on this
	// partition, across generations: a restored upstream re-emits the
	// records after its checkpoint with the same numbers.
	seq int
}

// world is the reference model: U upstream writers appending interleaved
// records and barriers to P partition logs, and a reader that obeys Seek,
// Pause and Resume, fetches into a buffer, and (at random) keeps iterating
// that buffer after a Seek.
type world struct {
	t    *rapid.T
	p, u int
	logs [][]rec
	now  time.Time

	// Per phase (generation).
	gen     uint64
	core    *Core
	cnt     [][]int // by partition, upstream: next seq to write
	got     [][]int // next seq expected to be delivered
	base    [][]int // seqs in the restored state (0 in the first phase)
	lastID  []ckpt.ID
	maxID   ckpt.ID
	pos     []int
	buf     [][]int // fetched offsets not yet passed to Step
	paused  []bool
	snaps   []snap
	prevPos map[int32]int64
	// wms and data count the watermark and data records delivered.
	wms, data uint64
}

type snap struct {
	id        ckpt.ID
	positions map[int32]int64
	got       [][]int
}

func grid(p, u, v int) [][]int {
	g := make([][]int, p)
	for i := range g {
		g[i] = make([]int, u)
		for j := range g[i] {
			g[i][j] = v
		}
	}
	return g
}

func cloneGrid(g [][]int) [][]int {
	c := make([][]int, len(g))
	for i := range g {
		c[i] = append([]int(nil), g[i]...)
	}
	return c
}

// startPhase makes a core of generation gen reading from start, with the
// restored state base.
func (w *world) startPhase(gen uint64, start map[int32]int64, base [][]int) {
	parts := make([]int32, w.p)
	for i := range parts {
		parts[i] = int32(i)
	}
	c, err := New(Config{Partitions: parts, Upstreams: w.u, Gen: gen, Start: start})
	if err != nil {
		w.t.Fatal(err)
	}
	w.gen, w.core = gen, c
	w.cnt, w.got, w.base = cloneGrid(base), cloneGrid(base), cloneGrid(base)
	w.lastID = make([]ckpt.ID, w.u)
	for i := range w.lastID {
		w.lastID[i] = w.maxID
	}
	w.pos = make([]int, w.p)
	for p := range w.pos {
		w.pos[p] = int(start[int32(p)])
	}
	w.buf = make([][]int, w.p)
	w.paused = make([]bool, w.p)
	w.snaps = nil
	w.wms, w.data = 0, 0
	w.prevPos = maps.Clone(start)
	if w.prevPos == nil {
		w.prevPos = map[int32]int64{}
	}
}

func (w *world) write(p, u int, wm bool) {
	w.logs[p] = append(w.logs[p], rec{u: u, gen: w.gen, wm: wm, seq: w.cnt[p][u]})
	w.cnt[p][u]++
}

func (w *world) writeBarrier(u int, id ckpt.ID) {
	w.lastID[u] = id
	w.maxID = max(w.maxID, id)
	for p := range w.logs {
		w.logs[p] = append(w.logs[p], rec{u: u, gen: w.gen, barrier: true, id: id})
	}
}

// zombie appends a record of the previous generation (a fenced-off writer
// still writing, or an older generation's more upstream tasks).
func (w *world) zombie(p, u int, barrier, wm bool, id ckpt.ID) {
	w.logs[p] = append(w.logs[p], rec{u: u, gen: w.gen - 1, barrier: barrier, wm: wm && !barrier, id: id, seq: -1})
}

func (w *world) fetch(p, n int) {
	if w.paused[p] {
		return
	}
	for ; n > 0 && w.pos[p] < len(w.logs[p]); n-- {
		w.buf[p] = append(w.buf[p], w.pos[p])
		w.pos[p]++
	}
}

// deliver passes the head of p's buffer to the core and checks the result.
func (w *world) deliver(p int, purgeOnSeek bool) {
	if len(w.buf[p]) == 0 {
		return
	}
	off := w.buf[p][0]
	w.buf[p] = w.buf[p][1:]
	r := w.logs[p][off]
	ev := Event{Partition: int32(p), Offset: int64(off), Watermark: r.wm, Upstream: r.u, Gen: r.gen}
	if r.barrier {
		ev.Barrier = barrierOf(r.id)
	}
	what := fmt.Sprintf("gen %d: p%d@%d %+v", w.gen, p, off, r)
	dec, err := w.core.Step(ev, w.now)
	if err != nil {
		w.t.Fatalf("%s: %v", what, err)
	}
	switch dec {
	case Deliver:
		if r.barrier || r.gen != w.gen {
			w.t.Fatalf("%s: delivered", what)
		}
		if r.seq != w.got[p][r.u] {
			w.t.Fatalf("%s: delivered seq %d, want %d (exactly once, in order)", what, r.seq, w.got[p][r.u])
		}
		w.got[p][r.u]++
		if r.wm {
			w.wms++
		} else {
			w.data++
		}
	case Taken:
		if !r.barrier || r.gen != w.gen {
			w.t.Fatalf("%s: taken as a barrier", what)
		}
	case Drop:
	default:
		w.t.Fatalf("%s: decision %v", what, dec)
	}
	w.actions(what, purgeOnSeek)
}

func (w *world) actions(what string, purgeOnSeek bool) {
	for _, a := range w.core.Actions() {
		p := int(a.Partition)
		switch a.Kind {
		case Seek:
			w.pos[p] = int(a.Offset)
			if purgeOnSeek {
				w.buf[p] = nil
			}
		case Pause:
			w.paused[p] = true
		case Resume:
			w.paused[p] = false
		case Snapshot:
			w.checkSnapshot(what, a)
		case Abort:
		default:
			w.t.Fatalf("%s: action %v", what, a)
		}
	}
}

// barrierAt returns the offset of u's barrier id of this generation on p.
func (w *world) barrierAt(p, u int, id ckpt.ID) int {
	for off, r := range w.logs[p] {
		if r.u == u && r.gen == w.gen && r.barrier && r.id == id {
			return off
		}
	}
	return -1
}

// barrierOf is the barrier every upstream task writes for checkpoint id:
// every third one is a savepoint.
func barrierOf(id ckpt.ID) ckpt.Barrier {
	if id%3 == 0 {
		return ckpt.Barrier{ID: id, Kind: ckpt.KindSavepoint, Target: fmt.Sprintf("sp-%d", id)}
	}
	return ckpt.Barrier{ID: id, Kind: ckpt.KindCheckpoint}
}

// checkSnapshot: at snapshot n exactly the records before barrier n of
// every (partition, upstream) have been delivered; every record of the
// generation below a position is before its writer's barrier n (it is in
// the snapshot); positions never decrease.
func (w *world) checkSnapshot(what string, a Action) {
	if len(a.Positions) != w.p {
		w.t.Fatalf("%s: snapshot %d positions %v", what, a.ID, a.Positions)
	}
	if a.Barrier != barrierOf(a.ID) {
		w.t.Fatalf("%s: snapshot %d of barrier %+v, want %+v", what, a.ID, a.Barrier, barrierOf(a.ID))
	}
	for p := range w.p {
		for u := range w.u {
			b := w.barrierAt(p, u, a.ID)
			if b < 0 {
				w.t.Fatalf("%s: snapshot %d but upstream %d wrote no barrier %d to partition %d", what, a.ID, u, a.ID, p)
			}
			want := w.base[p][u]
			for _, r := range w.logs[p][:b] {
				if r.u == u && r.gen == w.gen && !r.barrier {
					want++
				}
			}
			if w.got[p][u] != want {
				w.t.Fatalf("%s: snapshot %d: partition %d upstream %d delivered up to seq %d, want %d", what, a.ID, p, u, w.got[p][u], want)
			}
		}
		pos := a.Positions[int32(p)]
		if pos < w.prevPos[int32(p)] || pos > int64(len(w.logs[p])) {
			w.t.Fatalf("%s: snapshot %d: position %d of partition %d, previous %d, log end %d", what, a.ID, pos, p, w.prevPos[int32(p)], len(w.logs[p]))
		}
		for off, r := range w.logs[p][:pos] {
			if r.gen == w.gen && off > w.barrierAt(p, r.u, a.ID) && w.barrierAt(p, r.u, a.ID) >= 0 {
				w.t.Fatalf("%s: snapshot %d: position %d of partition %d is past %d %+v, after its writer's barrier", what, a.ID, pos, p, off, r)
			}
		}
	}
	w.prevPos = maps.Clone(a.Positions)
	w.snaps = append(w.snaps, snap{id: a.ID, positions: maps.Clone(a.Positions), got: cloneGrid(w.got)})
}

// run draws a phase of writes, reads, aborts and ticks.
func (w *world) run(t *rapid.T) {
	steps := rapid.IntRange(0, 150).Draw(t, "steps")
	for range steps {
		switch rapid.IntRange(0, 9).Draw(t, "op") {
		case 0, 1:
			w.write(rapid.IntRange(0, w.p-1).Draw(t, "p"), rapid.IntRange(0, w.u-1).Draw(t, "u"), rapid.IntRange(0, 3).Draw(t, "kind") == 0)
		case 2:
			u := rapid.IntRange(0, w.u-1).Draw(t, "u")
			w.writeBarrier(u, w.lastID[u]+idRange(1, 2).Draw(t, "skip"))
		case 3:
			if rapid.IntRange(0, 2).Draw(t, "rarely") == 0 {
				w.zombie(rapid.IntRange(0, w.p-1).Draw(t, "p"), rapid.IntRange(0, w.u+1).Draw(t, "u"),
					rapid.Bool().Draw(t, "barrier"), rapid.Bool().Draw(t, "wm"), idRange(1, w.maxID+2).Draw(t, "id"))
			}
		case 4, 5:
			w.fetch(rapid.IntRange(0, w.p-1).Draw(t, "p"), rapid.IntRange(1, 4).Draw(t, "n"))
		case 6, 7, 8:
			w.deliver(rapid.IntRange(0, w.p-1).Draw(t, "p"), rapid.Bool().Draw(t, "purge"))
		case 9:
			if rapid.Bool().Draw(t, "abort") {
				id := idRange(1, w.maxID+1).Draw(t, "id")
				w.core.Abort(id, w.now)
				w.actions(fmt.Sprintf("abort %d", id), false)
			} else {
				w.now = w.now.Add(time.Duration(rapid.IntRange(1, 3000).Draw(t, "ms")) * time.Millisecond)
			}
		}
	}
}

// drain writes a last barrier from every upstream and reads everything; an
// alignment that cannot complete (an upstream skipped its checkpoint) is
// aborted as the coordinator's timeout would. Then every record of the
// generation must have been delivered.
func (w *world) drain(t *rapid.T) {
	last := w.maxID + 1
	for u := range w.u {
		w.writeBarrier(u, last)
	}
	for round := 0; ; round++ {
		if round > 1000 {
			t.Fatalf("gen %d: reading does not finish", w.gen)
		}
		moved := false
		for p := range w.p {
			for !w.paused[p] && w.pos[p] < len(w.logs[p]) || len(w.buf[p]) > 0 {
				w.fetch(p, 3)
				w.deliver(p, rapid.Bool().Draw(t, "purge"))
				moved = true
			}
		}
		if id := w.core.Aligning(); id != 0 && !moved {
			// Only an upstream that skipped id can leave it hanging; if
			// every one wrote it to every partition, the reader stalled
			// (a partition paused while one of its writers was not held).
			skipped := false
			for p := range w.p {
				for u := range w.u {
					skipped = skipped || w.barrierAt(p, u, id) < 0
				}
			}
			if !skipped {
				t.Fatalf("gen %d: alignment %d stalls though every upstream wrote it everywhere (paused %v)", w.gen, id, w.paused)
			}
			w.core.Abort(id, w.now) // the coordinator's timeout
			w.actions(fmt.Sprintf("timeout abort %d", id), false)
			moved = true
		}
		if !moved {
			break
		}
	}
	for p := range w.p {
		for u := range w.u {
			if w.got[p][u] != w.cnt[p][u] {
				t.Fatalf("gen %d: partition %d upstream %d: delivered up to seq %d of %d", w.gen, p, u, w.got[p][u], w.cnt[p][u])
			}
		}
	}
	if st := w.core.Stats(); st.Watermarks != w.wms || st.Delivered != w.data {
		t.Fatalf("gen %d: stats count %d watermark and %d data records delivered, want %d and %d", w.gen, st.Watermarks, st.Delivered, w.wms, w.data)
	}
}

// TestPropertyAgainstModel simulates a shuffle end to end: every data and watermark record of the
// task's generation is delivered exactly once and in order (a watermark
// record never twice for one offset, and re-read after a seek back like
// the data around it);
// at each snapshot exactly the records before its barriers have been
// delivered; after a restore from a snapshot's positions with a new
// generation (older records present before and after the positions, a
// zombie still writing), nothing of the old generation is delivered and the
// restored state plus the re-emitted records is each upstream's whole
// sequence, once.
func TestPropertyAgainstModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		w := &world{t: t, p: rapid.IntRange(1, 3).Draw(t, "partitions"), u: rapid.IntRange(1, 3).Draw(t, "upstreams"), now: t0}
		w.logs = make([][]rec, w.p)
		w.startPhase(1, nil, grid(w.p, w.u, 0))
		w.run(t)
		w.drain(t)
		if len(w.snaps) == 0 {
			return
		}
		full := cloneGrid(w.cnt)
		s := w.snaps[rapid.IntRange(0, len(w.snaps)-1).Draw(t, "restore")]

		// Restore from s: the state holds s.got; the restored upstreams
		// re-emit from there (same seqs) in generation 2, and write on.
		w.startPhase(2, s.positions, s.got)
		w.run(t)
		for p := range w.p {
			for u := range w.u {
				for w.cnt[p][u] < full[p][u] {
					w.write(p, u, rapid.IntRange(0, 3).Draw(t, "kind") == 0)
				}
			}
		}
		w.drain(t)
	})
}

// idRange draws a checkpoint ID in [lo, hi], as rapid.Uint64Range does.
func idRange(lo, hi ckpt.ID) *rapid.Generator[ckpt.ID] {
	return rapid.Map(rapid.Uint64Range(uint64(lo), uint64(hi)), func(v uint64) ckpt.ID { return ckpt.ID(v) })
}
