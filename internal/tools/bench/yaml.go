package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/benchutil"
)

// The -yaml run (issue 14): the YAML language job,
//
//	source json → filter value.amount > 0 → map {page, user, amount}
//	→ key_by {expr: value.page} → aggregate {count: true,
//	total: {sum: value.amount}, biggest: {max: value.amount}}
//	→ sink json exactly-once
//
// over N clicks {"i","user","page","amount"} keyed by user (-keys users,
// -pages pages, uniform, as -two-stage), amounts 1..1000: the filter
// evaluates every record and keeps them all, so that the job writes one
// output per input record (its running aggregate emits on every update),
// as the raw pipe does. In one run:
//
//  1. the raw two-hop pipe (the job has a shuffle, by page: the baseline of
//     -two-stage, whose hop one decodes each value's page), before, between
//     and after the job's passes; its figure is over all its passes;
//  2. the job with the first -replicas entry, -passes times (passes.go),
//     each pass timed from before its processes start until an
//     independent read_committed consumer has seen N outputs (as the count
//     job); the figure is over all passes, and the last pass's checkpoint
//     durations are reported (p50, p99);
//  3. the verification of every pass's output: each page's counts exactly 1..n,
//     each once, and each page's last output (count n) with the total and
//     the biggest amount of its input.
//
// The ratio's goal is 0.5. No latency or recovery is measured (the count
// job's runs measure those).

// yamlSteps are the job's steps between its source and its sink.
const yamlSteps = `    - filter: {where: "value.amount > 0"}
    - map: {value: {page: value.page, user: value.user, amount: value.amount}}
    - key_by: {expr: value.page}
    - aggregate: {count: true, total: {sum: value.amount}, biggest: {max: value.amount}}
`

// yamlAmount is input record i's amount, 1..1000, spread by a
// multiplicative hash.
func yamlAmount(i int) int64 { return 1 + int64(uint64(i)*2654435761%1000) }

// yamlValue is input record i: {"i":i,"user":…,"page":…,"amount":…}.
func yamlValue(buf []byte, i int, user, page string) []byte {
	buf = append(buf[:0], `{"i":`...)
	buf = strconv.AppendInt(buf, int64(i), 10)
	buf = append(buf, `,"user":"`...)
	buf = append(buf, user...)
	buf = append(buf, `","page":"`...)
	buf = append(buf, page...)
	buf = append(buf, `","amount":`...)
	buf = strconv.AppendInt(buf, yamlAmount(i), 10)
	return append(buf, '}')
}

// pageAgg is a page's aggregates: the job's, or those its input implies.
type pageAgg struct {
	count          int64
	total, biggest float64
}

// wantYAML adds input record i, of page, to the expected aggregates.
func (b *bench) wantYAML(page string, i int) {
	if b.yamlWant == nil {
		b.yamlWant = map[string]*pageAgg{}
	}
	a := b.yamlWant[page]
	if a == nil {
		a = &pageAgg{}
		b.yamlWant[page] = a
	}
	amount := float64(yamlAmount(i))
	a.count++
	a.total += amount
	a.biggest = max(a.biggest, amount)
}

// runYAML is a -yaml run after the preload: see the comment at the top of
// this file.
func (b *bench) runYAML(ctx context.Context) error {
	n := b.c.records
	check := func(j *job, _ bool) ([]*verification, error) {
		vs, err := b.verifyOutputs(ctx, []output{{j, b.preloadPerKey, n}})
		if err != nil {
			return nil, err
		}
		v, err := b.verifyAggregates(ctx, j.out, n)
		if err != nil {
			return nil, fmt.Errorf("verify %s: %w", j.name, err)
		}
		return append(vs, v), nil
	}
	passes, raws, vs, err := b.alternate(ctx, "YAML language job", "yaml_checkpoint_duration", nil, check)
	if err != nil {
		return err
	}
	t, raw := reportPasses("yaml", n, passes, raws)
	benchutil.Info("load average now %s", loadAvg())
	benchutil.Info("headline: YAML language job, %d replica(s), %.0f records/s vs the raw two-hop pipe's %.0f records/s: %.3f (goal >= 0.5); CPU: replicas %v, raw pipe (this process) %v per pass",
		b.c.replicas[0], t.rate(n), raw.rate(n), t.rate(n)/raw.rate(n), (t.cpu / time.Duration(t.passes)).Round(time.Millisecond), (raw.cpu / time.Duration(raw.passes)).Round(time.Millisecond))
	if !b.c.verify {
		return nil
	}
	return verdict(vs)
}

// verifyAggregates reads topic read_committed from the start until it has
// total records (and a second more) and checks that every page's output
// with the highest count has exactly the count, total and biggest amount
// of the page's input (a lost or repeated record shows in the total, as in
// the count; a wrong sum or max shows only here).
func (b *bench) verifyAggregates(ctx context.Context, topic string, total int) (*verification, error) {
	start := time.Now()
	v := &verification{topic: topic + " (aggregates)"}
	note := func(format string, args ...any) {
		if len(v.problems) < 10 {
			v.problems = append(v.problems, fmt.Sprintf(format, args...))
		}
	}
	last := map[string]pageAgg{}
	var seen atomic.Int64
	obs, err := b.observe(ctx, topic, nil, func(r *kgo.Record, _ time.Time) {
		seen.Add(1)
		var out struct {
			Key     string   `json:"key"`
			Count   *int64   `json:"count"`
			Total   *float64 `json:"total"`
			Biggest *float64 `json:"biggest"`
		}
		if err := json.Unmarshal(r.Value, &out); err != nil || out.Count == nil || out.Total == nil || out.Biggest == nil {
			v.duplicated++
			note("%s[%d]@%d: %.200q is not {key, count, total, biggest}", r.Topic, r.Partition, r.Offset, r.Value)
			return
		}
		if a, ok := last[out.Key]; !ok || *out.Count > a.count {
			last[out.Key] = pageAgg{*out.Count, *out.Total, *out.Biggest}
		}
	})
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for seen.Load() < int64(total) && time.Now().Before(deadline) {
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			obs.stop()
			return nil, err
		}
	}
	_ = sleep(ctx, time.Second)
	obs.stop()
	for page, want := range b.yamlWant {
		got, ok := last[page]
		if !ok || got != *want {
			v.lost++
			note("page %s: last output %+v, want %+v", page, got, *want)
		}
	}
	for page := range last {
		if b.yamlWant[page] == nil {
			v.duplicated++
			note("page %s: outputs for a page never produced", page)
		}
	}
	benchutil.Info("verified the aggregates of %s: %d outputs, %d pages: %d wrong or missing, %d not of the input, in %v",
		topic, seen.Load(), len(b.yamlWant), v.lost, v.duplicated, time.Since(start).Round(time.Millisecond))
	return v, nil
}
