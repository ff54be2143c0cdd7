package storage

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/authstate"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// slowApply is etcd's default --warning-apply-duration: an apply slower than this counts in
// etcd_server_slow_apply_total.
const slowApply = 100 * time.Millisecond

// metrics are the storage's Prometheus series, served on the admin endpoint: etcd's for what storage owns
// (backend, MVCC, quota, apply; names, types, labels and buckets as etcd v3.7's) and Cairn's own where etcd has
// none.
type metrics struct {
	registry      *prometheus.Registry
	applySeconds  prometheus.Histogram
	submitSeconds *obs.Observers
	failures      prometheus.Counter
	sealFailures  *prometheus.CounterVec

	slowApplies   prometheus.Counter
	pending       prometheus.Gauge
	backendCommit prometheus.Histogram
	backendDefrag prometheus.Histogram
	puts, deletes prometheus.Counter
	ranges, txns  prometheus.Counter
	quotaBackend  prometheus.Gauge
}

func newMetrics(s *Storage) *metrics {
	registry := s.deps.Registry
	if registry == nil {
		registry = obs.NewRegistry()
	}
	etcd := func(subsystem, name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "etcd", Subsystem: subsystem, Name: name, Help: help}
	}
	m := &metrics{
		registry: registry,
		applySeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "cairn", Subsystem: "storage",
			Name: "apply_duration_seconds", Help: "Time to apply one log entry into MVCC.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12)}),
		submitSeconds: obs.NewObservers(prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "cairn", Subsystem: "storage",
			Name: "submit_duration_seconds", Help: "Time from Submit to its answer, by request type and gRPC code.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 12)}, []string{"type", "code"})),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "storage",
			Name: "failures_total", Help: "Store failures (failed bbolt commits) that needed a reopen and replay."}),
		sealFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "storage",
			Name: "seal_open_failures_total", Help: "Sealed values that did not open, by reason (auth_failed is an alarm: tampered data)."},
			[]string{"reason"}),

		slowApplies: prometheus.NewCounter(prometheus.CounterOpts(etcd("server", "slow_apply_total",
			"The total number of slow apply requests (likely overloaded from slow disk)."))),
		pending: prometheus.NewGauge(prometheus.GaugeOpts(etcd("server", "proposals_pending",
			"The current number of pending proposals to commit."))),
		backendCommit: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "disk",
			Name: "backend_commit_duration_seconds", Help: "The latency distributions of commit called by backend.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		backendDefrag: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "disk",
			Name: "backend_defrag_duration_seconds", Help: "The latency distribution of backend defragmentation.",
			Buckets: prometheus.ExponentialBuckets(.1, 2, 13)}),
		puts:    prometheus.NewCounter(prometheus.CounterOpts(etcd("mvcc", "put_total", "Total number of puts seen by this member."))),
		deletes: prometheus.NewCounter(prometheus.CounterOpts(etcd("mvcc", "delete_total", "Total number of deletes seen by this member."))),
		ranges:  prometheus.NewCounter(prometheus.CounterOpts(etcd("mvcc", "range_total", "Total number of ranges seen by this member."))),
		txns:    prometheus.NewCounter(prometheus.CounterOpts(etcd("mvcc", "txn_total", "Total number of txns seen by this member."))),
		quotaBackend: prometheus.NewGauge(prometheus.GaugeOpts(etcd("server", "quota_backend_bytes",
			"Current backend storage quota size in bytes."))),
	}
	m.quotaBackend.Set(float64(s.cfg.QuotaBackendBytes))
	gauge := func(opts prometheus.Opts, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts(opts), f)
	}
	cairn := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: "cairn", Subsystem: "storage", Name: name, Help: help}
	}
	m.registry.MustRegister(m.applySeconds, m.submitSeconds.Vec(), m.failures, m.sealFailures,
		m.slowApplies, m.pending, m.backendCommit, m.backendDefrag, m.puts, m.deletes, m.ranges, m.txns, m.quotaBackend,
		// etcd's proposals_applied_total is a gauge of the applied index, despite its name.
		gauge(etcd("server", "proposals_applied_total", "The total number of consensus proposals applied."),
			func() float64 { return float64(s.currentStore().Position().AppliedIndex) }),
		gauge(etcd("mvcc", "db_total_size_in_bytes", "Total size of the underlying database physically allocated in bytes."),
			func() float64 { size, _ := s.currentStore().Size(); return float64(size) }),
		gauge(etcd("mvcc", "db_total_size_in_use_in_bytes", "Total size of the underlying database logically in use in bytes."),
			func() float64 { _, inUse := s.currentStore().Size(); return float64(inUse) }),
		gauge(prometheus.Opts{Namespace: "etcd_debugging", Subsystem: "mvcc", Name: "keys_total", Help: "Total number of keys."},
			func() float64 { return float64(s.currentStore().KeyCount()) }),
		gauge(cairn("durable_index", "Last log index committed to bbolt."),
			func() float64 { return float64(s.currentStore().Position().DurableIndex) }),
		gauge(cairn("revision", "Current MVCC revision."),
			func() float64 { return float64(s.currentStore().Position().Revision) }),
		gauge(cairn("compact_revision", "Compact revision."),
			func() float64 { return float64(s.currentStore().Position().CompactRev) }),
		gauge(cairn("healthy", "1 when storage is applying and committing normally."), func() float64 {
			if s.unhealthyReason() == "" {
				return 1
			}
			return 0
		}),
	)
	return m
}

func (m *metrics) observeSubmit(req *pb.InternalRaftRequest, err error, took time.Duration) {
	m.submitSeconds.Observe(requestType(req), status.Code(err).String(), took.Seconds())
}

// applied counts an applied request as etcd's MVCC counters do: each put, delete and range it ran (those of
// the txn branch taken, for a Txn), and a txn when it ran more than one.
func (m *metrics) applied(req *pb.InternalRaftRequest, res *mvcc.Result, took time.Duration) {
	m.applySeconds.Observe(took.Seconds())
	if took > slowApply {
		m.slowApplies.Inc()
	}
	if res.Err != nil {
		return // refused: it changed nothing
	}
	switch {
	case req.Put != nil:
		m.puts.Inc()
	case req.DeleteRange != nil:
		m.deletes.Inc()
	case req.Txn != nil:
		resp, _ := res.Response.(*pb.TxnResponse)
		m.countTxn(req.Txn, resp)
	}
}

// countTxn counts the operations of the branch of r that resp says ran (none when r was refused).
func (m *metrics) countTxn(r *pb.TxnRequest, resp *pb.TxnResponse) {
	if resp == nil {
		return
	}
	ops := r.Failure
	if resp.Succeeded {
		ops = r.Success
	}
	if len(ops) > 1 {
		m.txns.Inc()
	}
	for i, op := range ops {
		switch {
		case op.GetRequestPut() != nil:
			m.puts.Inc()
		case op.GetRequestDeleteRange() != nil:
			m.deletes.Inc()
		case op.GetRequestRange() != nil:
			m.ranges.Inc()
		case op.GetRequestTxn() != nil && i < len(resp.Responses):
			m.countTxn(op.GetRequestTxn(), resp.Responses[i].GetResponseTxn())
		}
	}
}

func requestType(req *pb.InternalRaftRequest) string {
	switch {
	case req == nil:
		return "none"
	case req.Put != nil:
		return "put"
	case req.DeleteRange != nil:
		return "delete_range"
	case req.Txn != nil:
		return "txn"
	case req.Compaction != nil:
		return "compaction"
	case req.LeaseGrant != nil:
		return "lease_grant"
	case req.LeaseRevoke != nil:
		return "lease_revoke"
	case req.LeaseCheckpoint != nil:
		return "lease_checkpoint"
	case req.Alarm != nil:
		return "alarm"
	case authstate.IsAuthRequest(req):
		return "auth"
	}
	return "other"
}
