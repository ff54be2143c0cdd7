package obs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestAdminMux(t *testing.T) {
	var healthErr error
	srv := httptest.NewServer(AdminMux(NewRegistry(), func(context.Context) error { return healthErr }))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	tests := []struct {
		name, path string
		healthErr  error
		wantCode   int
		wantBody   string
	}{
		{"health ok", "/health", nil, 200, `{"health":"true","reason":""}`},
		{"health down", "/health", errors.New("no leader"), 503, `{"health":"false","reason":"no leader"}`},
		{"readyz ok", "/readyz", nil, 200, "ok"},
		{"readyz down", "/readyz", errors.New("no leader"), 503, "no leader"},
		{"livez while down", "/livez", errors.New("no leader"), 200, "ok"},
		{"metrics", "/metrics", nil, 200, "go_goroutines"},
		{"metrics: the collector's CPU", "/metrics", nil, 200, "go_cpu_classes_gc_total_cpu_seconds_total"},
		{"metrics: the memory limit", "/metrics", nil, 200, "go_gc_gomemlimit_bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			healthErr = tc.healthErr
			code, body := get(tc.path)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Fatalf("GET %s = %d %q, want %d containing %q", tc.path, code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
}

func TestInjectExtractCarriesTraceContext(t *testing.T) {
	tel := NoTelemetry()
	if got := tel.Inject(context.Background()); got != nil {
		t.Fatalf("Inject without a span = %v, want nil", got)
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{1, 2, 3},
		SpanID:     trace.SpanID{4, 5, 6},
		TraceFlags: trace.FlagsSampled,
	})
	carrier := tel.Inject(trace.ContextWithSpanContext(context.Background(), sc))
	if carrier["traceparent"] == "" {
		t.Fatalf("carrier has no traceparent: %v", carrier)
	}
	got := trace.SpanContextFromContext(tel.Extract(context.Background(), carrier))
	if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() {
		t.Fatalf("extracted %v, want %v", got, sc)
	}
}

// TestUnrecordedTelemetryStillPropagatesOverGRPC: without an exporter, a trace context set by the caller still
// crosses a gRPC hop (client interceptor → server interceptor), unary and streaming.
func TestUnrecordedTelemetryStillPropagatesOverGRPC(t *testing.T) {
	tel := NoTelemetry()
	if tel.Recording() {
		t.Fatal("NoTelemetry records spans")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(tel.ServerOptions()...)
	seen := make(chan trace.SpanContext, 2)
	healthpb.RegisterHealthServer(srv, spyHealth{seen: seen})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(),
		append(tel.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{9, 9}, SpanID: trace.SpanID{7}, TraceFlags: trace.FlagsSampled,
	})
	ctx, cancel := context.WithTimeout(trace.ContextWithSpanContext(context.Background(), sc), 5*time.Second)
	defer cancel()
	client := healthpb.NewHealthClient(conn)
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	stream, err := client.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	for _, call := range []string{"unary", "stream"} {
		if got := <-seen; got.TraceID() != sc.TraceID() || !got.IsRemote() {
			t.Fatalf("%s call: server saw span context %v, want remote trace %v", call, got, sc.TraceID())
		}
	}
}

type spyHealth struct {
	healthpb.UnimplementedHealthServer
	seen chan trace.SpanContext
}

func (s spyHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	s.seen <- trace.SpanContextFromContext(ctx)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (s spyHealth) Watch(_ *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	s.seen <- trace.SpanContextFromContext(stream.Context())
	return stream.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING})
}

// TestSpanLimits: a batch span keeps batchLinkLimit links unless OTEL_SPAN_LINK_COUNT_LIMIT says otherwise.
func TestSpanLimits(t *testing.T) {
	tests := []struct {
		env  string
		want int
	}{
		{"", batchLinkLimit},
		{"50", 50},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			t.Setenv("OTEL_SPAN_LINK_COUNT_LIMIT", tt.env)
			if got := spanLimits().LinkCountLimit; got != tt.want {
				t.Errorf("LinkCountLimit with OTEL_SPAN_LINK_COUNT_LIMIT=%q: %d, want %d", tt.env, got, tt.want)
			}
		})
	}
}

// TestExporterNone: OTEL_TRACES_EXPORTER=none with an endpoint records and samples spans (and exports none);
// without an endpoint nothing is recorded, whatever the exporter variable says.
func TestExporterNone(t *testing.T) {
	tests := []struct {
		name, endpoint, exporter string
		wantRecording            bool
	}{
		{"none with endpoint", "http://127.0.0.1:9", "none", true},
		{"none without endpoint", "", "none", false},
		{"otlp without endpoint", "", "otlp", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", tt.endpoint)
			t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
			t.Setenv(envExporter, tt.exporter)
			tel, err := NewTelemetry(context.Background(), TraceConfig{Service: "test", Instance: "m1", SampleRatio: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer tel.Shutdown(context.Background())
			if tel.Recording() != tt.wantRecording {
				t.Fatalf("Recording() = %v, want %v", tel.Recording(), tt.wantRecording)
			}
			_, span := tel.Tracer("test").Start(context.Background(), "test.stage")
			defer span.End()
			if span.SpanContext().IsSampled() != tt.wantRecording {
				t.Errorf("span sampled %v, want %v", span.SpanContext().IsSampled(), tt.wantRecording)
			}
		})
	}
}

// TestServiceDefaults: what a service is given is kept; what is nil becomes no telemetry and slog's default
// logger.
func TestServiceDefaults(t *testing.T) {
	tel, logger := NoTelemetry(), slog.New(slog.DiscardHandler)
	if gotTel, gotLogger := ServiceDefaults(tel, logger); gotTel != tel || gotLogger != logger {
		t.Fatalf("ServiceDefaults replaced what it was given: %p %p, want %p %p", gotTel, gotLogger, tel, logger)
	}
	gotTel, gotLogger := ServiceDefaults(nil, nil)
	if gotTel == nil || gotTel.Tracers == nil || gotTel.Propagator == nil {
		t.Fatalf("ServiceDefaults(nil) telemetry = %+v, want NoTelemetry", gotTel)
	}
	if gotLogger != slog.Default() {
		t.Fatal("ServiceDefaults(nil) logger is not slog.Default()")
	}
}
