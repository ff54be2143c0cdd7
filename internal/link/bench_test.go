package link

import (
	"context"
	"sync"
	"testing"

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
