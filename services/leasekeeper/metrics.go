package leasekeeper

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-kv/cairn/internal/obs"
)

// metrics are the keeper's Prometheus series: cairn_leasekeeper_*, and etcd's
// etcd_debugging_server_lease_expired_total, which etcd's leader serves.
type metrics struct {
	registry     *prometheus.Registry
	active       prometheus.Gauge
	epoch        prometheus.Gauge
	takeovers    prometheus.Counter
	keepAlives   prometheus.Counter
	expired      prometheus.Counter
	revokeErrors prometheus.Counter
	checkpoints  prometheus.Counter
	reconciles   prometheus.Counter
	// confirmations counts claim confirmations: none while a dormant holder dozes.
	confirmations prometheus.Counter
}

// newMetrics registers the series on the keeper's own registry (served on AdminAddr) and, when set, on
// Deps.Registry too (the process's, in `cairn dev` and `cairn up`).
func newMetrics(k *Keeper) *metrics {
	opts := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "cairn", Subsystem: "leasekeeper", Name: name, Help: help}
	}
	m := &metrics{
		registry:   obs.NewRegistry(),
		active:     prometheus.NewGauge(prometheus.GaugeOpts(opts("active", "1 while this keeper is the active one."))),
		epoch:      prometheus.NewGauge(prometheus.GaugeOpts(opts("epoch", "The claim epoch this keeper last became active at."))),
		takeovers:  prometheus.NewCounter(prometheus.CounterOpts(opts("promotions_total", "Times this keeper became active."))),
		keepAlives: prometheus.NewCounter(prometheus.CounterOpts(opts("keepalives_total", "Lease keep-alives answered."))),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd_debugging", Subsystem: "server",
			Name: "lease_expired_total", Help: "The total number of expired leases."}),
		revokeErrors: prometheus.NewCounter(prometheus.CounterOpts(opts("revoke_errors_total", "Revokes of expired leases that failed (and are retried)."))),
		checkpoints:  prometheus.NewCounter(prometheus.CounterOpts(opts("checkpoints_total", "Lease remaining-TTL checkpoints written."))),
		reconciles:   prometheus.NewCounter(prometheus.CounterOpts(opts("reconciliations_total", "Lease table reconciliations with storage."))),
		confirmations: prometheus.NewCounter(prometheus.CounterOpts(opts("claim_confirmations_total",
			"Linearizable reads of the claim this keeper sent to confirm it holds it (with peers)."))),
	}
	leases := prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts("leases", "Leases this keeper knows.")),
		func() float64 { return float64(k.table.count()) })
	all := []prometheus.Collector{m.active, m.epoch, m.takeovers, m.keepAlives, m.expired, m.revokeErrors,
		m.checkpoints, m.reconciles, m.confirmations, leases}
	m.registry.MustRegister(all...)
	if k.deps.Registry != nil {
		for _, c := range all {
			if err := k.deps.Registry.Register(c); err != nil {
				k.logger.Warn("registering leasekeeper metrics", "err", err)
			}
		}
	}
	return m
}
