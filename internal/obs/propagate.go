package obs

import (
	"context"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Propagation-only gRPC interceptors, used when no spans are recorded: they carry the caller's W3C trace context
// through the service unchanged (so a traced client's trace survives an untraced hop), at the cost of one
// metadata lookup per call.

// metadataCarrier adapts gRPC metadata to propagation.TextMapCarrier.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

func (t *Telemetry) extractIncoming(ctx context.Context) context.Context {
	// ValueFromIncomingContext looks without copying the metadata, which FromIncomingContext does on every call.
	if len(metadata.ValueFromIncomingContext(ctx, "traceparent")) == 0 {
		return ctx
	}
	md, _ := metadata.FromIncomingContext(ctx)
	return t.Propagator.Extract(ctx, metadataCarrier(md))
}

func (t *Telemetry) injectOutgoing(ctx context.Context) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	t.Propagator.Inject(ctx, metadataCarrier(md))
	return metadata.NewOutgoingContext(ctx, md)
}

func (t *Telemetry) unaryServerPropagation(ctx context.Context, req any, _ *grpc.UnaryServerInfo,
	handler grpc.UnaryHandler) (any, error) {
	return handler(t.extractIncoming(ctx), req)
}

func (t *Telemetry) streamServerPropagation(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo,
	handler grpc.StreamHandler) error {
	ctx := t.extractIncoming(ss.Context())
	if ctx == ss.Context() {
		return handler(srv, ss)
	}
	return handler(srv, contextStream{ServerStream: ss, ctx: ctx})
}

type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s contextStream) Context() context.Context { return s.ctx }

func (t *Telemetry) unaryClientPropagation(ctx context.Context, method string, req, reply any,
	cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(t.injectOutgoing(ctx), method, req, reply, cc, opts...)
}

func (t *Telemetry) streamClientPropagation(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
	method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(t.injectOutgoing(ctx), desc, cc, method, opts...)
}
