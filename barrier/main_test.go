package barrier

import (
	"flag"
	"os"
	"testing"
)

// TestMain runs the property tests with more cases than rapid's default of
// 100, unless -rapid.checks is given: rare interleavings (an abort newer
// than the alignment in progress, then its late barriers) need them.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "rapid.checks" })
	if !set && !testing.Short() {
		if err := flag.Set("rapid.checks", "1000"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
