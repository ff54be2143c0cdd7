package obs

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
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
