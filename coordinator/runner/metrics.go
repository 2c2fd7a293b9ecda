package runner

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/coordinator"
	"github.com/weir-stream/weir/state"
)

// metrics are the coordinator's Prometheus metrics (DESIGN.md section 12).
type metrics struct {
	triggered, completed, failed, aborted, restarts prometheus.Counter
	acks                                            *prometheus.CounterVec
	generation, pending, lastCompleted              prometheus.Gauge
	duration, alignment                             prometheus.Histogram
	stateBytes, uploadedBytes                       prometheus.Gauge
	ackResultNames                                  []string
	// Garbage collection: deleted objects and bytes by what they were
	// (released, aborted, collected); failures by step.
	gcObjects, gcBytes, gcFailures *prometheus.CounterVec
	// gcBacklog counts the discards queued or running.
	gcBacklog prometheus.Gauge
	// Shuffle purges: partitions purged, failed purge requests.
	purged, purgeErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "weir", Subsystem: "checkpoint", Name: name, Help: help})
	}
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "weir", Subsystem: "checkpoint", Name: name, Help: help})
	}
	m := &metrics{
		triggered: c("triggered_total", "Checkpoints and savepoints triggered."),
		completed: c("completed_total", "Checkpoints and savepoints completed."),
		failed:    c("failed_total", "Checkpoints aborted by a failure (expired, declined, metadata not written)."),
		aborted:   c("aborted_total", "Checkpoints aborted without failure (subsumed, generation change)."),
		restarts:  c("job_restarts_total", "Job restarts after tolerable_failures was exceeded."),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "weir", Subsystem: "checkpoint",
			Name: "acks_total", Help: "Acknowledgements and declines by how the coordinator handled them."}, []string{"result"}),
		generation:    g("generation", "The job's current generation."),
		pending:       g("in_progress", "Checkpoints in progress."),
		lastCompleted: g("last_completed_id", "ID of the newest completed checkpoint."),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "weir", Subsystem: "checkpoint",
			Name: "duration_seconds", Help: "Time from trigger to completion of completed checkpoints.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}),
		alignment: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "weir", Subsystem: "checkpoint",
			Name: "alignment_max_seconds", Help: "Longest barrier alignment of any task, per completed checkpoint.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		stateBytes:    g("state_bytes", "Total state size of the newest completed checkpoint."),
		uploadedBytes: g("uploaded_bytes", "Bytes uploaded by the newest completed checkpoint."),
		gcObjects: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "weir", Subsystem: "checkpoint",
			Name: "gc_deleted_objects_total", Help: "Objects deleted from checkpoint storage, by what they were: released (checkpoints beyond retained), aborted (what aborted checkpoints left under chk-<n>/), collected (unreferenced leftovers found after a new generation)."},
			[]string{"what"}),
		gcBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "weir", Subsystem: "checkpoint",
			Name: "gc_deleted_bytes_total", Help: "Bytes deleted from checkpoint storage, by what they were (as gc_deleted_objects_total)."},
			[]string{"what"}),
		gcFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "weir", Subsystem: "checkpoint",
			Name: "gc_failures_total", Help: "Failed garbage-collection steps (rebuild, register, release, discard, collect); registrations are retried, deletes are retried by later steps."},
			[]string{"what"}),
		purged: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "weir", Subsystem: "shuffle", Name: "purge_total",
			Help: "Shuffle-topic partitions purged: records below the positions of every retained checkpoint deleted (DeleteRecords)."}),
		purgeErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "weir", Subsystem: "shuffle", Name: "purge_errors_total",
			Help: "Failed shuffle purge requests; each is retried with the next purge."}),
		gcBacklog: g("gc_backlog", "Discards queued or running: released checkpoints, and what aborted checkpoints and refused acks left; while it exceeds max_concurrent, no periodic checkpoint is triggered."),
	}
	for _, what := range []string{"released", "aborted", "collected"} {
		m.gcObjects.WithLabelValues(what)
		m.gcBytes.WithLabelValues(what)
	}
	for _, what := range []string{"rebuild", "register", "release", "discard", "collect"} {
		m.gcFailures.WithLabelValues(what)
	}
	for _, r := range []coordinator.AckResult{coordinator.AckSuccess, coordinator.AckDuplicate,
		coordinator.AckUnknown, coordinator.AckDiscarded, coordinator.AckStale} {
		m.ackResultNames = append(m.ackResultNames, r.String())
	}
	for _, col := range []prometheus.Collector{m.triggered, m.completed, m.failed, m.aborted, m.restarts,
		m.acks, m.generation, m.pending, m.lastCompleted, m.duration, m.alignment, m.stateBytes, m.uploadedBytes,
		m.gcObjects, m.gcBytes, m.gcFailures, m.gcBacklog, m.purged, m.purgeErrors} {
		if err := reg.Register(col); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(x coordinator.Metrics) {
	m.triggered.Add(float64(x.Triggered))
	m.completed.Add(float64(x.Completed))
	m.failed.Add(float64(x.Failed))
	m.aborted.Add(float64(x.Aborted))
	m.restarts.Add(float64(x.Restarts))
	for i, n := range x.Acks {
		if n != 0 && i < len(m.ackResultNames) {
			m.acks.WithLabelValues(m.ackResultNames[i]).Add(float64(n))
		}
	}
	m.generation.Set(float64(x.Generation))
	m.pending.Set(float64(x.Pending))
	m.lastCompleted.Set(float64(x.LastCompleted))
}

func (m *metrics) observeStatus(s coordinator.Status) {
	m.generation.Set(float64(s.Gen))
	m.pending.Set(float64(len(s.Pending)))
	m.lastCompleted.Set(float64(s.LastCompleted))
}

func (m *metrics) observeNotification(n coordinator.Notification) {
	if !n.Completed {
		return
	}
	m.duration.Observe(n.Duration.Seconds())
	m.alignment.Observe(n.MaxAlign.Seconds())
	m.stateBytes.Set(float64(n.StateBytes))
	m.uploadedBytes.Set(float64(n.UploadedBytes))
}

func (m *metrics) observeDeleted(what string, d state.Deleted) {
	m.gcObjects.WithLabelValues(what).Add(float64(len(d.Keys)))
	m.gcBytes.WithLabelValues(what).Add(float64(d.Bytes))
}
