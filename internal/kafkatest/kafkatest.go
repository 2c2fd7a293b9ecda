package kafkatest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Environment variables that select and require the real broker. `make`
// exports the first two from scripts/kafka.sh; CI sets the third.
const (
	EnvBrokers     = "WEIR_KAFKA_BROKERS"
	EnvVersion     = "WEIR_KAFKA_VERSION"
	EnvRequireReal = "WEIR_REQUIRE_REAL_KAFKA"
)

// RealMarker starts the log line a test writes when it runs against the real
// broker. The test report (internal/tools/testreport) counts the tests that
// wrote it, so CI can show how many real-broker tests ran and that none was
// skipped.
const RealMarker = "weir-real-kafka:"

// Kind says which broker a Cluster is.
type Kind string

// The kinds of broker a test can get.
const (
	Kfake Kind = "kfake"
	Real  Kind = "kafka"
)

// Cluster is a broker a test can use: its bootstrap addresses and what it is.
type Cluster struct {
	Kind    Kind
	Brokers []string
	// Name is the broker software and version, for logs: "Apache Kafka 4.4.0"
	// or "kfake (franz-go ...)".
	Name string
	// Fake is the in-process cluster of a kfake Cluster, for tests that
	// inject broker failures (ControlKey); nil on the real broker.
	Fake *kfake.Cluster
	// Opts are added to every client the Cluster makes (Client, Admin,
	// CreateTopic, ReadCommitted): TLS and SASL of a secured cluster.
	Opts []kgo.Opt
}

// NewKfake starts an in-process kfake cluster for the test and closes it when
// the test ends. Extra options are passed to kfake.NewCluster.
func NewKfake(t testing.TB, opts ...kfake.Opt) *Cluster {
	t.Helper()
	opts = append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("kafkatest: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return &Cluster{Kind: Kfake, Brokers: c.ListenAddrs(), Name: "kfake (franz-go in-process)", Fake: c}
}

// RealRequired reports whether the environment demands the real broker.
func RealRequired() bool { return os.Getenv(EnvRequireReal) == "1" }

// NewReal returns the real broker that `make kafka-up` started. Without
// WEIR_KAFKA_BROKERS the test is skipped, unless WEIR_REQUIRE_REAL_KAFKA=1:
// then, as when the broker does not answer, the test fails. It never skips a
// test that the environment says must run.
func NewReal(t testing.TB) *Cluster {
	t.Helper()
	addrs := os.Getenv(EnvBrokers)
	if addrs == "" {
		if RealRequired() {
			t.Fatalf("kafkatest: %s=1 but %s is not set; run the tests with `make test` (it starts the broker)", EnvRequireReal, EnvBrokers)
		}
		t.Skipf("kafkatest: no real broker (%s unset); `make test` starts one", EnvBrokers)
	}
	brokers := strings.Split(addrs, ",")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	guess, err := Ping(ctx, brokers)
	if err != nil {
		if RealRequired() {
			t.Fatalf("kafkatest: real broker at %s unreachable: %v", addrs, err)
		}
		t.Skipf("kafkatest: real broker at %s unreachable: %v", addrs, err)
	}
	name := realName(guess)
	t.Logf("%s %s at %s", RealMarker, name, addrs)
	return &Cluster{Kind: Real, Brokers: brokers, Name: name}
}

// realName describes the real broker: "Apache Kafka 4.4.0 (protocol v4.4)".
func realName(protocol string) string {
	name := "Apache Kafka"
	if v := os.Getenv(EnvVersion); v != "" {
		name += " " + v
	}
	return name + " (protocol " + protocol + ")"
}

// Each runs fn as two subtests, "kfake" and "kafka", one on each broker. The
// real one skips or fails as NewReal says.
func Each(t *testing.T, fn func(t *testing.T, c *Cluster)) {
	t.Helper()
	t.Run(string(Kfake), func(t *testing.T) { fn(t, NewKfake(t)) })
	t.Run(string(Real), func(t *testing.T) { fn(t, NewReal(t)) })
}

// Ping asks the brokers for their API versions and metadata, and returns
// kversion's guess of the protocol version they speak. Extra options (TLS,
// SASL) are passed to the client.
func Ping(ctx context.Context, brokers []string, opts ...kgo.Opt) (string, error) {
	guess, _, err := ping(ctx, brokers, opts...)
	return guess, err
}

func ping(ctx context.Context, brokers []string, opts ...kgo.Opt) (string, kadm.BrokerDetails, error) {
	opts = append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RequestRetries(0)}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return "", nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("metadata: %w", err)
	}
	if len(md.Brokers) == 0 {
		return "", nil, fmt.Errorf("metadata lists no broker")
	}
	if md.Controller < 0 {
		return "", nil, fmt.Errorf("metadata names no controller yet")
	}
	vs, err := adm.ApiVersions(ctx)
	if err != nil {
		return "", nil, fmt.Errorf("api versions: %w", err)
	}
	for _, bv := range vs {
		if bv.Err != nil {
			return "", nil, fmt.Errorf("api versions of broker %d: %w", bv.NodeID, bv.Err)
		}
		guess := bv.VersionGuess()
		if strings.HasPrefix(guess, "unknown") {
			// Newer than franz-go's table: say at least the newest it knows.
			guess = "newer than " + kversion.Stable().VersionGuess()
		}
		for _, f := range bv.Raw().FinalizedFeatures {
			if f.Name == "metadata.version" {
				guess += fmt.Sprintf(", metadata.version level %d", f.MaxVersionLevel)
			}
		}
		return guess, md.Brokers, nil
	}
	return "", nil, fmt.Errorf("no api versions answered")
}

// Name returns a topic, group or transactional ID name unique to this test
// run: prefix, the test's name and a random suffix.
func Name(t testing.TB, prefix string) string {
	t.Helper()
	n := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	if len(n) > 80 {
		n = n[len(n)-80:]
	}
	return fmt.Sprintf("%s-%s-%s", prefix, n, rand.Text()[:10])
}

// Client returns a client on the cluster, closed when the test ends.
func (c *Cluster) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append(append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...)}, c.Opts...), opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("kafkatest: new client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Admin returns an admin client on the cluster, closed when the test ends.
func (c *Cluster) Admin(t testing.TB) *kadm.Client {
	t.Helper()
	return kadm.NewClient(c.Client(t))
}

// CreateTopic creates a topic with the given partitions (replication factor 1)
// and optional configs, and fails the test on any error.
//
// Unless configs set retention.ms, the topic keeps its records forever:
// tests write records with fixed event-time timestamps (2026-01-01 and
// the like), and the broker's time retention (7 days by default, checked
// every 5 minutes) would otherwise delete them in the middle of a test
// whenever its check falls there.
func (c *Cluster) CreateTopic(t testing.TB, topic string, partitions int32, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, ok := configs["retention.ms"]; !ok {
		withRetention := map[string]*string{"retention.ms": kadm.StringPtr("-1")}
		for k, v := range configs {
			withRetention[k] = v
		}
		configs = withRetention
	}
	adm := c.Admin(t)
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("kafkatest: create topic %s: %v", topic, err)
	}
	// Apache Kafka answers CreateTopics before its brokers' metadata has
	// the topic (seconds on a loaded machine): wait until a metadata
	// request names every partition with a leader, so that a client the
	// test starts next finds the topic.
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			if d, ok := md.Topics[topic]; ok && d.Err == nil && len(d.Partitions) == int(partitions) {
				led := true
				for _, p := range d.Partitions {
					led = led && p.Err == nil && p.Leader >= 0
				}
				if led {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kafkatest: topic %s created but not in the metadata after 30s (last error: %v)", topic, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitStable waits, up to 30 seconds, until every partition of topic has its
// last stable offset at its high watermark: every transaction that wrote to
// it has ended and its markers are written. Apache Kafka answers EndTxn
// before it writes the markers, so a read_committed reader started right
// after a commit may stop short of it.
func (c *Cluster) WaitStable(t testing.TB, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	adm := c.Admin(t)
	for {
		ends, err1 := adm.ListEndOffsets(ctx, topic)
		stable, err2 := adm.ListCommittedOffsets(ctx, topic)
		if err := errors.Join(err1, err2); err == nil {
			same := true
			ends.Each(func(hwm kadm.ListedOffset) {
				lso, ok := stable.Lookup(topic, hwm.Partition)
				if hwm.Err != nil || !ok || lso.Err != nil || lso.Offset != hwm.Offset {
					same = false
				}
			})
			if same {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("kafkatest: %s: last stable offsets did not reach the high watermarks within 30s", topic)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ReadCommitted returns every data record of topic that a read_committed
// consumer sees below the partitions' last stable offsets, taken first: what
// was committed when it was called, exactly (not "until a poll comes back
// empty", which stops short on a slow machine). It reads control records
// too, to know when a partition is read to its last stable offset: the
// offset just below it is always a committed record or a marker.
func (c *Cluster) ReadCommitted(ctx context.Context, t testing.TB, topic string) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords()}, c.Opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: client: %v", err)
	}
	defer cl.Close() // called in loops: no client is left polling
	lsos, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("kafkatest: last stable offsets of %s: %v", topic, err)
	}
	starts, err := kadm.NewClient(cl).ListStartOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("kafkatest: start offsets of %s: %v", topic, err)
	}
	ends := map[int32]int64{}
	lsos.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Fatalf("kafkatest: last stable offset of %s[%d]: %v", topic, o.Partition, o.Err)
		}
		if start, _ := starts.Lookup(topic, o.Partition); o.Offset > start.Offset {
			ends[o.Partition] = o.Offset
		}
	})
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var recs []*kgo.Record
	for len(ends) > 0 {
		fs := cl.PollFetches(rctx)
		if rctx.Err() != nil {
			t.Fatalf("kafkatest: %s not read to its last stable offsets within a minute: %v left", topic, ends)
		}
		fs.EachError(func(tp string, p int32, err error) {
			t.Fatalf("kafkatest: fetch %s[%d]: %v", tp, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := ends[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				recs = append(recs, r)
			}
			if r.Offset >= end-1 { // (>=: not the topics tests compact, but safe)
				delete(ends, r.Partition)
			}
		})
	}
	return recs
}
