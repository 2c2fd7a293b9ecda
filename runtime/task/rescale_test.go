package task

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/eventtime"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/keygroup"
	"github.com/weir-stream/weir/plan"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// oldStage is the operator state of a downstream stage of n tasks among
// maxPar key groups, read by ups upstream tasks, writing sink topic "out"
// (partition = task index): task j has position 100*p+j in each of its
// partitions p, input watermark 1000*p+u (pairs of even partitions idle),
// chain watermark 10+j, and one recorded transaction of its pool.
func oldStage(n, maxPar, ups int) []oldTask {
	var olds []oldTask
	for j := range n {
		lo, hi := keygroup.Range(j, n, maxPar)
		o := oldTask{index: j, keyGroups: [2]int{lo, hi}, keyed: true, sinks: true}
		wm := &watermarkState{Current: int64(10 + j), Valve: eventtime.ValveState{Output: int64(10 + j)}}
		for p := lo; p < hi; p++ {
			o.op.Shuffle = append(o.op.Shuffle, control.Position{Topic: "s", Partition: int32(p), Offset: int64(100*p + j)})
			for u := range ups {
				wm.Valve.Inputs = append(wm.Valve.Inputs, int64(1000*p+u))
				wm.Valve.Idle = append(wm.Valve.Idle, p%2 == 0)
			}
		}
		o.op.Watermark = wm
		pool := sink.PoolName("agg", "out")
		h := sink.TxnHandle{Version: 2, TransactionalID: sink.TxnID("p.", pool, int32(j), 1), ProducerID: int64(j), Checkpoint: 4,
			Marker: sink.TxnMarker{Topic: "out", Partition: int32(j)}}
		o.op.SinkPools = []sinkPool{{Topic: "out", Pool: pool, Size: 3, Txns: []sink.TxnHandle{h}}}
		olds = append(olds, o)
	}
	return olds
}

// restoreOf returns what new task i of m restores from olds (as
// restoreSources and oldTasks choose them).
func restoreOf(olds []oldTask, i, m, maxPar int) []oldTask {
	handles := make([]string, len(olds))
	for j := range olds {
		handles[j] = fmt.Sprint(j)
	}
	rf := rescaleSources(handles, i, m, maxPar)
	var out []oldTask
	for j, o := range olds {
		keyed := slices.Contains(rf.keyed, fmt.Sprint(j))
		_, sinks := rf.sinks[j]
		if keyed || sinks {
			o.keyed, o.sinks = keyed, sinks
			out = append(out, o)
		}
	}
	return out
}

// Across every new task of a rescale, each shuffle partition's position
// and each (partition, upstream) pair's watermark is taken from its old
// owner exactly once, the chain watermark is the lowest of the old tasks'
// it merges, and every old task's sink transactions are recovered by
// exactly one new task, under the old task's own partition.
func TestMergeOperatorState(t *testing.T) {
	for _, tc := range []struct{ from, to, maxPar, ups, newUps int }{
		{6, 3, 128, 2, 2}, {3, 8, 128, 2, 2}, {4, 4, 16, 3, 3}, {5, 2, 16, 1, 1},
		{4, 4, 16, 2, 3}, {4, 4, 16, 3, 2}, // the upstream stage rescaled
		{6, 3, 16, 2, 4},
	} {
		t.Run(fmt.Sprintf("%d-%d-of-%d-ups-%d-%d", tc.from, tc.to, tc.maxPar, tc.ups, tc.newUps), func(t *testing.T) {
			olds := oldStage(tc.from, tc.maxPar, tc.ups)
			positions := map[int32]int64{}
			committed := map[string]int{} // transactional ID -> times recovered
			for i := range tc.to {
				lo, hi := keygroup.Range(i, tc.to, tc.maxPar)
				mine := restoreOf(olds, i, tc.to, tc.maxPar)
				op, moved, err := mergeOperatorState(mine, "agg", i, lo, hi, tc.newUps, specs("out"), []int{0}, 1)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range op.Shuffle {
					if _, dup := positions[p.Partition]; dup || int(p.Partition) < lo || int(p.Partition) >= hi {
						t.Fatalf("task %d [%d,%d): position of partition %d (twice, or not its own)", i, lo, hi, p.Partition)
					}
					if owner := keygroup.Owner(int(p.Partition), tc.from, tc.maxPar); p.Offset != int64(100*int(p.Partition)+owner) {
						t.Fatalf("task %d: partition %d at %d, want its old owner %d's", i, p.Partition, p.Offset, owner)
					}
					positions[p.Partition] = p.Offset
				}
				// Watermarks: each pair from its old owner, a new upstream
				// at the output; the chain's the lowest merged.
				wm := op.Watermark
				if len(wm.Valve.Inputs) != (hi-lo)*tc.newUps {
					t.Fatalf("task %d: %d valve inputs, want %d", i, len(wm.Valve.Inputs), (hi-lo)*tc.newUps)
				}
				lowest := int64(1 << 62)
				for _, o := range mine {
					if o.keyed {
						lowest = min(lowest, o.op.Watermark.Current)
					}
				}
				if wm.Current != lowest || wm.Valve.Output != lowest {
					t.Fatalf("task %d: chain watermark %d, output %d; want %d", i, wm.Current, wm.Valve.Output, lowest)
				}
				for p := lo; p < hi; p++ {
					for u := range tc.newUps {
						in, idle := wm.Valve.Inputs[(p-lo)*tc.newUps+u], wm.Valve.Idle[(p-lo)*tc.newUps+u]
						want, wantIdle := int64(1000*p+u), p%2 == 0
						if u >= tc.ups {
							want, wantIdle = lowest, false
						}
						if in != want || idle != wantIdle {
							t.Fatalf("task %d: pair (%d, %d) at %d idle %v, want %d idle %v", i, p, u, in, idle, want, wantIdle)
						}
					}
				}
				// Sinks: its own old index as its own pool, the others
				// retired under their partition.
				recorded, err := recordedSinkPools(&op, "agg", specs("out"), []int{0}, 1)
				if err != nil {
					t.Fatal(err)
				}
				plan, err := planSinkRecovery("p.", "agg", int32(i), specs("out"), []int{0}, 1, recorded)
				if err == nil {
					plan, err = planMovedSinks("p.", plan, moved)
				}
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range plan {
					if r.index >= 0 && r.partition != int32(i) {
						t.Fatalf("task %d opens its sink on partition %d", i, r.partition)
					}
					if r.index < 0 && (r.partition == int32(i) || int(r.partition)%tc.to != i) {
						t.Fatalf("task %d retires the sink of old task %d", i, r.partition)
					}
					for _, h := range r.txns {
						if !strings.HasSuffix(h.TransactionalID, fmt.Sprintf("-%d-1", r.partition)) {
							t.Fatalf("task %d recovers %s under partition %d", i, h.TransactionalID, r.partition)
						}
						committed[h.TransactionalID]++
					}
				}
			}
			if len(positions) != tc.maxPar {
				t.Fatalf("%d partitions have a position, want %d", len(positions), tc.maxPar)
			}
			if len(committed) != tc.from {
				t.Fatalf("%d old tasks' transactions recovered, want %d: %v", len(committed), tc.from, committed)
			}
			for id, n := range committed {
				if n != 1 {
					t.Fatalf("transaction %s recovered %d times", id, n)
				}
			}
		})
	}
}

// An unchanged stage's state goes through the merge unchanged.
func TestMergeOperatorStateUnchanged(t *testing.T) {
	olds := oldStage(3, 16, 2)
	for i, o := range olds {
		lo, hi := keygroup.Range(i, 3, 16)
		op, moved, err := mergeOperatorState([]oldTask{o}, "agg", i, lo, hi, 2, specs("out"), []int{0}, 1)
		if err != nil || len(moved) > 0 {
			t.Fatalf("task %d: moved %v, %v", i, moved, err)
		}
		if !reflect.DeepEqual(op, o.op) {
			t.Fatalf("task %d: merged\n%+v\nwant\n%+v", i, op, o.op)
		}
	}
}

// TestRescaleStages runs the job in-process with its downstream stages at
// one parallelism after another, each generation restored from the
// previous one's checkpoint, whose _metadata is written but whose
// completion no task heard: its pre-committed transactions are recovered
// by the next generation's tasks, those of old tasks that no longer exist
// by task j mod the new parallelism. An independent read_committed
// consumer finds every key's counts exactly 1..N after each step, and no
// transaction left open on the output. On kfake and on the real broker.
//
//   - two stages: count at 3, 2, 5 tasks;
//   - three stages (main → mid → count, both downstream stages keyed and
//     counting): mid at 3, 2, 4 and count at 2, 2, 3, so that count's
//     second generation aligns and filters over another number of
//     upstream writers than its checkpoint recorded, without itself
//     being rescaled.
func TestRescaleStages(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps [][2]int // (mid, count) parallelism; mid 0: two stages
	}{
		{"two-stages", [][2]int{{0, 3}, {0, 2}, {0, 5}}},
		{"three-stages", [][2]int{{3, 2}, {2, 2}, {4, 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) { rescaleStages(t, c, tc.steps) })
		})
	}
}

func rescaleStages(t *testing.T, c *kafkatest.Cluster, steps [][2]int) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	g := newGate()
	defer g.open()
	build := func(name, in, out string, p [2]int) *stream.Job {
		if p[0] == 0 {
			return twoStageJob(name, in, out, twoStage, p[1], g)
		}
		return threeStageJob(name, in, out, p[0], p[1])
	}
	r := newRig(t, ctx, c, rigConfig{inParts: 2, outParts: 2, maxParallelism: twoStageMax,
		build: func(name, in, out string) *stream.Job { return build(name, in, out, steps[0]) }})
	want := map[string]int{}
	from := ckpt.ID(0)
	for step, p := range steps {
		if step > 0 {
			// The job file with other parallelisms, same name.
			r.job = build(r.job.Name(), r.in, r.out, p)
			pl, err := plan.Build(r.job, plan.Inputs{SourcePartitions: 2, MaxParallelism: twoStageMax, TopicPrefix: r.prefix})
			if err != nil {
				t.Fatal(err)
			}
			r.plan = pl
		}
		gn := r.newGen(uint64(step + 1))
		tasks := r.openAll(ctx, gn, from)
		if from > 0 {
			// Open recovered checkpoint from's transactions: the
			// output holds everything before it, once.
			r.verifyCounts(ctx, want)
		}
		r.produce(ctx, want, keys(150, 30)...)
		var up []*Task
		for id, tk := range tasks {
			if id.Stage == "main" {
				up = append(up, tk)
			}
		}
		r.waitConsumed(ctx, up...)
		n := ckpt.ID(step + 1)
		r.trigger(n, tasks)
		acks := r.ackLog.wait(t, ctx, n, gn.n, slices.Collect(mapsKeys(tasks))...)
		r.writeMetadata(ctx, n, gn.n, acks)
		from = n
		if step == len(steps)-1 {
			r.complete(ctx, n, tasks)
			r.verifyCounts(ctx, want)
			break
		}
		// The generation ends before `complete n` reached it: the
		// next one commits what each task pre-committed.
		for _, tk := range tasks {
			r.stop(tk)
		}
	}
}

// threeStageJob re-keys the input by its value (main), counts per key in
// stage mid (mid tasks), passes the count on keyed by the same key to
// stage count (count tasks), which counts again and writes its count as
// decimal text: 1..N per key if both stages' state moved intact.
func threeStageJob(name, in, out string, mid, count int) *stream.Job {
	j := stream.NewJob(name)
	s := stream.From(j, stream.KafkaSource{Topics: []string{in}}, stream.RawCodec{})
	byValue := stream.KeyBy(s, func(v []byte) ([]byte, error) { return v, nil }, stream.Named("mid"), stream.Parallelism(mid))
	seen := stream.Count(byValue, "seen")
	again := stream.KeyByCurrent(seen, stream.Named("count"), stream.Parallelism(count), stream.ShuffleCodec(state.Int64Codec{}))
	n := stream.Count(again, "count")
	text := stream.Map(n, func(c int64) (string, error) { return strconv.FormatInt(c, 10), nil })
	stream.To(text, stream.KafkaSink{Topic: out, TransactionTimeout: testTxnTimeout}, stream.StringCodec{})
	return j
}
