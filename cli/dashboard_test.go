package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// dashboardPanel is one panel of the Grafana dashboard, as the tests read it.
type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// dashboardPanels reads the panels of the Grafana dashboard the chart ships.
func dashboardPanels(t *testing.T) []dashboardPanel {
	t.Helper()
	raw, err := os.ReadFile("../deploy/grafana/weir-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	return dash.Panels
}

// dashboardMetrics returns every metric name the Grafana dashboard's
// queries use, with the titles of the panels that use it; but not those of
// a query that falls back to 0 (`or vector(0)`): such a panel shows 0
// until the metric's first series (a counter labelled by what failed).
func dashboardMetrics(t *testing.T) map[string][]string {
	t.Helper()
	re := regexp.MustCompile(`\bweir_[a-z0-9_]+`)
	out := map[string][]string{}
	for _, p := range dashboardPanels(t) {
		for _, tg := range p.Targets {
			if strings.HasSuffix(tg.Expr, " or vector(0)") {
				continue
			}
			for _, m := range re.FindAllString(tg.Expr, -1) {
				out[m] = append(out[m], p.Title)
			}
		}
	}
	return out
}

// TestDashboardMetricsPresentAtStart starts a replica of the count job and
// scrapes its /metrics as Prometheus would, as soon as it is ready and
// normally before any checkpoint (the interval is 3m): every weir_ metric the
// dashboard's queries use must already have a series, so that no panel is
// empty until something first happens (a retry, a failed checkpoint, a
// decode error).
func TestDashboardMetricsPresentAtStart(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		job := kafkatest.Name(t, "da")
		cfg, _ := countJobOn(t, c, job, job+"-in", job+"-out")
		// Counted per page after a shuffle, so that the shuffle panels'
		// metrics are there too.
		p := cfg.Job.Pipeline
		cfg.Job.Pipeline = append([]config.Step{p[0], {KeyBy: &config.KeyByStep{Field: "page"}}}, p[1:]...)
		cfg.HTTP.Address = freeAddr(t)
		// Checkpoints rarely (the first comes at a random point of the first
		// interval), within the sink's transaction timeout rule.
		cfg.Checkpoint.Interval, cfg.Checkpoint.Timeout = 3*time.Minute, time.Minute
		cfg.Job.Pipeline[len(cfg.Job.Pipeline)-1].Sink.TransactionTimeout = 10 * time.Minute
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		logs := &lockedBuffer{}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("replica log:\n%s", logs.String())
			}
		})
		done := make(chan error, 1)
		go func() { done <- serve(ctx, cfg, nil, logs, nil) }()

		base := "http://" + cfg.HTTP.Address
		for deadline := time.Now().Add(45 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			select {
			case err := <-done:
				t.Fatalf("replica stopped: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("not ready within 45s")
			}
			if resp, err := http.Get(base + "/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
		}
		code, body := httpGet(t, base+"/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		scraped := map[string]bool{}
		for _, line := range strings.Split(body, "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name, _, _ := strings.Cut(line, " ")
			name, _, _ = strings.Cut(name, "{")
			scraped[name] = true
		}
		var missing []string
		queried := dashboardMetrics(t)
		for name, panels := range queried {
			if !scraped[name] {
				missing = append(missing, name+" (panel "+strings.Join(panels, ", ")+")")
			}
		}
		sort.Strings(missing)
		if len(missing) > 0 {
			t.Errorf("dashboard metrics with no series on a freshly started replica:\n  %s", strings.Join(missing, "\n  "))
		}
		if len(queried) < 20 {
			t.Errorf("the dashboard queries only %d weir_ metrics; expected the full dashboard", len(queried))
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("replica: %v", err)
		}
	})
}
