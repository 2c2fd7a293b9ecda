package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/weir-stream/weir/config"
	"github.com/weir-stream/weir/control"
	"github.com/weir-stream/weir/kafkaio"
)

// devJob is the example job `processor dev` runs; the blanks are the
// embedded broker, the state directory, the checkpoint storage and the HTTP
// address.
const devJob = `
job:
  name: clicks-per-user
  pipeline:
    - source: {topics: [clicks], format: json, start: earliest}
    - aggregate: {op: count}
    - sink: {topic: clicks-per-user, format: json, delivery: exactly-once}
kafka: {brokers: [%s]}
checkpoint: {interval: 2s, storage: %q}
state: {dir: %q}
http: {address: %q}
log: {level: warn}
process: {replica_id: dev, grace_period: 10s}
`

func newDevCmd() *cobra.Command {
	var (
		dir        string
		rate       int
		users      int
		partitions int32
		httpAddr   string
		quiet      bool
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the example job on an embedded Kafka and a local object store",
		Long: `dev runs everything in one process, for trying Weir out: an in-process Kafka
(franz-go's kfake) persisted under --dir, a file:// object store under --dir,
the example job clicks-per-user (count clicks per user, exactly once), and a
generator of sample clicks. It prints the job's output as it is committed —
each line is one output record, visible to read_committed consumers — and
serves metrics on --http.

Stop it with Ctrl-C: it says which checkpoint completed last and how many
output records are committed. Start it again: it resumes from that
checkpoint, and no click is counted twice.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return runDev(ctx, cmd.OutOrStdout(), cmd.ErrOrStderr(), devOptions{
				dir: dir, rate: rate, users: users, partitions: partitions, http: httpAddr, quiet: quiet,
			})
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".weir-dev", "where the embedded Kafka, the state and the checkpoints live")
	cmd.Flags().IntVar(&rate, "rate", 20, "sample clicks generated per second (0: none)")
	cmd.Flags().IntVar(&users, "users", 10, "distinct users in the sample clicks")
	cmd.Flags().Int32Var(&partitions, "partitions", 4, "partitions of the input topic (tasks of the job), on first start")
	cmd.Flags().StringVar(&httpAddr, "http", "127.0.0.1:9464", "address of /metrics, /healthz, /livez, /readyz")
	cmd.Flags().BoolVar(&quiet, "quiet", false, "do not print the output records")
	return cmd
}

type devOptions struct {
	dir        string
	rate       int
	users      int
	partitions int32
	http       string
	quiet      bool
}

func runDev(ctx context.Context, out, logOut io.Writer, o devOptions) error {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(filepath.Join(dir, "kafka")))
	if err != nil {
		return fmt.Errorf("start the embedded Kafka: %w", err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	yaml := fmt.Sprintf(devJob, brokers[0], "file://"+filepath.ToSlash(filepath.Join(dir, "checkpoints")),
		filepath.Join(dir, "state"), o.http)
	cfg, err := config.Load(config.Source{YAML: []byte(yaml), Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		return fmt.Errorf("embedded job: %w", err)
	}

	if err := devTopics(ctx, brokers, o.partitions); err != nil {
		return err
	}
	fmt.Fprintf(out, "weir dev: Kafka (embedded) at %s, state and checkpoints in %s\n", brokers[0], dir)
	fmt.Fprintf(out, "weir dev: job clicks-per-user: clicks → count per user → clicks-per-user (exactly once, checkpoint every %v)\n", cfg.Checkpoint.Interval)
	if o.http != "" {
		fmt.Fprintf(out, "weir dev: metrics on http://%s/metrics; Ctrl-C stops, running again resumes\n", o.http)
	}

	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if o.rate > 0 {
		go devGenerate(gctx, brokers, o.rate, o.users)
	}
	printed := make(chan struct{})
	if o.quiet {
		close(printed)
	} else {
		go func() {
			defer close(printed)
			devPrint(gctx, out, brokers)
		}()
	}
	if err := serve(ctx, cfg, logOut, nil); err != nil {
		return err
	}
	cancel()
	<-printed
	devSummary(out, cfg, brokers, o.dir)
	return nil
}

// devSummary says, after Ctrl-C, what is committed and how to resume: the
// newest completed checkpoint (from the commit topic) and the records
// read_committed consumers see in the output topic.
func devSummary(out io.Writer, cfg *config.Config, brokers []string, dir string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	hist, err := kafkaio.ReadControlHistory(ctx, opts, kafkaio.NewControlTopics(cfg.Kafka.TopicPrefix), control.TopicCommit)
	if err != nil {
		fmt.Fprintf(out, "weir dev: stopped; could not read the checkpoints: %v\n", err)
		return
	}
	var last uint64
	for _, rec := range hist.Records {
		if c, ok := rec.Msg.(control.Complete); ok {
			last = max(last, c.ID)
		}
	}
	again := "make run"
	if dir != ".weir-dev" {
		again = "processor dev --dir " + dir
	}
	if last == 0 {
		fmt.Fprintf(out, "weir dev: stopped before the first checkpoint completed: nothing is committed yet.\n")
		fmt.Fprintf(out, "weir dev: run `%s` again to start over from the clicks already in the input.\n", again)
		return
	}
	records := "?"
	if n, err := devCommittedRecords(ctx, brokers, "clicks-per-user"); err == nil {
		records = strconv.FormatInt(n, 10)
	}
	fmt.Fprintf(out, "weir dev: stopped. Last completed checkpoint: %d; clicks-per-user holds %s committed records (what read_committed consumers see). Output after checkpoint %d was not committed and will be produced again.\n",
		last, records, last)
	fmt.Fprintf(out, "weir dev: run `%s` again to resume from checkpoint %d: no click is counted twice.\n", again, last)
}

// devCommittedRecords counts the records of topic that read_committed
// consumers see: it reads up to each partition's last stable offset,
// keeping transaction markers to know where it is.
func devCommittedRecords(ctx context.Context, brokers []string, topic string) (int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	if err != nil {
		return 0, err
	}
	remaining := map[int32]int64{} // partition -> last stable offset not yet reached
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err == nil && o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})
	if len(remaining) == 0 {
		return 0, ends.Error()
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
	if err != nil {
		return 0, err
	}
	defer rd.Close()
	var n int64
	for len(remaining) > 0 {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return n, err
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if !r.Attrs.IsControl() {
				n++
			}
			if r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
	}
	return n, nil
}

func devTopics(ctx context.Context, brokers []string, partitions int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, t := range []string{"clicks", "clicks-per-user"} {
		resp, err := adm.CreateTopic(ctx, partitions, 1, nil, t)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", t, err)
		}
	}
	return nil
}

// devGenerate produces sample clicks, keyed by user.
func devGenerate(ctx context.Context, brokers []string, rate, users int) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("clicks"))
	if err != nil {
		return
	}
	defer cl.Close()
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	pages := []string{"/", "/pricing", "/docs", "/blog", "/signup"}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		user := fmt.Sprintf("user-%d", rand.IntN(users))
		v, _ := json.Marshal(map[string]any{"user": user, "page": pages[rand.IntN(len(pages))], "ts": time.Now().UnixMilli()})
		cl.Produce(ctx, &kgo.Record{Key: []byte(user), Value: v}, nil)
	}
}

// devPrint prints the job's output as read_committed consumers see it.
func devPrint(ctx context.Context, out io.Writer, brokers []string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...),
		kgo.ConsumeTopics("clicks-per-user"),
		kgo.ConsumerGroup("weir-dev-printer"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return
		}
		fs.EachRecord(func(r *kgo.Record) {
			fmt.Fprintf(out, "%s  %s\n", r.Timestamp.Format("15:04:05"), r.Value)
		})
	}
}
