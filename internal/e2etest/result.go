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
