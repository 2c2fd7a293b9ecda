package task

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/weir-stream/weir/eventtime"
	"github.com/weir-stream/weir/keygroup"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// Rescaling (docs/state.md, "Rescaling"): a task of a downstream stage
// whose parallelism differs from the checkpoint's restores from the
// checkpoint's tasks of its stage, which ran another division of the key
// groups:
//
//   - keyed state (timers, per-key-group watermarks and window state
//     included: all of it is filed under key groups) from every old task
//     whose key groups overlap the task's (state.RestoreKeyGroups);
//   - the shuffle read positions of its partitions (one per key group)
//     from their old owners;
//   - its input watermarks per (partition, upstream task) pair from their
//     old owners, and the chain's watermark as the lowest of theirs (the
//     chain keeps a watermark per key group in keyed state, which moves
//     with the groups, so no key's watermark goes backwards);
//   - the sinks of old task j are recovered by new task j mod the new
//     parallelism: its own old index (j = i) as any restore does, any
//     other (j >= the new parallelism) by committing the transactions it
//     recorded and fencing its pool (retired, as a sink the job no longer
//     has), so that no transaction of a vanished task stays pending.

// restoreFrom is what a task restores from checkpoint RestoreFrom.
type restoreFrom struct {
	// handle is the task's own manifest. "" with rescaled, and for a
	// source task whose partition is new since the checkpoint.
	handle string
	// rescaled: the checkpoint has another number of tasks (from) of the
	// task's downstream stage.
	rescaled bool
	from     int
	// keyed are the manifests of the checkpoint's tasks of the stage whose
	// key groups overlap the task's.
	keyed []string
	// sinks are the manifests of the checkpoint's tasks whose sinks the
	// task recovers, by their index: j with j mod the stage's parallelism
	// = the task's index.
	sinks map[int]string
}

// rescaleSources returns what task index of a stage of parallelism tasks
// restores from a checkpoint whose from tasks of the stage have manifests
// handles (by index).
func rescaleSources(handles []string, index, parallelism, maxParallelism int) restoreFrom {
	from := len(handles)
	rf := restoreFrom{rescaled: true, from: from, sinks: map[int]string{}}
	lo, hi := keygroup.Range(index, parallelism, maxParallelism)
	for j, h := range handles {
		if l, h2 := keygroup.Range(j, from, maxParallelism); l < hi && h2 > lo {
			rf.keyed = append(rf.keyed, h)
		}
		if j%parallelism == index {
			rf.sinks[j] = h
		}
	}
	return rf
}

// oldTask is one task of the checkpoint a rescaled task restores from.
type oldTask struct {
	index     int
	keyGroups [2]int
	op        operatorState
	// keyed: its key groups overlap the task's. sinks: the task recovers
	// its sinks (its index is the task's modulo the parallelism).
	keyed, sinks bool
}

// oldTasks reads the operator state of every old task the rescaled task
// restores from: those whose keyed state the backend restored and those
// whose sinks it recovers.
func oldTasks(ctx context.Context, b *state.Backend, rf restoreFrom, store manifestReader) ([]oldTask, error) {
	var olds []oldTask
	seen := map[int]bool{}
	add := func(m *state.Manifest, keyed bool) error {
		id, ok := ParseStateName(m.Task)
		if !ok {
			return fmt.Errorf("manifest of task %q: not a task's name", m.Task)
		}
		_, sinks := rf.sinks[id.Index]
		o := oldTask{index: id.Index, keyGroups: m.KeyGroups, keyed: keyed, sinks: sinks}
		if len(m.OperatorState) > 0 {
			if err := json.Unmarshal(m.OperatorState, &o.op); err != nil {
				return fmt.Errorf("operator state of %s: %w", m.Task, err)
			}
		}
		seen[id.Index] = true
		olds = append(olds, o)
		return nil
	}
	for _, m := range b.RestoredManifests() {
		if err := add(m, true); err != nil {
			return nil, err
		}
	}
	for j, h := range rf.sinks {
		if seen[j] {
			continue
		}
		m, err := store(ctx, h)
		if err != nil {
			return nil, err
		}
		if err := add(m, false); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(olds, func(a, b oldTask) int { return a.index - b.index })
	return olds, nil
}

// manifestReader reads a task manifest (state.ReadManifest on the job's
// store).
type manifestReader func(ctx context.Context, handle string) (*state.Manifest, error)

// movedSinks are the sinks an old task recorded that the restoring task
// recovers for it: its transactional IDs are of partition (its index).
type movedSinks struct {
	partition int32
	pools     []sinkPool
}

// mergeOperatorState puts together the operator state of task index of a
// downstream stage, owning key groups [lo, hi) and reading upstreams
// upstream tasks, from the old tasks it restores from (of a parallelism of
// the checkpoint's, or the same): the shuffle positions of its partitions
// and its watermarks from those whose key groups overlap its own (keyed),
// the sinks of its own old index as its own. The sinks of the other old
// tasks it recovers (sinks) come back as moved.
func mergeOperatorState(olds []oldTask, stage string, index, lo, hi, upstreams int, specs []stream.KafkaSink, stageSinks []int, maxConcurrent int) (operatorState, []movedSinks, error) {
	var op operatorState
	var moved []movedSinks
	var wms []oldWatermarks
	for _, o := range olds {
		if o.keyed {
			for _, p := range o.op.Shuffle {
				if int(p.Partition) >= lo && int(p.Partition) < hi && int(p.Partition) >= o.keyGroups[0] && int(p.Partition) < o.keyGroups[1] {
					op.Shuffle = append(op.Shuffle, p)
				}
			}
			if o.op.Watermark != nil {
				wms = append(wms, oldWatermarks{keyGroups: o.keyGroups, state: o.op.Watermark})
			}
		}
		if !o.sinks {
			continue
		}
		if o.index == index {
			op.SinkPools, op.Sinks = o.op.SinkPools, o.op.Sinks
			continue
		}
		pools, err := recordedSinkPools(&o.op, stage, specs, stageSinks, maxConcurrent)
		if err != nil {
			return op, nil, fmt.Errorf("sinks of old task %d: %w", o.index, err)
		}
		if len(pools) > 0 {
			moved = append(moved, movedSinks{partition: int32(o.index), pools: pools})
		}
	}
	op.Watermark = mergeWatermarks(wms, lo, hi, upstreams)
	return op, moved, nil
}

// oldWatermarks is an old task's watermark state with the key groups
// (shuffle partitions) it read.
type oldWatermarks struct {
	keyGroups [2]int
	state     *watermarkState
}

// mergeWatermarks returns the watermark state of a downstream task reading
// partitions [lo, hi) from upstreams upstream tasks, from the states of
// the tasks that read them before (nil: none recorded one). Each (partition,
// upstream task) pair keeps its old watermark and idleness; a pair that
// had none (an upstream task that did not exist) starts at the merged
// output, active. The output and the chain's watermark are the lowest of
// the old tasks': each old task's chain had fired its timers up to its
// own, and the keys it fired for carry that watermark in their key
// groups' state.
func mergeWatermarks(olds []oldWatermarks, lo, hi, upstreams int) *watermarkState {
	if len(olds) == 0 {
		return nil
	}
	n := (hi - lo) * upstreams
	s := &watermarkState{Current: olds[0].state.Current, Valve: eventtime.ValveState{Output: olds[0].state.Valve.Output}}
	for _, o := range olds[1:] {
		s.Current = min(s.Current, o.state.Current)
		s.Valve.Output = min(s.Valve.Output, o.state.Valve.Output)
	}
	s.Valve.Inputs = make([]int64, n)
	s.Valve.Idle = make([]bool, n)
	for i := range s.Valve.Inputs {
		s.Valve.Inputs[i] = s.Valve.Output
	}
	for _, o := range olds {
		olo, ohi := o.keyGroups[0], o.keyGroups[1]
		in := o.state.Valve
		if ohi <= olo || len(in.Inputs)%(ohi-olo) != 0 || len(in.Idle) != len(in.Inputs) {
			continue // not a shuffle task's valve: its pairs are unknown
		}
		oldUp := len(in.Inputs) / (ohi - olo)
		for p := max(lo, olo); p < min(hi, ohi); p++ {
			for u := range min(upstreams, oldUp) {
				i, j := (p-lo)*upstreams+u, (p-olo)*oldUp+u
				s.Valve.Inputs[i], s.Valve.Idle[i] = in.Inputs[j], in.Idle[j]
			}
		}
	}
	return s
}
