package main

import (
	"context"
	"fmt"

	"github.com/weir-stream/weir/internal/benchutil"
)

// runBusyCost measures what accounting each task's busy, backpressured and
// idle time costs (http.busy_time, issue 34: goal at most 2 % of the count
// job's throughput): the headline count job with the accounting on and
// off, interleaved on, off, off, on so that a drift of the machine's load
// falls on both alike, with the raw pipe before and after as the baseline.
func (b *bench) runBusyCost(ctx context.Context) error {
	on := b.plain
	off := *b.plain
	off.name, off.suffix, off.top = "plaintext, http.busy_time false", "_busy_time_off", "http:\n  busy_time: false\n"
	raws, tputs := []pass{}, map[*transport][]pass{}
	steps := []*transport{nil, on, &off, &off, on, nil}
	for i, tr := range steps {
		if tr == nil {
			p, err := b.rawPipe(ctx, i+1, b.plain)
			if err != nil {
				return fmt.Errorf("raw pipe: %w", err)
			}
			raws = append(raws, p)
			continue
		}
		j, p, err := b.throughput(ctx, i, b.c.replicas[0], tr, "")
		if err != nil {
			return fmt.Errorf("count job (%s): %w", tr.name, err)
		}
		tputs[tr] = append(tputs[tr], p)
		if err := j.stopAll(); err != nil {
			return err
		}
	}
	n := b.c.records
	res := benchutil.Result
	raw, jon, joff := sum(raws), sum(tputs[on]), sum(tputs[&off])
	res("raw_pipe_throughput", "%.0f", raw.rate(n), "records/s")
	res("count_job_throughput", "%.0f", jon.rate(n), "records/s")
	res("count_job_busy_time_off_throughput", "%.0f", joff.rate(n), "records/s")
	res("count_job_vs_raw_ratio", "%.3f", jon.rate(n)/raw.rate(n), "ratio")
	res("busy_time_throughput_ratio", "%.3f", jon.rate(n)/joff.rate(n), "ratio")
	if pon, poff := jon.processingRate(n), joff.processingRate(n); pon > 0 && poff > 0 {
		res("count_job_processing_throughput", "%.0f", pon, "records/s")
		res("count_job_busy_time_off_processing_throughput", "%.0f", poff, "records/s")
		res("busy_time_processing_throughput_ratio", "%.3f", pon/poff, "ratio")
	}
	con, coff := jon.cpuPerMillion(jon.cpu, n), joff.cpuPerMillion(joff.cpu, n)
	res("count_job_cpu_per_million_records", "%.2f", con, "s")
	res("count_job_busy_time_off_cpu_per_million_records", "%.2f", coff, "s")
	res("busy_time_cpu_ratio", "%.3f", con/coff, "ratio")
	benchutil.Info("busy-time accounting: throughput %.0f vs %.0f records/s without (%+.1f%%), CPU %.2f vs %.2f s per million records (%+.1f%%); goal: at most 2%% of throughput",
		jon.rate(n), joff.rate(n), (jon.rate(n)/joff.rate(n)-1)*100, con, coff, (con/coff-1)*100)
	return nil
}
