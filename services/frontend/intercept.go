package frontend

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/internal/link"
)

// clientCalls is what every call on the client port goes through before its handler, in one interceptor per
// kind of call rather than a chain of them (gRPC builds a closure per link of a chain on every call): etcd's
// grpc_server_* series and Cairn's request histogram, the auth check (authGate), KV.Range's relay (kvServer's
// relayRange), and, last, the errors leaving without the not-sent mark (link.Plain), as etcd clients must
// see them.
type clientCalls struct {
	metrics *metrics
	auth    *authGate
	// relayRange answers KV.Range in place of its generated handler.
	relayRange grpc.UnaryHandler
}

// unary runs a unary call: counted (every method's series are looked up once, grpcMetrics), checked by the
// auth gate, then handled.
func (c *clientCalls) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info.FullMethod == rangeMethod {
		handler = c.relayRange
	}
	series := c.metrics.grpc.series(info.FullMethod, false, false)
	start := time.Now()
	series.started.Inc()
	series.received.Inc()
	resp, err := c.auth.unaryInterceptor(ctx, req, info, handler)
	series.sent.Inc() // the middleware counts the answer sent even when the call failed
	elapsed := time.Since(start)
	c.metrics.grpc.done(series, err, elapsed)
	c.metrics.handled.Observe(info.FullMethod, status.Code(err).String(), elapsed.Seconds())
	return resp, link.Plain(err)
}

// stream runs a stream: counted, its messages included, and its caller identified by the auth gate.
func (c *clientCalls) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	series := c.metrics.grpc.series(info.FullMethod, info.IsClientStream, info.IsServerStream)
	start := time.Now()
	series.started.Inc()
	err := c.auth.streamInterceptor(srv, &countedStream{ServerStream: ss, series: series}, info, handler)
	c.metrics.grpc.done(series, err, time.Since(start))
	return link.Plain(err)
}
