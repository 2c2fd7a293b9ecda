package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// devKafka is the embedded Kafka of `processor dev`: franz-go's kfake,
// persisted under a directory.
//
// kfake writes every batch, transaction markers included, to its files as
// it takes it, so a batch survives a kill -9 of the process. What it keeps
// only in memory until a clean Close is the transaction coordinator's state.
// After an unclean stop it reloads an open transaction as aborted, but
// writes no abort marker for it: a read_committed consumer that reads the
// log from before that transaction is told it is aborted and skips the
// producer's batches until an abort marker, which never comes, so it skips
// the producer's later, committed transactions too (the sink's transactional
// IDs are reused, so their producer IDs are the same). Output that dev had
// printed as committed then seems lost. So, after an unclean stop, dev
// writes the missing abort markers (endOpenTransactions) before any client
// writes again, which makes the log what Kafka's would be once its
// transaction timeout aborted those transactions.
type devKafka struct {
	cluster *kfake.Cluster
	brokers []string
	stopped string // the file a clean stop leaves next to the data
	// recovered is the number of transactions the last, unclean, stop
	// left open and start ended (0: it stopped cleanly).
	recovered int
}

// startDevKafka starts the embedded Kafka on the data of dir/kafka, and
// after an unclean stop ends the transactions the stop left open.
func startDevKafka(ctx context.Context, dir string) (*devKafka, error) {
	data := filepath.Join(dir, "kafka")
	k := &devKafka{stopped: filepath.Join(dir, "kafka.stopped")}
	_, err := os.Stat(data)
	existed := err == nil
	_, err = os.Stat(k.stopped)
	unclean := existed && errors.Is(err, os.ErrNotExist)
	if err := os.Remove(k.stopped); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if k.cluster, err = kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(data)); err != nil {
		return nil, fmt.Errorf("start the embedded Kafka: %w", err)
	}
	k.brokers = k.cluster.ListenAddrs()
	if unclean {
		if k.recovered, err = endOpenTransactions(ctx, k.brokers); err != nil {
			k.cluster.Close()
			return nil, fmt.Errorf("the embedded Kafka did not stop cleanly last time; end the transactions it left open: %w", err)
		}
	}
	return k, nil
}

// close stops the embedded Kafka, which saves its state, and records that
// it stopped cleanly.
func (k *devKafka) close() error {
	k.cluster.Close()
	return os.WriteFile(k.stopped, nil, 0o644)
}

// endOpenTransactions writes an abort marker for every transaction that is
// open in the log of any partition of the cluster at brokers (every
// transactional producer whose last batch in the partition is data, not a
// marker), and returns how many it ended. It must run before any client
// writes: a transaction open in the log is then one the previous process
// left, which kfake has already taken as aborted.
func endOpenTransactions(ctx context.Context, brokers []string) (int, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopicsWithInternal(ctx)
	if err != nil {
		return 0, err
	}
	starts, err := adm.ListStartOffsets(ctx, topics.Names()...)
	if err != nil {
		return 0, err
	}
	ends, err := adm.ListEndOffsets(ctx, topics.Names()...)
	if err != nil {
		return 0, err
	}
	from := map[string]map[int32]kgo.Offset{}
	remaining := map[string]map[int32]int64{} // topic -> partition -> high watermark not yet reached
	ends.Each(func(e kadm.ListedOffset) {
		s, ok := starts.Lookup(e.Topic, e.Partition)
		if e.Err != nil || !ok || s.Err != nil || e.Offset <= s.Offset {
			return
		}
		if from[e.Topic] == nil {
			from[e.Topic], remaining[e.Topic] = map[int32]kgo.Offset{}, map[int32]int64{}
		}
		from[e.Topic][e.Partition] = kgo.NewOffset().At(s.Offset)
		remaining[e.Topic][e.Partition] = e.Offset
	})
	if err := errors.Join(starts.Error(), ends.Error()); err != nil {
		return 0, err
	}
	if len(from) == 0 {
		return 0, nil
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(from),
		kgo.FetchIsolationLevel(kgo.ReadUncommitted()), kgo.KeepControlRecords())
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	type tp struct {
		topic     string
		partition int32
	}
	open := map[tp]map[int64]int16{} // partition -> producer ID with an open transaction -> its epoch
	for len(remaining) > 0 {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := fs.Err0(); err != nil {
			return 0, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			p := tp{r.Topic, r.Partition}
			switch {
			case r.Attrs.IsControl():
				delete(open[p], r.ProducerID)
			case r.Attrs.IsTransactional():
				if open[p] == nil {
					open[p] = map[int64]int16{}
				}
				open[p][r.ProducerID] = r.ProducerEpoch
			}
			if end, ok := remaining[r.Topic][r.Partition]; ok && r.Offset+1 >= end {
				delete(remaining[r.Topic], r.Partition)
				if len(remaining[r.Topic]) == 0 {
					delete(remaining, r.Topic)
				}
			}
		})
	}
	req := kmsg.NewPtrWriteTxnMarkersRequest()
	ended := 0
	for p, pids := range open {
		for pid, epoch := range pids {
			m := kmsg.NewWriteTxnMarkersRequestMarker()
			m.ProducerID, m.ProducerEpoch, m.Committed = pid, epoch, false
			t := kmsg.NewWriteTxnMarkersRequestMarkerTopic()
			t.Topic, t.Partitions = p.topic, []int32{p.partition}
			m.Topics = append(m.Topics, t)
			req.Markers = append(req.Markers, m)
			ended++
		}
	}
	if ended == 0 {
		return 0, nil
	}
	// One broker: it leads every partition.
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	for _, m := range resp.Markers {
		for _, t := range m.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return 0, fmt.Errorf("abort marker of producer %d on %s/%d: %w", m.ProducerID, t.Topic, p.Partition, err)
				}
			}
		}
	}
	return ended, nil
}
