package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/loopbacktest"
)

// TestBenchTrace: `cairn bench --trace` receives the spans of a running cluster that exports to
// --trace-listen and prints the breakdown of the benchmark's puts, and only of them, under the summary.
func TestBenchTrace(t *testing.T) {
	traceAddr := loopbacktest.Addr(t)
	ctx := context.Background()
	// The receiver starts with the benchmark: reconnect quickly, not with gRPC's backoff of up to 2 minutes.
	reconnect := grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 50 * time.Millisecond,
		Multiplier: 1, MaxDelay: 100 * time.Millisecond}, MinConnectTimeout: time.Second})
	exporter, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(traceAddr), otlptracegrpc.WithInsecure(),
		otlptracegrpc.WithDialOption(reconnect), otlptracegrpc.WithTimeout(time.Second),
		otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: true, InitialInterval: 50 * time.Millisecond,
			MaxInterval: 100 * time.Millisecond, MaxElapsedTime: 10 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter, sdktrace.WithBatchTimeout(100*time.Millisecond)),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("cairn-test"))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c := clustertest.Start(t, clustertest.Options{Members: 1,
		Telemetry: &obs.Telemetry{Tracers: tp, Propagator: propagation.TraceContext{}}})

	out, err := runCairn(t, "bench", "--endpoints", strings.Join(c.Endpoints(), ","), "--trace", "--trace-listen", traceAddr,
		"--trace-settle", "1s", "--clients", "2", "put", "--total", "40")
	if err != nil {
		t.Fatal(err)
	}
	summary, breakdown, ok := strings.Cut(out, "Where the time went (")
	if !ok || !strings.Contains(summary, "Requests/sec") {
		t.Fatalf("no breakdown under the summary:\n%s", out)
	}
	// The root of a put is the frontend's server span: "put" by its cairn.op, or otelgrpc's name before it is set.
	if !strings.Contains(breakdown, "\nput: 40 traces") && !strings.Contains(breakdown, "\netcdserverpb.KV/Put: 40 traces") {
		t.Errorf("breakdown lacks the 40 puts:\n%s", breakdown)
	}
	if strings.Contains(breakdown, "cairn.storage.Storage/Status:") {
		t.Errorf("breakdown lists the services' background calls:\n%s", breakdown)
	}
}
