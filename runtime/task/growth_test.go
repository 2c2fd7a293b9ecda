package task

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/plan"
	"github.com/weir-stream/weir/state/objstore"
	"github.com/weir-stream/weir/stream"
)

// TestManifestHandleAfterInputChange: restoring checkpoint 5, taken with 2
// input partitions and 2 downstream tasks, into plans of another input
// partition count (docs/operations.md, "Input partitions added"). More
// partitions: the checkpoint's tasks get their handles, the new source
// tasks none (they start empty) and no error. Fewer: every source task is
// refused as a permanent failure of cause job (ErrFewerPartitions). A
// downstream stage of another task count is refused too, without
// ErrFewerPartitions.
func TestManifestHandleAfterInputChange(t *testing.T) {
	ctx := context.Background()
	store, err := objstore.Open(ctx, "mem://", "grow", objstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	md := control.Metadata{ID: 5, Gen: 3, Kind: ckpt.KindCheckpoint, TS: time.Now().UnixMilli()}
	for _, id := range []control.TaskID{{Stage: "count", Index: 0}, {Stage: "count", Index: 1}, {Stage: "main", Index: 0}, {Stage: "main", Index: 1}} {
		md.Tasks = append(md.Tasks, control.TaskState{Task: id, Handle: "chk-5/" + StateName(id) + ".manifest"})
	}
	b, err := control.Encode(md)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PutIfAbsent(ctx, objstore.MetadataKey(5), b); err != nil {
		t.Fatal(err)
	}
	job := stream.NewJob("grow")
	s := stream.From(job, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{})
	byValue := stream.KeyBy(s, func(v []byte) ([]byte, error) { return v, nil }, stream.Named("count"))
	n := stream.Count(byValue, "count")
	text := stream.Map(n, func(c int64) (string, error) { return strconv.FormatInt(c, 10), nil })
	stream.To(text, stream.KafkaSink{Topic: "out"}, stream.StringCodec{})
	planFor := func(partitions, downstream int) *plan.Plan {
		p, err := plan.Build(job, plan.Inputs{SourcePartitions: partitions, MaxParallelism: 8, Running: map[string]int{"count": downstream}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	sources := func(p *plan.Plan, id control.TaskID) (restoreFrom, error) {
		tk := &Task{cfg: Config{ID: id, RestoreFrom: 5, Store: store, Plan: p}, log: slog.New(slog.DiscardHandler)}
		return tk.restoreSources(ctx, StateName(id))
	}
	handle := func(p *plan.Plan, id control.TaskID) (string, error) {
		rf, err := sources(p, id)
		if rf.rescaled {
			t.Fatalf("%s: rescaled", id)
		}
		return rf.handle, err
	}

	grown := planFor(4, 2)
	for i := range 4 {
		id := control.TaskID{Stage: "main", Index: i}
		h, err := handle(grown, id)
		want := ""
		if i < 2 {
			want = "chk-5/" + StateName(id) + ".manifest"
		}
		if err != nil || h != want {
			t.Errorf("input grown to 4: %s: handle %q, %v; want %q, no error", id, h, err, want)
		}
	}
	if h, err := handle(grown, control.TaskID{Stage: "count", Index: 1}); err != nil || h != "chk-5/count-1.manifest" {
		t.Errorf("input grown to 4: count/1: handle %q, %v; want its manifest", h, err)
	}

	shrunk := planFor(1, 2)
	_, err = handle(shrunk, control.TaskID{Stage: "main", Index: 0})
	var pe *PermanentError
	if !errors.As(err, &pe) || pe.Cause != control.CauseJob || !errors.Is(err, ErrFewerPartitions) {
		t.Errorf("input shrunk to 1: main/0: %v; want a permanent failure of cause job, ErrFewerPartitions", err)
	}

	// A downstream stage of another task count restores by key groups:
	// count/0 of 3 owns key groups [0, 3) of 8, held by count/0 of 2
	// ([0, 4)); count/2 owns [6, 8), held by count/1 ([4, 8)); the sinks of
	// old task j go to new task j mod 3.
	rescaled := planFor(2, 3)
	for i, want := range []restoreFrom{
		{rescaled: true, from: 2, keyed: []string{"chk-5/count-0.manifest"}, sinks: map[int]string{0: "chk-5/count-0.manifest"}},
		{rescaled: true, from: 2, keyed: []string{"chk-5/count-0.manifest", "chk-5/count-1.manifest"}, sinks: map[int]string{1: "chk-5/count-1.manifest"}},
		{rescaled: true, from: 2, keyed: []string{"chk-5/count-1.manifest"}, sinks: map[int]string{}},
	} {
		got, err := sources(rescaled, control.TaskID{Stage: "count", Index: i})
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("downstream 2 -> 3 tasks: count/%d: %+v, %v; want %+v", i, got, err, want)
		}
	}
}
