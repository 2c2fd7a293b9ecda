package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/benchutil"
)

// The -grow-partitions run (issue 31, section 4): how long a partition
// added to a running job's input waits for its first committed output.
//
// The count job (source json → aggregate count → sink json exactly-once)
// runs with the first -replicas entry and the product's default
// kafka.metadata_max_age (30s), on an input of -partitions partitions that
// receives steady input (-rate records/s over -keys keys). Then, -grow-rounds
// times, one partition is added (kadm UpdatePartitions) and, from the
// moment the broker accepts the first record on it, records with keys of
// their own ("grow-<partition>-<n>") are written to it every 20ms. The
// figure of a round is the time from the call that adds the partition to
// the first of those keys' outputs seen by an independent read_committed
// consumer of the output topic: detection (up to one metadata age), the
// new generation (every task restored), and the first checkpoint that
// commits the partition's output. The result is the worst round; the
// goal is 35s. At the end, every key's counts are verified exactly 1..n,
// those of the added partitions included.
//
// The rounds follow each other at once. The coordinator reads the count
// every metadata age from its start, so the first round's addition falls
// at a random point of that period, and every later one just after the
// reading that found the previous partition: those rounds wait almost a
// whole period, the worst case.

// growInput writes the run's input: steady records to the partitions that
// existed at the start, and records to each added partition. It counts
// what the broker acknowledged, per key.
type growInput struct {
	cl *kgo.Client

	mu     sync.Mutex
	perKey map[string]int
	total  int
	err    error
}

func (g *growInput) produce(ctx context.Context, key string, partition int32, i int) {
	v := []byte(`{"i":` + strconv.Itoa(i) + `,"user":"` + key + `"}`)
	g.cl.Produce(ctx, &kgo.Record{Key: []byte(key), Value: v, Partition: partition}, func(_ *kgo.Record, err error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		if err != nil {
			g.err = errors.Join(g.err, err)
			return
		}
		g.perKey[key]++
		g.total++
	})
}

// produceSync writes one record and waits for the broker's answer: the
// first record to a partition just added, which the client may not know
// yet.
func (g *growInput) produceSync(ctx context.Context, key string, partition int32, i int) error {
	v := []byte(`{"i":` + strconv.Itoa(i) + `,"user":"` + key + `"}`)
	if err := g.cl.ProduceSync(ctx, &kgo.Record{Key: []byte(key), Value: v, Partition: partition}).FirstErr(); err != nil {
		return err
	}
	g.mu.Lock()
	g.perKey[key]++
	g.total++
	g.mu.Unlock()
	return nil
}

// runGrowth is a -grow-partitions run: see the comment at the top of this
// file.
func (b *bench) runGrowth(ctx context.Context) error {
	c := b.c
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.DefaultProduceTopic(b.in), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.MetadataMinAge(250*time.Millisecond), kgo.MetadataMaxAge(time.Second), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return err
	}
	defer cl.Close()
	in := &growInput{cl: cl, perKey: map[string]int{}}
	j, err := b.newJob(ctx, b.id+"-grow", b.plain)
	if err != nil {
		return err
	}
	for i := range c.replicas[0] {
		if _, err := j.start("r" + strconv.Itoa(i)); err != nil {
			return err
		}
	}
	// First output seen per key prefix "grow-<partition>-".
	var mu sync.Mutex
	firsts := map[string]time.Time{}
	outputs := 0
	obs, err := b.observe(ctx, j.out, nil, func(r *kgo.Record, now time.Time) {
		mu.Lock()
		defer mu.Unlock()
		outputs++
		k := string(r.Key)
		if !strings.HasPrefix(k, "grow-") {
			return
		}
		prefix := k[:strings.LastIndexByte(k, '-')+1]
		if _, ok := firsts[prefix]; !ok {
			firsts[prefix] = now
		}
	})
	if err != nil {
		return err
	}
	defer obs.stop()

	// Steady input to the partitions of the start, from now to the end.
	steadyCtx, stopSteady := context.WithCancel(ctx)
	var steady sync.WaitGroup
	steady.Go(func() {
		const tick = 50 * time.Millisecond
		per := max(1, c.rate*int(tick)/int(time.Second))
		tk := time.NewTicker(tick)
		defer tk.Stop()
		for i := 0; ; {
			select {
			case <-steadyCtx.Done():
				return
			case <-tk.C:
			}
			for range per {
				in.produce(ctx, keyName(i%c.keys), int32(i%c.partitions), i)
				i++
			}
		}
	})
	defer func() { stopSteady(); steady.Wait() }()

	// The job runs: its first output is committed.
	start := time.Now()
	for {
		mu.Lock()
		n := outputs
		mu.Unlock()
		if n > 0 {
			break
		}
		if err := j.check(); err != nil {
			return err
		}
		in.mu.Lock()
		perr := in.err
		in.mu.Unlock()
		if perr != nil {
			return fmt.Errorf("produce input: %w", perr)
		}
		if time.Since(start) > 2*time.Minute {
			return errors.New("no output within 2 minutes of the job's start")
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	benchutil.Info("count job running (first output after %v); adding %d partition(s) to %s, one at a time", time.Since(start).Round(time.Millisecond), c.growRounds, b.in)

	var waits []time.Duration
	for round := range c.growRounds {
		p := int32(c.partitions + round)
		prefix := fmt.Sprintf("grow-%02d-", p)
		added := time.Now()
		rs, err := b.adm.UpdatePartitions(ctx, int(p)+1, b.in)
		if err == nil {
			err = rs.Error()
		}
		if err != nil {
			return fmt.Errorf("add partition %d to %s: %w", p, b.in, err)
		}
		// Records to the new partition, from the first the broker takes.
		var n int
		for {
			if err := in.produceSync(ctx, prefix+"0", p, n); err == nil {
				n++
				break
			}
			if time.Since(added) > time.Minute {
				return fmt.Errorf("partition %d of %s takes no record a minute after it was added", p, b.in)
			}
			if err := sleep(ctx, 20*time.Millisecond); err != nil {
				return err
			}
		}
		accepted := time.Since(added)
		var seen time.Time
		for seen.IsZero() {
			in.produce(ctx, prefix+strconv.Itoa(n%10), p, n)
			n++
			mu.Lock()
			seen = firsts[prefix]
			mu.Unlock()
			if err := j.check(); err != nil {
				return err
			}
			if time.Since(added) > 3*time.Minute {
				return fmt.Errorf("no output of partition %d within 3 minutes of its addition", p)
			}
			if err := sleep(ctx, 20*time.Millisecond); err != nil {
				return err
			}
		}
		wait := seen.Sub(added)
		waits = append(waits, wait)
		detail := "the coordinator's log line not found"
		if at, ok := j.detected(int(p) + 1); ok {
			detail = fmt.Sprintf("the coordinator noticed it after %v, %v before that output",
				at.Sub(added).Round(time.Millisecond), seen.Sub(at).Round(time.Millisecond))
		}
		benchutil.Info("round %d: partition %d added; the broker took its first record after %v, its first output was committed after %v (%s)",
			round+1, p, accepted.Round(time.Millisecond), wait.Round(time.Millisecond), detail)
	}
	stopSteady()
	steady.Wait()
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	in.mu.Lock()
	perKey, total, perr := in.perKey, in.total, in.err
	in.mu.Unlock()
	if perr != nil {
		return fmt.Errorf("produce input: %w", perr)
	}

	slices.Sort(waits)
	benchutil.Result("partition_added_to_first_output_seconds", "%.1f", waits[len(waits)-1].Seconds(), "s")
	benchutil.Info("headline: a partition added to the input of a running count job (%d replica(s), kafka.metadata_max_age 30s, the default) had its first output committed after at most %.1fs over %d rounds (goal <= 35s); each: %v",
		c.replicas[0], waits[len(waits)-1].Seconds(), len(waits), waits)
	if !c.verify {
		return j.stopAll()
	}
	v, err := b.verify(ctx, j.out, perKey, total)
	if err != nil {
		return err
	}
	if err := j.stopAll(); err != nil {
		return err
	}
	return verdict([]*verification{v})
}

// detectedRE is the coordinator's log line for a new partition count.
var detectedRE = regexp.MustCompile(`^time=(\S+) .*msg="the input topics' partition count changed.* partitions=(\d+) `)

// detected returns when a replica of j logged that the input's partition
// count changed to partitions (docs/operations.md, "Input partitions
// added"): when the coordinator noticed it.
func (j *job) detected(partitions int) (time.Time, bool) {
	for _, p := range j.procs {
		b, err := os.ReadFile(p.log)
		if err != nil {
			continue
		}
		for line := range strings.Lines(string(b)) {
			m := detectedRE.FindStringSubmatch(line)
			if m == nil || m[2] != strconv.Itoa(partitions) {
				continue
			}
			if at, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
				return at, true
			}
		}
	}
	return time.Time{}, false
}
