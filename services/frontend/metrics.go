package frontend

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/obs"
)

// metrics are the frontend's Prometheus series, served on /metrics.
type metrics struct {
	registry *prometheus.Registry
	handled  *obs.Observers
	retries  prometheus.Counter
}

func newMetrics(f *Frontend) *metrics {
	m := &metrics{
		registry: f.deps.Registry,
		handled: obs.NewObservers(prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "cairn", Subsystem: "frontend",
			Name: "request_duration_seconds", Help: "Time to answer one unary etcd API request, by method and gRPC code.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10)}, []string{"method", "code"})),
		retries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "frontend",
			Name: "replica_retries_total", Help: "Requests tried again on another replica after one was unavailable."}),
	}
	if m.registry == nil {
		m.registry = obs.NewRegistry()
	}
	gauge := func(name, help string, value func(*view) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "cairn", Subsystem: "frontend", Name: name, Help: help},
			func() float64 { return value(f.pool.view()) })
	}
	m.registry.MustRegister(m.handled.Vec(), m.retries,
		gauge("storage_replicas_healthy", "Storage replicas that answered their last probe healthy.", func(v *view) float64 {
			n := 0
			for _, r := range v.leaderFirst {
				if r.healthy.Load() {
					n++
				}
			}
			return float64(n)
		}),
		gauge("has_leader", "1 when consensus reports a leader.", func(v *view) float64 { return boolGauge(v.leader != 0) }),
		gauge("raft_term", "The raft term last reported by consensus.", func(v *view) float64 { return float64(v.term) }),
	)
	return m
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// unaryInterceptor times every unary request.
func (m *metrics) unaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	m.handled.Observe(info.FullMethod, status.Code(err).String(), time.Since(start).Seconds())
	return resp, err
}
