package kafkatest_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// TestRealRequiredFailsNotSkips runs a child test against an address where no
// broker listens: with WEIR_REQUIRE_REAL_KAFKA=1 it must fail, without it it
// must skip.
func TestRealRequiredFailsNotSkips(t *testing.T) {
	if os.Getenv("KAFKATEST_CHILD") == "1" {
		kafkatest.NewReal(t)
		return
	}
	for _, tc := range []struct {
		require  string
		wantFail bool
		wantText string
	}{
		{require: "1", wantFail: true, wantText: "unreachable"},
		{require: "", wantFail: false, wantText: "--- SKIP"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRealRequiredFailsNotSkips$", "-test.v")
		cmd.Env = append(os.Environ(),
			"KAFKATEST_CHILD=1",
			kafkatest.EnvBrokers+"=127.0.0.1:1",
			kafkatest.EnvRequireReal+"="+tc.require,
		)
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != tc.wantFail {
			t.Fatalf("require=%q: child failed=%v, want %v; output:\n%s", tc.require, failed, tc.wantFail, out)
		}
		if !strings.Contains(string(out), tc.wantText) {
			t.Fatalf("require=%q: child output lacks %q:\n%s", tc.require, tc.wantText, out)
		}
	}
}
