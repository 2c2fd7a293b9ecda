package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// The Avro test's input: orders written with two versions of a schema (v2
// adds a field with a default), event times 40 ms apart from t0.
const (
	avOrders     = 2400
	avPerRound   = 120
	avRoundPause = 400 * time.Millisecond
	avStep       = 40 * time.Millisecond
	avWindow     = 5 * time.Second
	avKills      = 2
	avParts      = 4
)

var avCountries = []string{"br", "de", "fr", "jp", "us"}

const (
	avOrderV1 = `{"type":"record","name":"Order","namespace":"shop","fields":[
		{"name":"id","type":"long"},{"name":"country","type":"string"},{"name":"amount","type":"long"},
		{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}}]}`
	avOrderV2 = `{"type":"record","name":"Order","namespace":"shop","fields":[
		{"name":"id","type":"long"},{"name":"country","type":"string"},{"name":"amount","type":"long"},
		{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"note","type":["null","string"],"default":null}]}`
	avResult = `{"type":"record","name":"CountryWindow","namespace":"shop","fields":[
		{"name":"key","type":"string"},
		{"name":"window_start","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"window_end","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"count","type":"long"},{"name":"total","type":"long"}]}`
)

// avRegistry is the test's own client of the registry's Confluent API
// (plain net/http): it shares no code with Weir.
type avRegistry struct{ url string }

func (r avRegistry) register(t *testing.T, subject, schema string) int {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"schema": schema})
	resp, err := http.Post(r.url+"/subjects/"+subject+"/versions", "application/vnd.schemaregistry.v1+json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct{ ID int }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &out) != nil || out.ID == 0 {
		t.Fatalf("register %s: %s: %s", subject, resp.Status, b)
	}
	return out.ID
}

func (r avRegistry) schema(id int) (avro.Schema, error) {
	resp, err := http.Get(fmt.Sprintf("%s/schemas/ids/%d", r.url, id))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct{ Schema string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("schema %d: %s %v", id, resp.Status, err)
	}
	return avro.Parse(out.Schema)
}

// frame writes v under schema s with ID id in the Confluent wire format.
func frame(s avro.Schema, id int, v any) ([]byte, error) {
	p, err := avro.Marshal(s, v)
	if err != nil {
		return nil, err
	}
	return append(binary.BigEndian.AppendUint32([]byte{0}, uint32(id)), p...), nil
}

func registryURL(t *testing.T) string {
	url := os.Getenv("WEIR_REGISTRY_URL")
	if url == "" {
		if os.Getenv("WEIR_REQUIRE_REGISTRY") == "1" {
			t.Fatal("WEIR_REQUIRE_REGISTRY=1 but WEIR_REGISTRY_URL is not set (scripts/registry.sh up)")
		}
		t.Skip("no schema registry: WEIR_REGISTRY_URL is not set (scripts/registry.sh up; make test starts one)")
	}
	return url
}

type avOrder struct {
	id, amount, ts int64
	country        string
}

type avKey struct {
	country string
	start   int64
}

type avAgg struct{ count, total int64 }

// TestAvroWindowsUnderKills is issue 15's proof end to end: an Avro input
// topic written with schema v1 and v2, a windowed aggregate over it, Avro
// output under a schema the sink registers, run by three `processor run`
// processes on the real broker and the real registry, two of them killed
// with SIGKILL at random moments and restarted. An independent
// read_committed reader (franz-go, hamba/avro and the registry's HTTP API)
// checks that every (country, 5 s window) has exactly one result with the
// right bounds, count and total, and nothing else is there.
func TestAvroWindowsUnderKills(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	reg := avRegistry{url: registryURL(t)}
	c := kafkatest.NewReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	bin, err := e2etest.BuildProcessor(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	job := kafkatest.Name(t, "avro")
	ordersT, outT := job+"-orders", job+"-per-country"
	c.CreateTopic(t, ordersT, avParts, nil)
	c.CreateTopic(t, outT, avParts, nil)

	// The input's schemas, registered by the test (as a producer would).
	v1, err := avro.Parse(avOrderV1)
	if err != nil {
		t.Fatal(err)
	}
	v2, err := avro.Parse(avOrderV2)
	if err != nil {
		t.Fatal(err)
	}
	id1 := reg.register(t, ordersT+"-value", avOrderV1)
	id2 := reg.register(t, ordersT+"-value", avOrderV2)

	dir := t.TempDir()
	schemaFile := filepath.Join(dir, "result.avsc")
	if err := os.WriteFile(schemaFile, []byte(avResult), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "job.yaml")
	yaml := fmt.Sprintf(`job:
  name: %s
  pipeline:
    - source:
        topics: [%s]
        format: {type: avro, registry: %q}
        timestamp: {field: ts, format: rfc3339}
        watermark: {max_out_of_orderness: 1s, idle_timeout: 5s}
    - filter: {where: "value.amount > 0"}
    - key_by: {expr: value.country}
    - window: {type: tumbling, size: %s}
    - aggregate:
        count: true
        total: {sum: value.amount}
    - sink:
        topic: %s
        format: {type: avro, registry: %q, schema_file: %s}
kafka:
  brokers: [%s]
  session_timeout: 6s
checkpoint:
  interval: 1s
  timeout: 30s
http:
  address: ""
`, job, ordersT, reg.url, avWindow, outT, reg.url, schemaFile, strings.Join(c.Brokers, ", "))
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	commits := e2etest.WatchCommits(t, c.Brokers, job)

	// The reader: every committed result, decoded with the schema its ID
	// names.
	var mu sync.Mutex
	got := map[avKey][]avAgg{}
	var bad []string
	rd, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.ConsumeTopics(outT),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rd.Close)
	schemas := map[int]avro.Schema{}
	go func() {
		for ctx.Err() == nil {
			fs := rd.PollFetches(ctx)
			fs.EachRecord(func(r *kgo.Record) {
				mu.Lock()
				defer mu.Unlock()
				if len(r.Value) < 5 || r.Value[0] != 0 {
					bad = append(bad, fmt.Sprintf("%s[%d]@%d: not in the wire format: %q", r.Topic, r.Partition, r.Offset, r.Value))
					return
				}
				id := int(binary.BigEndian.Uint32(r.Value[1:5]))
				s, ok := schemas[id]
				if !ok {
					var err error
					if s, err = reg.schema(id); err != nil {
						bad = append(bad, fmt.Sprintf("@%d: %v", r.Offset, err))
						return
					}
					schemas[id] = s
				}
				var v struct {
					Key         string    `avro:"key"`
					WindowStart time.Time `avro:"window_start"`
					WindowEnd   time.Time `avro:"window_end"`
					Count       int64     `avro:"count"`
					Total       int64     `avro:"total"`
				}
				if err := avro.Unmarshal(s, r.Value[5:], &v); err != nil {
					bad = append(bad, fmt.Sprintf("@%d: %v", r.Offset, err))
					return
				}
				if v.WindowEnd.Sub(v.WindowStart) != avWindow || string(r.Key) != v.Key {
					bad = append(bad, fmt.Sprintf("@%d: %+v with record key %q", r.Offset, v, r.Key))
				}
				k := avKey{v.Key, v.WindowStart.UnixMilli()}
				got[k] = append(got[k], avAgg{v.Count, v.Total})
			})
		}
	}()

	in, err := kgo.NewClient(kgo.SeedBrokers(c.Brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	var inMu sync.Mutex
	acked := map[int64]avOrder{}
	var inErr error
	s := avWindow.Milliseconds()
	t0 := time.Now().Add(-3*time.Minute).UnixMilli() / s * s
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 15))
	produce := func(o avOrder, p int32) {
		schema, id, v := v1, id1, map[string]any{"id": o.id, "country": o.country, "amount": o.amount, "ts": time.UnixMilli(o.ts)}
		if o.id%2 == 1 {
			schema, id = v2, id2
			v["note"] = map[string]any{"string": "v2"}
		}
		val, err := frame(schema, id, v)
		if err != nil {
			t.Errorf("encode order %d: %v", o.id, err)
			return
		}
		in.Produce(ctx, &kgo.Record{Topic: ordersT, Partition: p, Key: []byte(o.country), Value: val}, func(_ *kgo.Record, err error) {
			inMu.Lock()
			defer inMu.Unlock()
			if err != nil {
				inErr = err
				return
			}
			acked[o.id] = o
		})
	}
	order := func(i int) {
		ci := rng.IntN(len(avCountries))
		produce(avOrder{id: int64(i), country: avCountries[ci], amount: int64(rng.IntN(100) - 10),
			ts: t0 + int64(i)*avStep.Milliseconds() - rng.Int64N(500)}, int32(ci%avParts))
	}
	t.Logf("input seed %d, event time from %s; schemas %d (v1) and %d (v2)", seed, time.UnixMilli(t0).UTC().Format(time.RFC3339), id1, id2)

	cl := e2etest.NewReplicas(t, bin, cfgFile, dir, e2etest.ReplicaOptions{})
	for range 3 {
		cl.Start()
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range []string{"r0", "r1", "r2"} {
				if b, err := os.ReadFile(cl.LogPath(id)); err == nil {
					lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
					t.Logf("the end of replica %s's log:\n%s", id, strings.Join(lines[max(0, len(lines)-30):], "\n"))
				}
			}
		}
	})
	waitFor := func(what string, timeout time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !cond() {
			if err := cl.Exited(); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v", what, timeout)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitFor("a completed checkpoint", 2*time.Minute, func() bool { return len(commits.Records("complete")) >= 1 })

	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < avOrders; i += avPerRound {
			for j := i; j < min(i+avPerRound, avOrders); j++ {
				order(j)
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(avRoundPause):
			}
		}
	}()
	chaos := rand.New(rand.NewPCG(seed, 5))
	since := time.Now()
	for i := range avKills {
		waitFor("a checkpoint since the last restart", time.Minute, func() bool {
			cs := commits.Records("complete")
			return len(cs) > 0 && cs[len(cs)-1].Arrived.After(since)
		})
		time.Sleep(time.Duration(chaos.IntN(2000)) * time.Millisecond)
		victim := cl.KillRandom(chaos)
		mu.Lock()
		n := len(got)
		mu.Unlock()
		t.Logf("chaos %d at +%.1fs: kill -9 replica %s (%d window results committed)", i+1, time.Since(began).Seconds(), victim, n)
		time.Sleep(time.Duration(300+chaos.IntN(1500)) * time.Millisecond)
		cl.Restart(victim)
		since = time.Now()
	}
	<-done
	// The flush: one order per partition, 30 s of event time after the
	// last, of a country of its own, so that every window closes.
	for p := range int32(avParts) {
		produce(avOrder{id: avOrders + int64(p), country: "zz", amount: 1, ts: t0 + avOrders*avStep.Milliseconds() + 30_000}, p)
	}
	if err := in.Flush(ctx); err != nil || inErr != nil {
		t.Fatalf("produce the input: %v %v", err, inErr)
	}
	want := map[avKey]avAgg{}
	for _, o := range acked {
		if o.amount <= 0 || o.country == "zz" {
			continue
		}
		k := avKey{o.country, o.ts / s * s}
		a := want[k]
		a.count++
		a.total += o.amount
		want[k] = a
	}
	waitFor("every window's result committed", 2*time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for k := range want {
			if len(got[k]) == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(2 * time.Second) // a result too many shows itself
	cl.StopAll()

	mu.Lock()
	defer mu.Unlock()
	for k, rs := range got {
		w, ok := want[k]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s@%d: %d results, but no such window in the input", k.country, k.start, len(rs)))
		case len(rs) != 1:
			bad = append(bad, fmt.Sprintf("%s@%d: %d results %v, want exactly one", k.country, k.start, len(rs), rs))
		case rs[0] != w:
			bad = append(bad, fmt.Sprintf("%s@%d: %+v, want %+v", k.country, k.start, rs[0], w))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		t.Fatalf("the committed output is wrong:\n  %s", strings.Join(bad[:min(len(bad), 30)], "\n  "))
	}
	t.Logf("verified: %d orders (schemas v1 and v2), %d (country, window) results, each exactly once with its count and total, after %d kill -9s, in %v",
		len(acked), len(want), avKills, time.Since(began).Round(time.Second))
	e2etest.CheckCheckpointIDs(t, commits)
	e2etest.CheckNoOpenTransactions(ctx, t, c.Brokers, job)
}
