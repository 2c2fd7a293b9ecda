package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// The event-time run (issue 13): the YAML job views-per-page-per-window,
//
//	source (timestamp from the JSON field ts, unix_ms; watermark with 5 s
//	of out-of-orderness, idle after 5 s) → key_by page → window tumbling
//	5 s, allowed lateness 2 s, late_topic → aggregate count → sink
//	exactly-once
//
// over input produced in rounds: round r gives each active partition
// etPerRound records whose event times lie in [base(r) − 5 s, base(r)],
// base(r) = etT0 + 5 s + r·etStep, the first of them exactly base(r): every
// such record is at most 5 s behind the largest event time before it on its
// partition (in bound: never late). Partition etIdlePartition carries its
// own pages (idle-NN) and stops after round etIdleRound while the others go
// on, so its pages' last windows close only if the partition is marked
// idle. Among the live rounds, once every page's first window has a
// committed result, some records are far late (event time a minute or more
// before etT0, older than any window that was ever open: late whatever the
// tasks' relative progress after a restore) and some are behind (20–30 s
// behind their round: beyond the lateness, but whether they are late depends
// on how far the slowest upstream task had got, so they are only counted).
const (
	etRounds        = 600
	etPreload       = 150 // rounds produced before the replicas start
	etPerRound      = 20  // records per partition and round
	etStep          = 100 * time.Millisecond
	etRoundPause    = 100 * time.Millisecond // wall time between live rounds
	etIdlePartition = 7
	etIdleRound     = 300 // the idle partition's last round
	etPages         = 150 // pages of the other partitions
	etIdlePages     = 20
	etSize          = 5 * time.Second // window size
	etLateness      = 2 * time.Second // allowed lateness
	etBound         = 5 * time.Second // max out-of-orderness
	etIdleTimeout   = 5 * time.Second
)

// recordClass is how far an input record is behind its partition.
type recordClass int

const (
	inBound recordClass = iota // at most etBound behind: never late
	behind                     // 20–30 s behind its round: late or counted
	farLate                    // before any window ever open: always late
	flush                      // after the input: advances the watermark
)

func (c recordClass) String() string {
	return [...]string{"in-bound", "behind", "far-late", "flush"}[c]
}

// etRecord is one acknowledged input record.
type etRecord struct {
	page  string
	ts    int64 // event time, Unix ms
	class recordClass
	part  int32
}

// etInput produces the event-time input with an idempotent producer
// (per-partition order kept) and keeps every acknowledged record by its ID.
type etInput struct {
	t  *testing.T
	cl *kgo.Client
	t0 int64 // Unix ms, a multiple of etSize

	mu   sync.Mutex
	next int64
	recs map[int64]etRecord
	err  error
}

func newETInput(t *testing.T, brokers []string, topic string, t0 int64) *etInput {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatalf("input client: %v", err)
	}
	t.Cleanup(cl.Close)
	return &etInput{t: t, cl: cl, t0: t0, recs: map[int64]etRecord{}}
}

func (in *etInput) base(r int) int64 {
	return in.t0 + etBound.Milliseconds() + int64(r)*etStep.Milliseconds()
}

// produce sends one record {"i","user","page","ts"} to partition p.
func (in *etInput) produce(ctx context.Context, p int32, user, page string, ts int64, class recordClass) {
	in.mu.Lock()
	id := in.next
	in.next++
	in.mu.Unlock()
	v, _ := json.Marshal(map[string]any{"i": id, "user": user, "page": page, "ts": ts})
	in.cl.Produce(ctx, &kgo.Record{Key: []byte(user), Value: v, Partition: p}, func(_ *kgo.Record, err error) {
		in.mu.Lock()
		defer in.mu.Unlock()
		if err != nil {
			in.err = cmpErr(in.err, fmt.Errorf("produce input: %w", err))
			return
		}
		in.recs[id] = etRecord{page: page, ts: ts, class: class, part: p}
	})
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func pageOf(rng *rand.Rand, p int32) string {
	if p == etIdlePartition {
		return fmt.Sprintf("idle-%02d", rng.IntN(etIdlePages))
	}
	return fmt.Sprintf("page-%03d", rng.IntN(etPages))
}

// round produces round r; with extra, maybe a far-late and a behind
// record too.
func (in *etInput) round(ctx context.Context, rng *rand.Rand, r int, extra bool) {
	base := in.base(r)
	var active []int32
	for p := range int32(partitions) {
		if p == etIdlePartition && r > etIdleRound {
			continue
		}
		active = append(active, p)
		for j := range etPerRound {
			ts := base
			if j > 0 {
				ts -= rng.Int64N(etBound.Milliseconds() + 1)
			}
			in.produce(ctx, p, fmt.Sprintf("user-%04d", rng.IntN(1000)), pageOf(rng, p), ts, inBound)
		}
	}
	if !extra {
		return
	}
	if rng.IntN(4) == 0 {
		p := active[rng.IntN(len(active))]
		in.produce(ctx, p, "user-late", pageOf(rng, p), in.t0-60_000-rng.Int64N(60_000), farLate)
	}
	if rng.IntN(4) == 0 {
		p := active[rng.IntN(len(active))]
		in.produce(ctx, p, "user-behind", pageOf(rng, p), base-20_000-rng.Int64N(10_000), behind)
	}
}

// flush produces one record per partition far after the input, so that
// every window of the input closes.
func (in *etInput) flush(ctx context.Context) {
	ts := in.base(etRounds) + 30_000
	for p := range int32(partitions) {
		in.produce(ctx, p, "user-flush", "flush", ts, flush)
	}
}

func (in *etInput) wait(ctx context.Context) (map[int64]etRecord, error) {
	err := in.cl.Flush(ctx)
	in.mu.Lock()
	defer in.mu.Unlock()
	return maps.Clone(in.recs), cmpErr(err, in.err)
}

// snapshot returns the records acknowledged so far.
func (in *etInput) snapshot() map[int64]etRecord {
	in.mu.Lock()
	defer in.mu.Unlock()
	return maps.Clone(in.recs)
}

func windowOf(ts int64) int64 {
	s := etSize.Milliseconds()
	return ts - ((ts%s)+s)%s
}

// etTally is, per window, what the input holds and what the output and
// late topic say of it.
type etTally struct {
	in      int // input records
	inBound int // of which in bound
	late    int // in the late topic
	results []e2etest.WindowResult
}

// tally groups the input and what the reader read by window; the flush
// page is left out. It also returns each input ID's late-topic records
// and the problems of the late records themselves.
func tally(recs map[int64]etRecord, res map[e2etest.WindowKey][]e2etest.WindowResult, lates []e2etest.LateRecord) (map[e2etest.WindowKey]*etTally, map[int64]int, []string) {
	out := map[e2etest.WindowKey]*etTally{}
	get := func(k e2etest.WindowKey) *etTally {
		if out[k] == nil {
			out[k] = &etTally{}
		}
		return out[k]
	}
	for _, r := range recs {
		if r.class == flush {
			continue
		}
		t := get(e2etest.WindowKey{Key: r.page, Start: windowOf(r.ts)})
		t.in++
		if r.class == inBound {
			t.inBound++
		}
	}
	for k, rs := range res {
		if k.Key == "flush" {
			continue
		}
		get(k).results = rs
	}
	lateIDs := map[int64]int{}
	var bad []string
	for _, l := range lates {
		var v struct {
			I    *int64 `json:"i"`
			Page string `json:"page"`
			TS   int64  `json:"ts"`
		}
		if err := json.Unmarshal(l.Value, &v); err != nil || v.I == nil {
			bad = append(bad, fmt.Sprintf("late record %s is not an input record: %.200q", l.Pos, l.Value))
			continue
		}
		lateIDs[*v.I]++
		r, ok := recs[*v.I]
		if !ok {
			bad = append(bad, fmt.Sprintf("late record %s: input %d was never produced (or not yet acknowledged)", l.Pos, *v.I))
			continue
		}
		w := windowOf(r.ts)
		get(e2etest.WindowKey{Key: r.page, Start: w}).late++
		start, errS := time.Parse(time.RFC3339Nano, l.WindowStart)
		end, errE := time.Parse(time.RFC3339Nano, l.WindowEnd)
		if errS != nil || errE != nil || start.UnixMilli() != w || end.UnixMilli() != w+etSize.Milliseconds() || l.LateBy == "" {
			bad = append(bad, fmt.Sprintf("late record %s (input %d, event time %s): headers window %q – %q, late by %q; want the window %s – %s and a lateness",
				l.Pos, *v.I, time.UnixMilli(r.ts).UTC().Format(time.RFC3339Nano), l.WindowStart, l.WindowEnd, l.LateBy,
				time.UnixMilli(w).UTC().Format(time.RFC3339), time.UnixMilli(w+etSize.Milliseconds()).UTC().Format(time.RFC3339)))
		}
	}
	return out, lateIDs, bad
}

// settled reports whether every window of the input (of pages for which
// keep is true) is accounted for: its result's count plus its late
// records equal its input records.
func settled(ts map[e2etest.WindowKey]*etTally, keep func(string) bool) (done, open int) {
	for k, t := range ts {
		if t.in == 0 || !keep(k.Key) {
			continue
		}
		var counted int64
		if len(t.results) > 0 {
			counted = t.results[0].Count
		}
		if counted+int64(t.late) == int64(t.in) {
			done++
		} else {
			open++
		}
	}
	return done, open
}

// TestEventTimeWindowsUnderKills is issue 13's proof end to end: the
// tumbling-window job above, run by three `processor run` processes on the
// real broker, five of them killed with SIGKILL at random moments and
// restarted, over 8 input partitions of which one goes idle midway. An
// independent read_committed reader (e2etest.WindowReader: franz-go and
// encoding/json) of the output and the late topic checks:
//
//   - every (page, window) result appears exactly once, with the window's
//     bounds, the record timestamp window end − 1 ms, and not early;
//   - per window, the result's count plus the window's records in the
//     late topic equal the input records of the window: every input
//     record counted exactly once, in its window or as late, never both;
//   - every late record appears once, unchanged, with headers naming its
//     window and lateness; no in-bound record is late, every far-late one
//     is; how many behind records were late is logged;
//   - the idle partition's pages' windows all closed while it was idle
//     (before the input's final flush);
//   - checkpoint IDs only increased, no transaction is left open.
func TestEventTimeWindowsUnderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	c := kafkatest.NewReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	began := time.Now()

	bin, err := e2etest.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("processor built in %v", time.Since(began).Round(time.Millisecond))
	job := kafkatest.Name(t, "windows")
	input, output, late := job+"-clicks", job+"-counts", job+"-late"
	for _, topic := range []string{input, output, late} {
		c.CreateTopic(t, topic, partitions, nil)
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "job.yaml")
	jobFile := e2etest.Job{Name: job, Input: input, Output: output, Brokers: c.Brokers, KeyBy: "page",
		Source: fmt.Sprintf("timestamp: {field: ts, format: unix_ms}, watermark: {max_out_of_orderness: %s, idle_timeout: %s}", etBound, etIdleTimeout),
		Steps: []string{
			fmt.Sprintf("window: {type: tumbling, size: %s, allowed_lateness: %s, late_topic: %s}", etSize, etLateness, late),
			"aggregate: {op: count}",
		}}
	if err := jobFile.Write(cfgFile); err != nil {
		t.Fatal(err)
	}
	t.Logf("job:\n%s", jobFile.YAML())
	commits := e2etest.WatchCommits(t, c.Brokers, job)
	reader := e2etest.StartWindowReader(t, c.Brokers, output, late, "count")

	// Event time starts three minutes ago (the output's record timestamps
	// are event times: in the past, within the broker's bounds).
	t0 := windowOf(time.Now().Add(-3 * time.Minute).UnixMilli())
	in := newETInput(t, c.Brokers, input, t0)
	seed := uint64(time.Now().UnixNano())
	t.Logf("input seed %d, event time from %s", seed, time.UnixMilli(t0).UTC().Format(time.RFC3339))
	rng := rand.New(rand.NewPCG(seed, 13))
	for r := range etPreload {
		in.round(ctx, rng, r, false)
	}
	cl := e2etest.NewReplicas(t, bin, cfgFile, dir, e2etest.ReplicaOptions{})
	for range 3 {
		cl.Start()
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, id := range []string{"r0", "r1", "r2"} {
			if b, err := os.ReadFile(cl.LogPath(id)); err == nil {
				lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
				t.Logf("the end of replica %s's log (all its runs):\n%s", id, strings.Join(lines[max(0, len(lines)-40):], "\n"))
			}
		}
	})

	// The live rounds; far-late and behind records once every page's
	// first window has a committed result (from then on every
	// downstream task's restored watermark is past the far-late
	// records' windows).
	var gate atomic.Bool
	var idleAt, roundsDone atomic.Int64 // Unix ms
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		for r := etPreload; r < etRounds; r++ {
			in.round(ctx, rng, r, gate.Load())
			if r == etIdleRound {
				idleAt.Store(time.Now().UnixMilli())
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(etRoundPause):
			}
		}
		roundsDone.Store(time.Now().UnixMilli())
	}()
	pages := etPages + etIdlePages
	waitFor := func(what string, timeout time.Duration, cond func() bool) error {
		deadline := time.Now().Add(timeout)
		for !cond() {
			if err := cl.Exited(); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: not within %v", what, timeout)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	}
	// Every page with input in the first window (all of them, but for
	// a most unlikely draw) has a result of it.
	firstWindows := func() bool {
		res := reader.Results()
		for _, r := range in.snapshot() {
			if _, ok := res[e2etest.WindowKey{Key: r.page, Start: t0}]; windowOf(r.ts) == t0 && !ok {
				return false
			}
		}
		return len(res) > 0
	}
	gateDone := make(chan struct{})
	t.Cleanup(func() { <-gateDone }) // after the deferred cancel ends the producer
	go func() {
		defer close(gateDone)
		for !firstWindows() {
			select {
			case <-producerDone:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		gate.Store(true)
		t.Logf("every page's first window committed after %v; far-late and behind records from now on", time.Since(began).Round(time.Millisecond))
	}()
	if err := waitFor("a committed result", 3*time.Minute, func() bool { n, _ := reader.Counts(); return n > 0 }); err != nil {
		t.Fatal(err)
	}
	t.Logf("first result committed after %v", time.Since(began).Round(time.Millisecond))

	// Chaos: kill -9 of a random replica, each restarted; each kill a
	// random moment after a checkpoint completed since the last restart,
	// so that the job makes progress between the kills and every restore
	// starts from a different state.
	chaos := rand.New(rand.NewPCG(seed, 7))
	const kills = 5
	since := time.Now()
	for i := range kills {
		if err := waitFor("a checkpoint completed since the last restart", time.Minute, func() bool {
			cs := commits.Records("complete")
			return len(cs) > 0 && cs[len(cs)-1].Arrived.After(since)
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(chaos.IntN(3000)) * time.Millisecond)
		victim := cl.KillRandom(chaos)
		n, l := reader.Counts()
		t.Logf("chaos %d: kill -9 replica %s (%d results, %d late records committed)", i+1, victim, n, l)
		time.Sleep(time.Duration(500+chaos.IntN(2500)) * time.Millisecond)
		cl.Restart(victim)
		since = time.Now()
	}
	<-producerDone
	<-gateDone
	if !gate.Load() {
		t.Errorf("the first windows were not all committed before the input's last round: no far-late records")
	}
	if _, err := in.wait(ctx); err != nil {
		t.Fatal(err)
	}

	// The idle partition's windows close while it is idle: the others'
	// watermarks went on (by about 30 s of event time).
	idlePage := func(p string) bool { return strings.HasPrefix(p, "idle-") }
	if err := waitFor("every window of the idle partition's pages closed while it is idle", time.Minute, func() bool {
		ts, _, _ := tally(in.snapshot(), reader.Results(), reader.Late())
		done, open := settled(ts, idlePage)
		return done > 0 && open == 0
	}); err != nil {
		ts, _, _ := tally(in.snapshot(), reader.Results(), reader.Late())
		var open []string
		for k, v := range ts {
			if idlePage(k.Key) && (len(v.results) == 0 || v.results[0].Count+int64(v.late) != int64(v.in)) {
				open = append(open, fmt.Sprintf("%s@%s (%d input, %d results, %d late)", k.Key,
					time.UnixMilli(k.Start).UTC().Format("15:04:05"), v.in, len(v.results), v.late))
			}
		}
		slices.Sort(open)
		t.Errorf("%v: windows still open: %s", err, strings.Join(open, ", "))
	} else {
		// When the last of them was read: its result's arrival.
		var last time.Time
		for k, rs := range reader.Results() {
			if idlePage(k.Key) && rs[0].Arrived.After(last) {
				last = rs[0].Arrived
			}
		}
		idleAtT, doneAtT := time.UnixMilli(idleAt.Load()), time.UnixMilli(roundsDone.Load())
		t.Logf("the idle partition's pages' windows all closed while it was idle: the last result read %v after its last round (the others' last round: %v after it)",
			last.Sub(idleAtT).Round(time.Millisecond), doneAtT.Sub(idleAtT).Round(time.Millisecond))
	}

	// The flush: every window closes.
	in.flush(ctx)
	recs, err := in.wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	every := func(string) bool { return true }
	if err := waitFor("every window accounted for (count + late = input)", 2*time.Minute, func() bool {
		ts, _, _ := tally(recs, reader.Results(), reader.Late())
		_, open := settled(ts, every)
		return open == 0
	}); err != nil {
		t.Error(err)
	}
	time.Sleep(time.Second) // a result or late record too many shows itself
	cl.StopAll()

	// The checks.
	res, lates := reader.Results(), reader.Late()
	ts, lateIDs, bad := tally(recs, res, lates)
	bad = append(bad, reader.Violations()...)
	var windows, results, lateWindows int
	for k, v := range ts {
		if v.in == 0 {
			bad = append(bad, fmt.Sprintf("window %s@%s: %d results, but no input", k.Key, time.UnixMilli(k.Start).UTC().Format(time.RFC3339), len(v.results)))
			continue
		}
		windows++
		if len(v.results) > 1 {
			var where []string
			for _, r := range v.results {
				where = append(where, fmt.Sprintf("%s count %d", r.Pos, r.Count))
			}
			bad = append(bad, fmt.Sprintf("window %s@%s: %d results (%s), want exactly one", k.Key,
				time.UnixMilli(k.Start).UTC().Format(time.RFC3339), len(v.results), strings.Join(where, ", ")))
		}
		var counted int64
		if len(v.results) > 0 {
			results++
			r := v.results[0]
			counted = r.Count
			end := k.Start + etSize.Milliseconds()
			if r.End.UnixMilli() != end || r.Early || r.Timestamp.UnixMilli() != end-1 || r.RecordKey != k.Key {
				bad = append(bad, fmt.Sprintf("result %s of window %s@%s: window end %s, early %v, record timestamp %s, record key %q; want end %s, not early, timestamp end − 1 ms, key %q",
					r.Pos, k.Key, time.UnixMilli(k.Start).UTC().Format(time.RFC3339), r.End.UTC().Format(time.RFC3339Nano), r.Early,
					r.Timestamp.UTC().Format(time.RFC3339Nano), r.RecordKey, time.UnixMilli(end).UTC().Format(time.RFC3339), k.Key))
			}
		} else if v.inBound > 0 {
			bad = append(bad, fmt.Sprintf("window %s@%s: no result, but %d in-bound records", k.Key, time.UnixMilli(k.Start).UTC().Format(time.RFC3339), v.inBound))
		}
		if v.late > 0 {
			lateWindows++
		}
		if counted+int64(v.late) != int64(v.in) {
			bad = append(bad, fmt.Sprintf("window %s@%s: count %d + %d late = %d, but %d input records (%d in bound)", k.Key,
				time.UnixMilli(k.Start).UTC().Format(time.RFC3339), counted, v.late, counted+int64(v.late), v.in, v.inBound))
		}
	}
	perClass := map[recordClass]int{}
	lateClass := map[recordClass]int{}
	for id, r := range recs {
		perClass[r.class]++
		n := lateIDs[id]
		if n > 0 {
			lateClass[r.class]++
		}
		switch {
		case n > 1:
			bad = append(bad, fmt.Sprintf("input %d (%s, event time %s): %d times in the late topic", id, r.class, time.UnixMilli(r.ts).UTC().Format(time.RFC3339Nano), n))
		case n == 1 && (r.class == inBound || r.class == flush):
			bad = append(bad, fmt.Sprintf("input %d (%s, partition %d, page %s, event time %s): in the late topic", id, r.class, r.part, r.page, time.UnixMilli(r.ts).UTC().Format(time.RFC3339Nano)))
		case n == 0 && r.class == farLate:
			bad = append(bad, fmt.Sprintf("input %d (far late, partition %d, page %s, event time %s): not in the late topic", id, r.part, r.page, time.UnixMilli(r.ts).UTC().Format(time.RFC3339Nano)))
		}
	}
	if perClass[farLate] == 0 {
		bad = append(bad, "no far-late record was produced")
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		if len(bad) > 30 {
			bad = append(bad[:30], fmt.Sprintf("… and %d more", len(bad)-30))
		}
		t.Errorf("event-time check of %s and %s failed:\n  %s", output, late, strings.Join(bad, "\n  "))
	} else {
		t.Logf("verified: %d input records (%d in bound, %d behind, %d far late) in %d windows of %d pages: %d results, each window once, count + late = input; %d late records, each once (%d far late, %d of %d behind; none in bound)",
			len(recs)-perClass[flush], perClass[inBound], perClass[behind], perClass[farLate], windows, pages, results,
			len(lates), lateClass[farLate], lateClass[behind], perClass[behind])
	}
	e2etest.CheckCheckpointIDs(t, commits)
	e2etest.CheckNoOpenTransactions(ctx, t, c.Brokers, job)
	cps, err := e2etest.ReadCheckpoints(ctx, c.Brokers, job)
	if err != nil {
		t.Fatalf("read the control topics: %v", err)
	}
	var timeline []string
	for _, r := range commits.Records("") {
		switch r.Type {
		case "generation":
			timeline = append(timeline, fmt.Sprintf("generation %d +%.1fs", r.Gen, r.Arrived.Sub(began).Seconds()))
		case "complete":
			timeline = append(timeline, fmt.Sprintf("checkpoint %d +%.1fs", r.ID, r.Arrived.Sub(began).Seconds()))
		}
	}
	t.Logf("commit topic: %s", strings.Join(timeline, ", "))
	t.Logf("run: %d kill -9s, %d checkpoints completed (duration p50 %v, p99 %v), %d windows with late records, %v in all",
		kills, len(cps.Durations), e2etest.Quantile(cps.Durations, 0.5), e2etest.Quantile(cps.Durations, 0.99), lateWindows,
		time.Since(began).Round(time.Second))
}
