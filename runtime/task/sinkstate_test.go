package task

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/weir-stream/weir/kafkaio"
	"github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// handle is a recorded transaction of pool slot 1 of partition 0, with a
// marker record in topic (none if empty).
func handle(pool, topic string) sink.TxnHandle {
	h := sink.TxnHandle{Version: 2, TransactionalID: sink.TxnID("p.", pool, 0, 1), ProducerID: 7, ProducerEpoch: 3, Checkpoint: 4}
	if topic != "" {
		h.Marker = sink.TxnMarker{Topic: topic, Partition: 0, Offset: 9}
	}
	return h
}

func specs(topics ...string) []stream.KafkaSink {
	out := make([]stream.KafkaSink, len(topics))
	for i, t := range topics {
		out[i] = stream.KafkaSink{Topic: t, Delivery: kafkaio.DeliveryExactlyOnce}
	}
	if len(topics) > 0 && strings.HasSuffix(topics[len(topics)-1], "-alo") {
		out[len(topics)-1].Delivery = kafkaio.DeliveryAtLeastOnce
	}
	return out
}

// describe is a plan in one line per sink: "<topic or pool>: pool <name>/<size>
// txns <ids> fence <ids>", retired sinks marked "retire".
func describe(plan []sinkRecovery) string {
	var b strings.Builder
	for _, r := range plan {
		verb := "open"
		if r.index < 0 {
			verb = "retire"
		}
		var txns []string
		for _, h := range r.txns {
			txns = append(txns, strings.TrimPrefix(h.TransactionalID, "p."))
		}
		var fence []string
		for _, id := range r.fence {
			fence = append(fence, strings.TrimPrefix(id, "p."))
		}
		fmt.Fprintf(&b, "%s %s: pool %s/%d txns %v fence %v\n", verb, r.name(), r.pool.Pool, r.pool.Size, txns, fence)
	}
	return b.String()
}

// TestPlanSinkRecovery matches recorded sinks with the job's by topic, for
// checkpoints with sink pools and for the index-based ones older builds
// wrote. The stage's sinks are every sink of the job unless stageSinks
// says otherwise; the pool size is 3 (max_concurrent 1).
func TestPlanSinkRecovery(t *testing.T) {
	a, b := "a", "b"
	for _, tc := range []struct {
		name       string
		op         string // the operator state's JSON
		job        []stream.KafkaSink
		stageSinks []int
		want       string
		err        string
	}{{
		name: "unchanged",
		op:   j(operatorState{SinkPools: []sinkPool{{Topic: a, Pool: "main@a", Size: 3, Txns: []sink.TxnHandle{handle("main@a", a)}}}}),
		job:  specs(a),
		want: "open a: pool main@a/3 txns [main@a-0-1] fence []\n",
	}, {
		name: "sink added before",
		op:   j(operatorState{SinkPools: []sinkPool{{Topic: a, Pool: "main@a", Size: 3, Txns: []sink.TxnHandle{handle("main@a", a)}}}}),
		job:  specs(b, a),
		want: "open b: pool main@b/3 txns [] fence []\nopen a: pool main@a/3 txns [main@a-0-1] fence []\n",
	}, {
		name: "sink removed",
		op: j(operatorState{SinkPools: []sinkPool{
			{Topic: a, Pool: "main@a", Size: 3, Txns: []sink.TxnHandle{handle("main@a", a)}},
			{Topic: b, Pool: "main@b", Size: 3, Txns: []sink.TxnHandle{}},
		}}),
		job:  specs(b),
		want: "open b: pool main@b/3 txns [] fence []\nretire a: pool main@a/3 txns [main@a-0-1] fence []\n",
	}, {
		name: "removed at-least-once sink: nothing to do",
		op: j(operatorState{SinkPools: []sinkPool{
			{Topic: a, Pool: "main@a", Size: 3, Txns: []sink.TxnHandle{}},
			{Topic: "c-alo", Pool: "main@c-alo", Txns: []sink.TxnHandle{}},
		}}),
		job:  specs(a),
		want: "open a: pool main@a/3 txns [] fence []\n",
	}, {
		name: "legacy, unchanged: the old pool is fenced",
		op:   `{"sinks": [[` + j(handle("main", a)) + `]]}`,
		job:  specs(a),
		want: "open a: pool main@a/3 txns [main-0-1] fence [main-0-0 main-0-1 main-0-2]\n",
	}, {
		name: "legacy, sink of another stage (null)",
		op:   `{"sinks": [null, []]}`,
		job:  specs(a, b),
		// stage main writes b only
		stageSinks: []int{1},
		want:       "open b: pool main@b/3 txns [] fence [main.s1-0-0 main.s1-0-1 main.s1-0-2]\n",
	}, {
		name: "legacy, sinks swapped: markers decide",
		op:   `{"sinks": [[` + j(handle("main", a)) + `], [` + j(handle("main.s1", b)) + `]]}`,
		job:  specs(b, a),
		want: "open b: pool main@b/3 txns [main.s1-0-1] fence [main.s1-0-0 main.s1-0-1 main.s1-0-2]\n" +
			"open a: pool main@a/3 txns [main-0-1] fence [main-0-0 main-0-1 main-0-2]\n",
	}, {
		name: "legacy, first sink removed, it had no transactions",
		op:   `{"sinks": [[], [` + j(handle("main.s1", b)) + `]]}`,
		job:  specs(b),
		want: "open b: pool main@b/3 txns [main.s1-0-1] fence [main.s1-0-0 main.s1-0-1 main.s1-0-2]\n" +
			"retire main: pool main/3 txns [] fence []\n",
	}, {
		name: "legacy, version-1 handles of a removed last sink",
		op:   `{"sinks": [[], [` + j(handle("main.s1", "")) + `]]}`,
		job:  specs(a),
		want: "open a: pool main@a/3 txns [] fence [main-0-0 main-0-1 main-0-2]\n" +
			"retire main.s1: pool main.s1/3 txns [main.s1-0-1] fence []\n",
	}, {
		name: "legacy at-least-once sink: no pool to fence",
		op:   `{"sinks": [[], []]}`,
		job:  specs(a, "c-alo"),
		want: "open a: pool main@a/3 txns [] fence [main-0-0 main-0-1 main-0-2]\nopen c-alo: pool main@c-alo/0 txns [] fence []\n",
	}, {
		name: "a transaction in another sink's pool is refused",
		op: j(operatorState{SinkPools: []sinkPool{
			{Topic: a, Pool: "main@a", Size: 3, Txns: []sink.TxnHandle{handle("main@b", b)}},
		}}),
		job: specs(a, b),
		err: "transactional ID p.main@b-0-1 belongs to two sinks, a and b",
	}, {
		name: "two records of one topic are refused",
		op:   j(operatorState{SinkPools: []sinkPool{{Topic: a, Pool: "main@a", Size: 3}, {Topic: a, Pool: "main@a", Size: 3}}}),
		job:  specs(a),
		err:  "two sinks of topic a",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var op operatorState
			if err := json.Unmarshal([]byte(tc.op), &op); err != nil {
				t.Fatal(err)
			}
			stageSinks := tc.stageSinks
			if stageSinks == nil {
				for i := range tc.job {
					stageSinks = append(stageSinks, i)
				}
			}
			rec, err := recordedSinkPools(&op, "main", tc.job, stageSinks, 1)
			var plan []sinkRecovery
			if err == nil {
				plan, err = planSinkRecovery("p.", "main", 0, tc.job, stageSinks, 1, rec)
			}
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, plan\n%s\nwant the error %q", err, describe(plan), tc.err)
				}
			case err != nil:
				t.Fatal(err)
			default:
				if got := describe(plan); got != tc.want {
					t.Fatalf("plan:\n%s\nwant:\n%s", got, tc.want)
				}
			}
		})
	}
}

// TestRecordedTxns: the transactions tools are told a checkpoint recorded
// are those of its sink pools, each once, or, in a checkpoint of an older
// build, those of its sinks by index.
func TestRecordedTxns(t *testing.T) {
	ha, hb := handle("main@a", "a"), handle("main@b", "b")
	for _, tc := range []struct {
		op   operatorState
		want []sink.TxnHandle
	}{
		{operatorState{SinkPools: []sinkPool{{Topic: "a", Txns: []sink.TxnHandle{ha}}, {Topic: "b", Txns: []sink.TxnHandle{hb}}},
			Sinks: [][]sink.TxnHandle{{ha}, {hb}}}, []sink.TxnHandle{ha, hb}},
		{operatorState{Sinks: [][]sink.TxnHandle{nil, {hb}}}, []sink.TxnHandle{hb}},
		{operatorState{}, nil},
	} {
		m := manifestWith(t, tc.op)
		got, err := RecordedTxns(m)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("RecordedTxns of %s = %v, want %v", m.OperatorState, got, tc.want)
		}
	}
}

func j(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func manifestWith(t *testing.T, op operatorState) *state.Manifest {
	t.Helper()
	b, err := json.Marshal(op)
	if err != nil {
		t.Fatal(err)
	}
	return &state.Manifest{OperatorState: b}
}

// TestLeaveForeignTransactions: restored from a point the job does not
// own, a sink recovers only the transactions under the job's own IDs;
// another job's (another prefix, or a prefix that merely starts like the
// job's) are left alone.
func TestLeaveForeignTransactions(t *testing.T) {
	pool := sink.PoolName("main", "out")
	own := sink.TxnHandle{TransactionalID: sink.TxnID("_weir.clicks.", pool, 0, 1), ProducerID: 1}
	other := sink.TxnHandle{TransactionalID: sink.TxnID("_weir.clicks-v1.", pool, 0, 1), ProducerID: 2}
	longer := sink.TxnHandle{TransactionalID: sink.TxnID("_weir.clicks.v0.", pool, 0, 2), ProducerID: 3}
	tk := &Task{cfg: Config{Prefix: "_weir.clicks.", RestoreFrom: 9}, log: slog.New(slog.DiscardHandler)}
	rec := []sinkPool{
		{Topic: "out", Pool: pool, Size: 4, Txns: []sink.TxnHandle{own, other, longer}},
		{Topic: "gone", Pool: sink.PoolName("main", "gone"), Size: 4, Txns: []sink.TxnHandle{{TransactionalID: sink.TxnID("_weir.old.", sink.PoolName("main", "gone"), 0, 0)}}},
	}
	got := tk.leaveForeignTransactions(rec)
	if len(got) != 2 || !slices.Equal(got[0].Txns, []sink.TxnHandle{own}) || len(got[1].Txns) != 0 {
		t.Fatalf("kept %+v, want only %s", got, own.TransactionalID)
	}
	if len(rec[0].Txns) != 3 {
		t.Fatal("the recorded pools were changed in place")
	}
}
