package cli

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weir-stream/weir/checkpoint/ckpt"
	"github.com/weir-stream/weir/internal/kafkatest"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestLivezFailsWhenTheLoopIsStuck runs a replica of the count job with its
// HTTP endpoints: /livez answers 200 while it runs (for longer than
// process.liveness_timeout, with checkpoints completing and while idle),
// and 503 once its main loop is stuck — the hook that the loop calls for
// every completed checkpoint blocks — for longer than the timeout; it
// answers 200 again once the loop goes on.
func TestLivezFailsWhenTheLoopIsStuck(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		job := kafkatest.Name(t, "li")
		cfg, _ := countJobOn(t, c, job, job+"-in", job+"-out")
		cfg.HTTP.Address = freeAddr(t)
		cfg.Process.LivenessTimeout = 5 * time.Second
		livez := "http://" + cfg.HTTP.Address + "/livez"

		var stall atomic.Bool
		stalled := make(chan struct{}, 1)
		release := make(chan struct{})
		completed := make(chan ckpt.ID, 1000)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		logs := &lockedBuffer{}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("replica log:\n%s", logs.String())
			}
		})
		done := make(chan error, 1)
		go func() {
			done <- serve(ctx, cfg, nil, logs, func(id ckpt.ID) {
				completed <- id
				if stall.Load() {
					stalled <- struct{}{}
					<-release // the replica's Run loop is stuck here
				}
			})
		}()

		select {
		case <-completed:
		case err := <-done:
			t.Fatalf("replica stopped: %v", err)
		case <-time.After(45 * time.Second):
			t.Fatal("no checkpoint completed within 45s")
		}
		// Healthy for longer than the timeout.
		for end := time.Now().Add(cfg.Process.LivenessTimeout + 2*time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			if code, body := httpGet(t, livez); code != http.StatusOK {
				t.Fatalf("healthy replica: /livez %d %q", code, body)
			}
		}

		stall.Store(true)
		select {
		case <-stalled:
		case <-time.After(30 * time.Second):
			t.Fatal("no checkpoint completed to stall on")
		}
		began := time.Now()
		var code int
		var body string
		for code = http.StatusOK; code == http.StatusOK && time.Since(began) < 3*cfg.Process.LivenessTimeout; time.Sleep(200 * time.Millisecond) {
			code, body = httpGet(t, livez)
		}
		took := time.Since(began)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "process.liveness_timeout") {
			t.Fatalf("stuck replica: /livez %d %q after %v", code, body, took)
		}
		if took < cfg.Process.LivenessTimeout-time.Second {
			t.Fatalf("/livez failed after %v, before the timeout %v", took, cfg.Process.LivenessTimeout)
		}
		t.Logf("stuck loop: /livez 503 after %v: %s", took.Round(100*time.Millisecond), strings.TrimSpace(body))

		stall.Store(false)
		close(release)
		deadline := time.Now().Add(10 * time.Second)
		for code, body = httpGet(t, livez); code != http.StatusOK; code, body = httpGet(t, livez) {
			if time.Now().After(deadline) {
				t.Fatalf("unstuck replica: /livez %d %q", code, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("replica: %v", err)
		}
	})
}
