package obs

import (
	"context"
	"net"
	"testing"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// unaryEvents are the stats of one unary RPC, in the order gRPC gives them.
func unaryEvents(client bool) []stats.RPCStats {
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2379}
	return []stats.RPCStats{&stats.Begin{Client: client}, &stats.OutHeader{Client: client, RemoteAddr: addr},
		&stats.InHeader{Client: client, LocalAddr: addr}, &stats.InPayload{Client: client},
		&stats.OutPayload{Client: client}, &stats.InTrailer{Client: client}, &stats.OutTrailer{Client: client},
		&stats.End{Client: client}}
}

// TestGatedClientSkipsOtelgrpc: a client RPC reaches otelgrpc when its context carries a sampled span, or when
// it starts a trace the gate draws; one under an unsampled span, or a root not drawn, skips it.
func TestGatedClientSkipsOtelgrpc(t *testing.T) {
	spanContext := func(flags trace.TraceFlags) context.Context {
		return trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: flags}))
	}
	tests := []struct {
		name      string
		ratio     float64
		ctx       context.Context
		wantInner bool
	}{
		{"sampled parent", 0, spanContext(trace.FlagsSampled), true},
		{"unsampled parent", 1, spanContext(0), false},
		{"root not drawn", 0, context.Background(), false},
		{"root drawn", 1, context.Background(), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner := &countingHandler{sampled: true}
			h := gatedHandler{inner: inner, gate: &rootGate{ratio: tt.ratio}, client: true}
			ctx := h.TagRPC(tt.ctx, &stats.RPCTagInfo{FullMethodName: "/cairn.storage.Storage/Status"})
			for _, e := range unaryEvents(true) {
				h.HandleRPC(ctx, e)
			}
			if got := inner.tagged == 1; got != tt.wantInner {
				t.Fatalf("otelgrpc tagged %d RPCs, want reached: %v", inner.tagged, tt.wantInner)
			}
			if wantHandled := map[bool]int{true: 3, false: 0}[tt.wantInner]; inner.handled != wantHandled {
				t.Errorf("otelgrpc handled %d events, want %d (begin, out header, end)", inner.handled, wantHandled)
			}
			if marked := ctx.Value(sampledRootKey{}) != nil; marked != (tt.wantInner && tt.ctx == context.Background()) {
				t.Errorf("marked as a drawn root: %v", marked)
			}
		})
	}
}

// TestGatedUnsampledAllocatesNothing: an RPC that nothing samples costs the gated handler no allocation, on a
// server and on a client.
func TestGatedUnsampledAllocatesNothing(t *testing.T) {
	tel := &Telemetry{Tracers: sdktrace.NewTracerProvider(), Propagator: propagation.TraceContext{}, gate: &rootGate{}}
	incoming := metadata.NewIncomingContext(context.Background(), metadata.Pairs("content-type", "application/grpc"))
	tag := &stats.RPCTagInfo{FullMethodName: "/cairn.storage.Storage/Status"}
	for _, tt := range []struct {
		name string
		h    gatedHandler
		ctx  context.Context
	}{
		{"server", gatedHandler{inner: otelgrpc.NewServerHandler(tel.otelgrpcOptions()...), gate: tel.gate, staged: true}, incoming},
		{"client", gatedHandler{inner: otelgrpc.NewClientHandler(tel.otelgrpcOptions()...), gate: tel.gate, client: true}, context.Background()},
	} {
		events := unaryEvents(tt.h.client)
		if allocs := testing.AllocsPerRun(100, func() {
			ctx := tt.h.TagRPC(tt.ctx, tag)
			for _, e := range events {
				tt.h.HandleRPC(ctx, e)
			}
		}); allocs != 0 {
			t.Errorf("%s: %v allocations an unsampled RPC, want 0", tt.name, allocs)
		}
	}
}

// TestOtelgrpcIgnoresPayloads: otelgrpc records nothing on the events otelgrpcUses leaves out (payloads,
// trailers, the other side's headers), which gatedHandler therefore does not pass on; if an upgrade starts to,
// this fails, and otelgrpcUses must let them through.
func TestOtelgrpcIgnoresPayloads(t *testing.T) {
	for _, client := range []bool{false, true} {
		spans := map[bool]sdktrace.ReadOnlySpan{}
		for _, withPayloads := range []bool{false, true} {
			recorder := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
			tel := &Telemetry{Tracers: tp, Propagator: propagation.TraceContext{}}
			h := otelgrpc.NewServerHandler(tel.otelgrpcOptions()...)
			if client {
				h = otelgrpc.NewClientHandler(tel.otelgrpcOptions()...)
			}
			ctx := h.TagRPC(context.Background(), &stats.RPCTagInfo{FullMethodName: "/etcdserverpb.KV/Range"})
			for _, e := range unaryEvents(client) {
				if !withPayloads && !otelgrpcUses(e) {
					continue
				}
				h.HandleRPC(ctx, e)
			}
			if ended := recorder.Ended(); len(ended) != 1 {
				t.Fatalf("client %v: %d spans ended, want 1", client, len(ended))
			}
			spans[withPayloads] = recorder.Ended()[0]
		}
		with, without := spans[true], spans[false]
		if len(with.Events()) != len(without.Events()) || len(with.Attributes()) != len(without.Attributes()) {
			t.Errorf("client %v: with payload events the span has %d events and %d attributes, without %d and %d",
				client, len(with.Events()), len(with.Attributes()), len(without.Events()), len(without.Attributes()))
		}
	}
}
