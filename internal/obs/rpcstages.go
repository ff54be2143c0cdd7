package obs

import (
	"context"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
)

// StagedServerOptions instruments the gRPC server that receives client requests (the frontend's) as
// ServerOptions does, and, while spans are recorded, tiles the server span of every sampled unary RPC with
// three stages of stages' service: <service>.receive (from the span's start, when the request's headers
// arrived, to the first interceptor: reading and decoding the request), <service>.route (the interceptors and
// the handler: checks, and the calls to the services behind) and <service>.answer (from the handler's return to
// the end of the RPC: encoding and sending the answer). The server span, the root of the request's trace,
// gets cairn.op = op(method, request).
func (t *Telemetry) StagedServerOptions(stages StageTracer, op func(method string, req any) string) []grpc.ServerOption {
	if !t.Recording() {
		return t.ServerOptions()
	}
	return []grpc.ServerOption{
		grpc.StatsHandler(gatedHandler{inner: otelgrpc.NewServerHandler(t.otelgrpcOptions()...), gate: t.gate, staged: true}),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo,
			handler grpc.UnaryHandler) (any, error) {
			return stages.unary(ctx, req, info, handler, op)
		}),
	}
}

// rpcTimes is what the stats handler and the interceptor share about one sampled RPC.
type rpcTimes struct {
	start  time.Time
	answer trace.Span // set by the interceptor when the handler returns, ended by the stats handler
}

type rpcTimesKey struct{}

// unary runs handler inside the receive, route and answer stages of a sampled RPC.
func (s StageTracer) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler,
	op func(method string, req any) string) (any, error) {
	times, _ := ctx.Value(rpcTimesKey{}).(*rpcTimes)
	if times == nil || !s.Sampled(ctx) {
		return handler(ctx, req)
	}
	trace.SpanFromContext(ctx).SetAttributes(AttrOp.String(op(info.FullMethod, req)),
		AttrService.String(s.service), AttrMember.String(s.member))
	// Each stage starts when the one before ended, so that they tile the RPC's span.
	received := time.Now()
	s.Span(ctx, s.service+".receive", times.start, received)
	routeCtx, route := s.StartAt(ctx, s.service+".route", received)
	resp, err := handler(routeCtx, req)
	routed := time.Now()
	route.End(trace.WithTimestamp(routed))
	_, times.answer = s.StartAt(ctx, s.service+".answer", routed)
	return resp, err
}
