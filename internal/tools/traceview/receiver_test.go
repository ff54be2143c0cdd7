package traceview

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
)

// startReceiver runs a Receiver on loopback listeners, stopped at the end of the test.
func startReceiver(t *testing.T, cfg Config) *Receiver {
	t.Helper()
	var err error
	if cfg.GRPCListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if cfg.HTTPListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	r, err := New(cfg, Deps{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.Stop(ctx); err != nil {
			t.Errorf("stopping receiver: %v", err)
		}
	})
	return r
}

func (r *Receiver) grpcAddr() string { return r.cfg.GRPCListener.Addr().String() }
func (r *Receiver) httpAddr() string { return r.cfg.HTTPListener.Addr().String() }

// exportRequest sends one traced "put" through exporter, as a frontend and a storage would: the root server
// span with cairn.op, a child, and a batch span in a trace of its own linking the child.
func exportRequest(t *testing.T, exporter sdktrace.SpanExporter, service string) trace.SpanContext {
	t.Helper()
	ctx := context.Background()
	res := resource.NewSchemaless(semconv.ServiceName("cairn-"+service), semconv.ServiceInstanceID("member-1"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter), sdktrace.WithResource(res))
	defer func() {
		if err := tp.Shutdown(ctx); err != nil {
			t.Errorf("exporter shutdown: %v", err)
		}
	}()
	tracer := tp.Tracer("traceview_test")
	ctx, root := tracer.Start(ctx, "frontend.receive", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("cairn.op", "put"), attribute.String("cairn.member", "member-1")))
	_, propose := tracer.Start(ctx, "storage.propose")
	_, fsync := tracer.Start(context.Background(), "consensus.wal_fsync", trace.WithNewRoot(),
		trace.WithLinks(trace.Link{SpanContext: propose.SpanContext()}), trace.WithAttributes(attribute.Int("cairn.batch.size", 1)))
	fsync.End()
	propose.End()
	root.End()
	return root.SpanContext()
}

func TestReceiverTakesEveryOTLPTransport(t *testing.T) {
	r := startReceiver(t, Config{})
	ctx := context.Background()
	tests := []struct {
		name     string
		exporter func() (sdktrace.SpanExporter, error)
	}{
		{"grpc", func() (sdktrace.SpanExporter, error) {
			return otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(r.grpcAddr()), otlptracegrpc.WithInsecure())
		}},
		{"http protobuf", func() (sdktrace.SpanExporter, error) {
			return otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(r.httpAddr()), otlptracehttp.WithInsecure())
		}},
		{"http protobuf gzip", func() (sdktrace.SpanExporter, error) {
			return otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(r.httpAddr()), otlptracehttp.WithInsecure(),
				otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
		}},
		{"http json", func() (sdktrace.SpanExporter, error) {
			return otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(r.httpAddr()), otlptracehttp.WithInsecure(),
				otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			exporter, err := tt.exporter()
			if err != nil {
				t.Fatal(err)
			}
			root := exportRequest(t, exporter, "frontend")
			id := TraceID(root.TraceID())
			waittest.Until(t, 10*time.Second, 10*time.Millisecond, "the exported trace in the store", func() bool {
				return len(r.Store().Traces()[id]) == 2
			})
			spans := r.Store().Traces()[id]
			for _, s := range spans {
				if s.Service != "cairn-frontend" || s.Instance != "member-1" {
					t.Errorf("span %s from service %q instance %q, want cairn-frontend member-1", s.Name, s.Service, s.Instance)
				}
				if s.Name == "frontend.receive" && (s.Op != "put" || s.ID != SpanID(root.SpanID()) || s.Duration() <= 0) {
					t.Errorf("root span %+v, want op put, id %s and a duration", s, root.SpanID())
				}
			}
			var view *TraceView
			for _, v := range r.Report().Slowest {
				if v.ID == id {
					view = v
				}
			}
			if view == nil || view.Op != "put" || len(view.Spans) != 3 {
				t.Fatalf("trace %s in the report: %+v, want a put with its linked fsync (3 spans)", id, view)
			}
			if last := view.Spans[2]; last.Name != "consensus.wal_fsync" || !last.Linked || last.Depth != 2 || last.Attr("cairn.batch.size") != "1" {
				t.Errorf("linked span %+v, want consensus.wal_fsync under storage.propose with cairn.batch.size 1", last)
			}
		})
	}
	var text strings.Builder
	if err := r.Report().WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"put: 4 traces", "frontend.receive", "storage.propose", "consensus.wal_fsync (batch)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
}

func TestReceiverForwards(t *testing.T) {
	ctx := context.Background()
	downstream := startReceiver(t, Config{})
	tests := []struct {
		name string
		url  func() string
	}{
		{"to grpc", func() string { return "grpc://" + downstream.grpcAddr() }},
		{"to http", func() string { return "http://" + downstream.httpAddr() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := startReceiver(t, Config{ForwardURL: tt.url()})
			exporter, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(r.grpcAddr()), otlptracegrpc.WithInsecure())
			if err != nil {
				t.Fatal(err)
			}
			root := exportRequest(t, exporter, "storage")
			id := TraceID(root.TraceID())
			waittest.Until(t, 10*time.Second, 10*time.Millisecond, "the trace forwarded downstream", func() bool {
				return len(downstream.Store().Traces()[id]) == 2
			})
			here, there := r.Store().Traces()[id], downstream.Store().Traces()[id]
			for i := range here {
				if here[i].Trace != there[i].Trace || here[i].Name != there[i].Name || !here[i].Start.Equal(there[i].Start) ||
					!here[i].End.Equal(there[i].End) || here[i].Service != there[i].Service {
					t.Errorf("span %d forwarded as %+v, received as %+v", i, there[i], here[i])
				}
			}
			waittest.Until(t, 10*time.Second, 10*time.Millisecond, "every export counted as forwarded", func() bool {
				forwarded, _, _ := r.ForwardStats()
				return forwarded == 3
			})
			if forwarded, dropped, failed := r.ForwardStats(); forwarded != 3 || dropped != 0 || failed != 0 {
				t.Errorf("forwarded %d, dropped %d, failed %d; want the 3 exports (one per span) forwarded", forwarded, dropped, failed)
			}
		})
	}
}

func TestConfigRefusesBadForwardURL(t *testing.T) {
	for _, raw := range []string{"127.0.0.1:4317", "ftp://host:21", "grpc://"} {
		if err := (Config{ForwardURL: raw}).Validate(); err == nil {
			t.Errorf("forward URL %q accepted", raw)
		}
	}
}
