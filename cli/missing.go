package cli

import (
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// missingFields counts, for a YAML job, the records in which a field that
// a step reads is missing (pipeline.Env.Missing): weir_field_missing_total
// {step,field}, and one warning per step and field, the first time.
type missingFields struct {
	log   *slog.Logger
	total *prometheus.CounterVec
}

func newMissingFields(log *slog.Logger, reg prometheus.Registerer) (*missingFields, error) {
	m := &missingFields{log: log, total: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "weir_field_missing_total",
		Help: "Records whose value lacks a top-level field that the step's expressions read (null there: a misspelt name?), by step key path and field.",
	}, []string{"step", "field"})}
	if err := reg.Register(m.total); err != nil {
		return nil, err
	}
	return m, nil
}

// counter implements pipeline.Env.Missing: the counter is resolved once,
// so that counting a record allocates nothing.
func (m *missingFields) counter(step, field string) func() {
	c := m.total.WithLabelValues(step, field)
	var warned atomic.Bool
	return func() {
		c.Inc()
		if !warned.Load() && warned.CompareAndSwap(false, true) {
			m.log.Warn("a record lacks a field that the step reads: the field is null there; if every record lacks it, is its name misspelt? (weir_field_missing_total counts them)",
				"step", step, "field", field)
		}
	}
}
