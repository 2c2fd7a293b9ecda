package plan_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/plan"
	"github.com/weir-stream/weir/stream"
)

// TestPlan runs the scripts in testdata. Commands:
//
//	yaml [partitions=N] [parallelism=N] [max=N] [prefix=P]
//	<the job section of a YAML configuration>
//
// loads the configuration (brokers from the environment) and compiles its
// pipeline, then plans it with partitions source partitions and the job's
// settings (overridden by the other arguments); and
//
//	job [partitions=N] [parallelism=N] [max=N] [prefix=P] [running=<stage>:N,...] [names=<stage>:<name>,...]
//	from <topic>
//	key-by [name=<stage>] [parallelism=N]
//	count <operator>
//	map
//	to <topic>
//
// builds a Go job of []byte streams, each line applied to the stream of the
// line before. Both print the plan's Describe, or the error; running (also
// for yaml) is Inputs.Running, names Inputs.StageNames. Then
//
//	keygroups <stage>/<i> ...
//	tasks
//	json
//
// print the key groups of tasks, every task, or the JSON of the last plan,
// and
//
//	for-tasks <stage>:N ...
//
// plans the last job (with its arguments) with ForTasks for a generation of
// N tasks of each stage named, and prints it or the error.
// Go call sites print as FILE:N.
func TestPlan(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var last *plan.Plan
		var lastJob *stream.Job
		var lastIn plan.Inputs
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "yaml", "job":
				var job *stream.Job
				in := plan.Inputs{SourcePartitions: 8, TopicPrefix: "_weir.j."}
				if d.Cmd == "yaml" {
					cfg, err := config.Load(config.Source{YAML: []byte(d.Input + "\nkafka: {brokers: [127.0.0.1:9092]}\n"), NoEnv: true})
					if err != nil {
						return "config: " + err.Error() + "\n"
					}
					if job, err = pipeline.Compile(cfg.Job); err != nil {
						return "compile: " + err.Error() + "\n"
					}
					in.Parallelism, in.MaxParallelism, in.TopicPrefix = cfg.Job.Parallelism, cfg.Job.MaxParallelism, cfg.Kafka.TopicPrefix
				} else {
					job = scriptJob(t, d.Input)
				}
				for _, arg := range d.CmdArgs {
					switch arg.Key {
					case "prefix":
						in.TopicPrefix = arg.Vals[0]
						continue
					case "running":
						in.Running = stageCounts(t, arg.Vals)
						continue
					case "names":
						in.StageNames = map[string]string{}
						for _, v := range arg.Vals {
							job, runs, ok := strings.Cut(v, ":")
							if !ok {
								d.Fatalf(t, "names: %q is not <job's name>:<name it runs under>", v)
							}
							in.StageNames[job] = runs
						}
						continue
					}
					n, err := strconv.Atoi(arg.Vals[0])
					if err != nil {
						d.Fatalf(t, "%s: %v", arg.Key, err)
					}
					switch arg.Key {
					case "partitions":
						in.SourcePartitions = n
					case "parallelism":
						in.Parallelism = n
					case "max":
						in.MaxParallelism = n
					default:
						d.Fatalf(t, "unknown argument %s", arg.Key)
					}
				}
				lastJob, lastIn = job, in
				p, err := plan.Build(job, in)
				last = p
				return describe(t, p, err)
			case "for-tasks":
				var items []string
				for _, a := range d.CmdArgs {
					items = append(items, a.Key)
				}
				var tasks []control.TaskID
				for stage, n := range stageCounts(t, items) {
					for i := range n {
						tasks = append(tasks, control.TaskID{Stage: stage, Index: i})
					}
				}
				p, err := plan.ForTasks(lastJob, lastIn, tasks)
				last = p
				return describe(t, p, err)
			case "keygroups":
				var b strings.Builder
				for _, arg := range d.CmdArgs {
					id, err := control.ParseTaskID(arg.Key)
					if err != nil {
						d.Fatalf(t, "%v", err)
					}
					lo, hi := last.KeyGroups(id)
					fmt.Fprintf(&b, "%s: [%d, %d)\n", id, lo, hi)
				}
				return b.String()
			case "tasks":
				return fmt.Sprintln(last.Tasks())
			case "json":
				b, err := json.MarshalIndent(last, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				return goSite(string(b)) + "\n"
			}
			d.Fatalf(t, "unknown command %s", d.Cmd)
			return ""
		})
	})
}

// describe prints plan p, or err.
func describe(t *testing.T, p *plan.Plan, err error) string {
	if err != nil {
		return "error: " + goSite(err.Error()) + "\n"
	}
	var b bytes.Buffer
	if err := p.Describe(&b); err != nil {
		t.Fatal(err)
	}
	return goSite(b.String())
}

// stageCounts parses "<stage>:N" items, each possibly a comma-separated list.
func stageCounts(t *testing.T, items []string) map[string]int {
	out := map[string]int{}
	for _, item := range items {
		for kv := range strings.SplitSeq(item, ",") {
			k, v, ok := strings.Cut(kv, ":")
			n, err := strconv.Atoi(v)
			if !ok || err != nil {
				t.Fatalf("%q: want <stage>:N", kv)
			}
			out[k] = n
		}
	}
	return out
}

var goSiteRE = regexp.MustCompile(`[\w.-]+\.go:\d+`)

func goSite(s string) string { return goSiteRE.ReplaceAllString(s, "FILE:N") }

// scriptJob builds the job of a job script (see TestPlan).
func scriptJob(t *testing.T, script string) *stream.Job {
	j := stream.NewJob("j")
	var cur *stream.Stream[[]byte]
	for line := range strings.Lines(script) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "from":
			cur = stream.From(j, stream.KafkaSource{Topics: f[1:]}, stream.RawCodec{})
		case "key-by":
			var opts []stream.ShuffleOption
			for _, a := range f[1:] {
				k, v, _ := strings.Cut(a, "=")
				switch k {
				case "name":
					opts = append(opts, stream.Named(v))
				case "parallelism":
					n, err := strconv.Atoi(v)
					if err != nil {
						t.Fatal(err)
					}
					opts = append(opts, stream.Parallelism(n))
				default:
					t.Fatalf("key-by: unknown option %s", k)
				}
			}
			cur = stream.KeyBy(cur, func(v []byte) ([]byte, error) { return v, nil }, opts...)
		case "count":
			n := stream.Count(cur, f[1])
			cur = stream.Map(n, func(n int64) ([]byte, error) { return strconv.AppendInt(nil, n, 10), nil })
		case "map":
			cur = stream.Map(cur, func(v []byte) ([]byte, error) { return v, nil })
		case "to":
			stream.To(cur, stream.KafkaSink{Topic: f[1]}, stream.RawCodec{})
		default:
			t.Fatalf("unknown step %q", line)
		}
	}
	return j
}
