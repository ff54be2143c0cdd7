package storage

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// BenchmarkTracedPut measures BenchmarkPipelinePut's path (puts over the pipeline, 1024 in flight) with spans
// not recorded at all, recorded by an SDK whose sampler takes no request (the cost of tracing at a low ratio for
// the requests not sampled: each carries a span context that is not sampled, as the frontend's span gives), and
// recorded for every request (spans are made and ended, and dropped rather than exported).
func BenchmarkTracedPut(b *testing.B) {
	never, err := obs.NewSampler(0)
	if err != nil {
		b.Fatal(err)
	}
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}})
	for _, tc := range []struct {
		name string
		tel  *obs.Telemetry
		ctx  func(ctx context.Context, tel *obs.Telemetry) (context.Context, func())
	}{
		{"off", obs.NoTelemetry(), nil},
		{"unsampled", sdkTelemetry(sdktrace.WithSampler(never)),
			func(ctx context.Context, _ *obs.Telemetry) (context.Context, func()) {
				return trace.ContextWithSpanContext(ctx, unsampled), func() {}
			}},
		{"sampled", sdkTelemetry(sdktrace.WithSampler(sdktrace.AlwaysSample())),
			func(ctx context.Context, tel *obs.Telemetry) (context.Context, func()) {
				ctx, span := tel.Tracer("bench").Start(ctx, "request")
				return ctx, func() { span.End() }
			}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := testConfig(b, 1)
			cfg.AdminAddr = ""
			m := startMember(b, cfg, newMemlog(b, 1), tc.tel)
			p := dialPipelineWith(b, m, tc.tel)
			value := make([]byte, 256)
			runPipelineCalls(b, 1024, func(ctx context.Context, i int64) error {
				if tc.ctx != nil {
					var end func()
					ctx, end = tc.ctx(ctx, tc.tel)
					defer end()
				}
				_, err := p.Submit(ctx, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte(fmt.Sprintf("k%07d", i)), Value: value}})
				return err
			})
		})
	}
}

// sdkTelemetry is a Telemetry on an SDK provider that exports nothing.
func sdkTelemetry(opts ...sdktrace.TracerProviderOption) *obs.Telemetry {
	return &obs.Telemetry{Tracers: sdktrace.NewTracerProvider(opts...), Propagator: propagation.TraceContext{}}
}

// dialPipelineWith is dialPipeline with the frontend's telemetry.
func dialPipelineWith(t testing.TB, m *testMember, tel *obs.Telemetry) *storageclient.Pipeline {
	t.Helper()
	p := storageclient.NewPipeline(m.listener.Addr().String(), time.Minute, tel, nil)
	t.Cleanup(p.Close)
	return p
}
