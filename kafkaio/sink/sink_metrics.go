package sink

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the metrics of every Kafka sink task of a replica. Build it
// once per registry with NewMetrics and share it between the sinks
// (Config.Metrics): each sink labels its series with its stage, topic and
// partition, so cardinality is bounded by the job's sinks × parallelism.
// Latency histograms carry the stage only.
type Metrics struct {
	recordsWritten *prometheus.CounterVec
	bytesWritten   *prometheus.CounterVec
	committed      *prometheus.CounterVec
	aborted        *prometheus.CounterVec
	commitLatency  *prometheus.HistogramVec
	poolWait       *prometheus.HistogramVec
	flushWait      *prometheus.HistogramVec
}

// NewMetrics creates the sink metrics and registers them on reg (never
// the global registry). A nil reg creates unregistered metrics.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	taskLabels := []string{"stage", "topic", "partition"}
	m := &Metrics{
		recordsWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_sink_records_written_total",
			Help: "Records the Kafka sink wrote and the broker acknowledged (committed or not).",
		}, taskLabels),
		bytesWritten: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_sink_bytes_written_total",
			Help: "Key, value and header bytes of the records counted by weir_sink_records_written_total.",
		}, taskLabels),
		committed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_sink_transactions_committed_total",
			Help: "Sink transactions committed, on checkpoint completion or by recovery.",
		}, taskLabels),
		aborted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weir_sink_transactions_aborted_total",
			Help: "Sink transactions aborted: open ones at close, fenced ones at recovery, and pre-committed ones the broker aborted.",
		}, taskLabels),
		commitLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "weir_sink_commit_latency_seconds",
			Help:    "Time of one transaction commit (EndTxn) on checkpoint completion.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"stage"}),
		poolWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "weir_sink_pool_wait_seconds",
			Help:    "Time a sink waited for a free transactional producer at the start of an epoch (0 when one was free).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"stage"}),
		flushWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "weir_sink_flush_wait_seconds",
			Help:    "Time the first record of an epoch waited for the previous epoch's flush, so that output keeps its order in every partition (0 when it was done).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"stage"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.recordsWritten, m.bytesWritten, m.committed, m.aborted, m.commitLatency, m.poolWait, m.flushWait} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("sink: register sink metrics: %w", err)
		}
	}
	return m, nil
}

// sinkTaskMetrics are the series of one sink task, looked up once so that the
// hot path does no label lookups.
type sinkTaskMetrics struct {
	records, bytes     prometheus.Counter
	committed, aborted prometheus.Counter
	commitLatency      prometheus.Observer
	poolWait           prometheus.Observer
	flushWait          prometheus.Observer
}

func (m *Metrics) forTask(stage, topic string, partition int32) sinkTaskMetrics {
	p := strconv.Itoa(int(partition))
	return sinkTaskMetrics{
		records:       m.recordsWritten.WithLabelValues(stage, topic, p),
		bytes:         m.bytesWritten.WithLabelValues(stage, topic, p),
		committed:     m.committed.WithLabelValues(stage, topic, p),
		aborted:       m.aborted.WithLabelValues(stage, topic, p),
		commitLatency: m.commitLatency.WithLabelValues(stage),
		poolWait:      m.poolWait.WithLabelValues(stage),
		flushWait:     m.flushWait.WithLabelValues(stage),
	}
}
