package replica

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/kafkaio/source"
)

// This file keeps the job's input lag visible while the job is failed or
// stopped. The sources are closed then, and with them their
// weir_source_lag_records series, just when a lag alert must fire. Every
// live replica in that state exports the lag of every input partition
// instead: the partition's last stable offset minus the offset the
// sources committed with the newest completed checkpoint to the job's
// source group (source.GroupName), or minus the partition's start where
// none was committed. Queries aggregate it with max by (topic, partition)
// (docs/metrics.md): a running job exports each partition once.

// parkedLagInterval is how often the lag of a failed or stopped job is read
// again.
const parkedLagInterval = 10 * time.Second

// parkedLag is the goroutine that exports the lag while the job is failed
// or stopped. Owned by Run's goroutine.
type parkedLag struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// parkLag starts exporting the input's lag from the committed offsets,
// unless it runs already.
func (r *Replica) parkLag(ctx context.Context) {
	if p := r.parked; p != nil {
		select {
		case <-p.done: // ended with the session that started it
		default:
			return
		}
	}
	lctx, cancel := context.WithCancel(ctx)
	p := &parkedLag{cancel: cancel, done: make(chan struct{})}
	r.parked = p
	go func() {
		defer close(p.done)
		r.exportParkedLag(lctx)
	}()
}

// unparkLag stops exporting the lag and removes its series, before the
// sources of a new generation export theirs.
func (r *Replica) unparkLag() {
	if p := r.parked; p != nil {
		p.cancel()
		<-p.done
		r.parked = nil
	}
}

// exportParkedLag sets the lag of every input partition now and every
// parkedLagInterval until ctx ends, then deletes the series it set.
func (r *Replica) exportParkedLag(ctx context.Context) {
	set := map[[2]string]bool{}
	defer func() {
		for k := range set {
			r.lag.DeleteLabelValues(k[0], k[1])
		}
	}()
	cl, err := kgo.NewClient(r.kopts...)
	if err != nil {
		r.log.Warn("export the input's lag of the stopped job", "err", err)
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var topics []string
	for _, s := range r.opts.Job.Sources() {
		topics = append(topics, s.Topics...)
	}
	group := source.GroupName(r.cfg.Kafka.TopicPrefix)
	tick := time.NewTicker(parkedLagInterval)
	defer tick.Stop()
	for {
		lags, err := readLag(ctx, adm, group, topics)
		if err != nil && ctx.Err() == nil {
			r.log.Warn("read the input's lag of the stopped job from its committed offsets; its lag series keep their last values", "group", group, "err", err)
		}
		for tp, lag := range lags {
			k := [2]string{tp.Topic, source.PartitionLabel(tp.Partition)}
			r.lag.WithLabelValues(k[0], k[1]).Set(float64(lag))
			set[k] = true
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// readLag returns, per partition of topics, its last stable offset minus
// group's committed offset (or the partition's start offset, if the group
// committed none for it).
func readLag(ctx context.Context, adm *kadm.Client, group string, topics []string) (map[topicPartition]int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ends, err := adm.ListCommittedOffsets(rctx, topics...)
	if err != nil {
		return nil, err
	}
	if err := ends.Error(); err != nil {
		return nil, err
	}
	starts, err := adm.ListStartOffsets(rctx, topics...)
	if err != nil {
		return nil, err
	}
	committed, err := adm.FetchOffsets(rctx, group)
	if err != nil {
		return nil, err
	}
	out := map[topicPartition]int64{}
	ends.Each(func(end kadm.ListedOffset) {
		from, ok := committed.Lookup(end.Topic, end.Partition)
		at := from.At
		if !ok || from.Err != nil || at < 0 {
			s, ok := starts.Lookup(end.Topic, end.Partition)
			if !ok || s.Err != nil {
				return
			}
			at = s.Offset
		}
		out[topicPartition{Topic: end.Topic, Partition: end.Partition}] = max(end.Offset-at, 0)
	})
	return out, nil
}

type topicPartition struct {
	Topic     string
	Partition int32
}
