package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/internal/e2etest"
	"github.com/weir-stream/weir/internal/kafkatest"
)

// TestGoJobExample runs a job defined in Go as its own binary:
// examples/views-per-page-go (KeyBy page, then a keyed Process function
// counting views per page in value state, main is cli.Main(job)), built
// with go build, as two separate replica processes on the real broker, one
// of them killed with SIGKILL once and restarted, over a few thousand
// clicks keyed by user. An independent read_committed verifier demands
// that each page's committed counts are exactly 1..N in order; checkpoint
// IDs only increased, and no transaction of the job is left open.
//
// The configuration has no job section's pipeline: the job is the
// program's; job.name defaults to its name, and a topic prefix of the
// run's own keeps runs apart on the shared broker.
func TestGoJobExample(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	const (
		users, pages = 200, 50
		total        = 4000
	)
	c := kafkatest.NewReal(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	bin, err := e2etest.BuildExample(t.TempDir(), "views-per-page-go")
	if err != nil {
		t.Fatal(err)
	}
	run := kafkatest.Name(t, "gojob")
	input, output := run+"-clicks", run+"-views"
	c.CreateTopic(t, input, 4, nil)
	c.CreateTopic(t, output, 4, nil)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "weir.yaml")
	// e2etest's control-topic helpers name the prefix _weir.<job>.: with
	// this prefix, <job> is the run's name.
	yaml := fmt.Sprintf(`job:
  parallelism: 3
kafka:
  brokers: [%s]
  topic_prefix: _weir.%s.
  session_timeout: 6s
checkpoint:
  interval: 1s
  timeout: 30s
http:
  address: ""
log:
  level: info
`, strings.Join(c.Brokers, ", "), run)
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	commits := e2etest.WatchCommits(t, c.Brokers, run)
	verifier := e2etest.StartVerifier(t, c.Brokers, output)

	in := newClicks(t, c.Brokers, input, users, pages)
	in.Good(ctx, total/2)
	cl := e2etest.NewReplicas(t, bin, cfgFile, dir, e2etest.ReplicaOptions{
		Env: []string{"CLICKS_TOPIC=" + input, "VIEWS_TOPIC=" + output},
	})
	a := cl.Start()
	cl.Start()
	if err := verifier.WaitSeen(total/8, 3*time.Minute); err != nil {
		t.Fatalf("%v\nreplica %s:\n%s", err, a, cl.Proc(a).Log())
	}
	in.Good(ctx, total/4)
	// Kill once a checkpoint completed: the restarted replicas restore
	// both stages from it, and re-read the shuffle topic from its offsets.
	completed := func() int { return len(commits.Records("complete")) }
	for deadline := time.Now().Add(2 * time.Minute); completed() < 2; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no 2 checkpoints completed in 2m\nreplica %s:\n%s", a, cl.Proc(a).Log())
		}
	}
	atKill := completed()
	t.Logf("kill -9 replica %s after %d completed checkpoints", a, atKill)
	cl.Kill(a)
	in.Good(ctx, total/8)
	time.Sleep(2 * time.Second)
	cl.Restart(a)
	in.Good(ctx, total-total/2-total/4-total/8)
	if err := in.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	perPage, sum := in.PerPage()
	verifier.Check(perPage, sum, 5*time.Minute)
	if n := completed(); n <= atKill {
		t.Fatalf("%d checkpoints completed, %d at the kill: none after it", n, atKill)
	}
	cl.StopAll()
	e2etest.CheckCheckpointIDs(t, commits)
	e2etest.CheckNoOpenTransactions(ctx, t, c.Brokers, run)
}

// clicks produces click records keyed by user, {"i": i, "user": user,
// "page": page}, with pages independent of users (counting per page needs
// the shuffle), and counts the acknowledged ones per page.
type clicks struct {
	*e2etest.Input
	users, pages int

	mu      sync.Mutex
	next    int
	perPage map[string]int
	total   int
}

func newClicks(t *testing.T, brokers []string, topic string, users, pages int) *clicks {
	return &clicks{Input: e2etest.NewInput(t, brokers, topic, users), users: users, pages: pages, perPage: map[string]int{}}
}

// Good produces n more clicks: click i is user i%users's, on page
// (i*7919)%pages (a prime stride: each user's clicks reach many pages).
func (c *clicks) Good(ctx context.Context, n int) {
	for range n {
		c.mu.Lock()
		i := c.next
		c.next++
		c.mu.Unlock()
		user, page := e2etest.Key(i, c.users), fmt.Sprintf("page-%03d", (i*7919)%c.pages)
		v, _ := json.Marshal(map[string]any{"i": i, "user": user, "page": page})
		c.Record(ctx, &kgo.Record{Key: []byte(user), Value: v}, false, func(_ *kgo.Record, err error) {
			if err == nil {
				c.mu.Lock()
				c.perPage[page]++
				c.total++
				c.mu.Unlock()
			}
		})
	}
}

// PerPage returns the acknowledged clicks per page and their sum; call it
// after Flush.
func (c *clicks) PerPage() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.perPage), c.total
}
