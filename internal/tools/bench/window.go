package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/benchutil"
)

// The -window run (issue 13): the tumbling-window job of the issue,
//
//	source json (timestamp: {field: ts, format: unix_ms}, watermark:
//	{max_out_of_orderness: 5s, idle_timeout: 30s}) → key_by page →
//	window tumbling 1m, allowed_lateness 10s, late_topic → aggregate count
//	→ sink json exactly-once
//
// over N records {"i","user","page","ts"} whose event times all fall in one
// window, [t0, t0+size), t0 ten minutes ago, rising with the offset and up
// to the out-of-orderness behind (never late), and whose pages are N
// distinct ones by default (-pages): N open windows at once, one per record,
// until the watermark passes the window. The run:
//
//  1. the raw two-hop pipe (the job has a shuffle: the fair baseline, as
//     for -two-stage), before and after the jobs; its figure is over both
//     passes;
//  2. the hold job: reads the N records, then, with every window open,
//     the durations of the next -hold-checkpoints checkpoints (trigger to
//     complete); then one flush record per partition (event time past the
//     window's end + lateness + out-of-orderness) fires the N windows, and
//     the time from the flush to the N-th count committed is the firing
//     figure; no result may be committed before the flush;
//  3. the throughput job: a fresh job over the same input, flush records
//     included, timed from before its process starts until the committed
//     results' counts add up to N (an independent read_committed consumer);
//  4. the latency job: a fresh job on a fresh topic with steady input at
//     -rate records/s, event time = the wall clock at the produce call,
//     over 1000 pages, windows of -latency-window-size with
//     -latency-lateness; the delay of a result is the time a read_committed
//     consumer sees it minus its window's end (event time). The goal is
//     p99 <= out-of-orderness + lateness + checkpoint interval + 500ms;
//  5. every result of the three jobs is verified: each (page, window) once
//     with exactly its input's count.

// windowSpec is a window job's event-time settings.
type windowSpec struct {
	size, lateness, bound, idle time.Duration
}

func (w windowSpec) yaml(late string) (source, steps string) {
	source = fmt.Sprintf(", timestamp: {field: ts, format: unix_ms}, watermark: {max_out_of_orderness: %s, idle_timeout: %s}", w.bound, w.idle)
	steps = fmt.Sprintf("    - key_by: {field: page}\n    - window: {type: tumbling, size: %s, allowed_lateness: %s, late_topic: %s}\n    - aggregate: {op: count}\n",
		w.size, w.lateness, late)
	return source, steps
}

// windowTS is the event time of throughput record i of n: rising with i
// from t0+bound to the end of the window [t0, t0+size), and up to bound
// behind that (so never behind the largest event time before it by more
// than bound, on any partition).
func (b *bench) windowTS(rng *mrand.Rand, i int) int64 {
	w := b.c.win
	span := (w.size - w.bound - time.Millisecond).Milliseconds()
	base := b.t0 + w.bound.Milliseconds() + int64(i)*span/int64(b.c.records)
	return base - rng.Int64N(w.bound.Milliseconds()+1)
}

// windowPage is throughput record i's page: i spread over the pages by a
// multiplicative permutation, so that with as many pages as records each
// page has exactly one record.
func (b *bench) windowPage(i int) string {
	const prime = 1_000_003 // coprime with any page count it does not divide
	p := (uint64(i) * prime) % uint64(b.c.pages)
	if b.c.pages%prime == 0 {
		p = uint64(i) % uint64(b.c.pages)
	}
	return fmt.Sprintf("page-%07d", p)
}

func windowValue(buf []byte, i int, user, page string, ts int64) []byte {
	buf = append(buf[:0], `{"i":`...)
	buf = strconv.AppendInt(buf, int64(i), 10)
	buf = append(buf, `,"user":"`...)
	buf = append(buf, user...)
	buf = append(buf, `","page":"`...)
	buf = append(buf, page...)
	buf = append(buf, `","ts":`...)
	buf = strconv.AppendInt(buf, ts, 10)
	return append(buf, '}')
}

// newWindowJob writes the job file of a window job reading input.
func (b *bench) newWindowJob(ctx context.Context, name, input string, w windowSpec) (*job, error) {
	j := &job{b: b, name: name, out: name + "-out", dir: filepath.Join(b.dir, name)}
	b.jobs = append(b.jobs, name)
	if err := os.MkdirAll(j.dir, 0o755); err != nil {
		return nil, err
	}
	late := name + "-late"
	for _, t := range []string{j.out, late} {
		if err := b.createTopic(ctx, t); err != nil {
			return nil, err
		}
	}
	j.cfg = filepath.Join(j.dir, "job.yaml")
	source, steps := w.yaml(late)
	yaml := fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source: {topics: [%s], format: json, start: earliest%s}
%s    - sink: {topic: %s, format: json, delivery: exactly-once}
kafka:
  brokers: [%s]
  session_timeout: %s
checkpoint:
  interval: %s
  storage: file://%s
log:
  level: %s
`, name, input, source, steps, j.out, strings.Join(b.c.brokers, ", "), b.c.sessionTimeout, b.c.interval, filepath.Join(j.dir, "checkpoints"), b.c.logLevel)
	return j, os.WriteFile(j.cfg, []byte(yaml), 0o600)
}

// windowOutput follows a window job's output (read_committed, from the
// start) and checks every result against the input's counts per window.
type windowOutput struct {
	obs *observer

	mu       sync.Mutex
	counted  int64 // the results' counts, summed
	results  int
	first    time.Time // when the first result was seen
	reached  chan struct{}
	want     int64
	doneAt   time.Time
	seen     map[pageWindow]int // results per window
	counts   map[pageWindow]int64
	problems []string
	bad      int
	onResult func(end time.Time, seen time.Time)
}

// pageWindow is a page's window, by its start.
type pageWindow struct {
	page  string
	start int64 // Unix ms
}

func (k pageWindow) String() string {
	return k.page + "@" + time.UnixMilli(k.start).UTC().Format(time.RFC3339Nano)
}

type windowResult struct {
	Key   string `json:"key"`
	Start string `json:"window_start"`
	End   string `json:"window_end"`
	Count *int64 `json:"count"`
	Early bool   `json:"early"`
}

// observeWindows starts following topic; reached closes when the counts
// add up to want.
func (b *bench) observeWindows(ctx context.Context, topic string, want int64, onResult func(end, seen time.Time)) (*windowOutput, error) {
	o := &windowOutput{reached: make(chan struct{}), want: want, seen: map[pageWindow]int{}, counts: map[pageWindow]int64{}, onResult: onResult}
	obs, err := b.observe(ctx, topic, nil, func(r *kgo.Record, seen time.Time) {
		var v windowResult
		err := json.Unmarshal(r.Value, &v)
		start, errStart := time.Parse(time.RFC3339Nano, v.Start)
		end, errEnd := time.Parse(time.RFC3339Nano, v.End)
		o.mu.Lock()
		defer o.mu.Unlock()
		if err != nil || errStart != nil || errEnd != nil || v.Count == nil || v.Early {
			o.bad++
			o.note("%s[%d]@%d: not a final window count: %.200q", r.Topic, r.Partition, r.Offset, r.Value)
			return
		}
		if o.results == 0 {
			o.first = seen
		}
		o.results++
		k := pageWindow{v.Key, start.UnixMilli()}
		o.seen[k]++
		o.counts[k] = *v.Count
		o.counted += *v.Count
		if o.want > 0 && o.counted >= o.want && o.doneAt.IsZero() {
			o.doneAt = seen
			close(o.reached)
		}
		if o.onResult != nil {
			o.onResult(end, seen)
		}
	})
	if err != nil {
		return nil, err
	}
	o.obs = obs
	return o, nil
}

func (o *windowOutput) note(format string, args ...any) {
	if len(o.problems) < 10 {
		o.problems = append(o.problems, fmt.Sprintf(format, args...))
	}
}

func (o *windowOutput) snapshot() (results int, counted int64, first time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.results, o.counted, o.first
}

// check compares what was read with the expected count of every (page,
// window start) and returns the verification; keep, if set, selects the
// windows that count (the rest is not checked).
func (o *windowOutput) check(topic string, want map[pageWindow]int64, keep func(pageWindow) bool) *verification {
	o.mu.Lock()
	defer o.mu.Unlock()
	v := &verification{topic: topic, duplicated: o.bad, problems: slices.Clone(o.problems)}
	note := func(format string, args ...any) {
		if len(v.problems) < 10 {
			v.problems = append(v.problems, fmt.Sprintf(format, args...))
		}
	}
	for k, n := range o.seen {
		if keep != nil && !keep(k) {
			continue
		}
		w, ok := want[k]
		switch {
		case !ok:
			v.duplicated += n
			note("window %s: %d results, but no input", k, n)
		case n > 1:
			v.duplicated += n - 1
			note("window %s: %d results", k, n)
		}
		if ok && o.counts[k] != w {
			v.lost++
			note("window %s: count %d, want %d", k, o.counts[k], w)
		}
	}
	for k := range want {
		if (keep == nil || keep(k)) && o.seen[k] == 0 {
			v.lost++
			note("window %s: no result", k)
		}
	}
	return v
}

// runWindow is a -window run after the preload: see the comment at the
// top of this file.
func (b *bench) runWindow(ctx context.Context) error {
	n := b.c.records
	w := b.c.win
	want := map[pageWindow]int64{}
	for page, c := range b.preloadPerKey {
		want[pageWindow{page, b.t0}] = int64(c)
	}
	var raws []pass
	p, err := b.rawTwoHop(ctx, 1)
	if err != nil {
		return fmt.Errorf("raw two-hop pipe: %w", err)
	}
	raws = append(raws, p)

	// 2. The hold job: checkpoints with every window open, then the firing.
	hold, err := b.newWindowJob(ctx, b.id+"-hold", b.in, w)
	if err != nil {
		return err
	}
	holdOut, err := b.observeWindows(ctx, hold.out, int64(n), nil)
	if err != nil {
		return err
	}
	defer holdOut.obs.stop()
	holdStart := time.Now()
	for r := range b.c.replicas[0] {
		if _, err := hold.start(fmt.Sprintf("r%d", r+1)); err != nil {
			return err
		}
	}
	readAt, err := b.waitRead(ctx, hold, n)
	if err != nil {
		return fmt.Errorf("hold job: %w", err)
	}
	benchutil.Info("hold job: its source read the %d records %v after its start; waiting for %d checkpoints with every window open",
		n, readAt.Sub(holdStart).Round(time.Millisecond), b.c.holdCheckpoints)
	var durs []time.Duration
	deadline := time.Now().Add(10 * time.Minute)
	for len(durs) < b.c.holdCheckpoints {
		if err := hold.check(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hold job: %d of %d checkpoints completed after the input was read, in 10 minutes", len(durs), b.c.holdCheckpoints)
		}
		if err := sleep(ctx, b.c.interval); err != nil {
			return err
		}
		if durs, _, err = b.checkpointDurations(ctx, hold.name, readAt, time.Now()); err != nil {
			return fmt.Errorf("checkpoint durations: %w", err)
		}
	}
	stateBytes := hold.scrapeSum(ctx, "weir_checkpoint_state_bytes")
	res := benchutil.Result
	res("window_checkpoint_duration_p50", "%.0f", ms(quantile(durs, 0.5)), "ms")
	res("window_checkpoint_duration_p99", "%.0f", ms(quantile(durs, 0.99)), "ms")
	benchutil.Info("checkpoints with %d open windows (hold job, triggered after its source read all input): %d, p50 %v, p99 %v, max %v; state of the newest checkpoint %.1f MB",
		len(want), len(durs), quantile(durs, 0.5), quantile(durs, 0.99), slices.Max(durs), stateBytes/1e6)
	early, _, _ := holdOut.snapshot()
	written0 := hold.scrapeSum(ctx, "weir_sink_records_written_total")
	flushAt := time.Now()
	if err := b.produceFlush(ctx, b.in); err != nil {
		return err
	}
	// The sinks' written-records counters, scraped every 200ms: when the
	// N-th result was written (before its commit).
	var writtenAt time.Time
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	timeout := time.After(15 * time.Minute)
fire:
	for {
		select {
		case <-holdOut.reached:
			break fire
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			_, c, _ := holdOut.snapshot()
			return fmt.Errorf("hold job: the committed counts add up to %d of %d 15 minutes after the flush", c, n)
		case <-tick.C:
			if err := hold.check(); err != nil {
				return err
			}
			if writtenAt.IsZero() && hold.scrapeSum(ctx, "weir_sink_records_written_total")-written0 >= float64(n) {
				writtenAt = time.Now()
			}
		}
	}
	fired := holdOut.doneAt.Sub(flushAt)
	res("window_fire_seconds", "%.2f", fired.Seconds(), "s")
	if !writtenAt.IsZero() {
		res("window_fire_written_seconds", "%.2f", writtenAt.Sub(flushAt).Seconds(), "s")
	}
	benchutil.Info("firing: %d windows' results written %v and visible to read_committed %v after the flush records were produced",
		len(want), writtenAt.Sub(flushAt).Round(100*time.Millisecond), fired.Round(time.Millisecond))
	holdV := holdOut.check(hold.out, want, nil)
	if early > 0 {
		holdV.duplicated += early
		holdV.problems = append(holdV.problems, fmt.Sprintf("%d results committed before the flush, while the watermark was inside the window", early))
	}
	if err := hold.stopAll(); err != nil {
		return err
	}

	// 3. The throughput job.
	tput, err := b.newWindowJob(ctx, b.id+"-tput", b.in, w)
	if err != nil {
		return err
	}
	tputOut, err := b.observeWindows(ctx, tput.out, int64(n), nil)
	if err != nil {
		return err
	}
	defer tputOut.obs.stop()
	cpu0 := benchutil.ProcCPU(b.c.brokerPID)
	tStart := time.Now()
	for r := range b.c.replicas[0] {
		if _, err := tput.start(fmt.Sprintf("r%d", r+1)); err != nil {
			return err
		}
	}
	timeout = time.After(15 * time.Minute)
wait:
	for {
		select {
		case <-tputOut.reached:
			break wait
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			_, c, _ := tputOut.snapshot()
			return fmt.Errorf("throughput job: the committed counts add up to %d of %d after 15 minutes", c, n)
		case <-tick.C:
			if err := tput.check(); err != nil {
				return err
			}
		}
	}
	t := pass{passes: 1, wall: tputOut.doneAt.Sub(tStart), brokerCPU: cpuDelta(cpu0, benchutil.ProcCPU(b.c.brokerPID)), start: tStart, end: tputOut.doneAt}
	for _, p := range tput.procs {
		t.cpu += benchutil.ProcCPU(p.cmd.Process.Pid)
	}
	_, _, firstRes := tputOut.snapshot()
	tputDurs, _, err := b.checkpointDurations(ctx, tput.name, t.start, t.end)
	if err != nil {
		return fmt.Errorf("checkpoint durations: %w", err)
	}
	tputV := tputOut.check(tput.out, want, nil)
	tputFailed := tput.scrapeSum(ctx, "weir_checkpoint_failed_total")
	if err := tput.stopAll(); err != nil {
		return err
	}
	if p, err = b.rawTwoHop(ctx, 2); err != nil {
		return fmt.Errorf("raw two-hop pipe: %w", err)
	}
	raws = append(raws, p)

	raw := sum(raws)
	res("window_job_throughput", "%.0f", t.rate(n), "records/s")
	res("raw_two_hop_throughput", "%.0f", raw.rate(n), "records/s")
	res("window_job_vs_raw_two_hop_ratio", "%.3f", t.rate(n)/raw.rate(n), "ratio")
	benchutil.Info("window job, %d replica(s): %d records in %v (%.0f records/s); first result committed %v after the start, the last %v after it; CPU: replicas %v, broker %s",
		b.c.replicas[0], n, t.wall.Round(time.Millisecond), t.rate(n), firstRes.Sub(tStart).Round(time.Millisecond),
		tputOut.doneAt.Sub(firstRes).Round(time.Millisecond), t.cpu.Round(time.Millisecond), cpuString(t.brokerCPU))
	if len(tputDurs) > 0 {
		benchutil.Info("  its %d checkpoints (open windows growing to %d): p50 %v, p99 %v, max %v; %.0f failed (weir_checkpoint_failed_total)", len(tputDurs), len(want),
			quantile(tputDurs, 0.5), quantile(tputDurs, 0.99), slices.Max(tputDurs), tputFailed)
	}
	// 4. The latency job.
	latV, lats, err := b.windowLatency(ctx)
	if err != nil {
		return fmt.Errorf("latency: %w", err)
	}

	if len(lats) > 0 {
		p50, p99 := quantile(lats, 0.5), quantile(lats, 0.99)
		goal := b.c.latWin.bound + b.c.latWin.lateness + b.c.interval + 500*time.Millisecond
		res("window_result_delay_p50", "%.0f", ms(p50), "ms")
		res("window_result_delay_p99", "%.0f", ms(p99), "ms")
		met := "met"
		if p99 > goal {
			met = "NOT met"
		}
		benchutil.Info("result delay (window end in event time → result visible to read_committed), windows of %v, lateness %v, at %d records/s: %d results, p50 %v, p99 %v, max %v; goal p99 <= out-of-orderness %v + lateness %v + checkpoint interval %v + 500ms = %v: %s",
			b.c.latWin.size, b.c.latWin.lateness, b.c.rate, len(lats), p50.Round(time.Millisecond), p99.Round(time.Millisecond),
			lats[len(lats)-1].Round(time.Millisecond), b.c.latWin.bound, b.c.latWin.lateness, b.c.interval, goal, met)
	}
	benchutil.Info("load average now %s", loadAvg())
	benchutil.Info("headline: the window job, %d replica(s), %.0f records/s vs the raw two-hop pipe's %.0f records/s: %.3f",
		b.c.replicas[0], t.rate(n), raw.rate(n), t.rate(n)/raw.rate(n))
	for _, v := range []*verification{holdV, tputV, latV} {
		benchutil.Info("verified %s: %d lost or wrong counts, %d duplicated or unexpected results", v.topic, v.lost, v.duplicated)
	}
	return verdict([]*verification{holdV, tputV, latV})
}

// waitRead waits until the job's sources have read n records
// (weir_source_records_read_total) and returns when.
func (b *bench) waitRead(ctx context.Context, j *job, n int) (time.Time, error) {
	deadline := time.Now().Add(10 * time.Minute)
	for {
		if err := j.check(); err != nil {
			return time.Time{}, err
		}
		if j.scrapeSum(ctx, "weir_source_records_read_total") >= float64(n) {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("its sources did not read %d records in 10 minutes", n)
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return time.Time{}, err
		}
	}
}

// produceFlush writes one record per partition of topic with an event
// time past the throughput window's end, lateness and out-of-orderness, so
// that the window fires. Its page is "flush", a window of its own that
// stays open.
func (b *bench) produceFlush(ctx context.Context, topic string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer cl.Close()
	w := b.c.win
	ts := b.t0 + (w.size + w.lateness + w.bound + time.Second).Milliseconds()
	var errs error
	for p := range b.c.partitions {
		r := &kgo.Record{Key: []byte("user-flush"), Value: windowValue(nil, -1, "user-flush", "flush", ts), Partition: int32(p)}
		errs = errors.Join(errs, cl.ProduceSync(ctx, r).FirstErr())
	}
	if errs != nil {
		return fmt.Errorf("flush records: %w", errs)
	}
	return nil
}

// windowLatency runs the latency job: a fresh topic, steady input at the
// configured rate with event time = produce time, windows of
// -latency-window-size. It returns the verification of the results and
// the delays (seen − window end) of the results of windows that ended
// after the first seconds of input and early enough to close before the
// input stopped, sorted.
func (b *bench) windowLatency(ctx context.Context) (*verification, []time.Duration, error) {
	lw := b.c.latWin
	in := b.id + "-steady"
	if err := b.createTopic(ctx, in); err != nil {
		return nil, nil, err
	}
	j, err := b.newWindowJob(ctx, b.id+"-lat", in, lw)
	if err != nil {
		return nil, nil, err
	}
	var mu sync.Mutex
	var lats []time.Duration
	var from, to atomic.Int64 // Unix ms: the window ends measured
	from.Store(1<<62 - 1)
	to.Store(1<<62 - 1)
	out, err := b.observeWindows(ctx, j.out, 0, func(end, seen time.Time) {
		if e := end.UnixMilli(); e >= from.Load() && e <= to.Load() {
			mu.Lock()
			lats = append(lats, seen.Sub(end))
			mu.Unlock()
		}
	})
	if err != nil {
		return nil, nil, err
	}
	defer out.obs.stop()
	// The same read_uncommitted: when each result was written, before its
	// commit (the firing's share of the delay; the rest is the wait for the
	// checkpoint that commits it).
	written := map[pageWindow]time.Duration{}
	unc, err := b.observe(ctx, j.out, nil, func(r *kgo.Record, seen time.Time) {
		var v windowResult
		if json.Unmarshal(r.Value, &v) != nil {
			return
		}
		start, err1 := time.Parse(time.RFC3339Nano, v.Start)
		end, err2 := time.Parse(time.RFC3339Nano, v.End)
		if err1 != nil || err2 != nil {
			return
		}
		if e := end.UnixMilli(); e < from.Load() || e > to.Load() {
			return
		}
		k := pageWindow{v.Key, start.UnixMilli()}
		mu.Lock()
		if _, ok := written[k]; !ok {
			written[k] = seen.Sub(end)
		}
		mu.Unlock()
	}, kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	if err != nil {
		return nil, nil, err
	}
	defer unc.stop()
	for r := range b.c.replicas[0] {
		if _, err := j.start(fmt.Sprintf("r%d", r+1)); err != nil {
			return nil, nil, err
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.c.brokers...), kgo.DefaultProduceTopic(in), kgo.ProducerLinger(0))
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	var failed atomic.Pointer[error]
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	const pages = 1000
	want := map[pageWindow]int64{}
	rng := mrand.New(mrand.NewPCG(30, 4))
	size := lw.size.Milliseconds()
	produce := func(i int) {
		now := time.Now()
		ts := now.UnixMilli()
		user, page := keyName(rng.IntN(b.c.keys)), fmt.Sprintf("lpage-%04d", rng.IntN(pages))
		want[pageWindow{page, ts - ts%size}]++
		cl.Produce(ctx, &kgo.Record{Key: []byte(user), Value: windowValue(nil, i, user, page, ts), Timestamp: now}, promise)
	}
	// Until the job's first result: its start-up, not measured.
	const tickEvery = 10 * time.Millisecond
	tk := time.NewTicker(tickEvery)
	defer tk.Stop()
	began := time.Now()
	i := 0
	var measureFrom, measureTo time.Time
	for {
		now := <-tk.C
		for want := int(now.Sub(began).Seconds() * float64(b.c.rate)); i < want; i++ {
			produce(i)
		}
		if p := failed.Load(); p != nil {
			return nil, nil, fmt.Errorf("steady input: %w", *p)
		}
		if err := j.check(); err != nil {
			return nil, nil, err
		}
		if res, _, _ := out.snapshot(); res > 0 && measureFrom.IsZero() {
			// Windows ending from two seconds on: the backlog of the
			// start-up is gone by then.
			measureFrom = now.Add(2 * time.Second)
			measureTo = measureFrom.Add(b.c.latencyFor)
			from.Store(measureFrom.UnixMilli())
			to.Store(measureTo.UnixMilli())
			benchutil.Info("latency job: first result %v after its start; measuring the windows ending in the next %v", now.Sub(began).Round(time.Millisecond), b.c.latencyFor)
		}
		if !measureFrom.IsZero() && now.After(measureTo.Add(lw.bound+lw.lateness+b.c.interval+10*time.Second)) {
			break
		}
		if now.Sub(began) > 10*time.Minute {
			return nil, nil, errors.New("no result of the latency job in 10 minutes")
		}
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return nil, nil, err
	}
	v := out.check(j.out, want, func(k pageWindow) bool {
		e := time.UnixMilli(k.start).Add(lw.size)
		return !e.Before(measureFrom) && !e.After(measureTo)
	})
	if err := j.stopAll(); err != nil {
		return nil, nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lats)
	if len(lats) == 0 {
		return nil, nil, fmt.Errorf("no result of a window ending between %v and %v", measureFrom, measureTo)
	}
	var ws []time.Duration
	for _, d := range written {
		ws = append(ws, d)
	}
	slices.Sort(ws)
	if len(ws) > 0 {
		benchutil.Info("latency job: window end → result written (read_uncommitted, before its commit): %d results, p50 %v, p99 %v",
			len(ws), quantile(ws, 0.5).Round(time.Millisecond), quantile(ws, 0.99).Round(time.Millisecond))
	}
	durs, _, err := b.checkpointDurations(ctx, j.name, measureFrom, measureTo)
	if err == nil && len(durs) > 0 {
		benchutil.Info("latency job: %d checkpoints meanwhile, p50 %v, p99 %v", len(durs), quantile(durs, 0.5), quantile(durs, 0.99))
	}
	return v, lats, nil
}
