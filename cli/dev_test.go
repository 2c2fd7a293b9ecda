package cli

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/internal/e2etest"
)

// buildProcessor builds the stock binary, cmd/processor.
func buildProcessor(t *testing.T) string {
	t.Helper()
	bin, err := e2etest.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

var (
	devOutputLine = regexp.MustCompile(`^\d\d:\d\d:\d\d  \{"key":"user-\d+","count":\d+\}$`)
	devStopped    = regexp.MustCompile(`weir dev: stopped\. Last completed checkpoint: (\d+); clicks-per-user holds (\d+) committed records`)
	// The views-per-page example's, with the page and the count.
	devViewsLine    = regexp.MustCompile(`^\d\d:\d\d:\d\d  \{"key":"(/[a-z]*)","count":(\d+)\}$`)
	devViewsStopped = regexp.MustCompile(`weir dev: stopped\. Last completed checkpoint: (\d+); views-per-page holds (\d+) committed records`)
)

// runDevUntilOutput starts `processor dev` with args, waits for n committed
// output records (lines that match line) and for checkpoint minCheckpoint
// to be complete (its /metrics), sends SIGINT and returns its output once
// it exited 0.
func runDevUntilOutput(t *testing.T, bin, dir string, line *regexp.Regexp, n int, minCheckpoint float64, args ...string) string {
	t.Helper()
	addr := freeAddr(t)
	cmd := exec.Command(bin, append([]string{"dev", "--dir", dir, "--http", addr, "--rate", "100"}, args...)...)
	cmd.Env = append(os.Environ(), "WEIR_LOG_LEVEL=warn")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu  sync.Mutex
		all bytes.Buffer
	)
	enough := make(chan struct{})
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(stdout)
		seen := 0
		for sc.Scan() {
			mu.Lock()
			all.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if line.MatchString(sc.Text()) {
				if seen++; seen == n {
					close(enough)
				}
			}
		}
	}()
	timeout := time.After(60 * time.Second)
	fail := func(what string) {
		_ = cmd.Process.Kill()
		<-eof
		_ = cmd.Wait() // stderr's copying goroutine is done: stderr can be read
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%s in 60s; stdout:\n%s\nstderr:\n%s", what, all.String(), stderr.String())
	}
	select {
	case <-enough:
	case <-timeout:
		fail(fmt.Sprintf("no %d output records", n))
	}
	// Output printed at once may be what an earlier run's checkpoint left
	// for this one's recovery to commit: wait for this run's own.
	for metricSum(addr, "weir_checkpoint_last_completed_id") < minCheckpoint {
		select {
		case <-timeout:
			fail(fmt.Sprintf("checkpoint %.0f not complete", minCheckpoint))
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	<-eof
	err = cmd.Wait()
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		t.Fatalf("processor dev after SIGINT: %v (want exit 0); stdout:\n%s\nstderr:\n%s", err, all.String(), stderr.String())
	}
	return all.String()
}

// TestDevSaysWhatIsCommittedOnCtrlC runs `processor dev` (what `make run`
// runs) as a user would, stops it with SIGINT once committed output was
// printed, and checks that it exits 0 saying the last completed checkpoint,
// how many output records are committed (at least as many as it printed)
// and how to resume, with the command it was started as; then runs it
// again, which resumes from there: its next stop names a later checkpoint.
// While it runs, its banner says how other commands reach its Kafka.
func TestDevSaysWhatIsCommittedOnCtrlC(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildProcessor(t)
	dir := filepath.Join(t.TempDir(), "dev")

	check := func(out string) (checkpoint, committed int) {
		t.Helper()
		m := devStopped.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no 'stopped. Last completed checkpoint' line after SIGINT:\n%s", out)
		}
		resume := "run `" + bin + " dev --dir " + dir + "` again to resume from checkpoint " + m[1]
		if !bytes.Contains([]byte(out), []byte(resume)) {
			t.Fatalf("no %q after SIGINT:\n%s", resume, out)
		}
		checkpoint, _ = strconv.Atoi(m[1])
		committed, _ = strconv.Atoi(m[2])
		printed := 0
		for _, line := range regexp.MustCompile("\n").Split(out, -1) {
			if devOutputLine.MatchString(line) {
				printed++
			}
		}
		if checkpoint < 1 || committed < printed {
			t.Fatalf("checkpoint %d, %d committed records, %d printed:\n%s", checkpoint, committed, printed, out)
		}
		return checkpoint, committed
	}
	out1 := runDevUntilOutput(t, bin, dir, devOutputLine, 10, 1)
	if !regexp.MustCompile("weir dev: while dev runs, other commands reach its Kafka with --kafka.brokers 127.0.0.1:\\d+: `" +
		regexp.QuoteMeta(bin) + " resume -c examples/clicks-per-user.yaml --kafka.brokers 127.0.0.1:\\d+` after the job failed").MatchString(out1) {
		t.Errorf("the banner does not say how to reach dev's Kafka:\n%s", out1)
	}
	first, committed1 := check(out1)
	second, committed2 := check(runDevUntilOutput(t, bin, dir, devOutputLine, 10, float64(first+1)))
	if second <= first || committed2 <= committed1 {
		t.Fatalf("second run: checkpoint %d (first %d), %d committed records (first %d): did not resume", second, first, committed2, committed1)
	}
	t.Logf("first run: checkpoint %d, %d records; second: checkpoint %d, %d records", first, committed1, second, committed2)
}

// TestDevViewsPerPage runs `processor dev --example views-per-page`, the
// two-stage example (key_by page), until committed output was printed and
// a checkpoint completed, and stops it with SIGINT: each page's printed
// counts are 1, 2, 3, … in order (the output of one run, exactly once),
// and the stop line names the example's output topic and how to resume it.
func TestDevViewsPerPage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildProcessor(t)
	dir := filepath.Join(t.TempDir(), "dev")
	out := runDevUntilOutput(t, bin, dir, devViewsLine, 30, 2, "--example", "views-per-page")
	if !strings.Contains(out, "weir dev: job views-per-page: clicks (keyed by user) → key_by page") {
		t.Errorf("no banner of the views-per-page job:\n%s", out)
	}
	m := devViewsStopped.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no 'stopped. Last completed checkpoint' line naming views-per-page:\n%s", out)
	}
	if resume := "run `" + bin + " dev --dir " + dir + " --example views-per-page` again to resume from checkpoint " + m[1]; !strings.Contains(out, resume) {
		t.Errorf("no %q:\n%s", resume, out)
	}
	last := map[string]int{}
	printed := 0
	for _, l := range strings.Split(out, "\n") {
		v := devViewsLine.FindStringSubmatch(l)
		if v == nil {
			continue
		}
		printed++
		n, _ := strconv.Atoi(v[2])
		if n != last[v[1]]+1 {
			t.Errorf("page %s: count %d after %d", v[1], n, last[v[1]])
		}
		last[v[1]] = n
	}
	if committed, _ := strconv.Atoi(m[2]); len(last) < 2 || committed < printed {
		t.Fatalf("%d pages, %d printed, %s committed:\n%s", len(last), printed, m[2], out)
	}
	t.Logf("counts per page: %v", last)
}

// TestDevExamplesAreTheExampleFiles: the jobs dev runs are those of
// examples/<name>.yaml, and an unknown --example is refused with the
// names of the known ones.
func TestDevExamplesAreTheExampleFiles(t *testing.T) {
	clearConfigEnv(t)
	for _, ex := range devExamples() {
		file, err := config.Load(config.Source{File: "../examples/" + ex.name + ".yaml"})
		if err != nil {
			t.Fatal(err)
		}
		dev, err := config.Load(config.Source{YAML: []byte(ex.pipeline + "kafka: {brokers: [a:1]}\n")})
		if err != nil {
			t.Fatalf("%s: %v", ex.name, err)
		}
		if !reflect.DeepEqual(withoutPositions(file.Job), withoutPositions(dev.Job)) {
			t.Errorf("%s: dev runs %+v, examples/%s.yaml is %+v", ex.name, dev.Job, ex.name, file.Job)
		}
		if last := dev.Job.Pipeline[len(dev.Job.Pipeline)-1].Sink; last == nil || last.Topic != ex.output {
			t.Errorf("%s: output %s, the sink writes %+v", ex.name, ex.output, last)
		}
	}
	var out bytes.Buffer
	root := newRootCmd(&out, nil)
	root.SetArgs([]string{"dev", "--example", "nope"})
	if err := root.Execute(); err == nil || err.Error() != "--example nope: no such example (there are clicks-per-user, views-per-page, views-per-page-per-minute)" {
		t.Fatalf("unknown example: %v", err)
	}
}

// TestDevJobFile runs `processor dev --job FILE --input FILE` on a job with
// a filter, a map with a key and a running aggregate (two stages), and
// checks the committed output it prints: each expected record once, with
// its topic and key, and nothing else.
func TestDevJobFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildProcessor(t)
	dir := t.TempDir()
	job := filepath.Join(dir, "orders.yaml")
	input := filepath.Join(dir, "orders.txt")
	if err := os.WriteFile(job, []byte(`
job:
  name: orders
  pipeline:
    - source: {topics: [orders]}
    - filter: {where: "value.amount > 0"}
    - map:
        key: value.customer
        value: {customer: value.customer, amount: value.amount}
    - aggregate: {op: sum, field: amount}
    - sink: {topic: totals}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// One input partition (--partitions 1): the records reach the
	// aggregate in input order, so ann's running sums are 10, then 15.
	if err := os.WriteFile(input, []byte("o1\t{\"customer\":\"ann\",\"amount\":10}\n{\"customer\":\"bob\",\"amount\":-1}\n{\"customer\":\"bob\",\"amount\":2.5}\n{\"customer\":\"ann\",\"amount\":5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^\d\d:\d\d:\d\d  totals  (\w+)  (\{.*\})$`)
	out := runDevUntilOutput(t, bin, filepath.Join(dir, "dev"), line, 3, 1, "--job", job, "--input", input, "--partitions", "1")
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if m := line.FindStringSubmatch(l); m != nil {
			got = append(got, m[1]+" "+m[2])
		}
	}
	want := []string{`ann {"key":"ann","sum":10}`, `bob {"key":"bob","sum":2.5}`, `ann {"key":"ann","sum":15}`}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("output %q, want %q; stdout:\n%s", got, want, out)
	}
}

// withoutPositions returns job without the positions of its aggregates
// (where in which file they were written).
func withoutPositions(job config.Job) config.Job {
	for i, s := range job.Pipeline {
		if s.Aggregate == nil {
			continue
		}
		a := *s.Aggregate
		a.Aggs = slices.Clone(a.Aggs)
		for k := range a.Aggs {
			a.Aggs[k].File, a.Aggs[k].Line, a.Aggs[k].Column = "", 0, 0
			if e := a.Aggs[k].Arg; e != nil {
				a.Aggs[k].Arg = &config.Expr{Src: e.Src}
			}
		}
		job.Pipeline = slices.Clone(job.Pipeline)
		job.Pipeline[i].Aggregate = &a
	}
	return job
}

// TestDevGenerateJobInput runs a job file on records made by --generate
// and --generate-key through the binary: the samples have the job's
// fields, keyed as the key expression says, and the job's committed output
// follows from them (sample n: customer c<n%2>, amount n*10; the filter
// drops sample 0).
func TestDevGenerateJobInput(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildProcessor(t)
	dir := t.TempDir()
	job := filepath.Join(dir, "orders.yaml")
	if err := os.WriteFile(job, []byte(`
job:
  name: orders
  pipeline:
    - source: {topics: [orders]}
    - filter: {where: "value.amount > 0"}
    - aggregate: {count: true, total: {sum: value.amount}}
    - sink: {topic: totals}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`^\d\d:\d\d:\d\d  totals  (c[01])  (\{.*\})$`)
	out := runDevUntilOutput(t, bin, filepath.Join(dir, "dev"), line, 4, 1, "--job", job, "--partitions", "1", "--rate", "20",
		"--generate", `{"customer": "c" + string(offset % 2), "amount": offset * 10}`, "--generate-key", "value.customer")
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if m := line.FindStringSubmatch(l); m != nil && len(got) < 4 {
			got = append(got, m[1]+" "+m[2])
		}
	}
	// Samples 1, 2, 3, 4: c1 10, c0 20, c1 30, c0 40.
	want := []string{`c1 {"key":"c1","count":1,"total":10}`, `c0 {"key":"c0","count":1,"total":20}`,
		`c1 {"key":"c1","count":2,"total":40}`, `c0 {"key":"c0","count":2,"total":60}`}
	if !slices.Equal(got, want) {
		t.Fatalf("first outputs %q, want %q; stdout:\n%s", got, want, out)
	}
}

// TestDevGenerateErrors: a bad expression is an error before anything
// starts, with the expression's own message; an expression that fails on
// the first sample too.
func TestDevGenerateErrors(t *testing.T) {
	for _, tc := range []struct{ value, key, want string }{
		{`{"a": `, "", `--generate "{\"a\": "`},
		{`{"a": 1 / (offset - offset)}`, "", "--generate, sample 0: "},
		{`{"a": 1}`, `value.a +`, `--generate-key "value.a +"`},
	} {
		_, err := newDevGenerator(tc.value, tc.key)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("newDevGenerator(%q, %q) = %v, want an error containing %q", tc.value, tc.key, err, tc.want)
		}
	}
	g, err := newDevGenerator(`{"id": "o-" + string(offset), "n": offset, "c": ["DE", "FR"][offset % 2]}`, `value.id`)
	if err != nil {
		t.Fatal(err)
	}
	r, err := g.record(7, time.UnixMilli(1000))
	if err != nil || string(r.Key) != "o-7" || string(r.Value) != `{"c":"FR","id":"o-7","n":7}` {
		t.Fatalf("sample 7: %+v, %v", r, err)
	}
}

// TestDevFormats runs `processor dev --format avro` and `--format
// protobuf` with a schema registry (the real one of scripts/registry.sh,
// which WEIR_REQUIRE_REGISTRY=1 requires, else franz-go's fake) until
// committed counts were printed: the sample clicks are written in the
// format, under a schema registered as weir-dev-clicks-<format>, and the example reads
// them. Without --registry, dev says what to start.
func TestDevFormats(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	var out bytes.Buffer
	root := newRootCmd(&out, nil)
	root.SetErr(&out)
	root.SetArgs([]string{"dev", "--format", "avro", "--dir", t.TempDir()})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "scripts/registry.sh up") || !strings.Contains(err.Error(), "--registry http://127.0.0.1:19120/apis/ccompat/v7") {
		t.Errorf("--format avro without --registry: %v, want it to say what to start", err)
	}
	url := testRegistry(t)
	bin := buildProcessor(t)
	for _, f := range []string{"avro", "protobuf"} {
		t.Run(f, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "dev")
			out := runDevUntilOutput(t, bin, dir, devOutputLine, 10, 1, "--format", f, "--registry", url)
			if !strings.Contains(out, "clicks ("+f+") → count per user") {
				t.Errorf("the banner does not say the clicks are %s:\n%s", f, out)
			}
			if !regexp.MustCompile(`weir dev: the clicks were ` + f + `, schema \d+ \(subject weir-dev-clicks-` + f + `\) at ` + regexp.QuoteMeta(url)).MatchString(out) {
				t.Errorf("no line naming the clicks' schema:\n%s", out)
			}
		})
	}
}
