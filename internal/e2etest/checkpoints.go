package e2etest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Checkpoints is what a job's control topics tell of its checkpoints,
// decoded by hand from their documented JSON (docs/protocol.md).
type Checkpoints struct {
	// Durations is, per completed checkpoint, the time from its trigger
	// (the trigger's "ts") to its completion (the timestamp of the
	// complete record on the commit topic), sorted.
	Durations []time.Duration
	// Align is, per task ID, the align_ms of its acks, in ack order: how
	// long the task waited between the first and the last barrier of a
	// checkpoint (0 for a task that reads no shuffle).
	Align map[string][]time.Duration
}

// ReadCheckpoints reads job's trigger, commit and ack topics (default
// topic prefix) from their start to their ends of now, and returns the
// checkpoints completed so far with the tasks' alignment times.
func ReadCheckpoints(ctx context.Context, brokers []string, job string, opts ...kgo.Opt) (*Checkpoints, error) {
	type msg struct {
		Type    string `json:"type"`
		ID      uint64 `json:"id"`
		TS      int64  `json:"ts"`
		Task    string `json:"task"`
		Metrics struct {
			AlignMS int64 `json:"align_ms"`
		} `json:"metrics"`
	}
	triggers, completes := map[uint64]int64{}, map[uint64]int64{}
	out := &Checkpoints{Align: map[string][]time.Duration{}}
	prefix := "_weir." + job + "."
	for _, topic := range []string{prefix + "trigger", prefix + "commit", prefix + "ack"} {
		err := readToEnd(ctx, brokers, topic, opts, func(r *kgo.Record) {
			var m msg
			if json.Unmarshal(r.Value, &m) != nil {
				return
			}
			switch m.Type {
			case "trigger":
				triggers[m.ID] = m.TS
			case "complete":
				completes[m.ID] = r.Timestamp.UnixMilli()
			case "ack":
				out.Align[m.Task] = append(out.Align[m.Task], time.Duration(m.Metrics.AlignMS)*time.Millisecond)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	for id, done := range completes {
		if at, ok := triggers[id]; ok {
			out.Durations = append(out.Durations, time.Duration(done-at)*time.Millisecond)
		}
	}
	slices.Sort(out.Durations)
	return out, nil
}

// AlignAll returns every ack's alignment time, sorted; with stage set,
// only those of the tasks "<stage>/<i>".
func (c *Checkpoints) AlignAll(stage string) []time.Duration {
	var all []time.Duration
	for task, ds := range c.Align {
		if stage == "" || len(task) > len(stage) && task[:len(stage)+1] == stage+"/" {
			all = append(all, ds...)
		}
	}
	slices.Sort(all)
	return all
}

// Quantile is the nearest-rank quantile q of sorted ds, 0 if ds is empty.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(float64(len(ds))*q+0.999999) - 1
	return ds[max(0, min(i, len(ds)-1))]
}

// readToEnd calls fn for every record of topic (read_committed) from its
// start up to its last stable offsets of now. Transaction markers are kept
// in the fetch so that the position reaches the end even when the last
// offset is one; fn does not see them.
func readToEnd(ctx context.Context, brokers []string, topic string, opts []kgo.Opt, fn func(*kgo.Record)) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.FetchMaxWait(200 * time.Millisecond)}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	left := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			left[o.Partition] = o.Offset
		}
	})
	deadline := time.Now().Add(time.Minute)
	for len(left) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not read to its end within a minute", topic)
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return err
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset+1 >= left[r.Partition] {
				delete(left, r.Partition)
			}
			if !r.Attrs.IsControl() {
				fn(r)
			}
		})
	}
	return nil
}
