package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/weir-stream/weir/internal/benchutil"
)

// The -two-stage and -yaml runs measure their job against the raw two-hop
// pipe in -passes passes each, alternating: raw, job, raw, job, ..., raw.
// One pass of a million records lasts two to four seconds on the benchmark
// machine, and three things weigh on it that a longer run would average
// out: the broker's creation of the job's shuffle topic at start-up, the
// first checkpoint's random delay in [min_pause, interval] (as Flink's),
// which decides how long the last outputs wait for their commit, and the
// load of the machine, which drifts within minutes. Each job pass is a new
// job (its own name, topics and state) on the same preloaded input, and
// every pass's output is verified. The throughput figures are over
// all passes (records over summed wall time), and the worst and best
// passes are reported beside them; the checkpoint durations, and with
// -two-stage the alignment and latency, are the last pass's.

// jobPass is one pass of the job and the raw passes either side of it.
type jobPass struct {
	t         pass
	rawBefore pass
	rawAfter  pass
}

// alternate runs the raw two-hop pipe and the job alternately, -passes
// times the job. last, if not nil, runs right after the last job pass's
// throughput with that job still running (the alignment and latency
// measurements of -two-stage: its steady input goes to the input topic,
// which the passes before it have read by then); check verifies a job's
// output before the job stops. ckpt names the checkpoint-duration result
// lines of the last pass.
func (b *bench) alternate(ctx context.Context, what, ckpt string, last func(j *job, t pass) error,
	check func(j *job, last bool) ([]*verification, error)) (passes []jobPass, raws []pass, vs []*verification, err error) {
	raw, err := b.rawTwoHop(ctx, 1)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("raw two-hop pipe: %w", err)
	}
	raws = append(raws, raw)
	for i := range b.c.passes {
		isLast := i == b.c.passes-1
		name := ""
		if isLast {
			name = ckpt
		}
		j, t, err := b.throughput(ctx, i, b.c.replicas[0], b.plain, name)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s, pass %d, %d replica(s): %w", what, i+1, b.c.replicas[0], err)
		}
		if isLast && last != nil {
			if err := last(j, t); err != nil {
				return nil, nil, nil, err
			}
		}
		if b.c.verify {
			v, err := check(j, isLast)
			if err != nil {
				return nil, nil, nil, err
			}
			vs = append(vs, v...)
		}
		if err := j.stopAll(); err != nil {
			return nil, nil, nil, err
		}
		after, err := b.rawTwoHop(ctx, i+2)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("raw two-hop pipe: %w", err)
		}
		passes = append(passes, jobPass{t: t, rawBefore: raws[len(raws)-1], rawAfter: after})
		raws = append(raws, after)
	}
	return passes, raws, vs, nil
}

// reportPasses prints the result lines of the job's throughput against the
// raw two-hop pipe over all passes (prefix_job_throughput,
// raw_two_hop_throughput, prefix_job_vs_raw_two_hop_ratio, startup and
// processing), the worst pass's ratio (to the mean of the raw passes
// either side of it), and a line per pass. It returns the job's total and
// the raw pipe's.
func reportPasses(prefix string, n int, passes []jobPass, raws []pass) (job, raw pass) {
	ts := make([]pass, len(passes))
	ratios := make([]float64, len(passes))
	for i, p := range passes {
		ts[i] = p.t
		near := sum([]pass{p.rawBefore, p.rawAfter})
		ratios[i] = p.t.rate(n) / near.rate(n)
		startup := "unknown" // the written-records counters were not scraped in time
		if p.t.processing > 0 {
			startup = p.t.startup.Round(10 * time.Millisecond).String()
		}
		benchutil.Info("pass %d of %d: the job at %.0f records/s (start-up %s), the raw pipe either side at %.0f records/s: %.3f",
			i+1, len(passes), p.t.rate(n), startup, near.rate(n), ratios[i])
	}
	job, raw = sum(ts), sum(raws)
	res := benchutil.Result
	res(prefix+"_job_throughput", "%.0f", job.rate(n), "records/s")
	res("raw_two_hop_throughput", "%.0f", raw.rate(n), "records/s")
	res(prefix+"_job_vs_raw_two_hop_ratio", "%.3f", job.rate(n)/raw.rate(n), "ratio")
	if len(passes) > 1 {
		res(prefix+"_job_vs_raw_two_hop_ratio_worst_pass", "%.3f", slices.Min(ratios), "ratio")
		res(prefix+"_job_vs_raw_two_hop_ratio_best_pass", "%.3f", slices.Max(ratios), "ratio")
	}
	// Start-up and processing over the passes whose written-records
	// counters were scraped in time.
	var timed []pass
	for _, t := range ts {
		if t.processing > 0 {
			timed = append(timed, t)
		}
	}
	if len(timed) > 0 {
		tt := sum(timed)
		proc := tt.processingRate(n)
		res(prefix+"_job_startup", "%.2f", tt.startup.Seconds(), "s")
		res(prefix+"_job_processing_throughput", "%.0f", proc, "records/s")
		res(prefix+"_job_processing_vs_raw_two_hop_ratio", "%.3f", proc/raw.rate(n), "ratio")
		if len(timed) < len(ts) {
			benchutil.Info("start-up and processing over %d of %d passes (the others' written-records counters were not scraped in time)", len(timed), len(ts))
		}
	}
	return job, raw
}
