package obs

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestStagesCostNothingUnsampled: a stage of a request that is not sampled, or of a service that records no
// spans, allocates nothing; one of a sampled request is recorded under it.
func TestStagesCostNothingUnsampled(t *testing.T) {
	recorder := tracetest.NewSpanRecorder()
	recording := &Telemetry{Tracers: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder)),
		Propagator: propagation.TraceContext{}}
	unsampled := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}))
	tests := []struct {
		name   string
		stages StageTracer
		ctx    context.Context
	}{
		{"no spans recorded", NoTelemetry().Stages("storage", "m1"), unsampled},
		{"no trace", recording.Stages("storage", "m1"), context.Background()},
		{"not sampled", recording.Stages("storage", "m1"), unsampled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			allocs := testing.AllocsPerRun(100, func() {
				_, span := tc.stages.Start(tc.ctx, "storage.submit")
				span.End()
				var batch Batch
				batch.Add(tc.ctx)
				tc.stages.StartBatch("storage.bbolt_commit", &batch).End()
			})
			if allocs != 0 {
				t.Fatalf("%v allocations per unsampled stage, want 0", allocs)
			}
		})
	}
	ctx, parent := recording.Tracer("test").Start(context.Background(), "request")
	_, span := recording.Stages("storage", "m1").Start(ctx, "storage.submit")
	span.End()
	parent.End()
	ended := recorder.Ended()
	if len(ended) != 2 || ended[0].Name() != "storage.submit" || ended[0].Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Fatalf("recorded %v, want storage.submit under the request", ended)
	}
}
