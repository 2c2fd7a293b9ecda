package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/state"
	"github.com/weir-stream/weir/stream"
)

// countPerKeyJob is a job defined in Go: JSON records from in, counted per
// record key by a keyed Process function with value state, each count
// written to out as {"key": ..., "count": n}.
func countPerKeyJob(name, in, out string) *stream.Job {
	job := stream.NewJob(name)
	recs := stream.From(job, stream.KafkaSource{Topics: []string{in}, Format: stream.FormatJSON}, stream.RawCodec{})
	counts := stream.Process(recs, "count", func() stream.KeyedProcessFunction[[]byte, keyCount] { return &counter{} })
	stream.To(counts, stream.KafkaSink{Topic: out}, stream.JSONCodec[keyCount]{})
	return job
}

type keyCount struct {
	Key   string `json:"key"`
	Count int64  `json:"count"`
}

type counter struct{ n *state.ValueState[int64] }

func (c *counter) Open(oc stream.OpenContext) (err error) {
	c.n, err = state.NewValueState(oc.Backend, oc.StateName("n"), stream.Int64Codec{})
	return err
}

func (c *counter) ProcessElement(ctx *stream.Context[keyCount], _ []byte) error {
	n, _, err := c.n.Get()
	if err != nil {
		return err
	}
	if err := c.n.Put(n + 1); err != nil {
		return err
	}
	return ctx.Emit(keyCount{Key: string(ctx.Key()), Count: n + 1})
}

// runCLI is Run with a Go job, returning its exit status and what it
// printed to stdout and stderr.
func runCLI(ctx context.Context, job *stream.Job, args ...string) (int, string, string) {
	var out, errOut lockedBuffer
	code := Run(ctx, args, job, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestGoJobThroughRun runs a job defined in Go as a Go program's main
// would (cli.Run, as cli.Main calls it), on kfake: validate, then run until
// every record is counted once in the committed output, then stop it with
// its context (exit status 0), then list its checkpoints. The
// configuration names no job: job.name defaults to the Go job's, which
// names its topics and checkpoints.
func TestGoJobThroughRun(t *testing.T) {
	clearConfigEnv(t)
	c := kafkatest.NewKfake(t)
	c.CreateTopic(t, "in", 2, nil)
	c.CreateTopic(t, "out", 2, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "job.yaml")
	yaml := fmt.Sprintf(`kafka: {brokers: [%s]}
checkpoint: {interval: 200ms, storage: "file://%s/chk"}
state: {dir: "%s/state"}
http: {address: ""}
log: {level: warn}
`, strings.Join(c.Brokers, ", "), dir, dir)
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	prod := c.Client(t, kgo.DefaultProduceTopic("in"))
	want := map[string]int{}
	for i := range 100 {
		k := fmt.Sprintf("k%d", i%7)
		want[k]++
		prod.Produce(context.Background(), &kgo.Record{Key: []byte(k), Value: []byte(`{}`)}, nil)
	}
	if err := prod.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	job := countPerKeyJob("go-counts", "in", "out")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if code, out, errOut := runCLI(ctx, job, "validate", "-c", file); code != 0 || !strings.Contains(out, "ok (job go-counts, defined in Go)") {
		t.Fatalf("validate: exit %d\n%s%s", code, out, errOut)
	}

	rctx, stop := context.WithCancel(ctx)
	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := runCLI(rctx, job, "run", "-c", file, "--process.replica_id=a")
		done <- result{code, out, errOut}
	}()
	last := map[string]int{}
	for deadline := time.Now().Add(time.Minute); ; {
		for _, r := range c.ReadCommitted(ctx, t, "out") {
			var v keyCount
			if err := json.Unmarshal(r.Value, &v); err != nil || v.Key != string(r.Key) {
				t.Fatalf("output %q (key %q): want {\"key\": <record key>, \"count\": n}", r.Value, r.Key)
			}
			last[v.Key] = int(v.Count)
		}
		if fmt.Sprint(last) == fmt.Sprint(want) {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("run ended early: exit %d\n%s%s", r.code, r.out, r.errOut)
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed counts %v, want %v", last, want)
		}
		clear(last)
	}
	stop()
	if r := <-done; r.code != 0 {
		t.Fatalf("run stopped with exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	// Every count, each once.
	seen := map[string][]int{}
	for _, r := range c.ReadCommitted(ctx, t, "out") {
		var v keyCount
		_ = json.Unmarshal(r.Value, &v)
		seen[v.Key] = append(seen[v.Key], int(v.Count))
	}
	for k, n := range want {
		if got := seen[k]; len(got) != n || got[n-1] != n {
			t.Errorf("key %s: counts %v, want 1..%d", k, got, n)
		}
	}

	code, out, errOut := runCLI(ctx, job, "checkpoints", "list", "-c", file)
	if code != 0 || !strings.Contains(out, "chk-") {
		t.Fatalf("checkpoints list: exit %d\n%s%s", code, out, errOut)
	}
}

// TestGoJobRefusals: what cannot run a Go job is refused before anything
// starts, with exit status 1 and the reason: a configuration with a
// pipeline or another job's name (by key path, where it was written), a
// job that does not build, and dev, which runs Weir's example job.
func TestGoJobRefusals(t *testing.T) {
	clearConfigEnv(t)
	dir := t.TempDir()
	write := func(name, yaml string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const settings = "kafka: {brokers: [127.0.0.1:1]}\nhttp: {address: \"\"}\n"
	withPipeline := write("pipeline.yaml", `job:
  pipeline:
    - source: {topics: [in]}
    - aggregate: {op: count}
    - sink: {topic: out}
`+settings)
	otherName := write("name.yaml", "job: {name: other}\n"+settings)
	ok := write("ok.yaml", settings)
	job := countPerKeyJob("go-counts", "in", "out")
	noSink := stream.NewJob("no-sink")
	stream.From(noSink, stream.KafkaSource{Topics: []string{"in"}}, stream.RawCodec{})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, c := range []struct {
		job  *stream.Job
		args []string
		want string
	}{
		{job, []string{"validate", "-c", withPipeline}, withPipeline + `:3:5: job.pipeline: must be empty: this program runs the job "go-counts" defined in Go`},
		{job, []string{"run", "-c", withPipeline}, withPipeline + `:3:5: job.pipeline: must be empty`},
		{job, []string{"resume", "-c", withPipeline}, `job.pipeline: must be empty`},
		{job, []string{"run", "-c", otherName}, otherName + `:1:13: job.name: "other", but this program runs the job "go-counts" defined in Go: leave job.name out, or set it to "go-counts"`},
		{job, []string{"checkpoints", "list", "-c", otherName}, `job.name: "other", but this program runs the job "go-counts"`},
		{noSink, []string{"run", "-c", ok}, "error: job no-sink (defined in Go) does not build: stream: invalid job: job no-sink has no sink"},
		{noSink, []string{"validate", "-c", ok}, "job no-sink (defined in Go) does not build"},
		{job, []string{"dev"}, "error: dev runs Weir's example job, not the job go-counts defined in this program: run it with `go-counts run -c FILE`"},
	} {
		code, out, errOut := runCLI(ctx, c.job, c.args...)
		if code != 1 || !strings.Contains(out+errOut, c.want) {
			t.Errorf("%s %v: exit %d, want 1 and %q:\n%s%s", c.job.Name(), c.args, code, c.want, out, errOut)
		}
	}
}

// TestRunWithoutArgsIsHelp: Run with no arguments (nil too) prints the
// commands and does not read the test binary's own arguments; a Go job's
// program does not list dev.
func TestRunWithoutArgsIsHelp(t *testing.T) {
	for _, job := range []*stream.Job{nil, countPerKeyJob("go-counts", "in", "out")} {
		var out, errOut bytes.Buffer
		if code := Run(context.Background(), nil, job, &out, &errOut); code != 0 || !strings.Contains(out.String(), "Available Commands") {
			t.Errorf("exit %d:\n%s%s", code, out.String(), errOut.String())
		}
		// A Go job's program lists no dev, which would refuse to run.
		if lists := regexp.MustCompile(`(?m)^  dev `).MatchString(out.String()); lists != (job == nil) {
			t.Errorf("job %v: help lists dev: %t:\n%s", job, lists, out.String())
		}
	}
}
