package consensus

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-kv/cairn/services/consensus/transport"
)

// metrics are what a member reports to Prometheus: etcd's series for what consensus owns (leadership,
// proposals committed and failed, WAL fsync; the peer network's are the transport's), with etcd's names,
// types, labels and buckets, and Cairn's own where etcd has none.
type metrics struct {
	proposalsFailed   prometheus.Counter
	proposalsAccepted prometheus.Counter
	leaderChanges     prometheus.Counter
	hasLeader         prometheus.Gauge
	isLeader          prometheus.Gauge
	appliedIndex      prometheus.Gauge
	walFsync          prometheus.Histogram
	logReadBack       prometheus.Counter
	transport         *transport.Metrics
}

func newMetrics(reg prometheus.Registerer, commitIndex func() uint64) (*metrics, error) {
	etcdServer := func(name, help string) prometheus.CounterOpts {
		return prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: name, Help: help}
	}
	m := &metrics{
		proposalsFailed:   prometheus.NewCounter(etcdServer("proposals_failed_total", "The total number of failed proposals seen.")),
		proposalsAccepted: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_consensus_proposals_accepted_total", Help: "Proposals raft took."}),
		leaderChanges:     prometheus.NewCounter(etcdServer("leader_changes_seen_total", "The number of leader changes seen.")),
		hasLeader: prometheus.NewGauge(prometheus.GaugeOpts(etcdServer("has_leader",
			"Whether or not a leader exists. 1 is existence, 0 is not."))),
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts(etcdServer("is_leader",
			"Whether or not this member is a leader. 1 if is, 0 otherwise."))),
		appliedIndex: prometheus.NewGauge(prometheus.GaugeOpts{Name: "cairn_consensus_applied_index", Help: "Highest index handed to Committed."}),
		walFsync: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "disk",
			Name: "wal_fsync_duration_seconds", Help: "The latency distributions of fsync called by WAL.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		logReadBack: prometheus.NewCounter(prometheus.CounterOpts{Name: "cairn_consensus_log_entries_read_back_total",
			Help: "Entries of the catch-up window read back from the WAL (for a follower or a storage behind the log in memory)."}),
	}
	// etcd's proposals_committed_total is a gauge of the commit index, despite its name.
	committed := prometheus.NewGaugeFunc(prometheus.GaugeOpts(etcdServer("proposals_committed_total",
		"The total number of consensus proposals committed.")), func() float64 { return float64(commitIndex()) })
	var err error
	if m.transport, err = transport.NewMetrics(reg); err != nil {
		return nil, err
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.proposalsFailed, m.proposalsAccepted, m.leaderChanges, m.hasLeader,
		m.isLeader, m.appliedIndex, m.walFsync, m.logReadBack, committed} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register: %w", err)
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
