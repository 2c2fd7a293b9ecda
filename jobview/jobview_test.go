package jobview

import (
	"testing"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
)

func tid(s string, i int) control.TaskID { return control.TaskID{Stage: s, Index: i} }

func gen2() control.Generation {
	return control.Generation{Gen: 2, RestoreFrom: 1, Assignment: control.Assignment{
		"r0": {tid("count", 0), tid("main", 1)}, "r1": {tid("main", 0), tid("count", 1)},
	}}
}

func TestJobStates(t *testing.T) {
	f := New("wc")
	if j := f.Job(0, 1000); j.State != StateStarting || j.Generation != 0 || len(j.Tasks) != 0 {
		t.Fatalf("empty fold: %+v", j)
	}
	f.Apply(gen2())
	f.Apply(control.Running{Gen: 2, Task: tid("main", 0)})
	f.Apply(control.Running{Gen: 1, Task: tid("main", 1)}) // an older generation's: ignored
	j := f.Job(0, 1000)
	if j.State != StateRestoring || j.Generation != 2 || j.RestoreFrom != 1 || len(j.Tasks) != 4 {
		t.Fatalf("restoring: %+v", j)
	}
	if j.Tasks[2].ID != tid("main", 0) || j.Tasks[2].Status != TaskRunning || j.Tasks[2].Replica != "r1" || j.Tasks[3].Status != TaskRestoring {
		t.Fatalf("tasks: %+v", j.Tasks)
	}
	for _, id := range []control.TaskID{tid("main", 1), tid("count", 0), tid("count", 1)} {
		f.Apply(control.Running{Gen: 2, Task: id})
	}
	f.Apply(control.ReplicaReport{Replica: "r1", TS: 900, Gen: 2, Coordinator: true})
	f.Apply(control.ReplicaReport{Replica: "r2", TS: 950, Gen: 2}) // alive, without tasks
	f.Apply(control.ReplicaReport{Replica: "r3", TS: 10, Gen: 1})  // gone
	j = f.Job(1000, 500)
	if j.State != StateRunning || j.Coordinator != "r1" || j.LiveReplicas != 2 {
		t.Fatalf("running: %+v", j)
	}
	if len(j.Replicas) != 3 || j.Replicas[0].ID != "r0" || j.Replicas[0].ReportedMS != 0 || len(j.Replicas[0].Tasks) != 2 ||
		!j.Replicas[1].Coordinator || j.Replicas[2].ID != "r2" || len(j.Replicas[2].Tasks) != 0 {
		t.Fatalf("replicas: %+v", j.Replicas)
	}
	if j = f.Job(2000, 500); j.Coordinator != "" {
		t.Fatalf("a coordinator whose report is older than the TTL: %q", j.Coordinator)
	}

	fail := control.Failed{Gen: 2, TS: 5, Task: tid("main", 1), Cause: control.CauseRecord, Reason: "not JSON",
		Record: control.Position{Topic: "in", Partition: 1, Offset: 7}}
	f.Apply(fail)
	j = f.Job(1000, 500)
	if j.State != StateFailed || j.Failure == nil || j.Failure.Reason != "not JSON" || j.Failure.Resume == "" {
		t.Fatalf("failed: %+v", j)
	}
	if j.Tasks[3].ID != tid("main", 1) || j.Tasks[3].Status != TaskFailed || j.Tasks[0].Status != TaskStopped {
		t.Fatalf("failed tasks: %+v", j.Tasks)
	}
	f.Apply(control.Resumed{Gen: 2, TS: 6})
	if j = f.Job(1000, 500); j.State != StateRunning || j.Failure != nil {
		t.Fatalf("resumed: %+v", j)
	}
	f.Apply(control.Stopped{Gen: 2, TS: 7})
	if j = f.Job(1000, 500); j.State != StateStopped || j.Stopped == nil {
		t.Fatalf("stopped: %+v", j)
	}
	g3 := gen2()
	g3.Gen = 3
	f.Apply(g3)
	if j = f.Job(1000, 500); j.State != StateRestoring || j.Stopped != nil {
		t.Fatalf("a new generation clears the stop: %+v", j)
	}
	// Running records expired from the ack topic: a checkpoint of the
	// generation says every task ran.
	f.Apply(control.Trigger{ID: 9, Gen: 3, TS: 10, Kind: ckpt.KindCheckpoint})
	if j = f.Job(1000, 500); j.State != StateRunning {
		t.Fatalf("triggered generation: %+v", j)
	}
}

func TestCheckpoints(t *testing.T) {
	f := New("wc")
	f.Apply(gen2())
	f.Apply(control.Trigger{ID: 5, Gen: 2, TS: 1000, Kind: ckpt.KindCheckpoint})
	f.Apply(control.Ack{ID: 5, Gen: 2, Task: tid("main", 0), Handle: "h",
		Metrics: control.AckMetrics{SyncMS: 1, AsyncMS: 20, AlignMS: 3, StateBytes: 100, UploadedBytes: 40}})
	c, ok := f.Checkpoint(5, 1500)
	if !ok || c.Status != CheckpointInProgress || c.Acks != 1 || c.Expected != 4 || c.DurationMS == nil || *c.DurationMS != 500 || len(c.Tasks) != 4 {
		t.Fatalf("in progress: %+v", c)
	}
	if c.Tasks[2].Task != tid("main", 0) || c.Tasks[2].Status != "acknowledged" || c.Tasks[2].Metrics.AsyncMS != 20 || c.Tasks[0].Status != "pending" {
		t.Fatalf("in progress tasks: %+v", c.Tasks)
	}
	f.Apply(control.Decline{ID: 5, Gen: 2, Task: tid("count", 1), Reason: "upload: access denied"})
	f.Apply(control.Abort{ID: 5, Gen: 2, Reason: control.AbortDeclined, Detail: "task count/1: upload: access denied", Last: 5})
	c, _ = f.Checkpoint(5, 1500)
	if c.Status != CheckpointFailed || c.AbortReason != "declined" || c.Failure == "" || c.Tasks[0].Status != "declined" || c.Tasks[0].Reason != "upload: access denied" {
		t.Fatalf("failed: %+v", c)
	}

	f.Apply(control.Trigger{ID: 6, Gen: 2, TS: 2000, Kind: ckpt.KindSavepoint, Target: "sp"})
	for _, id := range []control.TaskID{tid("main", 0), tid("main", 1), tid("count", 0), tid("count", 1)} {
		f.Apply(control.Ack{ID: 6, Gen: 2, Task: id, Handle: "h", Metrics: control.AckMetrics{StateBytes: 10, UploadedBytes: 5}})
	}
	f.Apply(control.Complete{ID: 6, Gen: 2, TS: 2300, Kind: ckpt.KindSavepoint, Target: "sp", Metadata: "savepoints/sp/_metadata"})
	f.Apply(control.Trigger{ID: 7, Gen: 2, TS: 3000, Kind: ckpt.KindCheckpoint})
	f.Apply(control.Abort{ID: 7, Gen: 2, Reason: control.AbortGeneration, Last: 7})

	all := f.Checkpoints(0)
	if len(all) != 3 || all[0].ID != 7 || all[0].Status != CheckpointAborted || all[1].ID != 6 || all[2].ID != 5 {
		t.Fatalf("history: %+v", all)
	}
	sp := all[1]
	if sp.Kind != "savepoint" || sp.Status != CheckpointCompleted || *sp.DurationMS != 300 || sp.StateBytes != 40 || sp.UploadedBytes != 20 || sp.Acks != 4 {
		t.Fatalf("savepoint: %+v", sp)
	}
	if got := f.Checkpoints(2); len(got) != 2 || got[1].ID != 6 {
		t.Fatalf("limit 2: %+v", got)
	}
	if j := f.Job(3000, 1000); j.LastCheckpoint == nil || j.LastCheckpoint.ID != 6 {
		t.Fatalf("last checkpoint: %+v", j.LastCheckpoint)
	}
	if _, ok := f.Checkpoint(99, 0); ok {
		t.Fatal("an unknown checkpoint found")
	}
}

// A completed checkpoint whose trigger and acks are gone (compacted,
// expired) takes its figures from its _metadata.
func TestMetadata(t *testing.T) {
	f := New("wc")
	f.Apply(control.Complete{ID: 3, Gen: 1, TS: 5000, Kind: ckpt.KindCheckpoint, Metadata: "chk-3/_metadata"})
	need := f.NeedsMetadata(20)
	if len(need) != 1 || need[0].ID != 3 || need[0].Metadata != "chk-3/_metadata" {
		t.Fatalf("needs metadata: %+v", need)
	}
	f.ApplyMetadata(control.Metadata{ID: 3, Gen: 1, Kind: ckpt.KindCheckpoint, TS: 4200, Tasks: []control.TaskState{
		{Task: tid("main", 0), Handle: "h", Metrics: control.AckMetrics{SyncMS: 2, StateBytes: 7}},
	}})
	c, _ := f.Checkpoint(3, 0)
	if c.TriggeredMS != 4200 || *c.DurationMS != 800 || c.StateBytes != 7 || c.Acks != 1 || c.Expected != 1 {
		t.Fatalf("from metadata: %+v", c)
	}
	if need := f.NeedsMetadata(20); len(need) != 0 {
		t.Fatalf("metadata read twice: %+v", need)
	}
}

func TestTrim(t *testing.T) {
	f := New("wc")
	for id := ckpt.ID(1); id <= keepCheckpoints*2; id++ {
		f.Apply(control.Trigger{ID: id, Gen: 1, TS: int64(id), Kind: ckpt.KindCheckpoint})
	}
	all := f.Checkpoints(0)
	if len(all) > keepCheckpoints+keepCheckpoints/10 || all[0].ID != keepCheckpoints*2 {
		t.Fatalf("kept %d checkpoints, newest %d", len(all), all[0].ID)
	}
}

func TestFigures(t *testing.T) {
	f := New("wc")
	f.Apply(gen2())
	f.Apply(control.ReplicaReport{Replica: "r0", TS: 100, Gen: 2, Tasks: []control.TaskFigures{{Task: tid("main", 1), RecordsInPerSecond: 5}}})
	f.Apply(control.ReplicaReport{Replica: "r0", TS: 90, Gen: 2}) // older, out of order: ignored
	f.Apply(control.ReplicaReport{Replica: "r1", TS: 100, Gen: 1, Tasks: []control.TaskFigures{{Task: tid("main", 0), RecordsInPerSecond: 9}}})
	fs := f.Figures(150, 100)
	if len(fs) != 1 || fs[tid("main", 1)].RecordsInPerSecond != 5 || fs[tid("main", 1)].Replica != "r0" {
		t.Fatalf("figures: %+v", fs)
	}
	if fs := f.Figures(500, 100); len(fs) != 0 {
		t.Fatalf("stale figures served: %+v", fs)
	}
}
