package obs

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// unsampledTelemetry records spans with a parent-based ratio of 0: what a stack at a low ratio does for the
// requests it does not draw.
func unsampledTelemetry(b *testing.B) *Telemetry {
	sampler, err := NewSampler(0)
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &Telemetry{Tracers: tp, Propagator: propagation.TraceContext{}, gate: newRootGate(0)}
}

// BenchmarkClientRPC measures what tracing adds to a client's unary RPC on the frontend's server, apart from
// gRPC itself: off is the propagation interceptor of a stack that records nothing; unsampled is the staged
// server's stats handler (the root gate, not drawing) for the stats of one unary RPC, and its interceptor.
// Both should cost a few ns and no allocation.
//
//	go test -run '^$' -bench BenchmarkClientRPC -benchmem ./internal/obs/
func BenchmarkClientRPC(b *testing.B) {
	incoming := metadata.NewIncomingContext(context.Background(), metadata.Pairs("content-type", "application/grpc"))
	info := &grpc.UnaryServerInfo{FullMethod: "/etcdserverpb.KV/Range"}
	tag := &stats.RPCTagInfo{FullMethodName: info.FullMethod}
	events := []stats.RPCStats{&stats.Begin{}, &stats.InHeader{}, &stats.InPayload{}, &stats.OutHeader{},
		&stats.OutPayload{}, &stats.OutTrailer{}, &stats.End{}}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	op := func(string, any) string { return "range.linearizable" }
	b.Run("off", func(b *testing.B) {
		tel := NoTelemetry()
		b.ReportAllocs()
		for b.Loop() {
			_, _ = tel.unaryServerPropagation(incoming, nil, info, handler)
		}
	})
	b.Run("unsampled", func(b *testing.B) {
		tel := unsampledTelemetry(b)
		h := gatedHandler{inner: otelgrpc.NewServerHandler(tel.otelgrpcOptions()...), gate: tel.gate, staged: true}
		stages := tel.Stages("frontend", "m1")
		b.ReportAllocs()
		for b.Loop() {
			ctx := h.TagRPC(incoming, tag)
			for _, e := range events[:3] {
				h.HandleRPC(ctx, e)
			}
			_, _ = stages.unary(ctx, nil, info, handler, op)
			for _, e := range events[3:] {
				h.HandleRPC(ctx, e)
			}
		}
	})
}

// BenchmarkStages measures what the stages of one request cost a request that is not sampled (three stages, a
// batch it joins, the trace context it would carry over a link), against a service that records nothing.
//
//	go test -run '^$' -bench BenchmarkStages -benchmem ./internal/obs/
func BenchmarkStages(b *testing.B) {
	unsampled := trace.ContextWithSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}))
	for _, tc := range []struct {
		name string
		tel  func(b *testing.B) *Telemetry
		ctx  context.Context
	}{
		{"off", func(*testing.B) *Telemetry { return NoTelemetry() }, context.Background()},
		{"unsampled", unsampledTelemetry, unsampled},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tel := tc.tel(b)
			stages := tel.Stages("storage", "m1")
			var batch Batch
			b.ReportAllocs()
			for b.Loop() {
				ctx, submit := stages.Start(tc.ctx, "storage.submit")
				_, propose := stages.Start(ctx, "storage.propose")
				if tel.Inject(ctx) != nil {
					b.Fatal("an unsampled request carries trace context")
				}
				batch.Add(ctx)
				stages.StartBatch("storage.bbolt_commit", &batch).End()
				batch.Reset()
				propose.End()
				stages.Span(ctx, "storage.apply", time.Time{}, time.Time{})
				submit.End()
			}
		})
	}
}
