package storage

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/authstate"
	"github.com/cairn-kv/cairn/internal/obs"
)

// metrics are the storage's Prometheus series, served on the admin endpoint.
type metrics struct {
	registry      *prometheus.Registry
	applySeconds  prometheus.Histogram
	submitSeconds *obs.Observers
	failures      prometheus.Counter
	sealFailures  *prometheus.CounterVec
}

func newMetrics(s *Storage) *metrics {
	registry := s.deps.Registry
	if registry == nil {
		registry = obs.NewRegistry()
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
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "cairn", Subsystem: "storage", Name: name, Help: help}, f)
	}
	m.registry.MustRegister(m.applySeconds, m.submitSeconds.Vec(), m.failures, m.sealFailures,
		gauge("applied_index", "Last log index applied.", func() float64 { return float64(s.currentStore().Position().AppliedIndex) }),
		gauge("durable_index", "Last log index committed to bbolt.", func() float64 { return float64(s.currentStore().Position().DurableIndex) }),
		gauge("revision", "Current MVCC revision.", func() float64 { return float64(s.currentStore().Position().Revision) }),
		gauge("compact_revision", "Compact revision.", func() float64 { return float64(s.currentStore().Position().CompactRev) }),
		gauge("db_size_bytes", "Size of the bbolt file.", func() float64 { size, _ := s.currentStore().Size(); return float64(size) }),
		gauge("db_size_in_use_bytes", "Bytes of the bbolt file in use.", func() float64 { _, inUse := s.currentStore().Size(); return float64(inUse) }),
		gauge("healthy", "1 when storage is applying and committing normally.", func() float64 {
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
