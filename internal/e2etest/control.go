package e2etest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ControlRecord is a record of a job's commit topic, decoded by hand (not
// with package control) from its documented JSON.
type ControlRecord struct {
	Type    string `json:"type"`
	ID      uint64 `json:"id"`
	Gen     uint64 `json:"gen"`
	Offset  int64  `json:"-"`
	Arrived time.Time
	Raw     string `json:"-"`
}

// CommitTopic is the commit topic of job under the default topic prefix.
func CommitTopic(job string) string { return "_weir." + job + ".commit" }

// CommitWatcher follows a job's commit topic from its start with a raw
// read_committed consumer, for tests that time a fault after a `complete`
// or look for `generation` and `failed` records.
type CommitWatcher struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	recs []ControlRecord
	subs []chan ControlRecord
}

// WatchCommits starts following the job's commit topic, which need not
// exist yet. It stops when the test ends.
func WatchCommits(t testing.TB, brokers []string, job string) *CommitWatcher {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics(CommitTopic(job)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.MetadataMinAge(250*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("commit watcher client: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &CommitWatcher{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				var m ControlRecord
				if err := json.Unmarshal(r.Value, &m); err != nil {
					m.Type = "undecodable"
				}
				m.Offset, m.Arrived, m.Raw = r.Offset, now, string(r.Value)
				w.mu.Lock()
				w.recs = append(w.recs, m)
				for _, s := range w.subs {
					select {
					case s <- m:
					default: // a subscriber that does not keep up misses records
					}
				}
				w.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-w.done })
	return w
}

// Subscribe returns a channel of the records read from now on.
func (w *CommitWatcher) Subscribe() <-chan ControlRecord {
	ch := make(chan ControlRecord, 1024)
	w.mu.Lock()
	w.subs = append(w.subs, ch)
	w.mu.Unlock()
	return ch
}

// Records returns the records read so far of the given type ("" for all).
func (w *CommitWatcher) Records(typ string) []ControlRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []ControlRecord
	for _, r := range w.recs {
		if typ == "" || r.Type == typ {
			out = append(out, r)
		}
	}
	return out
}

// CheckCheckpointIDs checks that the completed checkpoint IDs on the
// commit topic only increased (DESIGN.md invariant 2).
func CheckCheckpointIDs(t testing.TB, w *CommitWatcher) {
	t.Helper()
	var ids []uint64
	for _, r := range w.Records("complete") {
		ids = append(ids, r.ID)
	}
	if len(ids) == 0 {
		t.Fatal("no checkpoint completed")
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			t.Fatalf("completed checkpoint IDs went back: %v", ids)
		}
	}
	t.Logf("%d checkpoints completed, IDs %d..%d strictly increasing", len(ids), ids[0], ids[len(ids)-1])
}

// CheckNoOpenTransactions checks, for up to 30 seconds, that no
// transaction of the job is left open: a lingering one would block
// read_committed readers.
func CheckNoOpenTransactions(ctx context.Context, t testing.TB, brokers []string, job string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	prefix := "_weir." + job + "."
	deadline := time.Now().Add(30 * time.Second)
	for {
		open, err := openTransactions(ctx, adm, prefix)
		if err == nil && len(open) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("transactions of the job left open: %v (err %v)", open, err)
		}
		time.Sleep(time.Second)
	}
}

func openTransactions(ctx context.Context, adm *kadm.Client, prefix string) ([]string, error) {
	listed, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("list transactions: %w", err)
	}
	var open []string
	for _, tx := range listed.Sorted() {
		if strings.HasPrefix(tx.TxnID, prefix) && !strings.Contains("Empty CompleteCommit CompleteAbort Dead", tx.State) {
			open = append(open, tx.TxnID+"="+tx.State)
		}
	}
	return open, nil
}
