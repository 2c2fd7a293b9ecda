package shuffle

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/internal/promreg"
)

// Metric names of shuffle topics (DESIGN.md section 12). Their one label is
// the shuffle topic, bounded by the job's plan.
const (
	MetricRecordsWritten    = "weir_shuffle_records_written_total"
	MetricBarriersWritten   = "weir_shuffle_barriers_written_total"
	MetricRecordsRead       = "weir_shuffle_records_read_total"
	MetricWatermarksWritten = "weir_shuffle_watermarks_written_total"
	MetricStalledSeeks      = "weir_shuffle_stalled_seeks_total"
)

// Metrics holds the shuffle collectors of a process. Every writer and reader
// resolves its topic's counters once, when it is made, so the hot path adds
// to a counter without a label lookup. A nil *Metrics counts nothing.
type Metrics struct {
	written    *prometheus.CounterVec // topic
	barriers   *prometheus.CounterVec // topic
	watermarks *prometheus.CounterVec // topic
	stalled    *prometheus.CounterVec // topic
	read       *prometheus.CounterVec // topic
}

// NewMetrics registers the shuffle collectors with reg, adopting those
// another component of the process registered already. A nil reg registers
// nothing (the counters still count).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	g := promreg.NewGroup(reg)
	m := &Metrics{
		written: promreg.Add(g, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRecordsWritten,
			Help: "Data records the shuffle writers produced (barrier records excluded), acknowledged or not.",
		}, []string{"topic"})),
		barriers: promreg.Add(g, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricBarriersWritten,
			Help: "Barriers the shuffle writers produced; each is one record to every partition of the topic.",
		}, []string{"topic"})),
		watermarks: promreg.Add(g, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricWatermarksWritten,
			Help: "Watermarks the shuffle writers produced; each is one record to every partition of the topic.",
		}, []string{"topic"})),
		stalled: promreg.Add(g, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricStalledSeeks,
			Help: "Shuffle partitions a reader found not fetched for a second after a seek, with records to read, and sought again (a safety net for a franz-go fetch-loop race; it should stay at 0).",
		}, []string{"topic"})),
		read: promreg.Add(g, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRecordsRead,
			Help: "Records (data, barrier and watermark) the shuffle readers returned; a record read again after a seek counts again.",
		}, []string{"topic"})),
	}
	if err := g.Err(); err != nil {
		g.Undo()
		return nil, err
	}
	return m, nil
}

// counter returns v's counter of topic; for a nil Metrics, a counter
// registered nowhere, so that callers need no nil checks.
func (m *Metrics) counter(v func(*Metrics) *prometheus.CounterVec, topic string) prometheus.Counter {
	if m == nil {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "unregistered"})
	}
	return v(m).WithLabelValues(topic)
}

func written(m *Metrics) *prometheus.CounterVec    { return m.written }
func barriers(m *Metrics) *prometheus.CounterVec   { return m.barriers }
func watermarks(m *Metrics) *prometheus.CounterVec { return m.watermarks }
func read(m *Metrics) *prometheus.CounterVec       { return m.read }
func stalled(m *Metrics) *prometheus.CounterVec    { return m.stalled }
