package consensus

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are what a member reports to Prometheus (names follow etcd's where etcd has them).
type metrics struct {
	proposalsCommitted prometheus.Counter
	proposalsFailed    prometheus.Counter
	proposalsAccepted  prometheus.Counter
	leaderChanges      prometheus.Counter
	hasLeader          prometheus.Gauge
	isLeader           prometheus.Gauge
	appliedIndex       prometheus.Gauge
	walFsync           prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		proposalsCommitted: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_consensus_proposals_committed_total", Help: "Entries committed and handed to Committed."}),
		proposalsFailed:    prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_consensus_proposals_failed_total", Help: "Proposals refused."}),
		proposalsAccepted:  prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_consensus_proposals_accepted_total", Help: "Proposals raft took."}),
		leaderChanges:      prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_consensus_leader_changes_seen_total", Help: "Leader changes seen."}),
		hasLeader:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_consensus_has_leader", Help: "1 when a leader is known."}),
		isLeader:           prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_consensus_is_leader", Help: "1 when this member leads."}),
		appliedIndex:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_consensus_applied_index", Help: "Highest index handed to Committed."}),
		walFsync: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cairn_consensus_wal_fsync_duration_seconds",
			Help: "WAL fsync latency.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14)}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.proposalsCommitted, m.proposalsFailed, m.proposalsAccepted,
		m.leaderChanges, m.hasLeader, m.isLeader, m.appliedIndex, m.walFsync} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// proposals counts a batch of proposals that raft took (err nil) or refused.
func (m *metrics) proposals(count int, err error) {
	if err != nil {
		m.proposalsFailed.Add(float64(count))
		return
	}
	m.proposalsAccepted.Add(float64(count))
}
