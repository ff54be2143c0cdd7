package frontend

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grpcMetrics are etcd's grpc_server_* series, as the grpc-ecosystem middleware (providers/prometheus, which
// etcd uses, with the handling-time histogram of --metrics=extensive) defines and counts them: the same names,
// help, labels and buckets, the same events counted. The middleware looks each series up by its label values
// on every event (five lookups and as many label slices a unary call); here every method's series are looked
// up once, when the server's methods are known (initialize), and a call counts on them directly.
type grpcMetrics struct {
	started, handled, received, sent *prometheus.CounterVec
	handling                         *prometheus.HistogramVec
	// methods holds every registered method's series, by full method name; written by initialize before the
	// server serves, only read afterwards.
	methods map[string]*methodSeries
}

// methodSeries are one method's series.
type methodSeries struct {
	started, received, sent prometheus.Counter
	handling                prometheus.Observer
	// handled is grpc_server_handled_total by code, for gRPC's codes (0 to 16).
	handled [numCodes]prometheus.Counter
	labels  [3]string // grpc_type, grpc_service, grpc_method
}

// numCodes is how many codes gRPC defines (OK to Unauthenticated), as the middleware's AllCodes.
const numCodes = int(codes.Unauthenticated) + 1

func newGRPCMetrics() *grpcMetrics {
	labels := []string{"grpc_type", "grpc_service", "grpc_method"}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	return &grpcMetrics{
		started: counter("grpc_server_started_total", "Total number of RPCs started on the server.", labels...),
		handled: counter("grpc_server_handled_total",
			"Total number of RPCs completed on the server, regardless of success or failure.", append(labels, "grpc_code")...),
		received: counter("grpc_server_msg_received_total", "Total number of RPC stream messages received on the server.", labels...),
		sent:     counter("grpc_server_msg_sent_total", "Total number of gRPC stream messages sent by the server.", labels...),
		handling: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "grpc_server_handling_seconds",
			Help:    "Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.",
			Buckets: prometheus.DefBuckets}, labels),
		methods: map[string]*methodSeries{},
	}
}

// collectors are the series to register.
func (m *grpcMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.started, m.handled, m.received, m.sent, m.handling}
}

// initialize creates every method of s with its series at zero, as the middleware's InitializeMetrics does
// (etcd's dashboards expect them from the start); s must not serve yet.
func (m *grpcMetrics) initialize(s *grpc.Server) {
	for service, info := range s.GetServiceInfo() {
		for _, method := range info.Methods {
			m.methods["/"+service+"/"+method.Name] = m.newSeries(grpcType(method.IsClientStream, method.IsServerStream),
				service, method.Name)
		}
	}
}

func (m *grpcMetrics) newSeries(typ, service, method string) *methodSeries {
	s := &methodSeries{labels: [3]string{typ, service, method}}
	s.started = m.started.WithLabelValues(s.labels[:]...)
	s.received = m.received.WithLabelValues(s.labels[:]...)
	s.sent = m.sent.WithLabelValues(s.labels[:]...)
	s.handling = m.handling.WithLabelValues(s.labels[:]...)
	for code := range s.handled {
		s.handled[code] = m.handled.WithLabelValues(typ, service, method, codes.Code(code).String())
	}
	return s
}

// series returns fullMethod's series (a method initialize did not see gets new ones, not kept).
func (m *grpcMetrics) series(fullMethod string, clientStream, serverStream bool) *methodSeries {
	if s := m.methods[fullMethod]; s != nil {
		return s
	}
	service, method := "unknown", "unknown"
	if name := strings.TrimPrefix(fullMethod, "/"); strings.Contains(name, "/") {
		service, method, _ = strings.Cut(name, "/")
	}
	return m.newSeries(grpcType(clientStream, serverStream), service, method)
}

// done counts the end of a call of s that took elapsed and ended with err.
func (m *grpcMetrics) done(s *methodSeries, err error, elapsed time.Duration) {
	if code := grpcCode(err); int(code) < numCodes {
		s.handled[code].Inc()
	} else {
		m.handled.WithLabelValues(s.labels[0], s.labels[1], s.labels[2], code.String()).Inc()
	}
	s.handling.Observe(elapsed.Seconds())
}

// countedStream counts a stream's messages.
type countedStream struct {
	grpc.ServerStream
	series *methodSeries
}

func (s *countedStream) SendMsg(msg any) error {
	err := s.ServerStream.SendMsg(msg)
	s.series.sent.Inc()
	return err
}

func (s *countedStream) RecvMsg(msg any) error {
	err := s.ServerStream.RecvMsg(msg)
	s.series.received.Inc()
	return err
}

// grpcType is the middleware's grpc_type label of a method.
func grpcType(clientStream, serverStream bool) string {
	switch {
	case !clientStream && !serverStream:
		return "unary"
	case clientStream && !serverStream:
		return "client_stream"
	case !clientStream && serverStream:
		return "server_stream"
	}
	return "bidi_stream"
}

// grpcCode is the code the middleware counts err under: its status code, a context error's as gRPC converts
// it.
func grpcCode(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err)
	}
	return st.Code()
}
