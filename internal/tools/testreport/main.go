// Command testreport reads `go test -json` on standard input and writes a
// readable report: each package's result line as it finishes, the whole
// output of every test that failed, the tests that were skipped, how many
// tests ran against the real Kafka broker and the real S3 server, and a
// closing line "tests: N passed, N failed, N skipped".
//
// A test counts as a real-broker (real-S3) test when it logged the marker
// kafkatest.RealMarker (s3test.RealMarker). With -require-kafka
// (-require-s3) the report fails when no such test passed, so a run that
// silently lost its real-broker tests cannot look green.
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Markers written by internal/kafkatest and internal/s3test. They are copied
// here, not imported, so that this tool builds without the test packages.
const (
	kafkaMarker = "weir-real-kafka:"
	s3Marker    = "weir-real-s3:"
)

type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string
	Elapsed    float64 // seconds, on pass and fail
}

// timed is a top-level test's duration, for the list of the slowest.
type timed struct {
	name    string
	elapsed float64
}

type testState struct {
	output     strings.Builder
	realKafka  bool
	realS3     bool
	markerText string
}

type report struct {
	out                       io.Writer
	tests                     map[string]*testState
	passed, failed, skipped   int
	skippedNames              []string
	failedNames               []string
	kafkaPassed, s3Passed     int
	kafkaFailed, s3Failed     int
	kafkaName, s3Name         string
	pkgOutput                 map[string]*strings.Builder
	failedPackages, buildFail []string
	// durations of the top-level tests, to keep CI's time budget in view
	durations []timed
}

func main() {
	requireKafka := flag.Bool("require-kafka", false, "fail unless at least one real-broker test passed")
	requireS3 := flag.Bool("require-s3", false, "fail unless at least one real-S3 test passed")
	flag.Parse()

	r := &report{out: os.Stdout, tests: map[string]*testState{}, pkgOutput: map[string]*strings.Builder{}}
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (for example a line from a build step): pass it on.
			fmt.Fprintln(r.out, string(line))
			continue
		}
		r.add(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport: read:", err)
		os.Exit(2)
	}
	if !r.finish(*requireKafka, *requireS3) {
		os.Exit(1)
	}
}

func (r *report) add(e event) {
	switch {
	case e.Action == "build-output":
		fmt.Fprint(r.out, e.Output)
		return
	case e.Action == "build-fail":
		r.buildFail = append(r.buildFail, e.ImportPath)
		return
	case e.Test == "":
		r.addPackage(e)
		return
	}
	key := e.Package + " " + e.Test
	st := r.tests[key]
	if st == nil {
		st = &testState{}
		r.tests[key] = st
	}
	switch e.Action {
	case "output":
		st.output.WriteString(e.Output)
		if i := strings.Index(e.Output, kafkaMarker); i >= 0 {
			st.realKafka = true
			st.markerText = strings.TrimSpace(e.Output[i+len(kafkaMarker):])
		}
		if i := strings.Index(e.Output, s3Marker); i >= 0 {
			st.realS3 = true
			st.markerText = strings.TrimSpace(e.Output[i+len(s3Marker):])
		}
	case "pass":
		r.timed(e)
		r.passed++
		if st.realKafka {
			r.kafkaPassed++
			r.kafkaName = nameOf(st.markerText)
		}
		if st.realS3 {
			r.s3Passed++
			r.s3Name = nameOf(st.markerText)
		}
		delete(r.tests, key)
	case "skip":
		r.skipped++
		r.skippedNames = append(r.skippedNames, e.Package+" "+e.Test+": "+skipReason(st.output.String()))
		delete(r.tests, key)
	case "fail":
		r.timed(e)
		r.failed++
		if st.realKafka {
			r.kafkaFailed++
		}
		if st.realS3 {
			r.s3Failed++
		}
		r.failedNames = append(r.failedNames, e.Package+" "+e.Test)
		fmt.Fprintf(r.out, "\n--- FAIL: %s (%s)\n%s\n", e.Test, e.Package, st.output.String())
		delete(r.tests, key)
	}
}

func (r *report) addPackage(e event) {
	b := r.pkgOutput[e.Package]
	if b == nil {
		b = &strings.Builder{}
		r.pkgOutput[e.Package] = b
	}
	switch e.Action {
	case "output":
		b.WriteString(e.Output)
		// The package's closing line ("ok  pkg 1.2s", "FAIL pkg", "?  pkg [no test files]").
		if strings.HasPrefix(e.Output, "ok ") || strings.HasPrefix(e.Output, "FAIL") || strings.HasPrefix(e.Output, "?") {
			fmt.Fprint(r.out, e.Output)
		}
	case "fail":
		r.failedPackages = append(r.failedPackages, e.Package)
		// A panic, a timeout or a failure outside any test shows only here.
		fmt.Fprintf(r.out, "\n--- package %s failed; its output:\n%s\n", e.Package, b.String())
	}
}

func (r *report) finish(requireKafka, requireS3 bool) bool {
	ok := r.failed == 0 && len(r.failedPackages) == 0 && len(r.buildFail) == 0
	// Tests still open at the end were cut short (a panic or a timeout).
	var open []string
	for k := range r.tests {
		open = append(open, k)
	}
	slices.Sort(open)
	for _, k := range open {
		fmt.Fprintf(r.out, "\n--- UNFINISHED: %s\n%s\n", k, r.tests[k].output.String())
		ok = false
	}

	fmt.Fprintln(r.out)
	if len(r.skippedNames) > 0 {
		fmt.Fprintf(r.out, "skipped tests (%d):\n", len(r.skippedNames))
		for _, n := range r.skippedNames {
			fmt.Fprintf(r.out, "  %s\n", n)
		}
	}
	if len(r.failedNames) > 0 {
		fmt.Fprintf(r.out, "failed tests (%d):\n", len(r.failedNames))
		for _, n := range r.failedNames {
			fmt.Fprintf(r.out, "  %s\n", n)
		}
	}
	for _, p := range r.buildFail {
		fmt.Fprintf(r.out, "build failed: %s\n", p)
	}
	fmt.Fprintf(r.out, "real Kafka broker: %s: %d tests passed, %d failed\n", orNone(r.kafkaName), r.kafkaPassed, r.kafkaFailed)
	fmt.Fprintf(r.out, "real S3 server: %s: %d tests passed, %d failed\n", orNone(r.s3Name), r.s3Passed, r.s3Failed)
	if requireKafka && r.kafkaPassed == 0 {
		fmt.Fprintln(r.out, "testreport: -require-kafka: no test passed against the real Kafka broker")
		ok = false
	}
	if requireS3 && r.s3Passed == 0 {
		fmt.Fprintln(r.out, "testreport: -require-s3: no test passed against the real S3 server")
		ok = false
	}
	slices.SortFunc(r.durations, func(a, b timed) int { return cmp.Compare(b.elapsed, a.elapsed) })
	if n := min(len(r.durations), 12); n > 0 {
		fmt.Fprintf(r.out, "slowest tests (each package's run in parallel with others'):\n")
		for _, d := range r.durations[:n] {
			fmt.Fprintf(r.out, "  %6.1fs %s\n", d.elapsed, d.name)
		}
	}
	fmt.Fprintf(r.out, "tests: %d passed, %d failed, %d skipped\n", r.passed, r.failed, r.skipped)
	return ok
}

// timed records the duration of a top-level test.
func (r *report) timed(e event) {
	if e.Test != "" && !strings.Contains(e.Test, "/") {
		r.durations = append(r.durations, timed{name: e.Package + " " + e.Test, elapsed: e.Elapsed})
	}
}

// nameOf keeps the broker or server description of a marker line, dropping
// the address after " at ".
func nameOf(marker string) string {
	if i := strings.LastIndex(marker, " at "); i > 0 {
		return marker[:i]
	}
	return marker
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// skipReason returns the last non-empty line a skipped test logged.
func skipReason(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !strings.HasPrefix(l, "--- SKIP") && !strings.HasPrefix(l, "=== ") {
			return l
		}
	}
	return "no reason given"
}
