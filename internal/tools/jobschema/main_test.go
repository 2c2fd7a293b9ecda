package main

import (
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

const root = "../../.."

// TestSchemasAreCurrent fails if docs/job.schema.json or the chart's
// values.schema.json is not what the configuration types generate: a key
// added to package config must reach the schema (run the generator).
func TestSchemasAreCurrent(t *testing.T) {
	if err := run(root, true); err != nil {
		t.Fatal(err)
	}
}

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(filepath.Join(root, jobSchemaFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("job.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("job.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// yamlToJSON decodes a job file as an editor's YAML extension does.
func yamlToJSON(t *testing.T, y []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(y, &v); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestExamplesMatchTheSchema checks every example job file, and a job that
// uses every step kind, against docs/job.schema.json.
func TestExamplesMatchTheSchema(t *testing.T) {
	s := compileSchema(t)
	files, err := filepath.Glob(filepath.Join(root, "examples", "*.yaml"))
	more, err2 := filepath.Glob(filepath.Join(root, "examples", "*", "*.yaml"))
	files = append(files, more...)
	if err != nil || err2 != nil || len(files) == 0 {
		t.Fatalf("no examples: %v %v", err, err2)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(yamlToJSON(t, b)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if err := s.Validate(yamlToJSON(t, []byte(everyStep))); err != nil {
		t.Errorf("a job of every step: %v", err)
	}
}

// TestSchemaRefusesMistakes: what an editor should underline.
func TestSchemaRefusesMistakes(t *testing.T) {
	s := compileSchema(t)
	for _, c := range []struct{ from, to, want string }{
		{"filter: {where:", "filtre: {where:", "filtre"},
		{"count: true\n", "count: 1\n", "/aggregate/count"},
		{"total: {sum: value.amount}", "total: {summ: value.amount}", "summ"},
		{"type: left", "type: outer", "/join/type"},
		{"within: 10m", "within: 10", "within"},
		{"on_error: skip", "on_error: ignore", "/filter/on_error"},
		{"recent: {collect: value.id, limit: 10}", "recent: {collect: value.id, limit: 0}", "limit"},
		{"big: [ {sink:", "big: [ {sink: {topic: x}, filter:", "/streams/big/0"},
	} {
		y := strings.Replace(everyStep, c.from, c.to, 1)
		if y == everyStep {
			t.Fatalf("%q not in the job", c.from)
		}
		err := s.Validate(yamlToJSON(t, []byte(y)))
		if err == nil {
			t.Errorf("%s → %s: accepted", c.from, c.to)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s → %s: %v\nwant it to mention %s", c.from, c.to, err, c.want)
		}
	}
}

const everyStep = `
job:
  name: orders
  parallelism: 2
  pipeline:
    - source: {topics: [orders], timestamp: {field: ts}, watermark: {max_out_of_orderness: 5s}}
    - filter: {where: "value.amount > 0", on_error: skip}
    - map:
        value: {id: value.id, amount: value.amount * 1.2, customer: value.customer}
        key: value.customer
    - map: {value: value}
    - flat_map: {each: value.items, on_error: dead-letter, dead_letter_topic: dl}
    - key_by: {expr: "value.customer", parallelism: 2}
    - key_by: {field: customer}
    - join: {table: {topic: customers}, as: customer, type: left}
    - join: {stream: {name: payments, within: 5m}, as: payment}
    - window: {type: tumbling, size: 1m, emit_every: 10s}
    - aggregate:
        count: true
        sum: value.amount
        total: {sum: value.amount}
        people: {count_distinct: value.customer}
        recent: {collect: value.id, limit: 10}
        emit: close
    - aggregate: {op: sum, field: amount}
    - dedupe: {key: "value.id", within: 10m}
    - route:
        - {when: "value.amount > 1000", to: big}
        - {to: all}
  streams:
    big: [ {sink: {topic: big-orders}} ]
    all: [ {map: {value: "value"}}, {sink: {topic: all-orders, delivery: at-least-once}} ]
    payments: [ {source: {topics: [payments]}}, {key_by: {expr: "value.order"}} ]
kafka: {brokers: ["k:9092"]}
checkpoint: {interval: 1s, mode: exactly-once}
log: {level: info}
`

// TestYAMLReferenceCoversTheSchema keeps docs/yaml.md, the YAML language's
// reference, in step with the job section of docs/job.schema.json: every
// key the schema allows under job (steps, their options, format maps)
// must be named in the reference, `in backquotes` (alone, as `key: …` or
// at the end of a dotted path). It also checks that
// every relative link of the reference leads to a file.
func TestYAMLReferenceCoversTheSchema(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, jobSchemaFile))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	job, ok := schema["properties"].(map[string]any)["job"]
	if !ok {
		t.Fatal("the schema has no job property")
	}
	keys := map[string]string{} // key -> the path it was first met at
	var walk func(v any, path string)
	walk = func(v any, path string) {
		switch v := v.(type) {
		case map[string]any:
			if props, ok := v["properties"].(map[string]any); ok {
				for _, k := range slices.Sorted(maps.Keys(props)) {
					if _, seen := keys[k]; !seen {
						keys[k] = path + "." + k
					}
					walk(props[k], path+"."+k)
				}
			}
			for k, sub := range v {
				if k != "properties" {
					walk(sub, path)
				}
			}
		case []any:
			for _, sub := range v {
				walk(sub, path)
			}
		}
	}
	walk(job, "job")
	if len(keys) < 50 {
		t.Fatalf("only %d keys under job in the schema: the walk is broken", len(keys))
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs/yaml.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	for k, path := range keys {
		// `k`, `k: …`, or a dotted path ending in it: `watermark.interval`.
		if !regexp.MustCompile("`([a-z_]+\\.)*" + regexp.QuoteMeta(k) + "[`:]").MatchString(text) {
			t.Errorf("docs/yaml.md does not describe %s (`%s`)", path, k)
		}
	}
	for _, m := range regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`).FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") {
			continue
		}
		if _, err := os.Stat(filepath.Join(root, "docs", target)); err != nil {
			t.Errorf("docs/yaml.md links to %s, which does not exist", target)
		}
	}
}
