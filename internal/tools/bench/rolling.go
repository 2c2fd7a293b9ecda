package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/benchutil"
)

// rollingMapStep is v2 of the -rolling job: the count job with a map that
// adds a field to every output, a compatible change whose output tells
// which file wrote it.
const rollingMapStep = `    - map: {value: {key: value.key, count: value.count, job: '"v2"'}}` + "\n"

// runRolling is a -rolling run (issue 31): the count job with the last
// -replicas entry of replicas (at least 2) under steady input (-rate), then
// a rolling update to v2 (the same job with a map step added) as the
// chart's StatefulSet does it: from the highest ordinal, each replica is
// stopped with SIGTERM and started with v2, and the next goes once it
// answers /readyz with 200. The figure is the time from the start of the
// first replica of v2 to the first committed output written by v2
// (read_committed, with "job":"v2"); the whole update's duration, from
// the first stop to the last replica of v2 ready, is printed too. The
// output is verified at the end.
func (b *bench) runRolling(ctx context.Context) error {
	n := max(b.c.replicas[len(b.c.replicas)-1], 2)
	j, err := b.newJob(ctx, b.id+"-rolling", b.plain)
	if err != nil {
		return err
	}
	v1, err := os.ReadFile(j.cfg)
	if err != nil {
		return err
	}
	agg := []byte("    - aggregate: {op: count}\n")
	if !bytes.Contains(v1, agg) {
		return errors.New("rolling: the count job has no aggregate step to add the map after")
	}
	v2File := filepath.Join(j.dir, "job-v2.yaml")
	if err := os.WriteFile(v2File, bytes.Replace(v1, agg, append(agg, rollingMapStep...), 1), 0o600); err != nil {
		return err
	}

	var mu sync.Mutex
	var firstOut, firstV2 time.Time
	obs, err := b.observe(ctx, j.out, nil, func(r *kgo.Record, seen time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if firstOut.IsZero() {
			firstOut = seen
		}
		if firstV2.IsZero() && bytes.Contains(r.Value, []byte(`"job":"v2"`)) {
			firstV2 = seen
		}
	})
	if err != nil {
		return err
	}
	defer obs.stop()
	observed := func() (time.Time, time.Time) {
		mu.Lock()
		defer mu.Unlock()
		return firstOut, firstV2
	}

	ids := make([]string, n)
	procs := make([]*proc, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("weir-%d", i)
		if procs[i], err = j.start(ids[i]); err != nil {
			return err
		}
	}
	s, err := b.startSteady(ctx, 31)
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			_, _ = s.stop()
		}
	}()
	for _, p := range procs {
		if _, err := j.waitReady(ctx, p, 2*time.Minute); err != nil {
			return err
		}
	}
	if err := waitUntil(ctx, 2*time.Minute, "the first committed output of v1", func() bool { t, _ := observed(); return !t.IsZero() }); err != nil {
		return err
	}
	if err := sleep(ctx, 5*time.Second); err != nil { // steady processing under v1
		return err
	}

	began := time.Now()
	var firstNew time.Time
	for i := n - 1; i >= 0; i-- {
		if err := j.term(procs[i]); err != nil {
			return err
		}
		if firstNew.IsZero() {
			firstNew = time.Now()
		}
		if procs[i], err = j.startWith(ids[i], v2File); err != nil {
			return err
		}
		body, err := j.waitReady(ctx, procs[i], 2*time.Minute)
		if err != nil {
			return err
		}
		benchutil.Info("%s runs v2 after %.1f s; /readyz: %s", ids[i], time.Since(began).Seconds(), strings.TrimSpace(body))
		if err := j.check(); err != nil {
			return err
		}
	}
	updated := time.Since(began)
	if err := waitUntil(ctx, 2*time.Minute, "the first committed output of v2", func() bool { _, t := observed(); return !t.IsZero() }); err != nil {
		return err
	}
	_, v2At := observed()
	benchutil.Result("rolling_update_to_new_job_output_seconds", "%.1f", v2At.Sub(firstNew).Seconds(), "s")
	benchutil.Info("the rolling update of %d replicas took %.1f s (from the first stop to the last replica of v2 ready)", n, updated.Seconds())

	stopped = true
	produced, err := s.stop()
	if err != nil {
		return err
	}
	if !b.c.verify {
		return j.stopAll()
	}
	vs, err := b.verifyOutputs(ctx, []output{{j, b.perKey, produced}})
	if err != nil {
		return err
	}
	if err := j.stopAll(); err != nil {
		return err
	}
	return verdict(vs)
}

// waitReady waits up to timeout for replica p to answer /readyz with 200
// and returns the answer.
func (j *job) waitReady(ctx context.Context, p *proc, timeout time.Duration) (string, error) {
	var body string
	err := waitUntil(ctx, timeout, "replica "+p.id+" ready", func() bool {
		resp, err := http.Get("http://" + p.http + "/readyz")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		body = buf.String()
		return resp.StatusCode == http.StatusOK
	})
	if err == nil {
		return body, nil
	}
	if !p.alive() {
		return "", fmt.Errorf("replica %s exited: %v; its log ends:\n%s", p.id, p.err, tail(p.log, 30))
	}
	return "", err
}

// waitUntil polls cond every 100ms until it holds, ctx ends or timeout
// passes.
func waitUntil(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v", what, timeout)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}
