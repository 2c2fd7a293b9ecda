package replica

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/control"
)

// metrics are the replica's own Prometheus metrics; its tasks, sources,
// sinks, state and coordinator register theirs on the same registry.
type metrics struct {
	members, coordinator, tasks, lastCompleted prometheus.Gauge
	lastCompletedTime, interval                prometheus.Gauge
	waiting                                    prometheus.Gauge
	restoreSeconds                             prometheus.Histogram
	retries                                    *prometheus.CounterVec
	sessions                                   prometheus.Counter
	jobFailed                                  *prometheus.GaugeVec
	refused                                    prometheus.Gauge
	stopped                                    prometheus.Gauge
}

// failureCauses are the values of weir_replica_job_failed's cause label.
var failureCauses = [...]control.FailureCause{control.CauseRecord, control.CauseStorage, control.CauseKafka, control.CauseJob}

// setFailed sets weir_replica_job_failed: 1 for cause, 0 for the others
// (every cause 0 when cause is empty).
func (m *metrics) setFailed(cause control.FailureCause) {
	for _, c := range failureCauses {
		v := 0.0
		if c == cause {
			v = 1
		}
		m.jobFailed.WithLabelValues(string(c)).Set(v)
	}
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "weir", Subsystem: "replica", Name: name, Help: help})
	}
	m := &metrics{
		members:       g("group_members", "Replicas in the job's membership group, as this replica last saw it."),
		coordinator:   g("is_coordinator", "1 while this replica holds the coordinator role."),
		tasks:         g("tasks", "Tasks running on this replica."),
		lastCompleted: g("last_completed_checkpoint_id", "ID of the newest checkpoint this replica saw complete."),
		lastCompletedTime: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "weir", Subsystem: "checkpoint", Name: "last_completed_timestamp_seconds",
			Help: "Completion time (Unix seconds) of the job's newest completed checkpoint or savepoint, as this replica read it from the commit topic (also while the job is failed or stopped); 0 before the first."}),
		interval: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "weir", Subsystem: "checkpoint", Name: "interval_seconds",
			Help: "The job's checkpoint.interval, in seconds: alerts on the checkpoint age compare with it."}),
		stopped: g("job_stopped", "1 while the job is stopped on purpose (processor stop: a stopped record on the commit topic): this replica runs none of its tasks until processor resume."),
		refused: g("job_refused", "1 while this replica refuses to run its job file: it cannot restore the job's newest checkpoint (compatibility check); it takes no task."),
		waiting: g("waiting_for_job_file", "1 while this replica takes no task because the running generation runs another job file "+
			"(a rolling update: it takes its share once a generation of its file starts)."),
		restoreSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "weir", Subsystem: "replica",
			Name: "restore_duration_seconds", Help: "Time to restore and start this replica's tasks at a new generation.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "weir", Subsystem: "replica",
			Name: "retries_total", Help: "Failed attempts that were retried with backoff, by what was attempted (connect, start_task)."},
			[]string{"what"}),
		sessions: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "weir", Subsystem: "replica",
			Name: "session_restarts_total", Help: "Times the replica left the group after a failure and joined again."}),
		jobFailed: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "weir", Subsystem: "replica",
			Name: "job_failed", Help: "1 while the job is stopped by a permanent failure (a failed record on the commit topic), by cause: record, storage, kafka."},
			[]string{"cause"}),
	}
	m.setFailed("")
	for _, c := range []prometheus.Collector{m.members, m.coordinator, m.tasks, m.lastCompleted, m.lastCompletedTime, m.interval, m.waiting, m.restoreSeconds, m.retries, m.sessions, m.jobFailed, m.refused, m.stopped} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every series at 0 from the start: a dashboard's rate() has data
	// before the first retry.
	for _, what := range []string{"connect", "start_task"} { // what Run passes to retry
		m.retries.WithLabelValues(what)
	}
	return m, nil
}
