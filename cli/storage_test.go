package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gocloud.dev/blob/memblob"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// goInternals matches what a log line must never carry: a Go source file
// with its line, a module-cache path, a goroutine trace.
var goInternals = regexp.MustCompile(`\.go:\d+|/pkg/mod/|goroutine \d+ \[`)

// TestStorageWithoutCredentialsStopsAtStart runs the stock binary with
// checkpoint.storage on S3 and no AWS credentials anywhere: no variables, an
// empty home, and an instance-metadata endpoint (a local stand-in for EC2's
// IMDS, which knows no role) that the SDK's chain asks last. `run
// --log.format json` must exit 1 at once with one message that says no
// credentials were found, retry nothing, and write nothing but JSON lines,
// none with Go file paths or stack frames: the SDK's own warning ("falling
// back to IMDSv1") included, through slog. kfake serves the job's topics;
// no S3 server is needed, since no request is signed.
func TestStorageWithoutCredentialsStopsAtStart(t *testing.T) {
	bin := buildProcessor(t)
	var asked atomic.Int64
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		http.NotFound(w, nil) // no token (IMDSv2), no role (IMDSv1)
	}))
	defer imds.Close()

	c := kafkatest.NewKfake(t)
	name := kafkatest.Name(t, "nocreds")
	c.CreateTopic(t, name+"-in", 1, nil)
	c.CreateTopic(t, name+"-out", 1, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "job.yaml")
	yaml := fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s-in], format: json}
    - aggregate: {op: count}
    - sink: {topic: %s-out}
kafka: {brokers: [%s]}
checkpoint: {storage: "s3://weir-no-credentials?endpoint=http://127.0.0.1:9&region=us-east-1&use_path_style=true&disable_https=true"}
state: {dir: %s/state}
http: {address: ""}
`, name, name, name, c.Brokers[0], dir)
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "-c", file, "--log.format", "json")
	// Only what the test chooses: the test's own environment holds the S3
	// server's credentials.
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "AWS_EC2_METADATA_SERVICE_ENDPOINT=" + imds.URL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	var exit *exec.ExitError
	if ctx.Err() != nil || !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("run = %v after %v (ctx %v), want exit status 1 at once; stderr:\n%s", err, took, ctx.Err(), stderr.String())
	}
	if took > 30*time.Second {
		t.Errorf("run took %v to give up", took)
	}
	if asked.Load() == 0 {
		t.Fatal("the SDK never asked the instance-metadata stand-in: the test did not exercise the credential chain")
	}

	var stopped, sdk int
	sc := bufio.NewScanner(bytes.NewReader(append(stdout.Bytes(), stderr.Bytes()...)))
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Errorf("not a JSON log line: %s", line)
			continue
		}
		if goInternals.MatchString(line) {
			t.Errorf("a log line carries Go internals: %s", line)
		}
		if msg, _ := m["msg"].(string); strings.Contains(msg, "retrying") {
			t.Errorf("missing credentials were retried: %s", line)
		}
		if m["component"] == "aws-sdk" {
			sdk++
		}
		if m["level"] == "ERROR" && m["msg"] == "replica stopped" {
			stopped++
			msg, _ := m["err"].(string)
			for _, want := range []string{"checkpoint.storage s3://weir-no-credentials", "no AWS credentials", "AWS_ACCESS_KEY_ID", "retrying cannot help"} {
				if !strings.Contains(msg, want) {
					t.Errorf("the stop message lacks %q: %s", want, msg)
				}
			}
		}
	}
	if stopped != 1 {
		t.Errorf("%d 'replica stopped' lines, want one; output:\n%s%s", stopped, stdout.String(), stderr.String())
	}
	if sdk == 0 {
		t.Errorf("no log line of the AWS SDK (component=aws-sdk) though it fell back to IMDSv1; output:\n%s", stderr.String())
	}
}

// TestLogsCarryErrorMessagesOnly: an error logged by any component is
// written as its message, in text as in JSON. gocloud.dev's errors print
// their stack frames with %+v, which slog's text handler uses.
func TestLogsCarryErrorMessagesOnly(t *testing.T) {
	b := memblob.OpenBucket(nil)
	defer b.Close()
	_, gerr := b.ReadAll(context.Background(), "missing")
	if gerr == nil || !goInternals.MatchString(fmt.Sprintf("%+v", gerr)) {
		t.Fatalf("the gocloud error %+v carries no frames: the test would prove nothing", gerr)
	}
	for _, format := range []string{"text", "json"} {
		var out bytes.Buffer
		log := newLogger(&config.Config{Log: config.Log{Level: "info", Format: format}}, &out)
		log.Warn("read failed", "err", gerr, slog.Group("g", slog.Any("cause", fmt.Errorf("wrapped: %w", gerr))))
		if goInternals.MatchString(out.String()) || !strings.Contains(out.String(), "not found") {
			t.Errorf("%s log: %s", format, out.String())
		}
	}
}
