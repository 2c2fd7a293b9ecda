package source

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/internal/promreg"
)

// Metric names of the source (DESIGN.md section 12). Label values are the
// job's input topics, their partitions and the decode policy: all bounded by
// the job's configuration.
const (
	MetricRecordsRead = "weir_source_records_read_total"
	MetricBytesRead   = "weir_source_bytes_read_total"
	MetricLag         = "weir_source_lag_records"
	MetricDecodeErrs  = "weir_source_decode_errors_total"
	MetricDeadLetters = "weir_source_dead_letter_records_total"
)

// sourceMetrics holds a source's collectors. Every source of a process
// registers the same vectors; the first registration wins and the others
// reuse it, so any number of tasks can share one Registerer.
type sourceMetrics struct {
	records     *prometheus.CounterVec // topic
	bytes       *prometheus.CounterVec // topic
	lag         *prometheus.GaugeVec   // topic, partition
	decodeErrs  *decodeErrorCounter    // topic, policy
	deadLetters *prometheus.CounterVec // topic
}

func newSourceMetrics(reg prometheus.Registerer) (*sourceMetrics, error) {
	m := &sourceMetrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRecordsRead,
			Help: "Records the sources read and delivered or dropped (control records excluded).",
		}, []string{"topic"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricBytesRead,
			Help: "Key and value bytes of the records the sources read.",
		}, []string{"topic"}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricLag,
			Help: "Records between a source's fetch position and the partition's last stable offset.",
		}, []string{"topic", "partition"}),
		decodeErrs: &decodeErrorCounter{CounterVec: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricDecodeErrs,
			Help: "Records the sources' decoders rejected, by the policy that handled them; each once per process, also when a restore reads it again.",
		}, []string{"topic", "policy"})},
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricDeadLetters,
			Help: "Records the sources handed to the dead-letter topic; each once per process, also when a restore reads it again.",
		}, []string{"topic"}),
	}
	var err error
	if m.records, err = sourceRegister(reg, m.records); err != nil {
		return nil, err
	}
	if m.bytes, err = sourceRegister(reg, m.bytes); err != nil {
		return nil, err
	}
	if m.lag, err = sourceRegister(reg, m.lag); err != nil {
		return nil, err
	}
	if m.decodeErrs, err = sourceRegister(reg, m.decodeErrs); err != nil {
		return nil, err
	}
	if m.deadLetters, err = sourceRegister(reg, m.deadLetters); err != nil {
		return nil, err
	}
	return m, nil
}

// decodeErrorCounter is weir_source_decode_errors_total together with, per
// topic and partition, the offset from which rejected records were not
// counted yet. Registered once per registry and adopted by every later
// source (sourceRegister), it carries that offset across the sources that
// successive generations open for one partition, so that a record that a
// restore makes the source read again is not counted again.
type decodeErrorCounter struct {
	*prometheus.CounterVec

	mu   sync.Mutex // guards from
	from map[sourceTopicPartition]*atomic.Int64
}

type sourceTopicPartition struct {
	topic     string
	partition int32
}

// uncounted returns the shared "not counted from" offset of a partition.
func (c *decodeErrorCounter) uncounted(topic string, partition int32) *atomic.Int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.from == nil {
		c.from = make(map[sourceTopicPartition]*atomic.Int64)
	}
	k := sourceTopicPartition{topic, partition}
	a := c.from[k]
	if a == nil {
		a = new(atomic.Int64)
		c.from[k] = a
	}
	return a
}

// advanceUncounted moves *from past offset and reports whether offset was
// not counted yet. Lock-free: a partition's old source may still be closing
// while its new one reads.
func advanceUncounted(from *atomic.Int64, offset int64) bool {
	for {
		cur := from.Load()
		if offset < cur {
			return false
		}
		if from.CompareAndSwap(cur, offset+1) {
			return true
		}
	}
}

// sourceRegister registers c, or returns the equal collector already there.
func sourceRegister[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	got, _, err := promreg.Register(reg, c)
	if err != nil {
		return c, fmt.Errorf("source: register source metrics: %w", err)
	}
	return got, nil
}

// sourcePartitionLabel formats a partition for the lag gauge.
func sourcePartitionLabel(p int32) string { return strconv.FormatInt(int64(p), 10) }

// LagMetric returns weir_source_lag_records as registered on reg (with the
// sources' other metrics): the replica keeps the series of a job that is
// failed or stopped, whose sources are closed.
func LagMetric(reg prometheus.Registerer) (*prometheus.GaugeVec, error) {
	m, err := newSourceMetrics(reg)
	if err != nil {
		return nil, err
	}
	return m.lag, nil
}

// PartitionLabel is the partition label of weir_source_lag_records.
func PartitionLabel(p int32) string { return sourcePartitionLabel(p) }

// GroupName is the consumer group a job's sources commit the offsets of
// completed checkpoints to (Config.Group), for lag tools: prefix is the
// job's topic prefix.
func GroupName(prefix string) string { return prefix + "source" }
