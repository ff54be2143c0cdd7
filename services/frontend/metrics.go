package frontend

import (
	"context"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/obs"
)

// metrics are the frontend's Prometheus series, served on /metrics: etcd's for the client API it serves
// (grpc_server_* from the grpc-ecosystem middleware, as etcd's, for unary and streaming RPCs, and
// etcd_network_client_grpc_{sent,received}_bytes_total) and Cairn's own.
type metrics struct {
	registry *prometheus.Registry
	handled  *obs.Observers
	retries  prometheus.Counter
	// watchLagCanceled counts the watches relays canceled for lag, watchRelayLag the lag they relay at
	// (watchlag.go).
	watchLagCanceled prometheus.Counter
	watchRelayLag    prometheus.Histogram
	grpc             *grpcprom.ServerMetrics
	bytes            *clientBytes
}

func newMetrics(f *Frontend) *metrics {
	m := &metrics{
		registry: f.deps.Registry,
		handled: obs.NewObservers(prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "cairn", Subsystem: "frontend",
			Name: "request_duration_seconds", Help: "Time to answer one unary etcd API request, by method and gRPC code.",
			Buckets: prometheus.ExponentialBuckets(1e-4, 4, 10)}, []string{"method", "code"})),
		retries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "frontend",
			Name: "replica_retries_total", Help: "Requests tried again on another replica after one was unavailable."}),
		watchLagCanceled: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "cairn", Subsystem: "frontend",
			Name: "watchers_lag_canceled_total", Help: "Relayed watchers canceled for being more than their hub's " +
				"--max-watch-lag behind the head when the frontend would have sent them a response."}),
		watchRelayLag: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "cairn", Subsystem: "frontend",
			Name: "watch_relay_lag_seconds", Help: "For each frame of watch responses relayed from a hub that stamps " +
				"them, the largest lag among the responses sent: how far behind the head, counted from the hub, " +
				"a relayed watcher was expected to be when the frontend wrote it a response (its lag when " +
				"relayed plus the frontend's recent write wait).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)}),
		// etcd serves grpc_server_handling_seconds with --metrics=extensive; its buckets are the middleware's.
		grpc:  grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram()),
		bytes: newClientBytes(),
	}
	if m.registry == nil {
		m.registry = obs.NewRegistry()
	}
	gauge := func(name, help string, value func(*view) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "cairn", Subsystem: "frontend", Name: name, Help: help},
			func() float64 { return value(f.pool.view()) })
	}
	m.registry.MustRegister(m.handled.Vec(), m.retries, m.watchLagCanceled, m.watchRelayLag, m.grpc, m.bytes.sent, m.bytes.received,
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

// clientBytes counts the bytes of the messages the client API receives and sends, as etcd's codec counts them
// (the marshalled message, before compression and framing). They are counted in the server's codec
// (countingCodec), as etcd counts them, not by a gRPC stats handler: a server with any stats handler copies
// every request's metadata for it and builds an event for each of the RPC's stages, about 1 KiB a request.
type clientBytes struct {
	sent, received prometheus.Counter
}

func newClientBytes() *clientBytes {
	return &clientBytes{
		sent: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "network",
			Name: "client_grpc_sent_bytes_total", Help: "The total number of bytes sent to grpc clients."}),
		received: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "network",
			Name: "client_grpc_received_bytes_total", Help: "The total number of bytes received from grpc clients."}),
	}
}

// countingCodec is the client port's codec: it counts every message it encodes or decodes in bytes.
type countingCodec struct {
	encoding.CodecV2
	bytes *clientBytes
}

// Marshal encodes v and counts its bytes as sent.
func (c countingCodec) Marshal(v any) (mem.BufferSlice, error) {
	out, err := c.CodecV2.Marshal(v)
	if err == nil {
		c.bytes.sent.Add(float64(out.Len()))
	}
	return out, err
}

// Unmarshal counts data's bytes as received and decodes it into v.
func (c countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	c.bytes.received.Add(float64(data.Len()))
	return c.CodecV2.Unmarshal(data, v)
}
