package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/benchutil"
)

// phases is where the time of a job's checkpoints went, from the record
// timestamps of its control topics (one broker, so one clock): for each
// checkpoint triggered within a time span, trigger → the last ack of a
// source-stage task, that → the last ack of any task, that → the complete
// record; and the tasks' own sync, async and align figures of their acks.
type phases struct {
	n                               int
	toSources, toAll, toComplete    []time.Duration
	srcSync, srcAsync, downSync     []time.Duration
	downAsync, downAlign, firstAcks []time.Duration
}

// checkpointPhases reads the trigger, ack and commit topics of jobName.
// A source-stage task is one of stage "main" (the planner's name for it).
func (b *bench) checkpointPhases(ctx context.Context, jobName string, from, to time.Time) (*phases, error) {
	type msg struct {
		Type    string `json:"type"`
		ID      uint64 `json:"id"`
		TS      int64  `json:"ts"`
		Task    string `json:"task"`
		Metrics struct {
			SyncMS  int64 `json:"sync_ms"`
			AsyncMS int64 `json:"async_ms"`
			AlignMS int64 `json:"align_ms"`
		} `json:"metrics"`
	}
	type ack struct {
		at     time.Time
		source bool
		m      msg
	}
	prefix := "_weir." + jobName + "."
	triggers := map[uint64]int64{}
	completes := map[uint64]time.Time{}
	acks := map[uint64][]ack{}
	for _, t := range []string{prefix + "trigger", prefix + "ack", prefix + "commit"} {
		err := b.readControl(ctx, t, func(r *kgo.Record) {
			var m msg
			if json.Unmarshal(r.Value, &m) != nil {
				return
			}
			switch m.Type {
			case "trigger":
				triggers[m.ID] = m.TS
			case "ack":
				acks[m.ID] = append(acks[m.ID], ack{at: r.Timestamp, source: strings.HasPrefix(m.Task, "main/"), m: m})
			case "complete":
				completes[m.ID] = r.Timestamp
			}
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", t, err)
		}
	}
	ph := &phases{}
	for id, ts := range triggers {
		done, ok := completes[id]
		if !ok || ts < from.UnixMilli() || ts > to.UnixMilli() || len(acks[id]) == 0 {
			continue
		}
		trig := time.UnixMilli(ts)
		var lastSrc, last, first time.Time
		for _, a := range acks[id] {
			if a.source && a.at.After(lastSrc) {
				lastSrc = a.at
			}
			if a.at.After(last) {
				last = a.at
			}
			if first.IsZero() || a.at.Before(first) {
				first = a.at
			}
			d := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
			if a.source {
				ph.srcSync = append(ph.srcSync, d(a.m.Metrics.SyncMS))
				ph.srcAsync = append(ph.srcAsync, d(a.m.Metrics.AsyncMS))
			} else {
				ph.downSync = append(ph.downSync, d(a.m.Metrics.SyncMS))
				ph.downAsync = append(ph.downAsync, d(a.m.Metrics.AsyncMS))
				ph.downAlign = append(ph.downAlign, d(a.m.Metrics.AlignMS))
			}
		}
		ph.n++
		ph.firstAcks = append(ph.firstAcks, first.Sub(trig))
		if !lastSrc.IsZero() {
			ph.toSources = append(ph.toSources, lastSrc.Sub(trig))
			ph.toAll = append(ph.toAll, last.Sub(lastSrc))
		}
		ph.toComplete = append(ph.toComplete, done.Sub(last))
	}
	for _, s := range [][]time.Duration{ph.toSources, ph.toAll, ph.toComplete, ph.srcSync, ph.srcAsync, ph.downSync, ph.downAsync, ph.downAlign, ph.firstAcks} {
		slices.Sort(s)
	}
	return ph, nil
}

// report prints the breakdown as info lines (what for: finding the phase a
// latency goal loses its time in).
func (ph *phases) report(what string) {
	if ph.n == 0 {
		benchutil.Info("%s: no completed checkpoint to break down", what)
		return
	}
	q := func(s []time.Duration) string {
		if len(s) == 0 {
			return "-"
		}
		return fmt.Sprintf("p50 %v / p99 %v", quantile(s, 0.5), quantile(s, 0.99))
	}
	benchutil.Info("%s, %d checkpoints: trigger → first ack %s; trigger → last source-stage ack %s; → last ack %s; → complete %s",
		what, ph.n, q(ph.firstAcks), q(ph.toSources), q(ph.toAll), q(ph.toComplete))
	benchutil.Info("%s, per ack: source stage sync %s, async %s; downstream align %s, sync %s, async %s",
		what, q(ph.srcSync), q(ph.srcAsync), q(ph.downAlign), q(ph.downSync), q(ph.downAsync))
}
