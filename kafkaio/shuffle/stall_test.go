package shuffle_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/kafkatest"
	"github.com/weir-stream/weir/kafkaio/shuffle"
)

// stallRun is what driveAlignments saw.
type stallRun struct {
	cycles    int     // hold/release cycles driven
	seeks     int     // Seeks given (Resume's own not counted)
	records   int     // records returned
	stalls    int     // partitions seen not fetched for 2×FetchMaxWait with records to read
	unstalled float64 // weir_shuffle_stalled_seeks_total: unstall firing
	// From a release to a record of every partition, the slowest and the
	// sum over the cycles.
	flowMax, flowSum time.Duration
}

func (r *stallRun) add(o stallRun) {
	r.cycles += o.cycles
	r.seeks += o.seeks
	r.records += o.records
	r.stalls += o.stalls
	r.flowMax = max(r.flowMax, o.flowMax)
	r.flowSum += o.flowSum
}

// driveAlignments runs readers readers of 16 partitions each, side by side
// on one topic that a producer fills continuously, for d; each reads as a
// task's input core does during checkpoint alignments (see alignReader).
func driveAlignments(t *testing.T, c *kafkatest.Cluster, readers int, d time.Duration, unstall bool) stallRun {
	t.Helper()
	const per = 16
	m := readers * per
	ctx, opts, topic := setup(t, c, m)

	// The producer: a record to every partition every 4ms, as upstream
	// tasks write to every key group all the time.
	pctx, stopProducing := context.WithCancel(ctx)
	var produced atomic.Int64
	var prodErr atomic.Value
	var wg sync.WaitGroup
	pcl := c.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic),
		kgo.ProducerLinger(time.Millisecond))
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(4 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-pctx.Done():
				return
			case <-tick.C:
			}
			for p := range int32(m) {
				pcl.Produce(pctx, &kgo.Record{Partition: p, Value: fmt.Appendf(nil, "%d", i)}, func(_ *kgo.Record, err error) {
					if err != nil && pctx.Err() == nil {
						prodErr.Store(err)
					}
					produced.Add(1)
				})
			}
		}
	}()
	defer func() {
		stopProducing()
		wg.Wait()
	}()

	reg := prometheus.NewRegistry()
	metrics, err := shuffle.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	adm := c.Admin(t)
	rds := make([]*shuffle.Reader, readers)
	for k := range readers {
		r, err := shuffle.NewReader(ctx, shuffle.ReaderConfig{ClientOpts: opts, Topic: topic,
			Lo: int32(k * per), Hi: int32((k + 1) * per), Metrics: metrics})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		shuffle.SetUnstall(r, unstall)
		rds[k] = r
	}
	runs := make([]stallRun, readers)
	errs := make([]error, readers)
	var rwg sync.WaitGroup
	deadline := time.Now().Add(d)
	for k, r := range rds {
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			runs[k], errs[k] = alignReader(ctx, t, r, adm, topic, int32(k*per), per, deadline, &prodErr)
		}()
	}
	rwg.Wait()
	var run stallRun
	for k := range readers {
		if errs[k] != nil {
			t.Fatalf("reader %d: %v", k, errs[k])
		}
		run.add(runs[k])
	}
	run.unstalled = counterValue(t, reg, shuffle.MetricStalledSeeks, topic)
	t.Logf("%d readers for %s: %d cycles, %d seeks, %d records read, %d produced; %d stalls, unstall fired %v times; "+
		"release to a record of every partition: mean %v, max %v",
		readers, d, run.cycles, run.seeks, run.records, produced.Load(), run.stalls, run.unstalled,
		(run.flowSum / time.Duration(max(run.cycles, 1))).Round(time.Millisecond), run.flowMax.Round(time.Millisecond))
	return run
}

// alignReader reads partitions [lo, lo+n) with r until deadline as a task's
// input core does during checkpoint alignments, in quick cycles: it holds
// some partitions (all of them half the time), pausing most (a few at a
// time, between polls, as their writers' barriers come) while it keeps
// polling, then releases them all at once, each with a Seek back to where
// it was held followed by a Resume if it was paused. The next cycle starts
// once every partition has returned a record since the release, as the
// next barriers come after the records.
//
// It checks the Reader's contract as it goes (no record of a paused
// partition; each partition's records contiguous from its start and from
// each Seek) and counts stalls: an unpaused partition that has returned no
// record for 2×FetchMaxWait since its last record or its release while the
// broker has records beyond the reader's position there.
func alignReader(ctx context.Context, t *testing.T, r *shuffle.Reader, adm *kadm.Client, topic string, lo int32, n int, deadline time.Time, prodErr *atomic.Value) (stallRun, error) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(lo)))
	var (
		run      stallRun
		next     = make([]int64, n)     // the offset the reader must return next; 0 from the log start
		paused   = make([]bool, n)      // Paused, not resumed
		held     = make([]bool, n)      // in the cycle's held set
		rewind   = make([]int64, n)     // where a held partition is sought back to
		progress = make([]time.Time, n) // last record, or release
		fresh    = make([]bool, n)      // a record came since the last release
		stalled  = make([]bool, n)      // counted as stalled; cleared by a record
		order    []int                  // held partitions, in the order they were held
		toHold   []int
		lastEnds time.Time
		released time.Time // the last release; zero once every partition flowed
	)
	now := time.Now()
	for i := range progress {
		progress[i] = now
	}
	// A cycle: phase 0 polls until every partition has returned a record
	// (or stalled) and phaseEnd passed; phase 1 holds the partitions of
	// toHold, a few per poll; phase 2 polls with them held until phaseEnd,
	// then releases them.
	phase, phaseEnd := 0, now
	flowed := func() bool {
		for i := range fresh {
			if !fresh[i] && !stalled[i] {
				return false
			}
		}
		return true
	}
	for time.Now().Before(deadline) {
		if err, _ := prodErr.Load().(error); err != nil {
			return run, fmt.Errorf("produce: %w", err)
		}
		switch now := time.Now(); {
		case phase == 0 && now.After(phaseEnd) && flowed():
			toHold = rng.Perm(n)
			if rng.IntN(2) == 0 {
				toHold = toHold[:1+rng.IntN(n)]
			}
			order = order[:0]
			phase = 1
		case phase == 1:
			for range 1 + rng.IntN(6) {
				if len(toHold) == 0 {
					break
				}
				i := toHold[0]
				toHold = toHold[1:]
				held[i], rewind[i] = true, next[i]
				order = append(order, i)
				if rng.IntN(8) > 0 { // every writer held: paused
					paused[i] = true
					r.Pause(lo + int32(i))
				}
			}
			if len(toHold) == 0 {
				phase, phaseEnd = 2, now.Add(time.Duration(rng.IntN(50))*time.Millisecond)
			}
		case phase == 2 && now.After(phaseEnd):
			for _, i := range order {
				r.Seek(lo+int32(i), rewind[i])
				run.seeks++
				next[i], held[i] = rewind[i], false
				if paused[i] {
					paused[i] = false
					r.Resume(lo + int32(i))
				}
			}
			for i := range fresh {
				progress[i], fresh[i] = now, false
			}
			released = now
			run.cycles++
			phase, phaseEnd = 0, now.Add(time.Duration(rng.IntN(50))*time.Millisecond)
		}

		pctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		recs, err := r.Poll(pctx)
		cancel()
		if err != nil && pctx.Err() == nil {
			return run, fmt.Errorf("poll: %w", err)
		}
		now := time.Now()
		for _, rec := range recs {
			i := rec.Partition - lo
			if paused[i] {
				return run, fmt.Errorf("record %d of paused partition %d", rec.Offset, rec.Partition)
			}
			if rec.Offset != next[i] {
				return run, fmt.Errorf("partition %d: record at offset %d, want %d (held %v)", rec.Partition, rec.Offset, next[i], held[i])
			}
			next[i]++
			progress[i], fresh[i], stalled[i] = now, true, false
			run.records++
		}
		if !released.IsZero() && flowed() {
			d := now.Sub(released)
			run.flowSum += d
			run.flowMax = max(run.flowMax, d)
			released = time.Time{}
		}

		var suspects []int
		for i := range n {
			// Not before its first record: a new reader takes its time.
			if next[i] > 0 && !paused[i] && !stalled[i] && now.Sub(progress[i]) > 2*shuffle.FetchMaxWait {
				suspects = append(suspects, i)
			}
		}
		if len(suspects) == 0 || now.Sub(lastEnds) < 100*time.Millisecond {
			continue
		}
		lastEnds = now
		ends, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = ends.Error()
		}
		if err != nil {
			return run, fmt.Errorf("end offsets: %w", err)
		}
		for _, i := range suspects {
			if end, ok := ends.Lookup(topic, lo+int32(i)); ok && end.Offset > next[i] {
				stalled[i] = true
				run.stalls++
				t.Logf("partition %d stalled: at %d, log end %d, no record for %v (held %v)",
					lo+int32(i), next[i], end.Offset, now.Sub(progress[i]).Round(time.Millisecond), held[i])
			}
		}
	}
	return run, nil
}

// TestStallAfterSeekResume drives checkpoint alignments (pauses, seeks
// back, resumes) of eight readers of 16 partitions on the real broker, for
// about 22 s, with the readers' unstall safety net off: no partition may
// go unfetched while it has records. With the net on, it must never fire.
//
// A reader that gave franz-go v1.22.3 one SetOffsets per Seek, and
// ResumeFetchPartitions then SetOffsets per Resume, failed "unstall-off"
// in each of seven runs on a 2-CPU machine (16 to 48 stalled partitions,
// a whole reader's 16 at a time: the client had lost its fetch loop; see
// Reader.flush).
func TestStallAfterSeekResume(t *testing.T) {
	c := kafkatest.NewReal(t)
	t.Run("unstall-off", func(t *testing.T) {
		if run := driveAlignments(t, c, 8, 12*time.Second, false); run.stalls > 0 {
			t.Errorf("%d partitions stalled after a seek or resume in %d cycles", run.stalls, run.cycles)
		}
	})
	t.Run("unstall-on", func(t *testing.T) {
		run := driveAlignments(t, c, 8, 10*time.Second, true)
		if run.stalls > 0 || run.unstalled > 0 {
			t.Errorf("%d stalls seen, unstall fired %v times in %d cycles", run.stalls, run.unstalled, run.cycles)
		}
	})
}
