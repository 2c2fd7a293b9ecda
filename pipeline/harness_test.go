package pipeline_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/pipeline"
	"github.com/weir-stream/weir/stream"
)

// The scripted tests of the compiler (testdata/compile/*.txt) and of
// compiled jobs over recorded input (testdata/run/*.txt). Each file is one
// step kind; add a file for a new one. Regenerate the expected output with
// go test ./pipeline/ -run 'TestCompileScripts|TestRunScripts' -rewrite.
//
// compile
// <a job file: job: {name: ..., pipeline: [...]}>
// ----
// <the problems, one a line "job.yaml:line:col: path: message", or the
// plan: one line per stage, "stage <name> [parallelism n] [from <stage>]:
// <operators>">
//
// run
// <a job file>
// === records
// <records, one a line: [@<event time after 2026-12-01T19:00:00Z, a Go
// duration>] [topic:<topic> (default: the first source topic)]
// [<key><TAB>]<value> (an empty value is a tombstone); or "watermark
// <duration>", which advances every stage's watermark; "now <duration>",
// which sets the processing time (t0 + duration) and fires the timers due;
// "restart", which checkpoints every stage's state and restarts the stages
// from it (harness_restart_test.go)>
// [=== restart with
// <an edited job file, with the same stages>
// === records
// <records: the edited job's tasks run them, on the state the job before
// left at its last record (a restart, as above)>]...
// ----
// <what the sinks got, in order: "<topic>: [<key><TAB>]<value>", and
// "error: <message>" if a record failed the job (the records after it are
// not run)>

func TestCompileScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/compile", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "compile" {
				d.Fatalf(t, "unknown command %s", d.Cmd)
			}
			j, err := compileYAML(t, d.Input)
			if err != nil {
				return problems(err)
			}
			return plan(j)
		})
	})
}

func TestRunScripts(t *testing.T) {
	datadriven.Walk(t, "testdata/run", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "run" {
				d.Fatalf(t, "unknown command %s", d.Cmd)
			}
			var r *runner
			for i, run := range strings.Split(d.Input, "=== restart with\n") {
				job, recs, ok := strings.Cut(run, "=== records\n")
				if !ok {
					d.Fatalf(t, "no === records line")
				}
				j, err := compileYAML(t, job)
				if err != nil {
					if r == nil {
						return "compile: " + problems(err)
					}
					return r.out.String() + "compile: " + problems(err)
				}
				if i == 0 {
					r = newRunner(t, j)
				} else {
					r.restartWith(t, j)
				}
				if !r.runLines(t, recs) {
					break
				}
			}
			return r.out.String()
		})
	})
}

// compileYAML loads a job file (as job.yaml, so that origins read
// job.yaml:line:col) and compiles its job, as the processor does.
func compileYAML(t *testing.T, yaml string) (*stream.Job, error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "job.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	cfg, err := config.Load(config.Source{File: "job.yaml", YAML: []byte("kafka: {brokers: [127.0.0.1:9092]}\n"), NoEnv: true})
	if err != nil {
		return nil, err
	}
	j, err := pipeline.Compile(cfg.Job)
	return j, cfg.Annotate(err)
}

// problems writes the problems of err, one a line.
func problems(err error) string {
	var b strings.Builder
	for _, line := range strings.Split(err.Error(), "\n") {
		b.WriteString(line + "\n")
	}
	return b.String()
}

// plan writes the stages of j, one a line.
func plan(j *stream.Job) string {
	var b strings.Builder
	st := j.Stages()
	for _, s := range st {
		fmt.Fprintf(&b, "stage %s", s.Name)
		if s.Parallelism > 0 {
			fmt.Fprintf(&b, " parallelism %d", s.Parallelism)
		}
		if s.Input != nil {
			fmt.Fprintf(&b, " from %s", s.Input.From)
		}
		fmt.Fprintf(&b, ": %s\n", strings.Join(s.Operators, " "))
	}
	return b.String()
}

// RunJob runs a built job's stages in memory over records (the format of
// the run directive's records) and returns what its sinks got. Shuffled
// records go straight to the stage that reads them, at the end of each
// batch; each record line is one batch.
func RunJob(t *testing.T, j *stream.Job, records string) string {
	t.Helper()
	r := newRunner(t, j)
	r.runLines(t, records)
	return r.out.String()
}

// runLines runs records (the format of the run directive's records)
// through r's tasks, after those it ran before; what the sinks get goes
// to r.out. It returns false if a record failed the job.
func (r *runner) runLines(t *testing.T, records string) bool {
	t.Helper()
	for _, line := range strings.Split(strings.TrimRight(records, "\n"), "\n") {
		if line == "" {
			continue
		}
		if d, ok := strings.CutPrefix(line, "watermark "); ok {
			dur, err := time.ParseDuration(d)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			if err := r.watermark(t0.Add(dur)); err != nil {
				r.out.WriteString("error: " + err.Error() + "\n")
				return false
			}
			continue
		}
		if d, ok := strings.CutPrefix(line, "now "); ok {
			dur, err := time.ParseDuration(d)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			if err := r.fireTimers(t0.Add(dur)); err != nil {
				r.out.WriteString("error: " + err.Error() + "\n")
				return false
			}
			continue
		}
		if line == "restart" {
			r.restart(t)
			continue
		}
		ts := t0
		if rest, ok := strings.CutPrefix(line, "@"); ok {
			d, after, _ := strings.Cut(rest, " ")
			dur, err := time.ParseDuration(d)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			ts, line = t0.Add(dur), after
		}
		topic := r.topic
		if rest, ok := strings.CutPrefix(line, "topic:"); ok {
			topic, line, _ = strings.Cut(rest, " ")
		}
		rec := stream.Record{Value: []byte(line), Topic: topic, Offset: r.offset, Timestamp: ts}
		if k, v, ok := strings.Cut(line, "\t"); ok {
			rec.Key, rec.Value = []byte(k), []byte(v)
		}
		r.offset++
		if err := r.send(rec); err != nil {
			r.out.WriteString("error: " + err.Error() + "\n")
			return false
		}
	}
	return true
}

// runner is a job's tasks, one per stage, in memory.
type runner struct {
	j      *stream.Job
	topic  string // the first source topic
	tasks  []stream.Task
	inputs map[int]int // shuffle edge → stage index
	sinks  []string
	out    *strings.Builder
	now    time.Time
	offset int64 // of the next record sent
	// stages are the state of each stage's task (harness_restart_test.go).
	stages []*stageState
}

func newRunner(t *testing.T, j *stream.Job) *runner {
	r := &runner{j: j, inputs: map[int]int{}, out: &strings.Builder{}, now: t0}
	for _, k := range j.Sinks() {
		r.sinks = append(r.sinks, k.Topic)
	}
	if src := j.Sources(); len(src) > 0 && len(src[0].Topics) > 0 {
		r.topic = src[0].Topics[0]
	}
	for i, s := range j.Stages() {
		if s.Input != nil {
			r.inputs[s.Input.Index] = i
		}
		st := newStageState(t, s.Name)
		r.stages = append(r.stages, st)
		r.tasks = append(r.tasks, r.newTask(t, i, st))
	}
	return r
}

// emitter collects one task's shuffled records; sink records go to the
// runner's output.
type emitter struct {
	r        *runner
	shuffled map[int][]stream.Record
}

func (e *emitter) Emit(sink int, rec stream.Record) error {
	if sink < 0 || sink >= len(e.r.sinks) {
		return fmt.Errorf("sink %d of %d", sink, len(e.r.sinks))
	}
	fmt.Fprintf(e.r.out, "%s: ", e.r.sinks[sink])
	if len(rec.Key) > 0 {
		fmt.Fprintf(e.r.out, "%s\t", rec.Key)
	}
	fmt.Fprintf(e.r.out, "%s\n", rec.Value)
	return nil
}

func (e *emitter) Shuffle(edge int, rec stream.Record) error {
	c := stream.Record{Key: bytes.Clone(rec.Key), Value: bytes.Clone(rec.Value), Timestamp: rec.Timestamp, Topic: "shuffle"}
	for _, h := range rec.Headers {
		c.Headers = append(c.Headers, stream.Header{Key: h.Key, Value: bytes.Clone(h.Value)})
	}
	e.shuffled[edge] = append(e.shuffled[edge], c)
	return nil
}

// send runs rec through main and every stage its results reach.
func (r *runner) send(rec stream.Record) error {
	return r.run(0, func(t stream.Task, e *emitter) error { return t.ProcessBatch([]stream.Record{rec}, e) })
}

// watermark advances every stage's watermark to wm, in stage order.
func (r *runner) watermark(wm time.Time) error {
	for i := range r.tasks {
		if err := r.run(i, func(t stream.Task, e *emitter) error { return t.AdvanceWatermark(wm, e) }); err != nil {
			return err
		}
	}
	return nil
}

// run calls f on stage i's task, then feeds what it shuffled to the stages
// that read it.
func (r *runner) run(i int, f func(stream.Task, *emitter) error) error {
	e := &emitter{r: r, shuffled: map[int][]stream.Record{}}
	if err := f(r.tasks[i], e); err != nil {
		return err
	}
	edges := make([]int, 0, len(e.shuffled))
	for edge := range e.shuffled {
		edges = append(edges, edge)
	}
	slices.Sort(edges)
	for _, edge := range edges {
		down, ok := r.inputs[edge]
		if !ok {
			return errors.New("a shuffle no stage reads")
		}
		recs := e.shuffled[edge]
		if err := r.run(down, func(t stream.Task, e *emitter) error { return t.ProcessBatch(recs, e) }); err != nil {
			return err
		}
	}
	return nil
}
