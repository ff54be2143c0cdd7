package obs

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// gatedHandler is otelgrpc's stats handler (inner) for every gRPC server and client of a service that records
// spans. With a gate (a parent-based ratio below 1), an RPC that nothing samples skips otelgrpc altogether, so
// that at 1% the other 99%, and the services' background calls (status polls), cost what they cost untraced:
//   - a server RPC that arrives without a traceparent is a new root: the gate draws it; one not drawn is
//     left as it came (no span, no allocation), and HandleRPC knows it by the span context it lacks
//     (otelgrpc's TagRPC always puts one in the context);
//   - a client RPC whose context carries a sampled span goes through otelgrpc (the parent decides); one with
//     no span context is a new root the gate draws; one with an unsampled span context skips otelgrpc and
//     carries nothing, as a framed link call does (Telemetry.Inject). A client RPC went through otelgrpc
//     exactly when its context carries a sampled span.
//
// A drawn root is marked (sampledRootKey) so that the sampler samples it without drawing again. Only the events
// otelgrpc uses are passed on (otelgrpcUses), which spares a context lookup per message on every stream. With
// staged, the handler also notes when a
// sampled RPC starts and ends its answer stage (StagedServerOptions).
type gatedHandler struct {
	inner  stats.Handler
	gate   *rootGate
	client bool
	staged bool
}

// traceparentHeader is the W3C trace context's header, which the propagator reads.
const traceparentHeader = "traceparent"

func (h gatedHandler) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	if h.gate != nil {
		newRoot := false
		if h.client {
			sc := trace.SpanContextFromContext(ctx)
			if !sc.IsSampled() {
				if sc.IsValid() {
					return ctx
				}
				newRoot = true
			}
		} else {
			newRoot = len(metadata.ValueFromIncomingContext(ctx, traceparentHeader)) == 0
		}
		if newRoot {
			if !h.gate.draw() {
				return ctx
			}
			ctx = context.WithValue(ctx, sampledRootKey{}, true)
		}
	}
	ctx = h.inner.TagRPC(ctx, info)
	if !h.staged {
		return ctx
	}
	if span := trace.SpanFromContext(ctx); span.SpanContext().IsSampled() {
		start := time.Now()
		if recorded, ok := span.(interface{ StartTime() time.Time }); ok {
			start = recorded.StartTime() // the receive stage starts with the span, not a clock read later
		}
		ctx = context.WithValue(ctx, rpcTimesKey{}, &rpcTimes{start: start})
	}
	return ctx
}

func (h gatedHandler) HandleRPC(ctx context.Context, s stats.RPCStats) {
	if !otelgrpcUses(s) {
		return
	}
	if h.gate != nil && !h.tagged(ctx) {
		return // not drawn: otelgrpc never tagged it
	}
	h.inner.HandleRPC(ctx, s) // on End, otelgrpc ends the RPC's span
	if _, end := s.(*stats.End); end && h.staged {
		if times, _ := ctx.Value(rpcTimesKey{}).(*rpcTimes); times != nil && times.answer != nil {
			// The answer stage ends when the server span did: a clock read of its own, a preemption away,
			// would leave a gap the stages no longer tile (seen under load: 3.6 ms of a 7 ms Range).
			endedAt := time.Now()
			if recorded, ok := trace.SpanFromContext(ctx).(interface{ EndTime() time.Time }); ok && !recorded.EndTime().IsZero() {
				endedAt = recorded.EndTime()
			}
			times.answer.End(trace.WithTimestamp(endedAt))
		}
	}
}

// otelgrpcUses reports whether otelgrpc (v0.72) does anything on the event s: a client's Begin and OutHeader
// (the server's address), a server's InHeader (its own address) and End (the span's status and end). On the
// others (payloads, trailers, the other side's headers) it records nothing, so they are not passed on: that
// spares a context lookup on each, which on the frontend's deep contexts is most of what an RPC that is not
// sampled costs (TestOtelgrpcIgnoresPayloads checks that a span is the same without them).
func otelgrpcUses(s stats.RPCStats) bool {
	switch s := s.(type) {
	case *stats.Begin:
		return s.Client
	case *stats.OutHeader:
		return s.Client
	case *stats.InHeader:
		return !s.Client
	case *stats.End:
		return true
	}
	return false
}

// tagged reports whether TagRPC gave the RPC of ctx to otelgrpc (see gatedHandler).
func (h gatedHandler) tagged(ctx context.Context) bool {
	sc := trace.SpanContextFromContext(ctx)
	if h.client {
		return sc.IsSampled()
	}
	return sc.IsValid()
}

func (h gatedHandler) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	return h.inner.TagConn(ctx, info)
}

func (h gatedHandler) HandleConn(ctx context.Context, s stats.ConnStats) {
	h.inner.HandleConn(ctx, s)
}
