package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// securedCluster is a cluster whose job listener needs TLS and
// SCRAM-SHA-512, with what a job needs to reach it.
type securedCluster struct {
	c        *kafkatest.Cluster // for the test's own clients
	brokers  []string           // the secured listener: the job's only address
	caFile   string
	user     string
	password string
	// hangsUp: the broker closes the connection on a wrong password
	// instead of answering (kfake): a permanent failure only once it did
	// so for kafkaconn's window, with the replica's retries meanwhile.
	hangsUp bool
}

// eachSecured runs fn on a kfake cluster that only has a TLS + SASL
// listener, and on the real broker's SASL_SSL listener.
func eachSecured(t *testing.T, fn func(t *testing.T, s securedCluster)) {
	t.Run("kfake", func(t *testing.T) {
		srv, ca := kafkatest.KfakeTLS(t, false)
		const user, pw = "weir", "kfake-scram-secret-31d7"
		c := kafkatest.NewKfake(t, kfake.TLS(srv), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", user, pw))
		c.Opts = securedOpts(t, ca.CAFile, user, pw)
		fn(t, securedCluster{c: c, brokers: c.Brokers, caFile: ca.CAFile, user: user, password: pw, hangsUp: true})
	})
	t.Run("kafka", func(t *testing.T) {
		s := kafkatest.NewSecure(t)
		c := kafkatest.NewReal(t)
		fn(t, securedCluster{c: c, brokers: s.SASLSSL, caFile: s.CAFile, user: kafkatest.User, password: kafkatest.SCRAMPassword})
	})
}

// securedOpts are franz-go options for the test's own clients.
func securedOpts(t *testing.T, caFile, user, pw string) []kgo.Opt {
	t.Helper()
	return []kgo.Opt{kgo.DialTLSConfig(&tls.Config{RootCAs: kafkatest.CAPool(t, caFile), MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: user, Pass: pw}.AsSha512Mechanism())}
}

// TestSecuredClusterThroughTheBinary runs the built processor against a
// listener that needs TLS and SCRAM-SHA-512: `run` checkpoints and
// commits, `checkpoints list` and `transactions list` reach the cluster
// with the same settings, and the password is in no log line, no /metrics
// sample and no command output. With a wrong password, `run` and
// `checkpoints list` stop at once with one message naming the broker,
// mechanism and user, never the password. A password written in the YAML
// works, and `validate` warns about it at its line.
func TestSecuredClusterThroughTheBinary(t *testing.T) {
	bin := buildProcessor(t)
	eachSecured(t, func(t *testing.T, s securedCluster) {
		clearConfigEnv(t)
		name := kafkatest.Name(t, "sec")
		in, out := name+"-in", name+"-out"
		s.c.CreateTopic(t, in, 2, nil)
		s.c.CreateTopic(t, out, 2, nil)
		prod := s.c.Client(t, kgo.DefaultProduceTopic(in))
		for i := range 200 {
			prod.Produce(context.Background(), &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%7), Value: []byte(`{}`)}, nil)
		}
		if err := prod.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		writeJob := func(file, sasl string) string {
			t.Helper()
			p := filepath.Join(dir, file)
			yaml := fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s]}
    - aggregate: {op: count}
    - sink: {topic: %s}
kafka:
  brokers: [%s]
  session_timeout: 6s
  tls: {enabled: true, ca_file: %s}
  sasl: %s
checkpoint: {interval: 300ms, storage: "file://%s/chk"}
state: {dir: "%s/state"}
log: {level: debug}
`, name, in, out, strings.Join(s.brokers, ", "), s.caFile, sasl, dir, dir)
			if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}
		pwFile := filepath.Join(dir, "password")
		if err := os.WriteFile(pwFile, []byte(s.password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		good := writeJob("good.yaml", fmt.Sprintf("{mechanism: SCRAM-SHA-512, username: %s, password_file: %s}", s.user, pwFile))

		noSecret := func(what, text string) {
			t.Helper()
			if strings.Contains(text, s.password) {
				t.Errorf("%s holds the password:\n%s", what, text)
			}
		}
		command := func(ctx context.Context, args ...string) (string, error) {
			cmd := exec.CommandContext(ctx, bin, args...)
			var buf bytes.Buffer
			cmd.Stdout, cmd.Stderr = &buf, &buf
			err := cmd.Run()
			return buf.String(), err
		}

		// run, with the HTTP endpoints.
		addr := freeAddr(t)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		run := exec.CommandContext(ctx, bin, "run", "-c", good, "--http.address", addr, "--process.replica_id", "a")
		var runLog lockedBuffer
		run.Stdout, run.Stderr = &runLog, &runLog
		if err := run.Start(); err != nil {
			t.Fatal(err)
		}
		runDone := make(chan error, 1)
		go func() { runDone <- run.Wait() }()
		deadline := time.Now().Add(90 * time.Second)
		for metricSum(addr, "weir_checkpoint_last_completed_id") < 3 {
			select {
			case err := <-runDone:
				t.Fatalf("run exited: %v\n%s", err, runLog.String())
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("no 3 checkpoints completed over the secured listener in 90s:\n%s", runLog.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		metrics, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		noSecret("/metrics", string(metrics))
		committed := len(s.c.ReadCommitted(ctx, t, out))
		if committed == 0 {
			t.Error("no committed output")
		}

		for _, args := range [][]string{{"checkpoints", "list", "-c", good}, {"transactions", "list", "-c", good}} {
			outText, err := command(ctx, args...)
			if err != nil {
				t.Errorf("processor %s over the secured listener: %v\n%s", strings.Join(args[:2], " "), err, outText)
			}
			noSecret("processor "+strings.Join(args[:2], " "), outText)
			if args[0] == "checkpoints" && !strings.Contains(outText, "checkpoint") {
				t.Errorf("checkpoints list printed no checkpoint:\n%s", outText)
			}
		}
		_ = run.Process.Signal(syscall.SIGTERM)
		if err := <-runDone; err != nil {
			t.Errorf("run over the secured listener: %v\n%s", err, runLog.String())
		}
		if !strings.Contains(runLog.String(), "kafka_security=\"SASL_SSL (SCRAM-SHA-512, user "+s.user+")\"") {
			t.Errorf("the start log does not say how the replica connects:\n%.3000s", runLog.String())
		}
		noSecret("run's log", runLog.String())

		// A wrong password: one clear message, at once, for run and the CLI.
		const wrong = "wrong-password-e51f0c"
		badPw := filepath.Join(dir, "bad-password")
		if err := os.WriteFile(badPw, []byte(wrong), 0o600); err != nil {
			t.Fatal(err)
		}
		bad := writeJob("bad.yaml", fmt.Sprintf("{mechanism: SCRAM-SHA-512, username: %s, password_file: %s}", s.user, badPw))
		wantMsg := fmt.Sprintf(`authentication with broker %s failed (mechanism SCRAM-SHA-512, user %q)`, s.brokers[0], s.user)
		if s.hangsUp {
			wantMsg = fmt.Sprintf(`cannot talk to broker %s (mechanism SCRAM-SHA-512, user %q): it closed `, s.brokers[0], s.user)
		}
		for _, args := range [][]string{{"run", "-c", bad, "--http.address", ""}, {"checkpoints", "list", "-c", bad}} {
			start := time.Now()
			outText, err := command(ctx, args...)
			took := time.Since(start)
			var ee *exec.ExitError
			if err == nil || !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Errorf("processor %s with a wrong password: %v, want exit status 1\n%s", args[0], err, outText)
			}
			if !strings.Contains(outText, "error: kafka: "+wantMsg) {
				t.Errorf("processor %s with a wrong password does not say %q:\n%s", args[0], wantMsg, outText)
			}
			if strings.Contains(outText, wrong) {
				t.Errorf("processor %s repeats the wrong password:\n%s", args[0], outText)
			}
			if !s.hangsUp && strings.Contains(outText, "level=WARN msg=retrying") {
				t.Errorf("processor %s retried an authentication failure:\n%s", args[0], outText)
			}
			if took > 30*time.Second {
				t.Errorf("processor %s took %v to give up on a wrong password", args[0], took)
			}
			t.Logf("processor %s with a wrong password: exit 1 after %v", args[0], took.Round(time.Millisecond))
		}

		// A password in the YAML: it works, and validate warns at its line.
		inline := writeJob("inline.yaml", fmt.Sprintf("{mechanism: SCRAM-SHA-512, username: %s, password: %s}", s.user, s.password))
		outText, err := command(ctx, "validate", "-c", inline)
		if err != nil {
			t.Fatalf("validate: %v\n%s", err, outText)
		}
		if !strings.Contains(outText, "warning: "+inline+":11:") || !strings.Contains(outText, "kafka.sasl.password: a secret written in the configuration") {
			t.Errorf("validate does not warn about the password in the YAML at its line:\n%s", outText)
		}
		noSecret("validate", outText)
		outText, err = command(ctx, "checkpoints", "list", "-c", inline)
		if err != nil {
			t.Errorf("checkpoints list with the password in the YAML: %v\n%s", err, outText)
		}
		noSecret("checkpoints list with the password in the YAML", outText)
	})
}
