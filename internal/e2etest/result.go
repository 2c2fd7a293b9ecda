package e2etest

import (
	"fmt"
	"testing"
	"time"
)

// Result prints a measurement in the house format, `result: <name> =
// <seconds> s`, on standard output (scripts/test-faults.sh collects those
// lines) and in the test's log.
func Result(t testing.TB, name string, d time.Duration) {
	t.Helper()
	line := fmt.Sprintf("result: %s = %.1f s", name, d.Seconds())
	fmt.Println(line)
	t.Log(line)
}

// ResultMS is Result in milliseconds, `result: <name> = <ms> ms`, for
// durations well under a second.
func ResultMS(t testing.TB, name string, d time.Duration) {
	t.Helper()
	line := fmt.Sprintf("result: %s = %d ms", name, d.Milliseconds())
	fmt.Println(line)
	t.Log(line)
}
