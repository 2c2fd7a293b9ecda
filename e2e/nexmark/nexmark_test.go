// Package nexmark_test checks the Nexmark queries of examples/nexmark, run
// by the stock binary on the real broker, against the reference
// implementations of package nexmark/reference over the same generated
// events (issue 16). It is a package of its own so that it runs beside
// the other end-to-end tests, not after them.
package nexmark_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/nexmark"
	"github.com/weir-stream/weir/nexmark/reference"
)

const (
	// nxEvents is the input of every query: 100 000 events, at 1000
	// events/s of event time (100 s: ten 10-second windows), seed 16.
	nxEvents = 100_000
	nxRate   = 1000
	nxSeed   = 16
	nxParts  = 4
)

// generate makes the input of every query (nxEvents events, seed nxSeed).
func generate(t *testing.T) []nexmark.Event {
	t.Helper()
	g, err := nexmark.NewGenerator(nexmark.Config{Seed: nxSeed, Events: nxEvents, EventRate: nxRate})
	if err != nil {
		t.Fatal(err)
	}
	var events []nexmark.Event
	for e, ok := g.Next(); ok; e, ok = g.Next() {
		events = append(events, e)
	}
	return events
}

// write produces events to the topics of layout under prefix, those of
// kinds only (all if none), and waits for the broker to have them. The
// records' Kafka timestamps are their write times: the jobs read the
// event time from date_time, and the events' own times (2025) would let
// the broker's retention delete the input's segments under the test in a
// topic of default retention (kafkatest.CreateTopic's keep them anyway).
func write(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string, events []nexmark.Event, kinds ...nexmark.Kind) {
	t.Helper()
	cl := c.Client(t, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond))
	var failed error
	for _, e := range events {
		if len(kinds) > 0 && !slices.Contains(kinds, e.Kind) {
			continue
		}
		cl.Produce(ctx, &kgo.Record{Key: nexmark.Key(e), Value: nexmark.AppendJSON(nil, e)}, func(_ *kgo.Record, err error) {
			if err != nil && failed == nil {
				failed = err
			}
		})
	}
	if err := cl.Flush(ctx); err != nil || failed != nil {
		t.Fatalf("write %s: %v %v", topic, err, failed)
	}
}

// writeAvro registers nexmark.AvroSchema under <topic>-value in the
// registry at url and writes events to topic in Avro (the Confluent
// framing), then the flush persons, as write and flush do in JSON.
func writeAvro(ctx context.Context, t *testing.T, c *kafkatest.Cluster, url, topic string, events []nexmark.Event) {
	t.Helper()
	reg, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		t.Fatal(err)
	}
	ss, err := reg.CreateSchema(ctx, topic+"-value", sr.Schema{Schema: nexmark.AvroSchema, Type: sr.TypeAvro})
	if err != nil {
		t.Fatalf("register the Nexmark schema: %v", err)
	}
	codec, err := nexmark.NewAvroCodec()
	if err != nil {
		t.Fatal(err)
	}
	cl := c.Client(t, kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(5*time.Millisecond), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var failed error
	hash := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	last := events[len(events)-1].DateTime()
	produce := func(e nexmark.Event, p int32) {
		payload, err := codec.Encode(e)
		if err != nil {
			t.Fatal(err)
		}
		v := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(ss.ID)), payload...)
		r := &kgo.Record{Key: nexmark.Key(e), Value: v, Partition: p}
		if p < 0 {
			r.Partition = int32(hash.Partition(r, nxParts)) // as write's default partitioner
		}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil && failed == nil {
				failed = err
			}
		})
	}
	for _, e := range events {
		produce(e, -1)
	}
	for p := range int32(nxParts) {
		produce(nexmark.Flush(last), p)
	}
	if err := cl.Flush(ctx); err != nil || failed != nil {
		t.Fatalf("write %s: %v %v", topic, err, failed)
	}
}

// jobFile writes examples/nexmark/<q>.yaml with the topics and the job's
// name under prefix and the broker's address.
func jobFile(t *testing.T, c *kafkatest.Cluster, dir, q, prefix string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "examples", "nexmark", q+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := strings.ReplaceAll(string(b), "nexmark", prefix+"-nexmark")
	y = strings.ReplaceAll(y, "127.0.0.1:9092", strings.Join(c.Brokers, ", "))
	y += "checkpoint:\n  interval: 500ms\n"
	file := filepath.Join(dir, q+".yaml")
	if err := os.WriteFile(file, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// avroJob turns the job file of a query over <prefix>-nexmark into one
// over <prefix>-nexmark-avro, read as Avro through registry, with its own
// name and output topic out.
func avroJob(t *testing.T, file, prefix, registry, out string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	y := string(b)
	src := "topics: [" + prefix + "-nexmark]"
	if !strings.Contains(y, src) || !strings.Contains(y, "        format: json\n") {
		t.Fatalf("%s: no JSON source of %s-nexmark to turn to Avro", file, prefix)
	}
	y = strings.Replace(y, src, "topics: ["+prefix+"-nexmark-avro]", 1)
	y = strings.Replace(y, "        format: json\n", "        format: {type: avro, registry: \""+registry+"\"}\n", 1)
	q := strings.TrimPrefix(out, prefix+"-nexmark-")
	y = strings.Replace(y, "name: "+prefix+"-nexmark-"+strings.TrimSuffix(q, "-avro"), "name: "+prefix+"-nexmark-"+q, 1)
	y = strings.Replace(y, "topic: "+prefix+"-nexmark-"+strings.TrimSuffix(q, "-avro")+",", "topic: "+out+",", 1)
	if err := os.WriteFile(file, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
}

// want is a query's reference output as canonical JSON values (keys
// sorted, numbers as encoding/json writes float64s), with multiplicity.
func want(q string, events []nexmark.Event) map[string]int {
	out := map[string]int{}
	add := func(v map[string]any) {
		b, _ := json.Marshal(v)
		out[canonical(b)]++
	}
	switch q {
	case "q0":
		for _, b := range reference.Q0(events) {
			add(map[string]any{"auction": b.Auction, "bidder": b.Bidder, "price": b.Price, "date_time": b.DateTime, "extra": b.Extra})
		}
	case "q1":
		for _, r := range reference.Q1(events) {
			add(map[string]any{"auction": r.Auction, "bidder": r.Bidder, "price": r.Price, "date_time": r.DateTime, "extra": r.Extra})
		}
	case "q2":
		for _, r := range reference.Q2(events) {
			add(map[string]any{"auction": r.Auction, "price": r.Price})
		}
	case "q3":
		for _, r := range reference.Q3(events) {
			add(map[string]any{"name": r.Name, "city": r.City, "state": r.State, "id": r.ID})
		}
	case "q5":
		for _, r := range reference.Q5(events) {
			add(map[string]any{"auction": r.Auction, "num": r.Num, "window_start": rfc3339(r.WindowStart), "window_end": rfc3339(r.WindowEnd)})
		}
	case "q7", "q7-avro":
		for _, r := range reference.Q7(events) {
			add(map[string]any{"auction": r.Auction, "bidder": r.Bidder, "price": r.Price, "date_time": r.DateTime, "extra": r.Extra, "window_start": r.WindowStart})
		}
	case "q8":
		for _, r := range reference.Q8(events) {
			add(map[string]any{"id": r.ID, "name": r.Name, "window_start": r.WindowStart})
		}
	}
	return out
}

// rfc3339 writes Unix ms as a window's bound in a job's output.
func rfc3339(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }

// flush writes to each of the topic's partitions one person, an hour
// after the last event: the watermark passes every window of the
// events and every auction's expiry (the generator's auctions last
// seconds at this rate), so that the windowed queries emit all their
// results. A task whose inputs are all idle keeps its watermark
// (docs/event-time.md), so the end of the input alone would not. The
// persons are no row of any query over the topic: q0, q1, q2, q4, q5 and
// q7 read bids and auctions, and q3 and q8 read the split topics.
func flush(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string, events []nexmark.Event) {
	t.Helper()
	cl := c.Client(t, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	e := nexmark.Flush(events[len(events)-1].DateTime())
	for p := range int32(nxParts) {
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Key: nexmark.Key(e), Value: nexmark.AppendJSON(nil, e)}).FirstErr(); err != nil {
			t.Fatalf("flush %s: %v", topic, err)
		}
	}
}

func canonical(b []byte) string {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "not JSON: " + string(b)
	}
	c, _ := json.Marshal(v)
	return string(c)
}

// collect reads topic read_committed from its start until it has n
// records and then for settle more, and returns their values' canonical
// forms with multiplicity; it stops at ctx's end.
func collect(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topic string, n int, settle time.Duration, alive func() error, logs func() string) map[string]int {
	t.Helper()
	cl := c.Client(t, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got, count := map[string]int{}, 0
	var until time.Time
	for {
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) {
			got[canonical(r.Value)]++
			count++
		})
		switch {
		case ctx.Err() != nil:
			t.Fatalf("%s: %d of %d outputs committed when the time ran out (%s); the replicas' logs:\n%s", topic, count, n, offsets(t, c, topic), logs())
		case until.IsZero() && count >= n:
			until = time.Now().Add(settle)
		case !until.IsZero() && time.Now().After(until):
			return got
		}
		if err := alive(); err != nil {
			t.Fatalf("%s: %d of %d outputs: %v", topic, count, n, err)
		}
	}
}

// diff says how got differs from want, with a few examples.
func diff(want, got map[string]int) string {
	var missing, extra []string
	nm, ne := 0, 0
	for k, n := range want {
		if d := n - got[k]; d > 0 {
			nm += d
			if len(missing) < 3 {
				missing = append(missing, fmt.Sprintf("%dx %s", d, k))
			}
		}
	}
	for k, n := range got {
		if d := n - want[k]; d > 0 {
			ne += d
			if len(extra) < 3 {
				extra = append(extra, fmt.Sprintf("%dx %s", d, k))
			}
		}
	}
	if nm == 0 && ne == 0 {
		return ""
	}
	return fmt.Sprintf("%d missing (%s), %d extra or duplicated (%s)", nm, strings.Join(missing, "; "), ne, strings.Join(extra, "; "))
}

func total(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// TestNexmarkQueriesMatchTheReference runs each YAML query of
// examples/nexmark with the stock binary (one replica, a checkpoint every
// 500ms, exactly-once sinks) over the same 100 000 generated events on the
// real broker, and checks that the committed output equals the
// reference's, row for row with multiplicity (q0, q1, q2, q3, q8; q4, q5
// and q7 have no YAML job yet: docs/nexmark.md).
func TestNexmarkQueriesMatchTheReference(t *testing.T) {
	c := kafkatest.NewReal(t)
	bdir := t.TempDir()
	bin, err := e2etest.BuildProcessor(bdir)
	if err != nil {
		t.Fatal(err)
	}
	q4bin, err := e2etest.BuildExample(bdir, "nexmark/q4")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	events := generate(t)
	prefix := kafkatest.Name(t, "nx")
	for _, topic := range []string{"-nexmark", "-nexmark-persons", "-nexmark-auctions"} {
		c.CreateTopic(t, prefix+topic, nxParts, nil)
	}
	write(ctx, t, c, prefix+"-nexmark", events)
	flush(ctx, t, c, prefix+"-nexmark", events)
	write(ctx, t, c, prefix+"-nexmark-persons", events, nexmark.KindPerson)
	write(ctx, t, c, prefix+"-nexmark-auctions", events, nexmark.KindAuction)

	// q7-avro is q7 over the same events in Avro, read through the
	// registry (issue 15's formats): the same rows.
	queries := []string{"q0", "q1", "q2", "q3", "q4", "q5", "q7", "q7-avro", "q8"}
	registry := os.Getenv("WEIR_REGISTRY_URL")
	switch {
	case registry != "":
		c.CreateTopic(t, prefix+"-nexmark-avro", nxParts, nil)
		writeAvro(ctx, t, c, registry, prefix+"-nexmark-avro", events)
	case os.Getenv("WEIR_REQUIRE_REGISTRY") == "1":
		t.Fatal("WEIR_REQUIRE_REGISTRY=1 but WEIR_REGISTRY_URL is not set: start one with scripts/registry.sh up")
	default:
		t.Log("WEIR_REGISTRY_URL not set (scripts/registry.sh up): q7-avro is not run")
		queries = slices.DeleteFunc(queries, func(q string) bool { return q == "q7-avro" })
	}
	if qs := os.Getenv("WEIR_NEXMARK_QUERIES"); qs != "" {
		queries = strings.Split(qs, ",") // to run some only, when working on them
	}
	for _, q := range queries {
		if q == "q4" {
			t.Run(q, func(t *testing.T) { runQ4(ctx, t, c, q4bin, prefix, events) })
			continue
		}
		t.Run(q, func(t *testing.T) {
			exp := want(q, events)
			if total(exp) == 0 {
				t.Fatalf("%s: the reference has no output for this input", q)
			}
			dir := t.TempDir()
			out := prefix + "-nexmark-" + q
			c.CreateTopic(t, out, nxParts, nil)
			file := jobFile(t, c, dir, strings.TrimSuffix(q, "-avro"), prefix)
			if strings.HasSuffix(q, "-avro") {
				avroJob(t, file, prefix, registry, out)
			}
			reps := e2etest.NewReplicas(t, bin, file, dir, e2etest.ReplicaOptions{HTTP: true})
			start := time.Now()
			reps.Start()
			qctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			got := collect(qctx, t, c, out, total(exp), 1500*time.Millisecond, reps.Exited, func() string { return tail(reps) })
			t.Logf("%s: %d outputs committed %v after the start", q, total(got), time.Since(start).Round(time.Millisecond))
			stopAll(t, reps)
			if d := diff(exp, got); d != "" {
				t.Errorf("%s: the committed output differs from the reference: %s", q, d)
			}
		})
	}
}

// runQ4 runs q4, the Go job of examples/nexmark/q4, and checks its
// committed output against reference.Q4: the job emits a category's
// running count, sum and average once per closed auction, so each
// category must have exactly one record for each count from 1 to the
// reference's, and the one with the reference's count its sum and
// average.
func runQ4(ctx context.Context, t *testing.T, c *kafkatest.Cluster, bin, prefix string, events []nexmark.Event) {
	exp := reference.Q4(events)
	n := 0
	for _, r := range exp {
		n += int(r.Auctions)
	}
	if n == 0 {
		t.Fatal("q4: the reference has no output for this input")
	}
	dir := t.TempDir()
	out := prefix + "-nexmark-q4"
	c.CreateTopic(t, out, nxParts, nil)
	cfg := filepath.Join(dir, "weir.yaml")
	y := fmt.Sprintf("kafka:\n  brokers: [%s]\n  topic_prefix: %s-q4.\ncheckpoint:\n  interval: 500ms\n", strings.Join(c.Brokers, ", "), prefix)
	if err := os.WriteFile(cfg, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	reps := e2etest.NewReplicas(t, bin, cfg, dir, e2etest.ReplicaOptions{HTTP: true,
		Env: []string{"NEXMARK_TOPIC=" + prefix + "-nexmark", "Q4_TOPIC=" + out}})
	start := time.Now()
	reps.Start()
	qctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	got := collect(qctx, t, c, out, n, 1500*time.Millisecond, reps.Exited, func() string { return tail(reps) })
	t.Logf("q4: %d outputs committed %v after the start (%d categories)", total(got), time.Since(start).Round(time.Millisecond), len(exp))
	stopAll(t, reps)
	type row struct {
		Category, Auctions, Sum int64
		Avg                     float64
	}
	seen := map[[2]int64]int{} // (category, auctions) → records
	final := map[int64]row{}
	for v, k := range got {
		var r row
		if err := json.Unmarshal([]byte(v), &r); err != nil {
			t.Fatalf("q4: output %s: %v", v, err)
		}
		seen[[2]int64{r.Category, r.Auctions}] += k
		if r.Auctions > final[r.Category].Auctions {
			final[r.Category] = r
		}
	}
	var problems []string
	for _, w := range exp {
		for i := int64(1); i <= w.Auctions; i++ {
			if k := seen[[2]int64{w.Category, i}]; k != 1 {
				problems = append(problems, fmt.Sprintf("category %d: %d records with count %d", w.Category, k, i))
			}
		}
		if f := final[w.Category]; f != (row{w.Category, w.Auctions, w.Sum, w.Avg}) {
			problems = append(problems, fmt.Sprintf("category %d: last %+v, want %+v", w.Category, f, w))
		}
		delete(final, w.Category)
	}
	for cat := range final {
		problems = append(problems, fmt.Sprintf("category %d: not in the reference", cat))
	}
	if total(got) != n {
		problems = append(problems, fmt.Sprintf("%d records, want %d", total(got), n))
	}
	if len(problems) > 0 {
		t.Errorf("q4: the committed output differs from the reference: %s", strings.Join(problems[:min(len(problems), 5)], "; "))
	}
}

// TestNexmarkUnderKills runs q3 (a join, with state on both sides and a
// shuffle) on two replicas while its input is written in rounds, kills a
// replica with SIGKILL twice and restarts it, and checks that the
// committed output is still exactly the reference's.
func TestNexmarkUnderKills(t *testing.T) {
	c := kafkatest.NewReal(t)
	bin, err := e2etest.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	events := generate(t)
	prefix := kafkatest.Name(t, "nxk")
	for _, topic := range []string{"-nexmark-persons", "-nexmark-auctions", "-nexmark-q3"} {
		c.CreateTopic(t, prefix+topic, nxParts, nil)
	}
	dir := t.TempDir()
	reps := e2etest.NewReplicas(t, bin, jobFile(t, c, dir, "q3", prefix), dir, e2etest.ReplicaOptions{HTTP: true})
	a, _ := reps.Start(), reps.Start()
	rng := rand.New(rand.NewPCG(nxSeed, 3))
	const rounds = 10
	for i := range rounds {
		part := events[i*len(events)/rounds : (i+1)*len(events)/rounds]
		write(ctx, t, c, prefix+"-nexmark-persons", part, nexmark.KindPerson)
		write(ctx, t, c, prefix+"-nexmark-auctions", part, nexmark.KindAuction)
		switch i {
		case 3, 6:
			victim := a
			if i == 6 {
				victim = reps.KillRandom(rng)
			} else {
				reps.Kill(victim)
			}
			t.Logf("round %d: kill -9 replica %s", i, victim)
			time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
			reps.Restart(victim)
		}
		time.Sleep(time.Second)
	}
	exp := want("q3", events)
	got := collect(ctx, t, c, prefix+"-nexmark-q3", total(exp), 3*time.Second, func() error { return nil }, func() string { return tail(reps) })
	stopAll(t, reps)
	if d := diff(exp, got); d != "" {
		t.Errorf("q3 under kills: the committed output differs from the reference: %s", d)
	}
	t.Logf("q3 under kills: %d outputs, exactly the reference's", total(got))
}

// tail is the last lines of each replica's log.
func tail(reps *e2etest.Replicas) string {
	var b strings.Builder
	for _, id := range reps.IDs() {
		lines := strings.Split(strings.TrimRight(reps.Proc(id).Log(), "\n"), "\n")
		fmt.Fprintf(&b, "== %s\n%s\n", id, strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
	return b.String()
}

// stopAll stops the replicas gracefully (each must exit 0), and logs the
// end of their logs if one did not.
func stopAll(t *testing.T, reps *e2etest.Replicas) {
	t.Helper()
	var procs []*e2etest.Proc
	for _, id := range reps.IDs() {
		procs = append(procs, reps.Proc(id))
	}
	failed := t.Failed()
	reps.StopAll()
	if !failed && t.Failed() {
		for _, p := range procs {
			lines := strings.Split(strings.TrimRight(p.Log(), "\n"), "\n")
			t.Logf("== %s\n%s", p.ID, strings.Join(lines[max(0, len(lines)-25):], "\n"))
		}
	}
}

// offsets says where topic's partitions end and their last stable
// offsets: whether the job wrote and committed.
func offsets(t *testing.T, c *kafkatest.Cluster, topic string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	adm := c.Admin(t)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return "end offsets: " + err.Error()
	}
	lsos, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return "last stable offsets: " + err.Error()
	}
	var b strings.Builder
	ends.Each(func(o kadm.ListedOffset) {
		l, _ := lsos.Lookup(topic, o.Partition)
		fmt.Fprintf(&b, "[%d] end %d, last stable %d; ", o.Partition, o.Offset, l.Offset)
	})
	return strings.TrimSuffix(b.String(), "; ")
}
