package cli

import (
	"context"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/checkpoint/ckpt"
)

// recordingRegisterer registers with a registry and remembers every
// collector, so that metric vectors without samples are seen too.
type recordingRegisterer struct {
	*prometheus.Registry
	mu   sync.Mutex
	cols []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	err := r.Registry.Register(c)
	if err == nil {
		r.mu.Lock()
		r.cols = append(r.cols, c)
		r.mu.Unlock()
	}
	return err
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var fqNameRe = regexp.MustCompile(`fqName: "([^"]+)"`)

// names returns the names of every metric the collectors describe.
func (r *recordingRegisterer) names() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range r.cols {
			c.Describe(ch)
		}
		close(ch)
	}()
	out := map[string]bool{}
	for d := range ch {
		if m := fqNameRe.FindStringSubmatch(d.String()); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// TestMetricsDocumentedAndOnTheDashboard runs a replica of the count job on
// kfake until checkpoints complete and compares every weir_ metric it
// registered with docs/metrics.md, both ways, and checks that every metric
// the Grafana dashboard queries exists.
func TestMetricsDocumentedAndOnTheDashboard(t *testing.T) {
	cfg, _, _ := countJob(t, "metrics")
	reg := &recordingRegisterer{Registry: prometheus.NewRegistry()}
	var registered map[string]bool
	runUntilCheckpoints(t, 2, func(ctx context.Context, logOut io.Writer, onCommitted func(ckpt.ID)) error {
		return serveWith(ctx, cfg, nil, logOut, onCommitted, reg.Registry, reg, nil)
	}, func() { registered = reg.names() })

	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "| `weir_") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range regexp.MustCompile("`(weir_[a-z0-9_]+)`").FindAllStringSubmatch(first, -1) {
			documented[m[1]] = true
		}
	}
	var undocumented, missing []string
	for n := range registered {
		if strings.HasPrefix(n, "weir_") && !documented[n] {
			undocumented = append(undocumented, n)
		}
	}
	for n := range documented {
		if !registered[n] {
			missing = append(missing, n)
		}
	}
	sort.Strings(undocumented)
	sort.Strings(missing)
	if len(undocumented) > 0 {
		t.Errorf("registered but not in docs/metrics.md: %v", undocumented)
	}
	if len(missing) > 0 {
		t.Errorf("in docs/metrics.md but never registered: %v", missing)
	}

	metricRe := regexp.MustCompile(`\b((?:weir|go|process)_[a-z0-9_]+)\s*\{`)
	queried := 0
	for _, p := range dashboardPanels(t) {
		for _, tg := range p.Targets {
			ms := metricRe.FindAllStringSubmatch(tg.Expr, -1)
			if len(ms) == 0 {
				t.Errorf("panel %q: query %q names no metric", p.Title, tg.Expr)
			}
			for _, m := range ms {
				name := m[1]
				base := name
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(name, suf); ok && registered[b] {
						base = b
					}
				}
				if !registered[base] {
					t.Errorf("panel %q queries %s, which the replica does not have", p.Title, name)
				}
				queried++
			}
		}
	}
	if queried < 30 {
		t.Errorf("the dashboard queries %d metrics; expected the full dashboard", queried)
	}
}
