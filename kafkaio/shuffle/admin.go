package shuffle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrTopicMismatch is the error, for errors.Is, of a shuffle topic that
// exists with another partition count than the job's maximum parallelism. It
// is permanent: a person must act.
var ErrTopicMismatch = errors.New("shuffle: topic partition count mismatch")

// TopicMismatchError says which shuffle topic has which partition count.
type TopicMismatchError struct {
	Topic      string
	Partitions int // what the topic has
	Want       int // the job's maximum parallelism
}

func (e *TopicMismatchError) Error() string {
	return fmt.Sprintf("shuffle: topic %s has %d partitions, but the job's max parallelism is %d: "+
		"delete the topic (its records are lost with it: do so only with the job stopped and its checkpoints discarded), "+
		"or set job.max_parallelism to %d",
		e.Topic, e.Partitions, e.Want, e.Partitions)
}

func (e *TopicMismatchError) Unwrap() error { return ErrTopicMismatch }

// TopicConfigs returns the configuration of a shuffle topic, as Kafka
// Streams sets it for repartition topics: records are deleted by Purge once
// no retained checkpoint needs them, never by age (a stopped job must find
// its records when it restarts), and segments roll often so that a purge
// frees disk. Each segment's offset and time indexes are sized for its 50
// MiB (an entry per 4 KiB of log, Kafka's index.interval.bytes, is 12 800
// entries, 150 KiB at most), not Kafka's default 10 MiB for 1 GiB
// segments: the broker maps both files of every partition's active
// segment, and a job's shuffle topics have many partitions (128 per topic
// by default).
func TopicConfigs() map[string]*string {
	s := func(v string) *string { return &v }
	return map[string]*string{
		"cleanup.policy":      s("delete"),
		"retention.ms":        s("-1"),
		"segment.ms":          s("600000"),   // 10 minutes
		"segment.bytes":       s("52428800"), // 50 MiB
		"segment.index.bytes": s("1048576"),  // 1 MiB
	}
}

// EnsureTopics creates each missing topic of topics (name to partition
// count) with the shuffle topic configuration and replication factor rf (-1:
// the broker's default). An existing topic with another partition count is a
// *TopicMismatchError; all of them are returned, joined.
func EnsureTopics(ctx context.Context, adm *kadm.Client, topics map[string]int, rf int16) error {
	names := slices.Sorted(maps.Keys(topics))
	if len(names) == 0 {
		return nil
	}
	details, err := listTopics(ctx, adm, names...)
	if err != nil {
		return fmt.Errorf("shuffle: list topics: %w", err)
	}
	var errs []error
	var created []string
	for _, name := range names {
		want := topics[name]
		if want <= 0 {
			errs = append(errs, fmt.Errorf("shuffle: topic %s: %d partitions", name, want))
			continue
		}
		if d, ok := details[name]; ok && d.Err == nil {
			if n := len(d.Partitions); n != want {
				errs = append(errs, &TopicMismatchError{Topic: name, Partitions: n, Want: want})
			}
			continue
		}
		resp, err := adm.CreateTopic(ctx, int32(want), rf, TopicConfigs(), name)
		if err == nil {
			err = resp.Err
		}
		if errors.Is(err, kerr.TopicAlreadyExists) {
			// Made meanwhile (another replica): check it like the others.
			err = checkCount(ctx, adm, name, want)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("shuffle: create topic %s (%d partitions, replication %d): %w", name, want, rf, err))
			continue
		}
		created = append(created, name)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return awaitTopics(ctx, adm, created, topics)
}

// awaitTopics waits until the metadata shows each created topic with its
// partitions and their leaders: Kafka answers CreateTopics before every
// broker knows the topic, and a writer or reader started at once would fail
// on it. It asks every 10 ms at first, then up to every 100 ms: a start
// waits for it, and a doubling wait would sleep long past the moment the
// topics are ready.
func awaitTopics(ctx context.Context, adm *kadm.Client, names []string, want map[string]int) error {
	for backoff := 10 * time.Millisecond; len(names) > 0; backoff = min(2*backoff, 100*time.Millisecond) {
		details, err := listTopics(ctx, adm, names...)
		if err == nil {
			names = slices.DeleteFunc(names, func(name string) bool {
				d, ok := details[name]
				if !ok || d.Err != nil || len(d.Partitions) != want[name] {
					return false
				}
				for _, p := range d.Partitions {
					if p.Err != nil || p.Leader < 0 {
						return false
					}
				}
				return true
			})
			if len(names) == 0 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("shuffle: created topics %v not in the metadata yet: %w", names, errors.Join(ctx.Err(), err))
		case <-time.After(backoff):
		}
	}
	return nil
}

// listTopics asks the brokers for the topics' metadata, not kadm's cache
// (kept for MetadataMinAge, 5s), which may still hold a topic just made as
// missing: asking for the authorized operations is kadm's one way around it.
func listTopics(ctx context.Context, adm *kadm.Client, names ...string) (kadm.TopicDetails, error) {
	return adm.ListTopics(kadm.WithAuthorizedOps(ctx), names...)
}

// checkCount checks that topic has want partitions.
func checkCount(ctx context.Context, adm *kadm.Client, topic string, want int) error {
	details, err := listTopics(ctx, adm, topic)
	if err == nil {
		err = details.Error()
	}
	if err != nil {
		return err
	}
	if n := len(details[topic].Partitions); n != want {
		return &TopicMismatchError{Topic: topic, Partitions: n, Want: want}
	}
	return nil
}

// Purge deletes the records of topic below the given offsets, per partition
// (DeleteRecords), as Kafka Streams purges repartition topics once they are
// committed: the log start offsets move up to them. An offset at or below a
// partition's log start changes nothing.
func Purge(ctx context.Context, adm *kadm.Client, topic string, below map[int32]int64) error {
	if len(below) == 0 {
		return nil
	}
	// Kafka ignores an offset below the log start, kfake refuses it: skip
	// those partitions, so the result does not depend on the broker.
	starts, err := adm.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return fmt.Errorf("shuffle: purge %s: log start offsets: %w", topic, err)
	}
	os := make(kadm.Offsets)
	for p, off := range below {
		if start, ok := starts.Lookup(topic, p); ok && off <= start.Offset {
			continue
		}
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: off, LeaderEpoch: -1})
	}
	if len(os) == 0 {
		return nil
	}
	resps, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		return fmt.Errorf("shuffle: purge %s: %w", topic, err)
	}
	var errs []error
	resps.Each(func(r kadm.DeleteRecordsResponse) {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("shuffle: purge %s[%d] below %d: %w", r.Topic, r.Partition, below[r.Partition], r.Err))
		}
	})
	return errors.Join(errs...)
}
