package traceview

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
)

// forwardTimeout bounds one forwarded request.
const forwardTimeout = 10 * time.Second

// forwardMaxBackoff bounds the wait between two dials of an OTLP/gRPC downstream that is not there.
const forwardMaxBackoff = 2 * time.Second

// forwardTarget is a parsed Config.ForwardURL.
type forwardTarget struct {
	grpc bool
	tls  bool
	addr string // grpc: host:port
	url  string // http: the full POST URL
}

func parseForwardURL(raw string) (forwardTarget, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return forwardTarget{}, fmt.Errorf("traceview: forward URL %q: want grpc://host:port or http://host:port[/v1/traces]", raw)
	}
	switch u.Scheme {
	case "grpc", "grpcs":
		return forwardTarget{grpc: true, tls: u.Scheme == "grpcs", addr: u.Host}, nil
	case "http", "https":
		if u.Path == "" || u.Path == "/" {
			u.Path = "/v1/traces"
		}
		return forwardTarget{url: u.String()}, nil
	default:
		return forwardTarget{}, fmt.Errorf("traceview: forward URL %q: scheme must be grpc, grpcs, http or https", raw)
	}
}

// forwarder sends export requests on to another OTLP endpoint from a bounded queue, in order, one at a time.
type forwarder struct {
	target forwardTarget
	log    *slog.Logger
	queue  chan *collectorpb.ExportTraceServiceRequest

	conn   *grpc.ClientConn
	client collectorpb.TraceServiceClient
	http   *http.Client

	mu                        sync.Mutex
	closed                    bool
	forwarded, dropped, fails int64
	cancel                    context.CancelFunc
	done                      chan struct{}
}

func newForwarder(target forwardTarget, queue int, log *slog.Logger) *forwarder {
	if queue <= 0 {
		queue = 1024
	}
	return &forwarder{target: target, log: log, queue: make(chan *collectorpb.ExportTraceServiceRequest, queue), done: make(chan struct{})}
}

func (f *forwarder) start() error {
	if f.target.grpc {
		creds := insecure.NewCredentials()
		if f.target.tls {
			creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
		}
		// A downstream that was away (a Jaeger restarting, a `cairn bench --trace` between runs) is dialled
		// again within forwardMaxBackoff, not gRPC's default two minutes.
		backoffConfig := backoff.DefaultConfig
		backoffConfig.MaxDelay = forwardMaxBackoff
		conn, err := grpc.NewClient(f.target.addr, grpc.WithTransportCredentials(creds),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoffConfig, MinConnectTimeout: forwardTimeout}))
		if err != nil {
			return fmt.Errorf("traceview: forwarding to %s: %w", f.target.addr, err)
		}
		f.conn, f.client = conn, collectorpb.NewTraceServiceClient(conn)
	} else {
		f.http = &http.Client{Timeout: forwardTimeout}
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	go f.run(ctx)
	return nil
}

// enqueue queues req, or drops it when the queue is full or the forwarder stopped.
func (f *forwarder) enqueue(req *collectorpb.ExportTraceServiceRequest) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		f.dropped++
		return
	}
	select {
	case f.queue <- req:
	default:
		if f.dropped++; f.dropped == 1 || f.dropped%1000 == 0 {
			f.log.Warn("forward queue full: dropping trace exports", "dropped", f.dropped, "target", f.describe())
		}
	}
}

// run forwards until the queue is closed and drained, or ctx ends.
func (f *forwarder) run(ctx context.Context) {
	defer close(f.done)
	for req := range f.queue {
		err := f.send(ctx, req)
		f.mu.Lock()
		if err != nil {
			if f.fails++; f.fails == 1 || f.fails%100 == 0 {
				f.log.Warn("forwarding trace export failed", "target", f.describe(), "failures", f.fails, "err", err)
			}
		} else {
			f.forwarded++
		}
		f.mu.Unlock()
	}
}

func (f *forwarder) send(ctx context.Context, req *collectorpb.ExportTraceServiceRequest) error {
	ctx, cancel := context.WithTimeout(ctx, forwardTimeout)
	defer cancel()
	if f.client != nil {
		_, err := f.client.Export(ctx, req)
		return err
	}
	body, err := proto.Marshal(req)
	if err != nil {
		return err
	}
	post, err := http.NewRequestWithContext(ctx, http.MethodPost, f.target.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	post.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := f.http.Do(post)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", f.target.url, resp.Status)
	}
	return nil
}

// stop closes the queue and waits for what is queued to be forwarded, or for ctx to end.
func (f *forwarder) stop(ctx context.Context) error {
	if f.cancel == nil {
		return nil // never started
	}
	f.mu.Lock()
	if !f.closed {
		f.closed = true
		close(f.queue)
	}
	f.mu.Unlock()
	select {
	case <-f.done:
	case <-ctx.Done():
		f.cancel()
		<-f.done
	}
	f.cancel()
	if f.conn != nil {
		return f.conn.Close()
	}
	return nil
}

func (f *forwarder) stats() (forwarded, dropped, failed int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.forwarded, f.dropped, f.fails
}

func (f *forwarder) describe() string {
	if f.target.grpc {
		return "grpc://" + f.target.addr
	}
	return f.target.url
}
