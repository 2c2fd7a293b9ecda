package barrier

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

// amodel is a naive reference aligner (maps, recomputation), written from
// the rules in doc.go, to compare the real one with.
type amodel struct {
	n        int
	held     map[int]bool
	latest   ckpt.ID
	inflight map[ckpt.ID]*mtrack
	out      []Action
}

type mtrack struct {
	start time.Time
	seen  map[int]bool
}

func newAModel(n int) *amodel {
	return &amodel{n: n, held: map[int]bool{}, inflight: map[ckpt.ID]*mtrack{}}
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
		if !m.inflight[id].seen[i] {
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

func (m *amodel) newest() ckpt.ID {
	ids := m.ids()
	if len(ids) == 0 {
		return 0
	}
	return ids[len(ids)-1]
}

func (m *amodel) barrier(i int, id ckpt.ID, now time.Time) error {
	m.out = nil
	if i < 0 || i >= m.n {
		return ErrInput
	}
	if id <= m.latest {
		return nil
	}
	tr := m.inflight[id]
	if tr == nil {
		if m.newest() > id {
			return nil
		}
		m.abortBelow(id, now)
		m.releaseAll()
		tr = &mtrack{start: now, seen: map[int]bool{}}
		m.inflight[id] = tr
	}
	if tr.seen[i] {
		return ErrDuplicate
	}
	tr.seen[i] = true
	if m.aligned(id) {
		m.out = append(m.out, Action{Kind: Snapshot, ID: id, Alignment: now.Sub(tr.start)})
		m.latest = id
		delete(m.inflight, id)
		m.releaseAll()
	} else {
		m.held[i] = true
		m.out = append(m.out, Action{Kind: Hold, Input: i})
	}
	return nil
}

// abort is an abort from the coordinator.
func (m *amodel) abort(id ckpt.ID, now time.Time) {
	m.out = nil
	if id <= m.latest || m.newest() > id {
		return
	}
	m.abortBelow(id, now)
	if tr := m.inflight[id]; tr != nil {
		m.out = append(m.out, Action{Kind: Abort, ID: id, Alignment: now.Sub(tr.start)})
		delete(m.inflight, id)
	} else {
		m.out = append(m.out, Action{Kind: Abort, ID: id})
	}
	m.latest = id
	m.releaseAll()
}

// TestPropertyAlignerMatchesModel drives the aligner and the model with
// random streams and checks, besides equal output, the protocol's
// invariants computed from the streams alone: a record of an input that
// passed the barrier of the alignment in progress is never delivered, and
// nothing is held between alignments; a snapshot of n happens only when
// every input delivered barrier n; each checkpoint is snapshotted or
// aborted once, snapshots in increasing order.
func TestPropertyAlignerMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 5).Draw(t, "inputs")
		a, err := New(n)
		if err != nil {
			t.Fatal(err)
		}
		m := newAModel(n)
		now := t0
		var maxID ckpt.ID
		delivered := map[[2]ckpt.ID]bool{} // (input, id) barriers delivered
		heldByActions := map[int]bool{}
		finished := map[ckpt.ID]bool{}
		var lastSnapshot ckpt.ID

		apply := func(t *rapid.T, what string, acts []Action, err, errM error) {
			if (err == nil) != (errM == nil) || (errM != nil && !errors.Is(err, errM)) {
				t.Fatalf("%s: aligner error %v, model error %v", what, err, errM)
			}
			if !slices.Equal(acts, m.out) && (len(acts) != 0 || len(m.out) != 0) {
				t.Fatalf("%s:\naligner %v\nmodel   %v", what, acts, m.out)
			}
			for _, act := range acts {
				switch act.Kind {
				case Hold:
					heldByActions[act.Input] = true
				case Release:
					delete(heldByActions, act.Input)
				case Snapshot:
					if act.ID <= lastSnapshot {
						t.Fatalf("%s: snapshot %d after %d", what, act.ID, lastSnapshot)
					}
					lastSnapshot = act.ID
					for i := range n {
						if !delivered[[2]ckpt.ID{ckpt.ID(i), act.ID}] {
							t.Fatalf("%s: snapshot %d before input %d delivered its barrier", what, act.ID, i)
						}
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
			if a.Aligning() == 0 && len(heldByActions) > 0 {
				t.Fatalf("%s: inputs %v held with no alignment in progress", what, heldByActions)
			}
			if got, want := a.Aligning(), m.newest(); got != want {
				t.Fatalf("%s: aligning %d, model %d", what, got, want)
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
			"abort": func(t *rapid.T) {
				id := drawID(t)
				m.abort(id, now)
				acts := a.Abort(id, now)
				apply(t, fmt.Sprintf("abort %d", id), acts, nil, nil)
			},
		})
	})
}
