package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"go.yaml.in/yaml/v3"

	"github.com/weir-stream/weir/internal/kafkatest"
)

// chartAlertRules renders the rule groups of the chart's PrometheusRule
// (deploy/helm/weir/templates/prometheusrule.yaml) for the replicas of
// Prometheus job label job, with the chart's default values, as Helm
// renders them (make helm-check checks Helm's rendering with promtool).
func chartAlertRules(t *testing.T, job string) string {
	t.Helper()
	tmpl, err := os.ReadFile("../deploy/helm/weir/templates/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../deploy/helm/weir/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Metrics struct {
			PrometheusRule map[string]any `yaml:"prometheusRule"`
		} `yaml:"metrics"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	body := string(tmpl)
	start, end := strings.Index(body, "\nspec:\n"), strings.LastIndex(body, "{{- end }}")
	if start < 0 || end < start {
		t.Fatal("prometheusrule.yaml: no spec")
	}
	body = body[start+len("\nspec:\n") : end]
	body = strings.ReplaceAll(body, "{ {{- $sel -}} }", fmt.Sprintf("{job=%q}", job))
	body = strings.ReplaceAll(body, `{{ include "weir.fullname" . }}`, job)
	body = regexp.MustCompile(`\{\{ \$r\.(\w+) \}\}`).ReplaceAllStringFunc(body, func(m string) string {
		key := regexp.MustCompile(`\$r\.(\w+)`).FindStringSubmatch(m)[1]
		v, ok := values.Metrics.PrometheusRule[key]
		if !ok {
			t.Fatalf("prometheusrule.yaml uses metrics.prometheusRule.%s, which values.yaml does not set", key)
		}
		return fmt.Sprint(v)
	})
	body = regexp.MustCompile("\\{\\{`(.*?)`\\}\\}").ReplaceAllString(body, "$1")
	var out strings.Builder
	for _, line := range strings.Split(body, "\n") {
		out.WriteString(strings.TrimPrefix(line, "  ") + "\n")
	}
	if s := out.String(); strings.Contains(s, "$r.") || strings.Contains(s, "{{-") || strings.Contains(s, "$sel") {
		t.Fatalf("chart alert rules not fully rendered:\n%s", s)
	}
	return out.String()
}

// firing is an alert expected to fire: its labels (but alertname) and
// annotations, as promtool compares them.
type firing struct {
	labels, annotations map[string]string
}

// checkAlerts evaluates the chart's alert rules with promtool over the
// weir_ samples of a /metrics page (scraped), held for five minutes under
// Prometheus job label job and instance "a": every alert of want fires
// exactly so, and no other fires. promtool is WEIR_PROMTOOL (make test
// installs it: scripts/promtool.sh).
func checkAlerts(t *testing.T, job, scraped string, want map[string][]firing) {
	t.Helper()
	promtool := os.Getenv("WEIR_PROMTOOL")
	if promtool == "" {
		if os.Getenv("WEIR_REQUIRE_REAL_KAFKA") == "1" {
			t.Fatal("WEIR_PROMTOOL is not set: make test sets it (scripts/promtool.sh env)")
		}
		t.Log("WEIR_PROMTOOL is not set: the chart's alert rules are not evaluated (make test sets it)")
		return
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(chartAlertRules(t, job)), 0o600); err != nil {
		t.Fatal(err)
	}
	var series strings.Builder
	for _, line := range strings.Split(scraped, "\n") {
		if !strings.HasPrefix(line, "weir_") {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		labels := fmt.Sprintf(`job=%q, instance="a"`, job)
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i+1] + labels + ", " + name[i+1:]
		} else {
			name += "{" + labels + "}"
		}
		fmt.Fprintf(&series, "      - series: '%s'\n        values: '%s'\n", name, strings.TrimSpace(strings.Repeat(value+" ", 6)))
	}
	var tests strings.Builder
	for _, alert := range []string{"WeirJobFailed", "WeirCheckpointAge", "WeirLagGrowing", "WeirRecordErrors", "WeirReplicaNotReady"} {
		fmt.Fprintf(&tests, "      - eval_time: 5m\n        alertname: %s\n        exp_alerts:", alert)
		if len(want[alert]) == 0 {
			tests.WriteString(" []\n")
			continue
		}
		tests.WriteString("\n")
		for _, f := range want[alert] {
			tests.WriteString("          - exp_labels:\n")
			for k, v := range f.labels {
				fmt.Fprintf(&tests, "              %s: %q\n", k, v)
			}
			tests.WriteString("            exp_annotations:\n")
			for k, v := range f.annotations {
				fmt.Fprintf(&tests, "              %s: %q\n", k, v)
			}
		}
	}
	file := "rule_files: [rules.yaml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n" + series.String() +
		"    alert_rule_test:\n" + tests.String()
	if err := os.WriteFile(filepath.Join(dir, "test.yaml"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "test.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// inputLag returns, per partition of topic, its last stable offset minus
// group's committed offset (its start offset without one), read with kadm.
func inputLag(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic, group string) map[int32]int64 {
	t.Helper()
	adm := c.Admin(t)
	ends, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32]int64{}
	ends.Each(func(e kadm.ListedOffset) {
		from := int64(-1)
		if o, ok := committed.Lookup(topic, e.Partition); ok && o.Err == nil {
			from = o.At
		}
		if from < 0 {
			s, _ := starts.Lookup(topic, e.Partition)
			from = s.Offset
		}
		out[e.Partition] = e.Offset - from
	})
	return out
}
