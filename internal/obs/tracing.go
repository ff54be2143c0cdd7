package obs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
)

// Telemetry is one service's tracing setup. The zero value is not usable; build it with NewTelemetry (or
// NoTelemetry in tests).
type Telemetry struct {
	Tracers    trace.TracerProvider
	Propagator propagation.TextMapPropagator
	shutdown   func(context.Context) error
	// gate decides the roots of client RPCs before otelgrpc sees them (nil: otelgrpc decides every one).
	gate *rootGate
}

// TraceConfig is what a service's tracing needs to know.
type TraceConfig struct {
	// Service is the service's name without the "cairn-" prefix (resource attribute service.name, e.g.
	// cairn-storage); Instance is its member or instance name (service.instance.id).
	Service, Instance string
	// SampleRatio, from 0 to 1, is the parent-based ratio of requests traced (--trace-sample-ratio); below 0,
	// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG decide (see NewSampler).
	SampleRatio float64
}

// NewTelemetry sets up tracing for cfg.Service. An OTLP/gRPC exporter is installed when the standard
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) variable is set, and configured by the
// other standard OTEL_* variables, with the sampler NewSampler gives; when neither is set spans are not
// recorded at all, but trace context is still carried, so a traced client's context survives the hop through
// an untraced service. With an endpoint set and OTEL_TRACES_EXPORTER=none (as the Go SDK's autoexport reads
// it: no exporter) spans are sampled and recorded as with one, then dropped: what tracing costs in the
// process, without the export and the receiver (scripts/bench-trace.sh's 0.01-none mode).
func NewTelemetry(ctx context.Context, cfg TraceConfig) (*Telemetry, error) {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		return &Telemetry{Tracers: tracenoop.NewTracerProvider(), Propagator: prop}, nil
	}
	sampler, err := NewSampler(cfg.SampleRatio)
	if err != nil {
		return nil, err
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName("cairn-"+cfg.Service), semconv.ServiceInstanceID(cfg.Instance)))
	if err != nil {
		return nil, fmt.Errorf("trace resource for %s: %w", cfg.Service, err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sampler),
		sdktrace.WithRawSpanLimits(spanLimits())}
	if !strings.EqualFold(strings.TrimSpace(os.Getenv(envExporter)), "none") {
		exp, err := otlptracegrpc.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("otlp trace exporter for %s: %w", cfg.Service, err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return &Telemetry{Tracers: tp, Propagator: prop, shutdown: tp.Shutdown, gate: newRootGate(cfg.SampleRatio)}, nil
}

// batchLinkLimit is the most links a span keeps unless OTEL_SPAN_LINK_COUNT_LIMIT says otherwise: a batch span
// links every sampled request it carried, and the SDK's default, 128, dropped the links past it (a WAL fsync
// under 1000 clients carries more), so those requests' traces lost the batch.
const batchLinkLimit = 8192

// spanLimits are the SDK's limits (with their OTEL_SPAN_* variables), links raised to batchLinkLimit.
func spanLimits() sdktrace.SpanLimits {
	limits := sdktrace.NewSpanLimits()
	if os.Getenv("OTEL_SPAN_LINK_COUNT_LIMIT") == "" {
		limits.LinkCountLimit = batchLinkLimit
	}
	return limits
}

// envExporter names the exporter, as the standard variable does: otlp (the default) or none.
const envExporter = "OTEL_TRACES_EXPORTER"

// NoTelemetry carries trace context but records nothing; for tests and tools.
func NoTelemetry() *Telemetry {
	return &Telemetry{
		Tracers:    tracenoop.NewTracerProvider(),
		Propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	}
}

// ServiceDefaults gives every service's Deps its defaults for the two they all take: no telemetry
// (NoTelemetry) for a nil tel, and slog's default logger for a nil logger, so that a service built without
// one still reports its errors.
func ServiceDefaults(tel *Telemetry, logger *slog.Logger) (*Telemetry, *slog.Logger) {
	if tel == nil {
		tel = NoTelemetry()
	}
	if logger == nil {
		logger = slog.Default()
	}
	return tel, logger
}

// Tracer returns the named tracer (use the package path as name).
func (t *Telemetry) Tracer(name string) trace.Tracer { return t.Tracers.Tracer(name) }

// Shutdown flushes and stops the exporter, if any.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if t.shutdown == nil {
		return nil
	}
	return t.shutdown(ctx)
}

// Recording reports whether spans are recorded (an exporter or SDK provider is installed). When they are not,
// gRPC gets only the trace-context propagation (see propagate.go), not otelgrpc, so an untraced deployment pays
// nothing per message.
func (t *Telemetry) Recording() bool {
	_, noop := t.Tracers.(tracenoop.TracerProvider)
	return !noop
}

// ServerOptions instruments a gRPC server: otelgrpc when spans are recorded (for the RPCs a sampled trace
// reaches, or the ratio draws as roots, see gatedHandler), trace-context propagation only otherwise.
func (t *Telemetry) ServerOptions() []grpc.ServerOption {
	if !t.Recording() {
		return []grpc.ServerOption{
			grpc.ChainUnaryInterceptor(t.unaryServerPropagation),
			grpc.ChainStreamInterceptor(t.streamServerPropagation),
		}
	}
	return []grpc.ServerOption{grpc.StatsHandler(gatedHandler{inner: otelgrpc.NewServerHandler(t.otelgrpcOptions()...), gate: t.gate})}
}

// DialOptions instruments a gRPC client connection, as ServerOptions does a server.
func (t *Telemetry) DialOptions() []grpc.DialOption {
	if !t.Recording() {
		return []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(t.unaryClientPropagation),
			grpc.WithChainStreamInterceptor(t.streamClientPropagation),
		}
	}
	return []grpc.DialOption{grpc.WithStatsHandler(gatedHandler{inner: otelgrpc.NewClientHandler(t.otelgrpcOptions()...), gate: t.gate,
		client: true})}
}

func (t *Telemetry) otelgrpcOptions() []otelgrpc.Option {
	return []otelgrpc.Option{
		otelgrpc.WithTracerProvider(t.Tracers),
		otelgrpc.WithPropagators(t.Propagator),
		otelgrpc.WithMeterProvider(noop.NewMeterProvider()),
	}
}

// Inject writes ctx's trace context into a string map, for carrying it inside a proposal, a link call or a NATS
// message. It returns nil when there is nothing to carry: no trace context, or one that is not sampled (nothing
// downstream would record it, so a request that is not sampled carries nothing and costs nothing more).
func (t *Telemetry) Inject(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	t.Propagator.Inject(ctx, carrier)
	return carrier
}

// Extract returns ctx with the trace context read from carrier (as written by Inject), if any.
func (t *Telemetry) Extract(ctx context.Context, carrier map[string]string) context.Context {
	if len(carrier) == 0 {
		return ctx
	}
	return t.Propagator.Extract(ctx, propagation.MapCarrier(carrier))
}
