package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/weir-stream/weir/internal/benchutil"
)

// apiEndpoints are the REST API's read endpoints the -api run asks, in
// turn (docs/api.md).
// lastCheckpoint stands for /api/v1/checkpoints/<the newest completed
// checkpoint the last /api/v1/job answer named>.
var apiEndpoints = []string{"/api/v1/job", "/api/v1/job/metrics", "/api/v1/checkpoints?limit=20", lastCheckpoint, baseline}

const lastCheckpoint = "/api/v1/checkpoints/<last>"

// baseline is asked in turn with the API, and reported apart: /healthz
// does nothing, so its latency is the replica's HTTP server and scheduler
// under the job's load, what the API's figures are to be compared with.
const baseline = "/healthz"

// runAPI is an -api run (issue 34): the count job with the first -replicas
// entry of replicas processes the preloaded input at full speed while this
// process asks every replica's REST API, in turn, every endpoint in
// apiEndpoints, one request every -api-every (a closed loop: one at a
// time). Latencies count from the moment every replica is ready and a
// sink wrote its first record to the job's last committed output, that is
// under the job's full load; the figures are p50, p99 and
// the maximum over every request, and per endpoint in the log. The job's
// throughput is printed as well, to compare with a run without -api.
func (b *bench) runAPI(ctx context.Context) error {
	n := b.c.replicas[0]
	j, err := b.newJob(ctx, b.id+"-api", b.plain)
	if err != nil {
		return err
	}
	cnt := newCounter(b.c.records)
	obs, err := b.observe(ctx, j.out, nil, cnt.record)
	if err != nil {
		return err
	}
	defer obs.stop()
	start := time.Now()
	procs := make([]*proc, n)
	for r := range n {
		if procs[r], err = j.start(fmt.Sprintf("r%d", r+1)); err != nil {
			return err
		}
	}
	// Every replica ready (the generation of all of them running, after
	// the one the first replica started alone) before the first request
	// counts: a steady load, not a start-up.
	for _, p := range procs {
		if _, err := j.waitReady(ctx, p, 2*time.Minute); err != nil {
			return err
		}
	}
	client := &http.Client{Timeout: 10 * time.Second}
	var last uint64 // the newest completed checkpoint, from /api/v1/job
	get := func(url string) (time.Duration, int, error) {
		t0 := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			return 0, 0, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(t0)
		var j struct {
			Last *struct {
				ID uint64 `json:"id"`
			} `json:"last_checkpoint"`
		}
		if strings.HasSuffix(url, "/api/v1/job") && json.Unmarshal(body, &j) == nil && j.Last != nil {
			last = j.Last.ID
		}
		return d, resp.StatusCode, err
	}
	all := []time.Duration{}
	per := map[string][]time.Duration{}
	failed := 0
	answered := map[string]bool{} // by replica, once it answered 200: its API has read the job's history
	processing := false           // once a sink wrote its first record
	tick := time.NewTicker(b.c.apiEvery)
	defer tick.Stop()
	deadline := time.After(10 * time.Minute)
	for i := 0; ; i++ {
		select {
		case <-cnt.reached:
			// The same requests once the job has processed its input
			// (idle but for its checkpoints): the API's own cost.
			var idle []time.Duration
			for k := range 200 {
				ep := apiEndpoints[k%(len(apiEndpoints)-2)] // the API's endpoints without a path parameter
				d, status, err := get("http://" + procs[k%n].http + ep)
				if err != nil || status != http.StatusOK {
					return fmt.Errorf("GET %s once idle: status %d, %v", ep, status, err)
				}
				idle = append(idle, d)
				if err := sleep(ctx, b.c.apiEvery); err != nil {
					return err
				}
			}
			benchutil.Info("once the job is idle, 200 requests: p50 %.2f ms, p99 %.2f ms", ms(pct(idle, 50)), ms(pct(idle, 99)))
			benchutil.Result("api_latency_idle_p99", "%.2f", ms(pct(idle, 99)), "ms")
			return b.apiResults(j, start, time.Unix(0, cnt.doneAt.Load()), all, per, failed)
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("observer saw %d of %d records after 10 minutes", cnt.seen.Load(), b.c.records)
		case <-tick.C:
		}
		if err := j.check(); err != nil {
			return err
		}
		ep := apiEndpoints[i%len(apiEndpoints)]
		p := procs[(i/len(apiEndpoints))%n]
		path := ep
		if ep == lastCheckpoint {
			if last == 0 {
				continue
			}
			path = fmt.Sprintf("/api/v1/checkpoints/%d", last)
		}
		d, status, err := get("http://" + p.http + path)
		if err == nil && status == http.StatusOK && ep != baseline {
			answered[p.id] = true
		}
		if !processing && j.scrapeSum(ctx, "weir_sink_records_written_total") > 0 {
			processing = true
		}
		if !processing || !answered[p.id] {
			continue // starting: the API answers 503 until it has read the job's history
		}
		if err != nil || status != http.StatusOK {
			failed++
			benchutil.Info("GET %s on %s: status %d, %v", ep, p.id, status, err)
			continue
		}
		if ep != baseline {
			all = append(all, d)
		}
		per[ep] = append(per[ep], d)
	}
}

func (b *bench) apiResults(j *job, start, end time.Time, all []time.Duration, per map[string][]time.Duration, failed int) error {
	if len(all) == 0 {
		return fmt.Errorf("no API request answered while the job processed (%d failed)", failed)
	}
	rate := float64(b.c.records) / end.Sub(start).Seconds()
	benchutil.Info("count job with %d replica(s) under API requests every %v: %d records in %v: %.0f records/s (includes start-up)",
		b.c.replicas[0], b.c.apiEvery, b.c.records, end.Sub(start).Round(time.Millisecond), rate)
	eps := make([]string, 0, len(per))
	for ep := range per {
		eps = append(eps, ep)
	}
	slices.Sort(eps)
	for _, ep := range eps {
		ds := per[ep]
		benchutil.Info("  %-32s %4d requests: p50 %.2f ms, p99 %.2f ms, max %.2f ms", ep, len(ds), ms(pct(ds, 50)), ms(pct(ds, 99)), ms(pct(ds, 100)))
	}
	benchutil.Info("%d requests answered 200 under load, %d failed", len(all), failed)
	benchutil.Result("api_latency_p50", "%.2f", ms(pct(all, 50)), "ms")
	benchutil.Result("api_latency_p99", "%.2f", ms(pct(all, 99)), "ms")
	benchutil.Result("api_latency_max", "%.2f", ms(pct(all, 100)), "ms")
	benchutil.Result("count_job_throughput_under_api_requests", "%.0f", rate, "records/s")
	if failed > 0 {
		return fmt.Errorf("%d API requests failed under load", failed)
	}
	return j.stopAll()
}

// pct returns the p-th percentile of ds (quantile over a sorted copy; 100:
// the maximum).
func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return quantile(s, float64(p)/100)
}
