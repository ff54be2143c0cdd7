package frontend_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tlsconfig/certtest"
	"github.com/cairn-kv/cairn/services/frontend"
)

// TestClientTLS: an https client URL serves the etcd API (gRPC and the JSON gateway) over TLS; with
// --client-cert-auth only clients with a certificate the trusted CA signed get an answer.
func TestClientTLS(t *testing.T) {
	certs := certtest.Write(t)
	c := clustertest.Start(t, clustertest.Options{Members: 1, ConfigureFrontend: clustertest.ServeHTTPS(certs),
		ClientTLS: certs.ClientTLS(t, certs.ClientCert, certs.ClientKey)})
	fe := c.Frontends()[0]
	if urls := fe.Frontend().ClientURLs(); len(urls) != 1 || !strings.HasPrefix(urls[0], "https://") {
		t.Fatalf("client URLs %v, want one https URL", urls)
	}
	endpoint := strings.TrimPrefix(fe.URL, "http://")
	for _, tc := range []struct {
		name              string
		certFile, keyFile string
		wantOK            bool
	}{
		{"a certificate the CA signed", certs.ClientCert, certs.ClientKey, true},
		{"no certificate", "", "", false},
		{"a certificate the CA did not sign", certs.UntrustedClientCert, certs.UntrustedKey, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second,
				TLS: certs.ClientTLS(t, tc.certFile, tc.keyFile), Logger: zap.NewNop()})
			if err == nil {
				defer cli.Close()
				// A refused certificate fails the put, by its deadline at the latest; an accepted one goes
				// through raft and an fsync, which can take seconds on a loaded machine.
				limit := 3 * time.Second
				if tc.wantOK {
					limit = 30 * time.Second
				}
				ctx, cancel := context.WithTimeout(context.Background(), limit)
				defer cancel()
				_, err = cli.Put(ctx, "tls/"+tc.name, "v")
			}
			if (err == nil) != tc.wantOK {
				t.Fatalf("put over TLS: %v, want success %v", err, tc.wantOK)
			}

			// curl offers HTTP/2 and HTTP/1.1 to an https URL, older clients HTTP/1.1 alone: both get HTTP/1.1,
			// as the port keeps HTTP/2 for gRPC (serveTLS).
			for _, h2 := range []bool{true, false} {
				hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{ForceAttemptHTTP2: h2,
					TLSClientConfig: certs.ClientTLS(t, tc.certFile, tc.keyFile)}}
				resp, err := hc.Post("https://"+endpoint+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"dGxzLw==","range_end":"dGxzMA=="}`))
				if !tc.wantOK {
					if err == nil {
						resp.Body.Close()
						t.Fatalf("gateway over TLS answered %s without a trusted certificate", resp.Status)
					}
					continue
				}
				if err != nil {
					t.Fatalf("gateway over TLS (HTTP/2 %v): %v", h2, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"count":"1"`) || resp.ProtoMajor != 1 {
					t.Fatalf("gateway over TLS (HTTP/2 %v): %s %s %s", h2, resp.Proto, resp.Status, body)
				}
			}
		})
	}
}

// TestClientTLSRefusalsCounted: a plain-text client, a TLS client without a certificate and one with a
// certificate of another CA are refused by a --client-cert-auth client port (the plain-text one told so by a
// 400, as etcd tells it), and each refusal is counted in
// cairn_tls_handshake_failures_total{link="client",side="server"}.
func TestClientTLSRefusalsCounted(t *testing.T) {
	certs := certtest.Write(t)
	trusted := certs.ClientTLS(t, certs.ClientCert, certs.ClientKey)
	c := clustertest.Start(t, clustertest.Options{Members: 1, ConfigureFrontend: clustertest.ServeHTTPS(certs),
		ClientTLS: trusted})
	addr := strings.TrimPrefix(c.Frontends()[0].URL, "http://")
	metrics := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: trusted}}
	refusals := func() float64 {
		resp, err := metrics.Get("https://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(body), "\n") {
			if value, ok := strings.CutPrefix(line, `cairn_tls_handshake_failures_total{link="client",side="server"} `); ok {
				v, err := strconv.ParseFloat(value, 64)
				if err != nil {
					t.Fatal(err)
				}
				return v
			}
		}
		return 0
	}
	before := refusals()
	strangers := map[string]*tls.Config{
		"plain text":                  nil,
		"no certificate":              certs.ClientTLS(t, "", ""),
		"a certificate of another CA": certs.ClientTLS(t, certs.UntrustedClientCert, certs.UntrustedKey),
	}
	for name, cfg := range strangers {
		nc, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		conn := nc
		if cfg != nil {
			conn = tls.Client(nc, cfg)
		}
		_ = conn.SetDeadline(time.Now().Add(3 * time.Second))
		_, _ = io.WriteString(conn, "GET /health HTTP/1.1\r\nHost: cairn\r\n\r\n")
		reply, _ := io.ReadAll(conn)
		conn.Close()
		if strings.Contains(string(reply), `"health"`) {
			t.Errorf("%s: the client port answered %q", name, reply)
		}
		if cfg == nil && !strings.Contains(string(reply), "400 Bad Request") { // as net/http, and so etcd, answer
			t.Errorf("plain text: answered %q, want a 400 saying the port speaks HTTPS", reply)
		}
	}
	waittest.Until(t, 5*time.Second, 20*time.Millisecond, "every refusal counted", func() bool {
		return refusals()-before == float64(len(strangers))
	})
}

// TestHTTPSURLNeedsCertificate: an https client URL without --cert-file and --key-file is refused with etcd's error.
func TestHTTPSURLNeedsCertificate(t *testing.T) {
	cfg := frontend.DefaultConfig()
	cfg.ListenClientURLs = []string{"https://127.0.0.1:2379"}
	cfg.ConsensusEndpoints = []string{"http://127.0.0.1:2380"}
	err := cfg.Validate()
	want := "TLS key/cert (--cert-file, --key-file) must be provided for client url https://127.0.0.1:2379 with HTTPS scheme"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Validate: %v, want %q", err, want)
	}
	cfg.TLS.CertFile, cfg.TLS.KeyFile = "cert.pem", "key.pem"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate with a certificate: %v", err)
	}
}
