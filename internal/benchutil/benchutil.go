// Package benchutil holds what Weir's benchmark programs share: their
// output format, creating topics that are ready to use, and measuring CPU
// time. It is for the benchmark programs (internal/tools, state/statebench)
// only.
package benchutil

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// CreateTopic creates topic with the given partitions (replication factor 1)
// and waits until every partition has a leader: a client that looks a new
// topic up too early is told it does not exist and asks again only after
// its metadata min age (5s in kgo), which would land in a measured time.
// The topic keeps its records forever: sinks write event-time timestamps
// (Nexmark's are in 2025), which the broker's time retention would delete
// under the benchmark.
func CreateTopic(ctx context.Context, adm *kadm.Client, topic string, partitions int) error {
	return CreateTopicWith(ctx, adm, topic, partitions, map[string]*string{"retention.ms": kadm.StringPtr("-1")})
}

// CreateTopicWith is CreateTopic with the topic configuration configs: a
// baseline's intermediate topic is given a shuffle topic's.
func CreateTopicWith(ctx context.Context, adm *kadm.Client, topic string, partitions int, configs map[string]*string) error {
	resp, err := adm.CreateTopic(ctx, int32(partitions), 1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			err = topicReady(md.Topics[topic], partitions)
		}
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topic %s not ready 30s after its creation: %w", topic, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func topicReady(td kadm.TopicDetail, partitions int) error {
	if td.Err != nil {
		return td.Err
	}
	if len(td.Partitions) != partitions {
		return fmt.Errorf("%d partitions of %d", len(td.Partitions), partitions)
	}
	for _, pd := range td.Partitions {
		switch {
		case pd.Err != nil:
			return fmt.Errorf("partition %d: %w", pd.Partition, pd.Err)
		case pd.Leader < 0:
			return fmt.Errorf("partition %d: no leader", pd.Partition)
		}
	}
	return nil
}

// ProcessCPU is this process's user + system CPU time.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ProcCPU is the user + system CPU time of process pid from /proc, or -1.
func ProcCPU(pid int) time.Duration {
	if pid <= 0 {
		return -1
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: state is field 3, utime 14, stime 15.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return -1
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	stt, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(ut+stt) * time.Second / clockTicks
}

// BrokerPID reads the pid file scripts/kafka.sh writes for the
// broker on broker's port, looking from the working directory up; 0 if
// there is none.
func BrokerPID(broker string) int {
	_, port, ok := strings.Cut(broker, ":")
	if !ok {
		return 0
	}
	dir, err := os.Getwd()
	if err != nil {
		return 0
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, ".cache", "kafka-run", port, "kafka.pid"))
		if err == nil {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
			return pid
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return 0
		}
		dir = parent
	}
}

// Result prints one figure on standard output in the form scripts compare
// runs by: "result: <name> = <value> <unit>", the value formatted with
// format.
func Result(name, format string, v any, unit string) {
	fmt.Printf("result: %s = "+format+" %s\n", name, v, unit)
}

// Info prints a line of the human account on standard error, after "# ".
func Info(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "# "+format+"\n", args...)
}

// LoadAvg is the 1, 5 and 15 minute load averages, or "unknown".
func LoadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
