package obs

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/stats"
)

// TestNewRootGate: only a parent-based ratio below 1 (the flag, or parentbased_traceidratio) gates roots.
func TestNewRootGate(t *testing.T) {
	tests := []struct {
		name             string
		ratio            float64
		sampler, arg     string
		wantGate         bool
		wantGateRatioVal float64
	}{
		{"flag 1%", 0.01, "", "", true, 0.01},
		{"flag 100%", 1, "", "", false, 0},
		{"flag 0", 0, "", "", true, 0},
		{"env ratio", -1, "parentbased_traceidratio", "0.5", true, 0.5},
		{"env always_on", -1, "always_on", "", false, 0},
		{"env traceidratio (not parent-based)", -1, "traceidratio", "0.5", false, 0},
		{"no env", -1, "", "", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(envSampler, tt.sampler)
			t.Setenv(envSamplerArg, tt.arg)
			gate := newRootGate(tt.ratio)
			if (gate != nil) != tt.wantGate || (gate != nil && gate.ratio != tt.wantGateRatioVal) {
				t.Fatalf("gate %+v, want gate %v with ratio %v", gate, tt.wantGate, tt.wantGateRatioVal)
			}
		})
	}
}

// countingHandler is a stats.Handler that counts the RPCs it sees; like otelgrpc's, its TagRPC puts a span
// in the context, sampled when sampled is set.
type countingHandler struct {
	tagged, handled int
	sampled         bool
}

func (h *countingHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context {
	h.tagged++
	var flags trace.TraceFlags
	if h.sampled {
		flags = trace.FlagsSampled
	}
	return trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: flags}))
}
func (h *countingHandler) HandleRPC(context.Context, stats.RPCStats) { h.handled++ }
func (h *countingHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (h *countingHandler) HandleConn(context.Context, stats.ConnStats) {}

// TestRootGateSkipsOtelgrpc: an RPC without trace context that the gate does not draw never reaches otelgrpc;
// one with trace context always does (the parent decides); one the gate draws does, and is sampled.
func TestRootGateSkipsOtelgrpc(t *testing.T) {
	tests := []struct {
		name        string
		ratio       float64
		traceparent string
		wantInner   bool
	}{
		{"not drawn", 0, "", false},
		{"drawn", 1, "", true},
		{"traced client", 0, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner := &countingHandler{}
			h := gatedHandler{inner: inner, gate: &rootGate{ratio: tt.ratio}, staged: true}
			ctx := context.Background()
			if tt.traceparent != "" {
				ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(traceparentHeader, tt.traceparent))
			}
			ctx = h.TagRPC(ctx, &stats.RPCTagInfo{FullMethodName: "/etcdserverpb.KV/Range"})
			h.HandleRPC(ctx, &stats.End{})
			if got := inner.tagged == 1 && inner.handled == 1; got != tt.wantInner || (!tt.wantInner && inner.tagged+inner.handled != 0) {
				t.Errorf("otelgrpc tagged %d handled %d, want reached: %v", inner.tagged, inner.handled, tt.wantInner)
			}
		})
	}
	// A drawn root is marked so that the sampler samples it without drawing again.
	sampler, err := NewSampler(0)
	if err != nil {
		t.Fatal(err)
	}
	marked := context.WithValue(context.Background(), sampledRootKey{}, true)
	for ctx, want := range map[context.Context]sdktrace.SamplingDecision{marked: sdktrace.RecordAndSample, context.Background(): sdktrace.Drop} {
		if got := sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, Name: "etcdserverpb.KV/Range"}).Decision; got != want {
			t.Errorf("sampler at ratio 0 decides %v, want %v", got, want)
		}
	}
}
