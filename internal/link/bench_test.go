package link

import (
	"context"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/internal/tlsconfig/certtest"
)

// BenchmarkCall measures a unary round trip on loopback: a 64-byte body echoed by the server, answered on its
// receiving goroutine (echo) or on a worker (worker), with 1 caller and with 256 concurrent callers sharing
// the client, in plain text and over mutual TLS. go test -bench Call -benchmem -benchtime 20000x ./internal/link/
func BenchmarkCall(b *testing.B) {
	certs := certtest.Write(b)
	secure, err := tlsconfig.NewLink(tlsconfig.KindInternal, tlsconfig.Files{CertFile: certs.ServerCert,
		KeyFile: certs.ServerKey, TrustedCAFile: certs.CA}, tlsconfig.Policy{}, tlsconfig.Deps{})
	if err != nil {
		b.Fatal(err)
	}
	for _, transport := range []struct {
		name string
		link *tlsconfig.Link
	}{{"plain", nil}, {"tls", secure}} {
		b.Run(transport.name, func(b *testing.B) { benchmarkCall(b, transport.link) })
	}
}

func benchmarkCall(b *testing.B, secure *tlsconfig.Link) {
	for _, bench := range []struct {
		name    string
		method  uint64
		callers int
	}{
		{"echo/callers=1", methodEcho, 1},
		{"echo/callers=256", methodEcho, 256},
		{"worker/callers=1", methodWorker, 1},
		{"worker/callers=256", methodWorker, 256},
	} {
		b.Run(bench.name, func(b *testing.B) {
			ts := startBenchServer(b, secure)
			c := NewClient(ClientConfig{Addr: ts, Preamble: testPreamble, Lanes: 2, Name: "bench", TLS: secure})
			defer c.Close()
			body := make([]byte, 64)
			if _, err := c.Call(context.Background(), bench.method, body); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			per := b.N / bench.callers
			for i := range bench.callers {
				n := per
				if i == 0 {
					n += b.N % bench.callers
				}
				wg.Go(func() {
					for range n {
						if _, err := c.Call(context.Background(), bench.method, body); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// BenchmarkCallTraced measures what a client's Telemetry adds to a call that is not sampled (the context carries
// a span context that is not sampled, as under a frontend at a low ratio): off has no Telemetry, unsampled one
// that records spans. The difference should be a few ns and no allocation.
//
//	go test -run '^$' -bench CallTraced -benchmem -benchtime 20000x ./internal/link/
func BenchmarkCallTraced(b *testing.B) {
	sampler, err := obs.NewSampler(0)
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	unsampled := trace.ContextWithSpanContext(context.Background(),
		trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}}))
	for _, tc := range []struct {
		name string
		tel  *obs.Telemetry
	}{
		{"off", nil},
		{"unsampled", &obs.Telemetry{Tracers: tp, Propagator: propagation.TraceContext{}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ts := startBenchServer(b, nil)
			c := NewClient(ClientConfig{Addr: ts, Preamble: testPreamble, Lanes: 2, Name: "bench", Telemetry: tc.tel})
			defer c.Close()
			body := make([]byte, 64)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Call(unsampled, methodEcho, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkGo compares a call whose caller waits (Call) with one answered to a function (Go), 256 in flight, on
// a worker as a propose is: Go needs no goroutine per call in flight, so no stack.
//
//	go test -run '^$' -bench 'BenchmarkGo$' -benchmem -benchtime 20000x ./internal/link/
func BenchmarkGo(b *testing.B) {
	const inflight = 256
	for _, mode := range []string{"call", "go"} {
		b.Run(mode, func(b *testing.B) {
			ts := startBenchServer(b, nil)
			c := NewClient(ClientConfig{Addr: ts, Preamble: testPreamble, Lanes: 1, Name: "bench"})
			defer c.Close()
			body := make([]byte, 64)
			window := make(chan struct{}, inflight)
			var wg sync.WaitGroup
			b.ReportAllocs()
			for b.Loop() {
				window <- struct{}{}
				wg.Add(1)
				done := func(_ []byte, err error) {
					if err != nil {
						b.Error(err)
					}
					<-window
					wg.Done()
				}
				if mode == "go" {
					c.Go(context.Background(), methodWorker, body, done)
					continue
				}
				go func() { done(c.Call(context.Background(), methodWorker, body)) }()
			}
			wg.Wait()
		})
	}
}
