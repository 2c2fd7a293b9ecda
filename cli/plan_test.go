package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/plan"
	"github.com/weir-stream/weir/stream"
)

// viewsPerPageYAML is examples/views-per-page.yaml's job on the topics in
// and out, with a downstream parallelism of 3 and 16 key groups, and the
// given brokers.
func viewsPerPageYAML(t *testing.T, name, in, out string, brokers []string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "job.yaml")
	yaml := fmt.Sprintf(`job:
  name: %s
  parallelism: 3
  max_parallelism: 16
  pipeline:
    - source: {topics: [%s], format: json}
    - key_by: {field: page}
    - aggregate: {op: count}
    - sink: {topic: %s, format: json}
kafka: {brokers: [%s]}
http: {address: ""}
log: {level: warn}
`, name, in, out, strings.Join(brokers, ", "))
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestPlanAsksKafka: `processor plan -c job.yaml` asks the broker for the
// input topic's partition count (the source stage's parallelism) and prints
// the stages, their tasks with their key groups, the shuffle topic and the
// operators; a missing input topic is said so. On kfake and the real
// broker.
func TestPlanAsksKafka(t *testing.T) {
	kafkatest.Each(t, func(t *testing.T, c *kafkatest.Cluster) {
		clearConfigEnv(t) // after NewReal, which reads WEIR_KAFKA_BROKERS
		name := kafkatest.Name(t, "plan")
		in, out := name+"-clicks", name+"-views"
		c.CreateTopic(t, in, 5, nil)
		file := viewsPerPageYAML(t, name, in, out, c.Brokers)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		code, stdout, stderr := runCLI(ctx, nil, "plan", "-c", file)
		if code != 0 {
			t.Fatalf("plan: exit %d\n%s%s", code, stdout, stderr)
		}
		shuffle := "_weir." + name + ".shuffle.count"
		for _, want := range []string{
			"job " + name + ": 2 stage(s), 8 task(s), max parallelism 16 (key groups)",
			"stage main: parallelism 5",
			"tasks: main/0 main/1 main/2 main/3 main/4\n",
			"output: " + shuffle + " (16 partitions, 3 readers) -> stage count",
			"stage count: parallelism 3",
			"input: " + shuffle + " (16 partitions, 5 writers)",
			"tasks: count/0[0-5] count/1[6-10] count/2[11-15]",
			"sinks: " + out,
			"operators: ",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("plan output lacks %q:\n%s", want, stdout)
			}
		}
		t.Logf("\n%s", stdout)

		missing := viewsPerPageYAML(t, name, name+"-absent", out, c.Brokers)
		code, stdout, stderr = runCLI(ctx, nil, "plan", "-c", missing)
		if code != 1 || !strings.Contains(stderr, name+"-absent") {
			t.Fatalf("plan of a job whose input topic is missing: exit %d, want 1 and the topic named\n%s%s", code, stdout, stderr)
		}
	})
}

// TestPlanWithPartitions: with --partitions, plan connects to nothing (the
// broker of the configuration does not exist) and --json prints the plan
// as JSON; a Go job is planned the same way; --partitions 0 and a
// parallelism above the key groups are refused.
func TestPlanWithPartitions(t *testing.T) {
	clearConfigEnv(t)
	file := viewsPerPageYAML(t, "views", "clicks", "views", []string{"127.0.0.1:1"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, stdout, stderr := runCLI(ctx, nil, "plan", "-c", file, "--partitions", "8", "--json")
	if code != 0 {
		t.Fatalf("plan --partitions 8 --json: exit %d\n%s%s", code, stdout, stderr)
	}
	var p plan.Plan
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatalf("not the plan's JSON: %v\n%s", err, stdout)
	}
	if len(p.Stages) != 2 || p.Stages[0].Parallelism != 8 || p.Stages[1].Parallelism != 3 ||
		len(p.Shuffles) != 1 || p.Shuffles[0].Partitions != 16 || p.Shuffles[0].Writers != 8 || p.Shuffles[0].Topic != "_weir.views.shuffle.count" {
		t.Fatalf("plan %+v", p)
	}

	// A Go job: the example's shape (KeyBy, a keyed Process).
	goJob := stream.NewJob("go-views")
	clicks := stream.From(goJob, stream.KafkaSource{Topics: []string{"clicks"}}, stream.RawCodec{})
	byValue := stream.KeyBy(clicks, func(v []byte) ([]byte, error) { return v, nil })
	views := stream.Process(byValue, "views", func() stream.KeyedProcessFunction[[]byte, keyCount] { return &counter{} })
	stream.To(views, stream.KafkaSink{Topic: "views"}, stream.JSONCodec[keyCount]{})
	goFile := filepath.Join(t.TempDir(), "weir.yaml")
	if err := os.WriteFile(goFile, []byte("kafka: {brokers: [127.0.0.1:1]}\nhttp: {address: \"\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runCLI(ctx, goJob, "plan", "-c", goFile, "--partitions", "2")
	if code != 0 || !strings.Contains(stdout, "stage views: parallelism 2") || !strings.Contains(stdout, "_weir.go-views.shuffle.views (128 partitions") {
		t.Fatalf("plan of the Go job: exit %d\n%s%s", code, stdout, stderr)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--partitions", "0"}, "--partitions 0: must be at least 1"},
		{[]string{"--partitions", "4", "--job.parallelism", "17"}, "job.parallelism: 17: must not exceed job.max_parallelism (16)"},
	} {
		code, stdout, stderr := runCLI(ctx, nil, append([]string{"plan", "-c", file}, c.args...)...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("plan %v: exit %d, want 1 and %q\n%s%s", c.args, code, c.want, stdout, stderr)
		}
	}
}
