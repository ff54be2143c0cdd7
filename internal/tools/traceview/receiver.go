package traceview

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // OTLP exporters may compress with gzip
)

// Config configures a Receiver. Listeners are bound by the caller; either may be nil (not served).
type Config struct {
	// GRPCListener serves OTLP/gRPC (conventionally port 4317).
	GRPCListener net.Listener
	// HTTPListener serves OTLP/HTTP POST /v1/traces (conventionally port 4318), the page at /, the text report
	// at /report.txt and /health.
	HTTPListener net.Listener
	// ForwardURL, when set, is another OTLP endpoint every request is sent on to: grpc://host:port for
	// OTLP/gRPC (grpcs:// with TLS), http(s)://host:port[/path] for OTLP/HTTP protobuf (path default /v1/traces).
	ForwardURL string
	// ForwardQueue bounds the requests waiting to be forwarded (default 1024); more are dropped and counted.
	ForwardQueue int
	// MaxSpans bounds the store (DefaultMaxSpans when 0).
	MaxSpans int
	// Slowest is how many slowest traces reports list (default 10).
	Slowest int
	// PageRefresh makes the served page reload itself this often (0: never).
	PageRefresh time.Duration
}

// Validate reports what makes the configuration unusable.
func (c Config) Validate() error {
	var errs []error
	if c.ForwardURL != "" {
		if _, err := parseForwardURL(c.ForwardURL); err != nil {
			errs = append(errs, err)
		}
	}
	if c.MaxSpans < 0 || c.ForwardQueue < 0 || c.Slowest < 0 {
		errs = append(errs, fmt.Errorf("traceview: negative bound (max spans %d, forward queue %d, slowest %d)", c.MaxSpans, c.ForwardQueue, c.Slowest))
	}
	return errors.Join(errs...)
}

// Deps are a Receiver's collaborators.
type Deps struct {
	Logger *slog.Logger
}

// Receiver receives OTLP traces into a Store and serves reports of them. Lifecycle: New → Start → Stop.
type Receiver struct {
	cfg     Config
	log     *slog.Logger
	store   *Store
	forward *forwarder // nil without ForwardURL

	mu      sync.Mutex
	started bool
	stopped bool
	grpc    *grpc.Server
	http    *http.Server
	serving sync.WaitGroup
}

// New checks cfg; nothing is served until Start.
func New(cfg Config, deps Deps) (*Receiver, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	r := &Receiver{cfg: cfg, log: deps.Logger, store: NewStore(cfg.MaxSpans)}
	if cfg.ForwardURL != "" {
		target, _ := parseForwardURL(cfg.ForwardURL)
		r.forward = newForwarder(target, cfg.ForwardQueue, deps.Logger)
	}
	return r, nil
}

// Start serves the configured listeners and starts forwarding.
func (r *Receiver) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("traceview: already started")
	}
	r.started = true
	if r.forward != nil {
		if err := r.forward.start(); err != nil {
			return err
		}
	}
	if lis := r.cfg.GRPCListener; lis != nil {
		r.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(maxRequestBytes)) // as OTLP/HTTP: more than gRPC's 4 MiB default
		collectorpb.RegisterTraceServiceServer(r.grpc, traceService{r: r})
		r.serve("otlp grpc", lis, func() error { return r.grpc.Serve(lis) })
	}
	if lis := r.cfg.HTTPListener; lis != nil {
		r.http = &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 10 * time.Second}
		r.serve("otlp http", lis, func() error { return r.http.Serve(lis) })
	}
	return nil
}

func (r *Receiver) serve(what string, lis net.Listener, serve func() error) {
	r.log.Info("receiving traces", "protocol", what, "addr", lis.Addr().String())
	r.serving.Add(1)
	go func() {
		defer r.serving.Done()
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
			r.log.Error("serving traces stopped", "protocol", what, "err", err)
		}
	}()
}

// Stop stops serving, then forwards what is queued (until ctx ends). Safe to call twice.
func (r *Receiver) Stop(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started || r.stopped {
		return nil
	}
	r.stopped = true
	var errs []error
	if r.http != nil {
		errs = append(errs, r.http.Shutdown(ctx))
	}
	if r.grpc != nil {
		stopped := make(chan struct{})
		go func() { r.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			r.grpc.Stop()
		}
	}
	r.serving.Wait()
	if r.forward != nil {
		errs = append(errs, r.forward.stop(ctx))
	}
	return errors.Join(errs...)
}

// Store is where the received spans are kept.
func (r *Receiver) Store() *Store { return r.store }

// Report analyses every stored trace.
func (r *Receiver) Report() *Report {
	return Analyze(r.store.Traces(), Options{Slowest: r.cfg.Slowest})
}

// ForwardStats counts the requests forwarded and dropped so far (zero without ForwardURL).
func (r *Receiver) ForwardStats() (forwarded, dropped, failed int64) {
	if r.forward == nil {
		return 0, 0, 0
	}
	return r.forward.stats()
}

// receive stores one export request and queues it for forwarding.
func (r *Receiver) receive(req *collectorpb.ExportTraceServiceRequest) {
	r.store.Add(req.GetResourceSpans())
	if r.forward != nil {
		r.forward.enqueue(req)
	}
}

// traceService is the OTLP/gRPC TraceService.
type traceService struct {
	collectorpb.UnimplementedTraceServiceServer
	r *Receiver
}

// Export stores the request's spans.
func (s traceService) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	s.r.receive(req)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}
