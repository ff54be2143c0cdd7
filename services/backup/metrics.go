package backup

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are what an operator alerts on: the age of the last good backup, its duration and size, failures.
type metrics struct {
	lastSuccess  prometheus.Gauge
	lastDuration prometheus.Gauge
	lastSize     prometheus.Gauge
	taken        prometheus.Counter
	failures     *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_backup_last_success_timestamp_seconds",
			Help: "Unix time of the last verified backup."}),
		lastDuration: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_backup_last_duration_seconds",
			Help: "How long the last verified backup took (download, fsync, verification)."}),
		lastSize: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_backup_last_size_bytes",
			Help: "Size of the last verified backup."}),
		taken: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_backup_snapshots_total",
			Help: "Verified backups kept."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cairn_backup_failures_total",
			Help: "Failed backups, by reason: endpoints (none gave a snapshot), write (local disk), verify."},
			[]string{"reason"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.lastSuccess, m.lastDuration, m.lastSize, m.taken, m.failures} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observeSuccess(took time.Duration, size int64) {
	m.lastSuccess.Set(float64(time.Now().UnixNano()) / 1e9)
	m.lastDuration.Set(took.Seconds())
	m.lastSize.Set(float64(size))
	m.taken.Inc()
}
