package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

// stageState is the state backend of one stage's task in the run harness,
// with an in-memory object store, so that "restart" can checkpoint it and
// restore a new backend from the checkpoint, as the runtime does after a
// crash.
type stageState struct {
	cfg        state.Config
	b          *state.Backend
	checkpoint ckpt.ID
}

func newStageState(t *testing.T, stage string) *stageState {
	t.Helper()
	ctx := context.Background()
	store, err := objstore.Open(ctx, "mem://", "run-"+stage, objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	s := &stageState{cfg: state.Config{Dir: t.TempDir(), Task: stage + "-0", Store: store}}
	if s.b, err = state.Open(ctx, s.cfg); err != nil {
		t.Fatal(err)
	}
	b := s.b
	t.Cleanup(func() { _ = b.Close(ctx) })
	return s
}

// newTask creates stage i's task on st's backend.
func (r *runner) newTask(t *testing.T, i int, st *stageState) stream.Task {
	t.Helper()
	name := r.j.Stages()[i].Name
	task, err := r.j.NewTask(stream.TaskContext{Stage: name, Backend: st.b, Task: name + "/0",
		Now: func() time.Time { return r.now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = task.Close() })
	return task
}

// fireTimers sets the processing time to now and fires every stage's due
// timers, in stage order.
func (r *runner) fireTimers(now time.Time) error {
	r.now = now
	for i := range r.tasks {
		if err := r.run(i, func(t stream.Task, e *emitter) error { return t.FireTimers(now, e) }); err != nil {
			return err
		}
	}
	return nil
}

// restart checkpoints every stage's state (all records sent are
// processed: nothing is in flight), closes the tasks and their backends,
// and restores new ones from the checkpoint, without local recovery.
func (r *runner) restart(t *testing.T) { t.Helper(); r.restartWith(t, r.j) }

// restartWith is restart, with the tasks of j (a job file edited between
// the runs, with the same stages) after it.
func (r *runner) restartWith(t *testing.T, j *stream.Job) {
	t.Helper()
	ctx := context.Background()
	for i, st := range r.stages {
		st.checkpoint++
		snap, err := st.b.Snapshot(st.checkpoint, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := snap.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_ = r.tasks[i].Close()
		if err := st.b.NotifyComplete(ctx, st.checkpoint); err != nil {
			t.Fatal(err)
		}
		if err := st.b.Close(ctx); err != nil {
			t.Fatal(err)
		}
		st.cfg.Dir = t.TempDir()
		st.cfg.DisableLocalRecovery = true
		if st.b, err = state.Restore(ctx, st.cfg, res.Handle); err != nil {
			t.Fatal(err)
		}
		b := st.b
		t.Cleanup(func() { _ = b.Close(ctx) })
	}
	r.j, r.sinks = j, nil
	for _, k := range j.Sinks() {
		r.sinks = append(r.sinks, k.Topic)
	}
	if len(j.Stages()) != len(r.stages) {
		t.Fatalf("the edited job has %d stages, the job before %d", len(j.Stages()), len(r.stages))
	}
	for i, st := range r.stages {
		r.tasks[i] = r.newTask(t, i, st)
	}
}
