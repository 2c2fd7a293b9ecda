package barrier

import (
	"errors"
	"fmt"
	"github.com/weir-stream/weir/checkpoint/ckpt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// amodel is a naive reference aligner (maps, recomputation), written from
// the rules in doc.go, to compare the real one with.
type amodel struct {
	mode     Mode
	n        int
	ended    map[int]bool
	held     map[int]bool
	latest   ckpt.ID
	inflight map[ckpt.ID]*mtrack
	out      []Action
}

type mtrack struct {
	start time.Time
	seen  map[int]bool
}

func newAModel(n int, mode Mode) *amodel {
	return &amodel{mode: mode, n: n, ended: map[int]bool{}, held: map[int]bool{}, inflight: map[ckpt.ID]*mtrack{}}
}

func (m *amodel) ids() []ckpt.ID {
	var ids []ckpt.ID
	for id := range m.inflight {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (m *amodel) aligned(id ckpt.ID) bool {
	for i := range m.n {
		if !m.inflight[id].seen[i] && !m.ended[i] {
			return false
		}
	}
	return true
}

func (m *amodel) releaseAll() {
	for i := range m.n {
		if m.held[i] {
			delete(m.held, i)
			m.out = append(m.out, Action{Kind: Release, Input: i})
		}
	}
}

func (m *amodel) abortBelow(id ckpt.ID, now time.Time) {
	for _, o := range m.ids() {
		if o < id {
			m.out = append(m.out, Action{Kind: Abort, ID: o, Alignment: now.Sub(m.inflight[o].start)})
			m.latest = max(m.latest, o)
			delete(m.inflight, o)
		}
	}
}

func (m *amodel) completeReady(now time.Time) {
	for {
		var done ckpt.ID
		for _, id := range m.ids() {
			if m.aligned(id) {
				done = id
				break
			}
		}
		if done == 0 {
			return
		}
		m.abortBelow(done, now)
		m.out = append(m.out, Action{Kind: Snapshot, ID: done, Alignment: now.Sub(m.inflight[done].start)},
			Action{Kind: Forward, ID: done})
		m.latest = max(m.latest, done)
		delete(m.inflight, done)
		if m.mode == ExactlyOnce {
			m.releaseAll()
		}
	}
}

func (m *amodel) check(i int) error {
	if i < 0 || i >= m.n {
		return ErrInput
	}
	if m.ended[i] {
		return ErrEnded
	}
	return nil
}

func (m *amodel) newest() ckpt.ID {
	ids := m.ids()
	if len(ids) == 0 {
		return 0
	}
	return ids[len(ids)-1]
}

func (m *amodel) barrier(i int, id ckpt.ID, now time.Time) error {
	m.out = nil
	if err := m.check(i); err != nil {
		return err
	}
	if id <= m.latest {
		return nil
	}
	tr := m.inflight[id]
	if tr == nil {
		if m.newest() > id {
			return nil
		}
		if m.mode == ExactlyOnce {
			m.abortBelow(id, now)
			m.releaseAll()
		} else if len(m.inflight) == maxTracked {
			m.abortBelow(m.ids()[0]+1, now)
		}
		tr = &mtrack{start: now, seen: map[int]bool{}}
		m.inflight[id] = tr
	}
	if tr.seen[i] {
		return ErrDuplicate
	}
	tr.seen[i] = true
	if m.aligned(id) {
		m.completeReady(now)
	} else if m.mode == ExactlyOnce {
		m.held[i] = true
		m.out = append(m.out, Action{Kind: Hold, Input: i})
	}
	return nil
}

func (m *amodel) cancel(i int, id ckpt.ID, now time.Time) error {
	m.out = nil
	if err := m.check(i); err != nil {
		return err
	}
	return m.abort(id, now)
}

// abort is an abort from the coordinator: a cancel marker on no input.
func (m *amodel) abort(id ckpt.ID, now time.Time) error {
	m.out = nil
	if id <= m.latest {
		return nil
	}
	newest := m.newest()
	if m.mode == ExactlyOnce && newest > id {
		return nil
	}
	m.abortBelow(id, now)
	if tr := m.inflight[id]; tr != nil {
		m.out = append(m.out, Action{Kind: Abort, ID: id, Alignment: now.Sub(tr.start)})
		delete(m.inflight, id)
	} else if id > newest {
		m.out = append(m.out, Action{Kind: Abort, ID: id})
	}
	m.latest = id
	if m.mode == ExactlyOnce {
		m.releaseAll()
	}
	return nil
}

func (m *amodel) end(i int, now time.Time) error {
	m.out = nil
	if err := m.check(i); err != nil {
		return err
	}
	m.ended[i] = true
	m.completeReady(now)
	return nil
}

// TestPropertyAlignerMatchesModel drives the aligner and the model with
// random streams and checks, besides equal output, the protocol's
// invariants computed from the streams alone: exactly-once never delivers
// a record of an input that passed the barrier of an alignment in progress
// and holds nothing between alignments; a snapshot of n happens only when
// every input delivered barrier n or ended; each checkpoint is snapshotted
// or aborted once, snapshots in increasing order, each followed by its
// forward; at-least-once never holds.
func TestPropertyAlignerMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 5).Draw(t, "inputs")
		mode := rapid.SampledFrom([]Mode{ExactlyOnce, AtLeastOnce}).Draw(t, "mode")
		a, err := New(n, mode)
		if err != nil {
			t.Fatal(err)
		}
		m := newAModel(n, mode)
		now := t0
		var maxID ckpt.ID
		delivered := map[[2]ckpt.ID]bool{} // (input, id) barriers delivered
		heldByActions := map[int]bool{}
		finished := map[ckpt.ID]bool{}
		var lastSnapshot ckpt.ID
		ended := map[int]bool{}

		apply := func(t *rapid.T, what string, acts []Action, err, errM error) {
			if (err == nil) != (errM == nil) || (errM != nil && !errors.Is(err, errM)) {
				t.Fatalf("%s: aligner error %v, model error %v", what, err, errM)
			}
			if !slices.Equal(acts, m.out) && (len(acts) != 0 || len(m.out) != 0) {
				t.Fatalf("%s:\naligner %v\nmodel   %v", what, acts, m.out)
			}
			for k, act := range acts {
				switch act.Kind {
				case Hold:
					if mode == AtLeastOnce {
						t.Fatalf("%s: at-least-once held input %d", what, act.Input)
					}
					heldByActions[act.Input] = true
				case Release:
					delete(heldByActions, act.Input)
				case Snapshot:
					if act.ID <= lastSnapshot {
						t.Fatalf("%s: snapshot %d after %d", what, act.ID, lastSnapshot)
					}
					lastSnapshot = act.ID
					for i := range n {
						if !delivered[[2]ckpt.ID{ckpt.ID(i), act.ID}] && !ended[i] {
							t.Fatalf("%s: snapshot %d before input %d delivered its barrier", what, act.ID, i)
						}
					}
					if k+1 >= len(acts) || acts[k+1] != (Action{Kind: Forward, ID: act.ID}) {
						t.Fatalf("%s: snapshot %d not followed by its forward: %v", what, act.ID, acts)
					}
					fallthrough
				case Abort:
					if finished[act.ID] {
						t.Fatalf("%s: checkpoint %d finished twice", what, act.ID)
					}
					finished[act.ID] = true
				}
			}
			for i := range n {
				if a.IsHeld(i) != heldByActions[i] {
					t.Fatalf("%s: input %d held=%v, but the actions say %v", what, i, a.IsHeld(i), heldByActions[i])
				}
			}
			if st := a.Status(); len(st.Aligning) == 0 && len(st.Held) > 0 {
				t.Fatalf("%s: inputs %v held with no alignment in progress", what, st.Held)
			}
			if a.HeldInputs() != len(heldByActions) {
				t.Fatalf("%s: HeldInputs %d, want %d", what, a.HeldInputs(), len(heldByActions))
			}
		}
		drawID := func(t *rapid.T) ckpt.ID {
			lo := maxID - min(maxID, 2)
			id := ckpt.ID(rapid.Uint64Range(uint64(max(lo, 1)), uint64(maxID+2)).Draw(t, "id"))
			maxID = max(maxID, id)
			return id
		}
		input := func(t *rapid.T) int { return rapid.IntRange(0, n-1).Draw(t, "input") }

		t.Repeat(map[string]func(*rapid.T){
			"record": func(t *rapid.T) {
				i := input(t)
				got := a.Record(i)
				if got == heldByActions[i] {
					t.Fatalf("record on input %d: deliver=%v while held=%v", i, got, heldByActions[i])
				}
			},
			"tick": func(t *rapid.T) {
				now = now.Add(time.Duration(rapid.IntRange(0, 5000).Draw(t, "ms")) * time.Millisecond)
			},
			"barrier": func(t *rapid.T) {
				i, id := input(t), drawID(t)
				errM := m.barrier(i, id, now)
				acts, err := a.Barrier(i, id, now)
				if err == nil {
					delivered[[2]ckpt.ID{ckpt.ID(i), id}] = true
				}
				apply(t, fmt.Sprintf("barrier %d on %d", id, i), acts, err, errM)
			},
			"cancel": func(t *rapid.T) {
				i, id := input(t), drawID(t)
				errM := m.cancel(i, id, now)
				acts, err := a.Cancel(i, id, now)
				apply(t, fmt.Sprintf("cancel %d on %d", id, i), acts, err, errM)
			},
			"abort": func(t *rapid.T) {
				id := drawID(t)
				errM := m.abort(id, now)
				acts := a.Abort(id, now)
				apply(t, fmt.Sprintf("abort %d", id), acts, nil, errM)
			},
			"end": func(t *rapid.T) {
				if rapid.IntRange(0, 3).Draw(t, "rarely") != 0 {
					return
				}
				i := input(t)
				errM := m.end(i, now)
				acts, err := a.End(i, now)
				if err == nil {
					ended[i] = true
				}
				apply(t, fmt.Sprintf("end %d", i), acts, err, errM)
			},
		})
	})
}

func TestAtLeastOnceTracksAtMost50(t *testing.T) {
	a, _ := New(2, AtLeastOnce)
	for id := ckpt.ID(1); id <= maxTracked; id++ {
		if acts, err := a.Barrier(0, id, t0); err != nil || len(acts) != 0 {
			t.Fatalf("barrier %d: %v %v", id, acts, err)
		}
	}
	acts, err := a.Barrier(0, maxTracked+1, t0)
	if err != nil || len(acts) != 1 || acts[0].Kind != Abort || acts[0].ID != 1 {
		t.Fatalf("the 51st checkpoint in flight should abort the oldest: %v %v", acts, err)
	}
	if len(a.Status().Aligning) != maxTracked {
		t.Fatalf("tracking %d", len(a.Status().Aligning))
	}
}
