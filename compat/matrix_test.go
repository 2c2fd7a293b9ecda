package compat_test

import (
	"strings"
	"testing"

	"github.com/weir-stream/weir/compat"
	"github.com/weir-stream/weir/config"
	kafkasink "github.com/weir-stream/weir/kafkaio/sink"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/plan"
)

// schemaOf compiles a YAML job (its job section's pipeline, under
// job.name "orders") and returns its state schema with parts input
// partitions.
func schemaOf(t *testing.T, pipelineYAML string, parts int, extra string, running map[string]int) *compat.Schema {
	t.Helper()
	return schemaUnder(t, pipelineYAML, parts, extra, running, nil)
}

// schemaUnder is schemaOf with the job's stages run under stageNames
// (plan.Inputs.StageNames).
func schemaUnder(t *testing.T, pipelineYAML string, parts int, extra string, running map[string]int, stageNames map[string]string) *compat.Schema {
	t.Helper()
	cfg, err := config.Load(config.Source{YAML: []byte("kafka: {brokers: [k:9092]}\njob:\n  name: orders\n" + extra + "  pipeline:\n" + pipelineYAML), NoEnv: true})
	if err != nil {
		t.Fatal(err)
	}
	job, err := pipeline.Compile(cfg.Job)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Build(job, plan.Inputs{SourcePartitions: parts, Parallelism: cfg.Job.Parallelism, MaxParallelism: cfg.Job.MaxParallelism,
		TopicPrefix: "_weir.orders.", Running: running, StageNames: stageNames})
	if err != nil {
		t.Fatal(err)
	}
	fp, err := compat.FingerprintOf(cfg.Job)
	if err != nil {
		t.Fatal(err)
	}
	s := p.Schema(job, fp, kafkasink.TxnIDPrefix("_weir.orders."))
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return &s
}

const (
	src    = "    - source: {topics: [orders], format: json}\n"
	keyBy  = "    - key_by: {field: user}\n"
	aggs   = "    - aggregate: {small: {sum: value.x}, big: {sum: value.y}}\n"
	sink   = "    - sink: {topic: out, format: json}\n"
	window = "    - window: {type: tumbling, size: 10s}\n"
)

// A route to the stream all, whose aggregate is "aggregate"; then a
// route to a stream even too, compiled before all: its aggregate takes
// the name "aggregate", all's becomes "aggregate-2".
const (
	route        = "    - route: [{when: \"value.x % 2 == 0\", to: even}, {to: all}]\n"
	routeAll     = src + "    - route: [{to: all}]\n  streams:\n    all: [{aggregate: {n: {count: true}}}, {sink: {topic: out}}]\n"
	routeEvenAll = src + route + "  streams:\n    even: [{aggregate: {n: {count: true}}}, {sink: {topic: out-even}}]\n    all: [{aggregate: {n: {count: true}}}, {sink: {topic: out}}]\n"
)

// TestUpgradeMatrix is the compatibility check's verdict on each change of
// the upgrade matrix of docs/operations.md ("Upgrading a job"): the
// levels found, and a word of each message.
func TestUpgradeMatrix(t *testing.T) {
	base := src + keyBy + aggs + sink
	for _, tc := range []struct {
		name      string
		old, cur  string
		oldParts  int
		curParts  int
		extraOld  string
		extraCur  string
		allowed   bool // without --allow-non-restored-state
		withFlag  bool // with it
		mentioned []string
	}{
		{name: "unchanged", old: base, cur: base, allowed: true, withFlag: true},
		{name: "insert a filter", old: base, cur: src + "    - filter: {where: \"value.x > 0\"}\n" + keyBy + aggs + sink, allowed: true, withFlag: true,
			mentioned: []string{"definition changed"}},
		{name: "reorder aggregates", old: base, cur: src + keyBy + "    - aggregate: {big: {sum: value.y}, small: {sum: value.x}}\n" + sink, allowed: true, withFlag: true},
		{name: "add an aggregate", old: base, cur: src + keyBy + "    - aggregate: {small: {sum: value.x}, big: {sum: value.y}, biggest: {max: value.y}}\n" + sink,
			allowed: true, withFlag: true, mentioned: []string{"max biggest is new"}},
		{name: "remove an aggregate", old: base, cur: src + keyBy + "    - aggregate: {small: {sum: value.x}}\n" + sink,
			allowed: false, withFlag: true, mentioned: []string{"sum big"}},
		{name: "change an aggregate's op", old: base, cur: src + keyBy + "    - aggregate: {small: {sum: value.x}, big: {max: value.y}}\n" + sink,
			allowed: false, withFlag: false, mentioned: []string{"big is a max, the checkpoint's big is a sum"}},
		{name: "rename the count form", old: src + "    - aggregate: {op: count}\n" + sink, cur: src + "    - aggregate: {count: true}\n" + sink,
			allowed: false, withFlag: true, mentioned: []string{"count (job.pipeline[1].aggregate)", "new aggregate"}},
		{name: "change a window's size", old: src + keyBy + window + "    - aggregate: {n: {count: true}}\n" + sink,
			cur:     src + keyBy + "    - window: {type: tumbling, size: 20s}\n" + "    - aggregate: {n: {count: true}}\n" + sink,
			allowed: false, withFlag: false, mentioned: []string{"window tumbling size 20s, the checkpoint's is tumbling size 10s"}},
		{name: "add a sink", old: base, cur: "    - source: {topics: [orders], format: json, on_error: dead-letter, dead_letter_topic: dlq}\n" + keyBy + aggs + sink,
			allowed: true, withFlag: true, mentioned: []string{"sink dlq: new sink"}},
		{name: "remove a sink", old: "    - source: {topics: [orders], format: json, on_error: dead-letter, dead_letter_topic: dlq}\n" + keyBy + aggs + sink, cur: base,
			allowed: true, withFlag: true, mentioned: []string{"sink dlq: no longer in the job: the transactions the checkpoint recorded for it are committed"}},
		{name: "change key_by", old: base, cur: src + "    - key_by: {field: country}\n" + aggs + sink,
			allowed: false, withFlag: false, mentioned: []string{"is keyed by key_by field country, its state by key_by field user"}},
		{name: "explicit id matching the derived one", old: base, cur: src + keyBy + "    - id: aggregate\n      aggregate: {small: {sum: value.x}, big: {sum: value.y}}\n" + sink,
			allowed: true, withFlag: true},
		// The id of a stage's first stateful step names the stage, whose
		// tasks recorded the transactions of the stage's sinks.
		{name: "explicit id of another name", old: base, cur: src + keyBy + "    - id: totals\n      aggregate: {small: {sum: value.x}, big: {sum: value.y}}\n" + sink,
			allowed: false, withFlag: false, mentioned: []string{"aggregate (job.pipeline[2].aggregate): the checkpoint has state", "totals", "keep the stage's name"}},
		{name: "explicit id of another name, one stage", old: src + aggs + sink, cur: src + "    - id: totals\n      aggregate: {small: {sum: value.x}, big: {sum: value.y}}\n" + sink,
			allowed: false, withFlag: true, mentioned: []string{"aggregate (job.pipeline[1].aggregate): the checkpoint has state", "totals (job.pipeline[1].aggregate): new aggregate"}},
		{name: "aggregate inserted before another", old: base,
			cur:     src + keyBy + "    - aggregate: {n: {count: true}}\n" + "    - key_by: {field: key}\n" + "    - aggregate: {small: {sum: value.n}, big: {sum: value.n}}\n" + sink,
			allowed: false, withFlag: false, mentioned: []string{"sum small", "aggregate-2"}},
		// The step that starts a downstream stage names it: renamed by an
		// aggregate inserted before it, its state follows it, and the
		// stage keeps the name it had (its tasks, shuffle topic, sinks).
		{name: "aggregate inserted before one that starts a stage", old: src + "    - key_by: {expr: key}\n" + aggs + sink,
			cur:     src + "    - aggregate: {n: {count: true}}\n" + "    - key_by: {expr: key}\n" + "    - aggregate: {small: {sum: value.n}, big: {sum: value.n}}\n" + sink,
			allowed: true, withFlag: true, mentioned: []string{"stage aggregate-2: runs as stage aggregate, the checkpoint's stage named after aggregate",
				"aggregate-2 (job.pipeline[3].aggregate): continues the state of aggregate (job.pipeline[2].aggregate in the checkpoint)",
				"aggregate (job.pipeline[1].aggregate): new aggregate: it starts empty (its state is stored as aggregate#2"}},
		// ... unless another stage has that name.
		{name: "aggregate inserted before one that starts a stage, in a stage of its own", old: src + "    - key_by: {expr: key}\n" + aggs + sink,
			cur: src + "    - key_by: {field: country}\n" + "    - aggregate: {n: {count: true}}\n" + "    - key_by: {expr: key}\n" +
				"    - aggregate: {small: {sum: value.n}, big: {sum: value.n}}\n" + sink,
			allowed: false, withFlag: false, mentioned: []string{"stage aggregate-2: its first stateful step aggregate-2 continues the state of the checkpoint's stage aggregate, whose name the job's stage aggregate has"}},
		// A stream's aggregate whose derived id an aggregate of a stream
		// compiled before it shifted: its state follows it.
		{name: "aggregate inserted before another, in another stream", old: routeAll, cur: routeEvenAll, allowed: true, withFlag: true,
			mentioned: []string{"aggregate-2 (job.streams.all[0].aggregate): continues the state of aggregate (job.streams.all[0].aggregate in the checkpoint)",
				"aggregate (job.streams.even[0].aggregate): new aggregate: it starts empty (its state is stored as aggregate#2", "sink out-even: new sink"}},
		{name: "aggregate removed before another, in another stream", old: routeEvenAll, cur: routeAll, allowed: false, withFlag: true,
			mentioned: []string{"aggregate (job.streams.all[0].aggregate): continues the state of aggregate-2", "aggregate (job.streams.even[0].aggregate): the checkpoint has state of this aggregate"}},
		// Two aggregates defined alike (one stream, one stage, one key)
		// are told apart by their rank only: swapping them swaps their
		// names, and the aggregates' names say what changed.
		{name: "two aggregates defined alike, swapped", old: src + "    - aggregate: {n: {count: true}}\n    - aggregate: {m: {count: true}}\n" + sink,
			cur:     src + "    - aggregate: {m: {count: true}}\n    - aggregate: {n: {count: true}}\n" + sink,
			allowed: false, withFlag: true, mentioned: []string{"aggregate (job.pipeline[1].aggregate): count m is new", "aggregate (job.pipeline[1].aggregate): the checkpoint has state of count n"}},
		{name: "aggregate inserted before one defined alike", old: routeAll,
			cur:     src + "    - route: [{to: all}]\n  streams:\n    all: [{aggregate: {c: {count: true}}}, {aggregate: {n: {count: true}}}, {sink: {topic: out}}]\n",
			allowed: false, withFlag: true, mentioned: []string{"aggregate (job.streams.all[0].aggregate): count c is new", "the checkpoint has state of count n", "aggregate-2 (job.streams.all[1].aggregate): new aggregate"}},
		{name: "add an input topic", old: base, cur: "    - source: {topics: [orders, more], format: json}\n" + keyBy + aggs + sink,
			allowed: true, withFlag: true, mentioned: []string{"topic more is new"}},
		{name: "remove an input topic", old: "    - source: {topics: [orders, more], format: json}\n" + keyBy + aggs + sink, cur: base,
			allowed: false, withFlag: true, mentioned: []string{"read positions in topic more"}},
		{name: "input partitions added", old: src + aggs + sink, cur: src + aggs + sink, oldParts: 4, curParts: 6, allowed: true, withFlag: true,
			mentioned: []string{"input partitions 4 → 6: tasks main/4…main/5 are new"}},
		{name: "input partitions added, downstream parallelism pinned", old: base, cur: base, oldParts: 4, curParts: 6, extraCur: "  parallelism: 4\n",
			allowed: true, withFlag: true, mentioned: []string{"input partitions 4 → 6"}},
		// A downstream stage whose parallelism follows the input keeps its
		// task count once the job ran (plan.Inputs.Running), as a replica
		// plans it.
		{name: "input partitions added, downstream parallelism following", old: base, cur: base, oldParts: 4, curParts: 6,
			allowed: true, withFlag: true, mentioned: []string{"input partitions 4 → 6"}},
		{name: "input partitions fewer", old: base, cur: base, oldParts: 6, curParts: 4, allowed: false, withFlag: false,
			mentioned: []string{"have 4 partitions, the checkpoint's had 6"}},
		{name: "downstream parallelism", old: base, cur: base, extraCur: "  parallelism: 2\n", allowed: true, withFlag: true,
			mentioned: []string{"stage aggregate: parallelism 4 → 2: key groups move"}},
		{name: "max parallelism", old: base, cur: base, extraCur: "  max_parallelism: 64\n", allowed: false, withFlag: false,
			mentioned: []string{"job.max_parallelism is 64, the checkpoint's is 128"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op, cp := max(tc.oldParts, 4), max(tc.curParts, 4)
			if tc.oldParts == 0 {
				op = 4
			}
			if tc.curParts == 0 {
				cp = op
			}
			old := schemaOf(t, tc.old, op, tc.extraOld, nil)
			running := map[string]int{}
			for _, st := range old.Stages {
				running[st.Name] = st.Parallelism
			}
			cur := schemaOf(t, tc.cur, cp, tc.extraCur, running)
			res := compat.Compare(7, old, cur)
			report := res.Report()
			if got := res.Allowed(false); got != tc.allowed {
				t.Errorf("allowed without the flag: %v, want %v\n%s", got, tc.allowed, report)
			}
			if got := res.Allowed(true); got != tc.withFlag {
				t.Errorf("allowed with the flag: %v, want %v\n%s", got, tc.withFlag, report)
			}
			for _, m := range tc.mentioned {
				if !strings.Contains(report, m) {
					t.Errorf("report does not say %q:\n%s", m, report)
				}
			}
			if err := res.Err(false); (err == nil) != tc.allowed {
				t.Errorf("Err: %v", err)
			} else if err != nil && !strings.Contains(err.Error(), "nothing was written") {
				t.Errorf("Err does not say nothing was written: %v", err)
			}
			t.Logf("\n%s", report)
		})
	}
}

// TestUncheckedCheckpoint: a checkpoint without a schema (taken before
// schemas were recorded) is restored without a comparison.
func TestUncheckedCheckpoint(t *testing.T) {
	res := compat.Compare(3, nil, &compat.Schema{})
	if !res.Unchecked || !res.Allowed(false) {
		t.Fatalf("%+v", res)
	}
}
