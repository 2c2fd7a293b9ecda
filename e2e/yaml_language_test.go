package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// The YAML language run (issue 14): one job of the language's steps,
//
//	source orders (keyed by customer; event time from ts, watermark 2 s
//	out of orderness, idle after 15 s: longer than the wait for the table
//	before the first order, so that no input is idle when the orders
//	begin; else one task's watermark may pass another's first orders
//	downstream, which are then late, as in Flink: docs/event-time.md)
//	→ join the table customers (keyed by customer, compacted) as customer
//	→ filter value.amount > 0
//	→ map {order, country: value.customer?.country ?? "none", amount}
//	→ route: country "none" → unmatched, any other → matched
//	unmatched: sink
//	matched:   key_by country → window tumbling 5 s
//	           → aggregate {count, total: sum amount, biggest: max amount}
//	           → sink
//
// over ylOrders orders of ylCustomers customers, of which every fifth has
// no row in the table, with amounts in [-10, 110) (about one in twelve
// filtered out) and event times rising by ylStep per order, up to ylJitter
// behind (never late: the jitter is within the out-of-orderness, and each
// partition's records are produced in order). The table is written, and
// read by the job, before the first order: ylFirst orders at once when the
// job has completed two checkpoints, then ylPerRound every ylRoundPause.
const (
	ylCustomers  = 120
	ylOrders     = 3200
	ylFirst      = 800 // orders produced at once when the table is loaded
	ylPerRound   = 80  // orders per live round
	ylRoundPause = 500 * time.Millisecond
	ylStep       = 50 * time.Millisecond // event time between orders
	ylJitter     = 1500 * time.Millisecond
	ylWindow     = 5 * time.Second
	ylKills      = 3
)

var ylCountries = []string{"br", "de", "fr", "in", "jp", "us"}

// ylCustomer is customer c's ID, country and whether the table has a row
// for it.
func ylCustomer(c int) (id, country string, row bool) {
	return fmt.Sprintf("cust-%03d", c), ylCountries[(c*7)%len(ylCountries)], c%5 != 0
}

// ylPartition is where customer c's orders and its table row go: the
// same partition of both topics, as the join requires.
func ylPartition(c int) int32 { return int32(c % partitions) }

// ylOrder is one acknowledged input order.
type ylOrder struct {
	id       int64
	customer int // -1: a flush order, of no customer
	amount   int64
	ts       int64 // Unix ms
}

// ylJob is the job's file.
func ylJob(name, orders, customers, unmatched, perCountry string, brokers []string) string {
	return fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source:
        topics: [%s]
        format: json
        start: earliest
        timestamp: {field: ts, format: unix_ms}
        watermark: {max_out_of_orderness: 2s, idle_timeout: 15s}
    - join:
        table: {topic: %s}
        as: customer
        type: left
    - filter:
        where: "value.amount > 0"
    - map:
        value:
          order: value.id
          country: 'value.customer?.country ?? "none"'
          amount: value.amount
    - route:
        - {when: 'value.country == "none"', to: unmatched}
        - {when: 'value.country != "none"', to: matched}
  streams:
    unmatched:
      - sink: {topic: %s, format: json, delivery: exactly-once}
    matched:
      - key_by: {expr: value.country}
      - window: {type: tumbling, size: %s}
      - aggregate:
          count: true
          total: {sum: value.amount}
          biggest: {max: value.amount}
      - sink: {topic: %s, format: json, delivery: exactly-once}
kafka:
  brokers: [%s]
  session_timeout: 6s
checkpoint:
  interval: 1s
  timeout: 30s
http:
  address: ""
log:
  level: info
`, name, orders, customers, unmatched, ylWindow, perCountry, strings.Join(brokers, ", "))
}

// ylInput produces the customers and the orders with an idempotent
// producer (per-partition order kept) and keeps every acknowledged order.
type ylInput struct {
	cl *kgo.Client

	mu     sync.Mutex
	orders map[int64]ylOrder
	err    error
}

func newYLInput(t *testing.T, brokers []string) *ylInput {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		t.Fatalf("input client: %v", err)
	}
	t.Cleanup(cl.Close)
	return &ylInput{cl: cl, orders: map[int64]ylOrder{}}
}

// customers writes the table's rows and waits for them. Each row has an
// event time ts, t0: the job's source reads the table's partitions with
// the stream's timestamp setting, and fails on a record without the field.
func (in *ylInput) customers(ctx context.Context, topic string, t0 int64) (int, error) {
	var recs []*kgo.Record
	for c := range ylCustomers {
		id, country, row := ylCustomer(c)
		if !row {
			continue
		}
		v, _ := json.Marshal(map[string]any{"id": id, "country": country, "name": "Customer " + id, "ts": t0})
		recs = append(recs, &kgo.Record{Topic: topic, Key: []byte(id), Value: v, Partition: ylPartition(c)})
	}
	return len(recs), in.cl.ProduceSync(ctx, recs...).FirstErr()
}

// produce sends order o {"id","cust","amount","ts"} to partition p,
// keyed by its customer (key).
func (in *ylInput) produce(ctx context.Context, topic, key string, p int32, o ylOrder) {
	v, _ := json.Marshal(map[string]any{"id": o.id, "cust": key, "amount": o.amount, "ts": o.ts})
	in.cl.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: v, Partition: p}, func(_ *kgo.Record, err error) {
		in.mu.Lock()
		defer in.mu.Unlock()
		if err != nil {
			in.err = cmpErr(in.err, fmt.Errorf("produce order %d: %w", o.id, err))
			return
		}
		in.orders[o.id] = o
	})
}

func (in *ylInput) wait(ctx context.Context) (map[int64]ylOrder, error) {
	err := in.cl.Flush(ctx)
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make(map[int64]ylOrder, len(in.orders))
	for k, v := range in.orders {
		out[k] = v
	}
	return out, cmpErr(err, in.err)
}

// ylWindowKey is one country's window, by its start (Unix ms).
type ylWindowKey struct {
	country string
	start   int64
}

func (k ylWindowKey) String() string {
	return k.country + "@" + time.UnixMilli(k.start).UTC().Format("15:04:05")
}

// ylAgg is a window's aggregates.
type ylAgg struct {
	count          int64
	total, biggest float64
}

// ylExpected computes, in plain Go from the input, the orders the
// unmatched sink must write (by ID, with their amounts) and every
// country's window results.
func ylExpected(orders map[int64]ylOrder) (unmatched map[int64]int64, windows map[ylWindowKey]ylAgg) {
	unmatched, windows = map[int64]int64{}, map[ylWindowKey]ylAgg{}
	for _, o := range orders {
		if o.amount <= 0 {
			continue
		}
		if o.customer < 0 {
			unmatched[o.id] = o.amount
			continue
		}
		_, country, row := ylCustomer(o.customer)
		if !row {
			unmatched[o.id] = o.amount
			continue
		}
		s := ylWindow.Milliseconds()
		k := ylWindowKey{country, o.ts - ((o.ts%s)+s)%s}
		a, seen := windows[k]
		a.count++
		a.total += float64(o.amount)
		if !seen || float64(o.amount) > a.biggest {
			a.biggest = float64(o.amount)
		}
		windows[k] = a
	}
	return unmatched, windows
}

// ylResult is one committed window result, decoded by hand from its
// documented JSON: {"key","window_start","window_end","count","total","biggest"}.
type ylResult struct {
	agg        ylAgg
	start, end time.Time
	recordKey  string
	pos        string
}

// ylUnmatched is one committed record of the unmatched sink: the map's
// value {"order","country","amount"}.
type ylUnmatched struct {
	country string
	amount  float64
	pos     string
}

// ylReader follows both output topics from their start with its own
// read_committed consumer, decoding with encoding/json only.
type ylReader struct {
	unmatchedTopic string
	cancel         context.CancelFunc
	done           chan struct{}

	mu         sync.Mutex
	unmatched  map[int64][]ylUnmatched
	results    map[ylWindowKey][]ylResult
	violations []string
}

func startYLReader(t *testing.T, brokers []string, unmatched, perCountry string) *ylReader {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(unmatched, perCountry),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatalf("reader client: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &ylReader{unmatchedTopic: unmatched, cancel: cancel, done: make(chan struct{}),
		unmatched: map[int64][]ylUnmatched{}, results: map[ylWindowKey][]ylResult{}}
	go func() {
		defer close(r.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			r.mu.Lock()
			fs.EachRecord(r.addLocked)
			r.mu.Unlock()
		}
	}()
	t.Cleanup(r.stop)
	return r
}

func (r *ylReader) stop() {
	r.cancel()
	<-r.done
}

func (r *ylReader) addLocked(rec *kgo.Record) {
	pos := fmt.Sprintf("%s[%d]@%d", rec.Topic, rec.Partition, rec.Offset)
	bad := func(what string, err error) {
		r.violations = append(r.violations, fmt.Sprintf("%s: %s: %v: %.200q", pos, what, err, rec.Value))
	}
	if rec.Topic == r.unmatchedTopic {
		var v struct {
			Order   *int64   `json:"order"`
			Country string   `json:"country"`
			Amount  *float64 `json:"amount"`
		}
		if err := json.Unmarshal(rec.Value, &v); err != nil || v.Order == nil || v.Amount == nil {
			bad("not an unmatched order {order, country, amount}", err)
			return
		}
		r.unmatched[*v.Order] = append(r.unmatched[*v.Order], ylUnmatched{country: v.Country, amount: *v.Amount, pos: pos})
		return
	}
	var v struct {
		Key     *string  `json:"key"`
		Start   string   `json:"window_start"`
		End     string   `json:"window_end"`
		Count   *int64   `json:"count"`
		Total   *float64 `json:"total"`
		Biggest *float64 `json:"biggest"`
	}
	if err := json.Unmarshal(rec.Value, &v); err != nil || v.Key == nil || v.Count == nil || v.Total == nil || v.Biggest == nil {
		bad("not a window result {key, window_start, window_end, count, total, biggest}", err)
		return
	}
	res := ylResult{agg: ylAgg{*v.Count, *v.Total, *v.Biggest}, recordKey: string(rec.Key), pos: pos}
	var err error
	if res.start, err = time.Parse(time.RFC3339Nano, v.Start); err != nil {
		bad("window_start", err)
		return
	}
	if res.end, err = time.Parse(time.RFC3339Nano, v.End); err != nil {
		bad("window_end", err)
		return
	}
	k := ylWindowKey{*v.Key, res.start.UnixMilli()}
	r.results[k] = append(r.results[k], res)
}

// snapshot returns copies of what was read so far.
func (r *ylReader) snapshot() (map[int64][]ylUnmatched, map[ylWindowKey][]ylResult, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	u := make(map[int64][]ylUnmatched, len(r.unmatched))
	for k, v := range r.unmatched {
		u[k] = slices.Clone(v)
	}
	w := make(map[ylWindowKey][]ylResult, len(r.results))
	for k, v := range r.results {
		w[k] = slices.Clone(v)
	}
	return u, w, slices.Clone(r.violations)
}

// TestYAMLLanguageUnderKills is issue 14's proof end to end: the job above
// (a stream–table join, filter, map, route to two named streams, key_by
// an expression, a tumbling window with three aggregates at once), run by
// three `processor run` processes on the real broker, ylKills of them
// killed with SIGKILL at random moments and restarted, over 8 partitions.
// An independent read_committed reader of both outputs (franz-go and
// encoding/json) checks against results computed in plain Go from the
// acknowledged input:
//
//   - every order with amount > 0 and no customer row is in the unmatched
//     topic exactly once, with country "none" and its amount, and nothing
//     else is;
//   - every (country, window) of the other orders with amount > 0 has
//     exactly one result, with the window's bounds, the country as record
//     key, and the right count, total and biggest; no other result exists;
//   - checkpoint IDs only increased, no transaction is left open.
func TestYAMLLanguageUnderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	c := kafkatest.NewReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()

	bin, err := e2etest.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("processor built in %v", time.Since(began).Round(time.Millisecond))
	job := kafkatest.Name(t, "yaml")
	ordersT, customersT, unmatchedT, perCountryT := job+"-orders", job+"-customers", job+"-unmatched", job+"-per-country"
	compact := "compact"
	c.CreateTopic(t, customersT, partitions, map[string]*string{"cleanup.policy": &compact})
	for _, topic := range []string{ordersT, unmatchedT, perCountryT} {
		c.CreateTopic(t, topic, partitions, nil)
	}
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "job.yaml")
	yaml := ylJob(job, ordersT, customersT, unmatchedT, perCountryT, c.Brokers)
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Logf("job:\n%s", yaml)
	commits := e2etest.WatchCommits(t, c.Brokers, job)
	reader := startYLReader(t, c.Brokers, unmatchedT, perCountryT)

	// Event time starts three minutes ago (the window results' record
	// timestamps are event times: in the past, within the broker's bounds).
	s := ylWindow.Milliseconds()
	t0 := time.Now().Add(-3*time.Minute).UnixMilli() / s * s
	in := newYLInput(t, c.Brokers)
	rows, err := in.customers(ctx, customersT, t0)
	if err != nil {
		t.Fatalf("produce the customers: %v", err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("input seed %d: %d customers, %d in the table; %d orders, event time from %s", seed, ylCustomers, rows, ylOrders,
		time.UnixMilli(t0).UTC().Format(time.RFC3339))
	rng := rand.New(rand.NewPCG(seed, 14))
	order := func(i int) {
		cust := rng.IntN(ylCustomers)
		id, _, _ := ylCustomer(cust)
		ts := t0 + ylJitter.Milliseconds() + int64(i)*ylStep.Milliseconds() - rng.Int64N(ylJitter.Milliseconds()+1)
		in.produce(ctx, ordersT, id, ylPartition(cust), ylOrder{id: int64(i), customer: cust, amount: int64(rng.IntN(120) - 10), ts: ts})
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
	waitFor := func(what string, timeout time.Duration, cond func() bool) error {
		deadline := time.Now().Add(timeout)
		for !cond() {
			if err := cl.Exited(); err != nil {
				return err
			}
			// A replica whose job failed permanently keeps running idle.
			for _, id := range cl.IDs() {
				if p := cl.Proc(id); p != nil && strings.Contains(p.Log(), "job failed permanently") {
					return fmt.Errorf("%s: replica %s: the job failed permanently", what, id)
				}
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s: not within %v", what, timeout)
			}
			time.Sleep(100 * time.Millisecond)
		}
		return nil
	}

	// The table is loaded before the first order exists: the join reads
	// the table's and the orders' partitions as they come, without
	// ordering them by time, so an order read before its customer's row
	// would be unmatched. The job's sources read the table's few rows at
	// their start; two checkpoints complete after it.
	if err := waitFor("two completed checkpoints", 2*time.Minute, func() bool { return len(commits.Records("complete")) >= 2 }); err != nil {
		t.Fatal(err)
	}
	t.Logf("second checkpoint completed after %v: the orders begin", time.Since(began).Round(time.Millisecond))
	for i := range ylFirst {
		order(i)
	}

	// The live rounds, and the chaos meanwhile.
	producerDone := make(chan struct{})
	go func() {
		defer close(producerDone)
		for i := ylFirst; i < ylOrders; i += ylPerRound {
			for j := i; j < min(i+ylPerRound, ylOrders); j++ {
				order(j)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(ylRoundPause):
			}
		}
	}()
	chaos := rand.New(rand.NewPCG(seed, 7))
	since := time.Now()
	for i := range ylKills {
		if err := waitFor("a checkpoint completed since the last restart", time.Minute, func() bool {
			cs := commits.Records("complete")
			return len(cs) > 0 && cs[len(cs)-1].Arrived.After(since)
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(chaos.IntN(2000)) * time.Millisecond)
		victim := cl.KillRandom(chaos)
		u, w, _ := reader.snapshot()
		t.Logf("chaos %d at +%.1fs: kill -9 replica %s (%d unmatched orders, %d window results committed)", i+1,
			time.Since(began).Seconds(), victim, len(u), len(w))
		time.Sleep(time.Duration(300+chaos.IntN(1500)) * time.Millisecond)
		cl.Restart(victim)
		since = time.Now()
	}
	<-producerDone

	// The flush: one order per partition 30 s of event time after the
	// last, of no customer (it goes to unmatched), so that every window
	// closes.
	flushTS := t0 + int64(ylOrders)*ylStep.Milliseconds() + 30_000
	for p := range int32(partitions) {
		in.produce(ctx, ordersT, fmt.Sprintf("flush-%d", p), p, ylOrder{id: int64(ylOrders) + int64(p), customer: -1, amount: 1, ts: flushTS})
	}
	orders, err := in.wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantUnmatched, wantWindows := ylExpected(orders)
	if err := waitFor("every unmatched order and every window result committed", 2*time.Minute, func() bool {
		u, w, _ := reader.snapshot()
		for id := range wantUnmatched {
			if len(u[id]) == 0 {
				return false
			}
		}
		for k := range wantWindows {
			if len(w[k]) == 0 {
				return false
			}
		}
		return true
	}); err != nil {
		u, w, _ := reader.snapshot()
		var missing int
		for id := range wantUnmatched {
			if len(u[id]) == 0 {
				missing++
			}
		}
		var open []string
		for k := range wantWindows {
			if len(w[k]) == 0 {
				open = append(open, k.String())
			}
		}
		slices.Sort(open)
		t.Errorf("%v: %d of %d unmatched orders missing; %d of %d windows without a result: %s", err, missing, len(wantUnmatched),
			len(open), len(wantWindows), strings.Join(open[:min(len(open), 20)], ", "))
	}
	time.Sleep(2 * time.Second) // a result too many shows itself
	processed := time.Since(began)
	cl.StopAll()

	// The checks.
	gotUnmatched, gotWindows, bad := reader.snapshot()
	for id, rs := range gotUnmatched {
		amount, ok := wantUnmatched[id]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("unmatched order %d at %s: not an unmatched order with amount > 0 (input: %+v)", id, rs[0].pos, orders[id]))
			continue
		case len(rs) > 1:
			var where []string
			for _, r := range rs {
				where = append(where, r.pos)
			}
			bad = append(bad, fmt.Sprintf("unmatched order %d: %d times (%s), want once", id, len(rs), strings.Join(where, ", ")))
		}
		if r := rs[0]; r.country != "none" || r.amount != float64(amount) {
			bad = append(bad, fmt.Sprintf("unmatched order %d at %s: country %q, amount %v; want \"none\", %d", id, r.pos, r.country, r.amount, amount))
		}
	}
	for id := range wantUnmatched {
		if len(gotUnmatched[id]) == 0 {
			bad = append(bad, fmt.Sprintf("unmatched order %d (%+v): not in %s", id, orders[id], unmatchedT))
		}
	}
	for k, rs := range gotWindows {
		want, ok := wantWindows[k]
		if !ok {
			bad = append(bad, fmt.Sprintf("window %s: %d results (first %s: %+v), but no matched order with amount > 0", k, len(rs), rs[0].pos, rs[0].agg))
			continue
		}
		if len(rs) > 1 {
			var where []string
			for _, r := range rs {
				where = append(where, fmt.Sprintf("%s %+v", r.pos, r.agg))
			}
			bad = append(bad, fmt.Sprintf("window %s: %d results (%s), want exactly one", k, len(rs), strings.Join(where, ", ")))
		}
		r := rs[0]
		if r.agg != want || r.end.UnixMilli() != k.start+ylWindow.Milliseconds() || r.recordKey != k.country {
			bad = append(bad, fmt.Sprintf("window %s at %s: %+v, end %s, record key %q; want %+v, end %s, key %q", k, r.pos, r.agg,
				r.end.UTC().Format(time.RFC3339), r.recordKey, want, time.UnixMilli(k.start+ylWindow.Milliseconds()).UTC().Format(time.RFC3339), k.country))
		}
	}
	for k, want := range wantWindows {
		if len(gotWindows[k]) == 0 {
			bad = append(bad, fmt.Sprintf("window %s: no result, want %+v", k, want))
		}
	}
	var filtered int
	for _, o := range orders {
		if o.amount <= 0 {
			filtered++
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		if len(bad) > 30 {
			bad = append(bad[:30], fmt.Sprintf("… and %d more", len(bad)-30))
		}
		t.Errorf("check of %s and %s failed:\n  %s", unmatchedT, perCountryT, strings.Join(bad, "\n  "))
	} else {
		t.Logf("verified: %d orders (%d with amount <= 0, filtered out): %d unmatched, each once; %d (country, window) results, each once with its count, total and biggest",
			len(orders), filtered, len(wantUnmatched), len(wantWindows))
	}
	e2etest.CheckCheckpointIDs(t, commits)
	e2etest.CheckNoOpenTransactions(ctx, t, c.Brokers, job)
	cps, err := e2etest.ReadCheckpoints(ctx, c.Brokers, job)
	if err != nil {
		t.Fatalf("read the control topics: %v", err)
	}
	t.Logf("run: %d kill -9s, %d checkpoints completed (duration p50 %v, p99 %v); all output committed %v after the start, %v in all",
		ylKills, len(cps.Durations), e2etest.Quantile(cps.Durations, 0.5), e2etest.Quantile(cps.Durations, 0.99),
		processed.Round(time.Millisecond), time.Since(began).Round(time.Second))
}
