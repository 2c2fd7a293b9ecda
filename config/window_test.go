package config_test

import (
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weir-stream/weir/config"
)

// windowJob is the example, examples/views-per-page-per-minute.yaml;
// the lines of its steps are 5 to 9.
const windowJob = `
job:
  name: views-per-page-per-minute
  pipeline:
    - source: {topics: [clicks], format: json, timestamp: {field: ts, format: unix_ms}, watermark: {max_out_of_orderness: 5s, idle_timeout: 30s}}
    - key_by: {field: page}
    - window: {type: tumbling, size: 1m, allowed_lateness: 10s, late_topic: clicks-late}
    - aggregate: {op: count}
    - sink: {topic: page-views-per-minute, format: json, delivery: exactly-once}
kafka:
  brokers: [127.0.0.1:9092]
`

func TestLoadWindowJob(t *testing.T) {
	for _, src := range []config.Source{
		{YAML: []byte(windowJob), NoEnv: true},
		{File: "../examples/views-per-page-per-minute.yaml", NoEnv: true},
	} {
		cfg, err := config.Load(src)
		if err != nil {
			t.Fatal(err)
		}
		p := cfg.Job.Pipeline
		if len(p) != 5 {
			t.Fatalf("pipeline %+v", p)
		}
		s := p[0].Source
		if s.Timestamp == nil || *s.Timestamp != (config.TimestampSpec{Field: "ts", Format: "unix_ms"}) {
			t.Errorf("timestamp %+v", s.Timestamp)
		}
		// interval takes its default.
		if s.Watermark == nil || *s.Watermark != (config.WatermarkSpec{MaxOutOfOrderness: 5 * time.Second, IdleTimeout: 30 * time.Second, Interval: 200 * time.Millisecond}) {
			t.Errorf("watermark %+v", s.Watermark)
		}
		if w := p[2].Window; w == nil || *w != (config.WindowStep{Type: "tumbling", Size: time.Minute, AllowedLateness: 10 * time.Second, LateTopic: "clicks-late"}) {
			t.Errorf("window %+v", w)
		}
		if a := p[3].Aggregate; a == nil || a.Op != "count" || a.Field != "" {
			t.Errorf("aggregate %+v", a)
		}
	}
	// Defaults: a timestamp's format is unix_ms.
	cfg, err := config.Load(config.Source{YAML: []byte(strings.Replace(windowJob, "field: ts, format: unix_ms", "field: ts", 1)), NoEnv: true})
	if err != nil || cfg.Job.Pipeline[0].Source.Timestamp.Format != "unix_ms" {
		t.Fatalf("default format: %v %+v", err, cfg)
	}
	// sliding and session windows, and the other aggregates.
	for _, c := range []struct{ window, aggregate string }{
		{"{type: sliding, size: 10m, slide: 1m}", "{op: sum, field: ms}"},
		{"{type: sliding, size: 10m, slide: 3m}", "{op: avg, field: ms}"}, // as in Flink, size need not be a multiple of slide
		{"{type: session, gap: 30s, emit_every: 5s}", "{op: max, field: ms}"},
		{"{type: tumbling, size: 1500ms}", "{op: min, field: ms}"},
	} {
		y := strings.Replace(windowJob, "{type: tumbling, size: 1m, allowed_lateness: 10s, late_topic: clicks-late}", c.window, 1)
		y = strings.Replace(y, "{op: count}", c.aggregate, 1)
		if _, err := config.Load(config.Source{YAML: []byte(y), NoEnv: true}); err != nil {
			t.Errorf("%s %s: %v", c.window, c.aggregate, err)
		}
	}
}

// TestWindowProblemsByPathAndLine: every problem of the new keys names its
// key path and the line and column where it was written.
func TestWindowProblemsByPathAndLine(t *testing.T) {
	const window = "{type: tumbling, size: 1m, allowed_lateness: 10s, late_topic: clicks-late}"
	for _, c := range []struct{ from, to, want string }{
		// window
		{window, "{type: tumbeling, size: 1m}", `yaml:7:22: job.pipeline[2].window.type: "tumbeling": must be tumbling, sliding or session (did you mean tumbling?)`},
		{window, "{size: 1m}", "yaml:7:15: job.pipeline[2].window.type: required: tumbling, sliding or session"},
		{window, "{type: tumbling}", "yaml:7:15: job.pipeline[2].window.size: must be positive"},
		{window, "{type: tumbling, size: -1m}", "yaml:7:38: job.pipeline[2].window.size: -1m0s: must not be negative"},
		{window, "{type: tumbling, size: 1m, slide: 10s}", "yaml:7:49: job.pipeline[2].window.slide: set, but a tumbling window has no slide: remove it"},
		{window, "{type: tumbling, size: 1m, gap: 10s}", "yaml:7:47: job.pipeline[2].window.gap: set, but a tumbling window has no gap: remove it"},
		{window, "{type: tumbling, size: 1500us}", "yaml:7:38: job.pipeline[2].window.size: 1.5ms: must be a whole number of milliseconds (event time is in milliseconds)"},
		{window, "{type: tumbling, size: 60}", "yaml:7:38: job.pipeline[2].window.size: 60: a duration needs a unit"},
		{window, "{type: sliding, size: 10m}", "yaml:7:15: job.pipeline[2].window.slide: must be positive"},
		{window, "{type: sliding, slide: 1m}", "yaml:7:15: job.pipeline[2].window.size: must be positive"},
		{window, "{type: sliding, size: 1m, slide: 2m}", "yaml:7:48: job.pipeline[2].window.slide: 2m0s: must not exceed size (1m0s): the records between two windows would belong to none"},
		{window, "{type: session, size: 1m}", "yaml:7:15: job.pipeline[2].window.gap: must be positive"},
		{window, "{type: session, gap: 30s, size: 1m}", "yaml:7:47: job.pipeline[2].window.size: set, but a session window has no size: remove it"},
		{window, "{type: session, gap: 30s, slide: 1m}", "yaml:7:48: job.pipeline[2].window.slide: set, but a session window has no slide"},
		{window, "{type: tumbling, size: 1m, allowed_lateness: -1s}", "yaml:7:60: job.pipeline[2].window.allowed_lateness: -1s: must not be negative"},
		{window, "{type: tumbling, size: 1m, emit_every: -1s}", "yaml:7:54: job.pipeline[2].window.emit_every: -1s: must not be negative"},
		{window, "{type: tumbling, size: 1m, late_topic: 'late topic'}", `yaml:7:54: job.pipeline[2].window.late_topic: "late topic" is not a valid Kafka topic name`},
		{window, "{type: tumbling, size: 1m, late_topic: clicks}", `yaml:7:54: job.pipeline[2].window.late_topic: "clicks" is also an input topic (job.pipeline[0].source.topics)`},
		{window, "{type: tumbling, size: 1m, late_topic: page-views-per-minute}", `yaml:7:54: job.pipeline[2].window.late_topic: "page-views-per-minute" is also the sink's topic (job.pipeline[4].sink.topic)`},
		{window, "{type: tumbling, size: 1m, lateness: 10s}", "yaml:7:42: job.pipeline[2].window.lateness: unknown key"},
		{window, "{type: tumbling, size: 1m, allowed_latenes: 10s}", "yaml:7:42: job.pipeline[2].window.allowed_latenes: unknown key (did you mean allowed_lateness?)"},
		{"    - aggregate: {op: count}\n", "", "yaml:7:15: job.pipeline[2].window: must be followed by an aggregate step"},
		{"    - key_by: {field: page}\n    - window: " + window, "    - window: " + window + "\n    - key_by: {field: page}", "yaml:6:15: job.pipeline[1].window: must be followed by an aggregate step"},
		{"    - key_by: {field: page}\n", "    - key_by: {field: page}\n      window: {type: tumbling, size: 1m}\n", "yaml:6:7: job.pipeline[1]: must have exactly one of source, filter, map, flat_map, key_by, window, aggregate, dedupe, join, route, sink (has key_by and window)"},
		// aggregate
		{"{op: count}", "{op: sum}", "yaml:8:18: job.pipeline[3].aggregate.field: required by op sum: the top-level JSON number field to aggregate"},
		{"{op: count}", "{op: avg}", "yaml:8:18: job.pipeline[3].aggregate.field: required by op avg"},
		{"{op: count}", "{op: count, field: ms}", "yaml:8:37: job.pipeline[3].aggregate.field: set, but count reads no field"},
		{"{op: count}", "{op: mean, field: ms}", `yaml:8:23: job.pipeline[3].aggregate.op: "mean": must be count, sum, min, max or avg`},
		{"{op: count}", "{op: maxx, field: ms}", `yaml:8:23: job.pipeline[3].aggregate.op: "maxx": must be count, sum, min, max or avg (did you mean max?)`},
		{"{op: count}", "{field: ms}", "yaml:8:18: job.pipeline[3].aggregate.op: required: count, sum, min, max or avg"},
		{"{op: count}", "{op: sum, fields: ms}", "yaml:8:28: job.pipeline[3].aggregate.fields: unknown key (did you mean field?)"},
		// source.timestamp
		{"timestamp: {field: ts, format: unix_ms}", "timestamp: {format: unix_ms}", "yaml:5:59: job.pipeline[0].source.timestamp.field: required: the top-level JSON field that holds the event time"},
		{"format: unix_ms", "format: unix_ns", `yaml:5:79: job.pipeline[0].source.timestamp.format: "unix_ns": must be unix_ms, unix_s or rfc3339 (did you mean unix_ms?)`},
		{"format: unix_ms", "format: iso8601", `yaml:5:79: job.pipeline[0].source.timestamp.format: "iso8601": must be unix_ms, unix_s or rfc3339`},
		{"format: unix_ms", "fromat: unix_ms", "yaml:5:71: job.pipeline[0].source.timestamp.fromat: unknown key (did you mean format?)"},
		{"format: json, timestamp", "format: raw, timestamp", "yaml:5:58: job.pipeline[0].source.timestamp: reads a JSON field, but the source's format is raw"},
		{"timestamp: {field: ts, format: unix_ms}", "timestamp: ts", `yaml:5:59: job.pipeline[0].source.timestamp: "ts": want a mapping of field, format`},
		// source.watermark
		{"max_out_of_orderness: 5s", "max_out_of_orderness: -5s", "yaml:5:123: job.pipeline[0].source.watermark.max_out_of_orderness: -5s: must not be negative"},
		{"max_out_of_orderness: 5s", "max_out_of_orderness: 5", "yaml:5:123: job.pipeline[0].source.watermark.max_out_of_orderness: 5: a duration needs a unit"},
		{"idle_timeout: 30s", "idle_timeout: -1s", "yaml:5:141: job.pipeline[0].source.watermark.idle_timeout: -1s: must not be negative"},
		{"idle_timeout: 30s", "interval: 1ms", "yaml:5:137: job.pipeline[0].source.watermark.interval: 1ms: must be at least 10ms"},
		{"idle_timeout: 30s", "idle_timout: 30s", "yaml:5:127: job.pipeline[0].source.watermark.idle_timout: unknown key (did you mean idle_timeout?)"},
		{"max_out_of_orderness", "max_out_of_order", "yaml:5:101: job.pipeline[0].source.watermark.max_out_of_order: unknown key"},
		{"    - window: " + window + "\n    - aggregate: {op: count}\n", "    - aggregate: {op: count}\n", "yaml:5:100: job.pipeline[0].source.watermark: set, but no step reads watermarks (a window, an interval join or a dedupe): remove it, or add a window"},
	} {
		y := strings.Replace(windowJob, c.from, c.to, 1)
		if y == windowJob {
			t.Fatalf("%q is not in the job", c.from)
		}
		_, err := config.Load(config.Source{YAML: []byte(y), NoEnv: true})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s → %s:\n%v\nwant %s", c.from, c.to, err, c.want)
		}
	}
}

// TestReferenceDocumentsEveryStepKey keeps the pipeline steps' table of
// docs/configuration.md in step with config.Step: every key of every step
// kind ("window.allowed_lateness", "source.timestamp.field") is there.
func TestReferenceDocumentsEveryStepKey(t *testing.T) {
	doc, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var walk func(rt reflect.Type, prefix string)
	walk = func(rt reflect.Type, prefix string) {
		for i := range rt.NumField() {
			f := rt.Field(i)
			key := f.Tag.Get("mapstructure")
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if key == "-" { // a shape: the list of route branches, the named aggregates
				if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && ft.Elem() != reflect.TypeFor[config.Agg]() {
					walk(ft.Elem(), prefix)
				}
				continue
			}
			path := strings.TrimPrefix(prefix+"."+key, ".")
			leaf := ft == reflect.TypeFor[time.Duration]() || ft == reflect.TypeFor[config.Expr]() || ft == reflect.TypeFor[config.MapValue]()
			if ft.Kind() == reflect.Struct && !leaf {
				walk(ft, path)
				continue
			}
			if !strings.Contains(string(doc), "`"+path+"`") {
				t.Errorf("docs/configuration.md does not document the step key %s", path)
			}
		}
	}
	walk(reflect.TypeFor[config.Step](), "")
}
