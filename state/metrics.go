package state

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/weir-stream/weir/internal/promreg"
)

// metrics are the backend's Prometheus metrics. Several backends (tasks) of
// one process share the collectors through the task label.
type metrics struct {
	reg  prometheus.Registerer
	task string
	vecs []interface{ DeleteLabelValues(...string) bool }

	syncSeconds     prometheus.Observer
	asyncSeconds    prometheus.Observer
	uploadedBytes   prometheus.Counter
	snapshots       prometheus.Counter
	snapshotsFailed prometheus.Counter
	restoreSeconds  prometheus.Observer
	downloadedBytes prometheus.Counter
	stateBytes      prometheus.Gauge
	cacheHits       prometheus.Counter
	cacheMisses     prometheus.Counter
	cacheEvictions  prometheus.Counter
	cacheBytes      prometheus.Gauge
	diskFailures    prometheus.Counter // no task label: it outlives the task
}

func newMetrics(reg prometheus.Registerer, task string) (*metrics, error) {
	m := &metrics{reg: reg, task: task}
	buckets := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	hist := func(name, help string) (prometheus.Observer, error) {
		v := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, []string{"task"})
		v, err := register(reg, v)
		if err != nil {
			return nil, err
		}
		m.vecs = append(m.vecs, v)
		return v.WithLabelValues(task), nil
	}
	counter := func(name, help string) (prometheus.Counter, error) {
		v, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"task"}))
		if err != nil {
			return nil, err
		}
		m.vecs = append(m.vecs, v)
		return v.WithLabelValues(task), nil
	}
	var err error
	if m.syncSeconds, err = hist("weir_state_snapshot_sync_duration_seconds", "Duration of the synchronous part of state snapshots."); err != nil {
		return nil, err
	}
	if m.asyncSeconds, err = hist("weir_state_snapshot_async_duration_seconds", "Duration of the asynchronous part (upload) of state snapshots."); err != nil {
		return nil, err
	}
	if m.restoreSeconds, err = hist("weir_state_restore_duration_seconds", "Duration of state restores."); err != nil {
		return nil, err
	}
	if m.uploadedBytes, err = counter("weir_state_snapshot_uploaded_bytes_total", "Bytes uploaded by state snapshots."); err != nil {
		return nil, err
	}
	if m.snapshots, err = counter("weir_state_snapshots_total", "State snapshots whose asynchronous part succeeded."); err != nil {
		return nil, err
	}
	if m.snapshotsFailed, err = counter("weir_state_snapshots_failed_total", "State snapshots that failed or were cancelled."); err != nil {
		return nil, err
	}
	if m.downloadedBytes, err = counter("weir_state_restore_downloaded_bytes_total", "Bytes downloaded by state restores."); err != nil {
		return nil, err
	}
	if m.cacheHits, err = counter("weir_state_cache_hits_total", "Keyed state reads answered by the record cache (published at each flush)."); err != nil {
		return nil, err
	}
	if m.cacheMisses, err = counter("weir_state_cache_misses_total", "Keyed state reads and writes of keys the record cache did not hold (published at each flush)."); err != nil {
		return nil, err
	}
	if m.cacheEvictions, err = counter("weir_state_cache_evictions_total", "Entries evicted from the record cache because it was full."); err != nil {
		return nil, err
	}
	gauge := func(name, help string) (prometheus.Gauge, error) {
		v, err := register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, []string{"task"}))
		if err != nil {
			return nil, err
		}
		m.vecs = append(m.vecs, v)
		return v.WithLabelValues(task), nil
	}
	if m.stateBytes, err = gauge("weir_state_snapshot_size_bytes", "Total size of the files of the task's last snapshot."); err != nil {
		return nil, err
	}
	if m.cacheBytes, err = gauge("weir_state_cache_bytes", "Bytes the task's record cache holds, as of its last flush."); err != nil {
		return nil, err
	}
	if m.diskFailures, err = register(reg, prometheus.NewCounter(prometheus.CounterOpts{Name: "weir_state_disk_failures_total",
		Help: "Times a task's local state disk failed (full or failing: ENOSPC, EDQUOT, EIO, EROFS, or a fatal Pebble write error); the task stops and is restored from its checkpoint."})); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the collector already registered under
// the same description (another task of the process registered it).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	got, _, err := promreg.Register(reg, c)
	if err != nil {
		return c, fmt.Errorf("state: register metrics: %w", err)
	}
	return got, nil
}

// unregister drops the task's series.
func (m *metrics) unregister() {
	if m.reg == nil {
		return
	}
	for _, v := range m.vecs {
		v.DeleteLabelValues(m.task)
	}
}
