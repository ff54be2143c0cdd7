package tlsconfig_test

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/internal/tlsconfig/certtest"
)

// TestLinkRefusesWhoIsNotTrusted serves a Link's listener and dials it as each kind of client: only the one
// with a certificate the CA signed (and, with allowed CNs, one of those) gets through, every refusal is counted,
// and a refused client reads nothing the server wrote.
func TestLinkRefusesWhoIsNotTrusted(t *testing.T) {
	certs := certtest.Write(t)
	own := tlsconfig.Files{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, TrustedCAFile: certs.CA}
	for _, tc := range []struct {
		name     string
		kind     string
		server   tlsconfig.Files
		dial     func(t *testing.T, addr string) (net.Conn, error)
		accepted bool
	}{
		{"own certificate", tlsconfig.KindInternal, own, tlsDial(certs, certs.ServerCert, certs.ServerKey), true},
		{"client certificate of the CA", tlsconfig.KindInternal, own, tlsDial(certs, certs.ClientCert, certs.ClientKey), true},
		{"no certificate", tlsconfig.KindInternal, own, tlsDial(certs, "", ""), false},
		{"certificate of another CA", tlsconfig.KindInternal, own, tlsDial(certs, certs.UntrustedClientCert, certs.UntrustedKey), false},
		{"plain text", tlsconfig.KindInternal, own, plainDial, false},
		{"peer CN allowed", tlsconfig.KindPeer, withCNs(own, "cairn"), tlsDial(certs, certs.ServerCert, certs.ServerKey), true},
		{"peer CN not allowed", tlsconfig.KindPeer, withCNs(own, "cairn"), tlsDial(certs, certs.ClientCert, certs.ClientKey), false},
		{"peer hostname not allowed", tlsconfig.KindPeer, withHostnames(own, "10.9.9.9"), tlsDial(certs, certs.ClientCert, certs.ClientKey), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			link, err := tlsconfig.NewLink(tc.kind, tc.server, tlsconfig.Policy{}, tlsconfig.Deps{Registry: reg})
			if err != nil {
				t.Fatal(err)
			}
			raw, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			lis := link.Listener(raw, "test")
			defer lis.Close()
			served := make(chan error, 1)
			go func() {
				conn, err := lis.Accept()
				if err != nil {
					served <- err
					return
				}
				defer conn.Close()
				_, err = conn.Write([]byte("cluster data"))
				served <- err
			}()
			conn, err := tc.dial(t, lis.Addr().String())
			var got []byte
			if err == nil {
				_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
				got, _ = io.ReadAll(io.LimitReader(conn, 12))
				conn.Close()
			}
			serveErr := <-served
			failures := failures(t, reg, tc.kind, "server")
			if tc.accepted {
				if serveErr != nil || !bytes.Equal(got, []byte("cluster data")) || failures != 0 {
					t.Fatalf("accepted client: server error %v, read %q, %v failures counted", serveErr, got, failures)
				}
				return
			}
			if serveErr == nil || bytes.Contains(got, []byte("cluster")) || failures != 1 {
				t.Fatalf("refused client: server error %v, read %q, %v failures counted (want 1)", serveErr, got, failures)
			}
		})
	}
}

// TestLinkDialRefusesAnotherCA dials a server whose certificate another CA signed: the client refuses it.
func TestLinkDialRefusesAnotherCA(t *testing.T) {
	certs, others := certtest.Write(t), certtest.Write(t)
	reg := prometheus.NewRegistry()
	link, err := tlsconfig.NewLink(tlsconfig.KindInternal, tlsconfig.Files{CertFile: certs.ServerCert, KeyFile: certs.ServerKey,
		TrustedCAFile: certs.CA}, tlsconfig.Policy{}, tlsconfig.Deps{Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	impostor, err := tlsconfig.NewLink(tlsconfig.KindInternal, tlsconfig.Files{CertFile: others.ServerCert, KeyFile: others.ServerKey,
		TrustedCAFile: certs.CA}, tlsconfig.Policy{}, tlsconfig.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := impostor.Listener(raw, "impostor")
	defer lis.Close()
	go func() {
		if conn, err := lis.Accept(); err == nil {
			_, _ = conn.Read(make([]byte, 1))
			conn.Close()
		}
	}()
	nc, err := net.Dial("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := link.Client(nc, lis.Addr().String()); err == nil {
		t.Fatal("a server with another CA's certificate was trusted")
	}
	if n := failures(t, reg, tlsconfig.KindInternal, "client"); n != 1 {
		t.Fatalf("%v client-side failures counted, want 1", n)
	}
}

func TestPolicy(t *testing.T) {
	for _, tc := range []struct {
		policy tlsconfig.Policy
		ok     bool
	}{
		{tlsconfig.Policy{}, true},
		{tlsconfig.Policy{MinVersion: "TLS1.2", MaxVersion: "TLS1.3"}, true},
		{tlsconfig.Policy{MinVersion: "TLS1.3", MaxVersion: "TLS1.2"}, false},
		{tlsconfig.Policy{MinVersion: "TLS1.1"}, false},
		{tlsconfig.Policy{CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}}, true},
		{tlsconfig.Policy{CipherSuites: []string{"TLS_NOPE"}}, false},
		{tlsconfig.Policy{MinVersion: "TLS1.3", CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}}, false},
	} {
		if err := tc.policy.Validate(); (err == nil) != tc.ok {
			t.Errorf("%+v: Validate = %v, want ok %v", tc.policy, err, tc.ok)
		}
	}
}

func TestInternalLinkNeedsCA(t *testing.T) {
	certs := certtest.Write(t)
	_, err := tlsconfig.NewLink(tlsconfig.KindInternal, tlsconfig.Files{CertFile: certs.ServerCert, KeyFile: certs.ServerKey,
		FlagPrefix: tlsconfig.InternalFlags}, tlsconfig.Policy{}, tlsconfig.Deps{})
	if err == nil {
		t.Fatal("an internal link without --internal-trusted-ca-file was accepted")
	}
	if link, err := tlsconfig.NewLink(tlsconfig.KindInternal, tlsconfig.Files{}, tlsconfig.Policy{}, tlsconfig.Deps{}); link != nil || err != nil {
		t.Fatalf("no certificate: link %v, error %v; want a plain (nil) link", link, err)
	}
}

func withCNs(f tlsconfig.Files, cns ...string) tlsconfig.Files { f.AllowedCNs = cns; return f }

func withHostnames(f tlsconfig.Files, hosts ...string) tlsconfig.Files {
	f.AllowedHostnames = hosts
	return f
}

// failures is cairn_tls_handshake_failures_total{link=kind,side=side} on reg (0 when not yet counted).
func failures(t *testing.T, reg *prometheus.Registry, kind, side string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if f.GetName() == "cairn_tls_handshake_failures_total" && labels["link"] == kind && labels["side"] == side {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

func tlsDial(certs certtest.Files, certFile, keyFile string) func(t *testing.T, addr string) (net.Conn, error) {
	return func(t *testing.T, addr string) (net.Conn, error) {
		cfg := certs.ClientTLS(t, certFile, keyFile)
		cfg.ServerName = "127.0.0.1"
		return tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	}
}

func plainDial(_ *testing.T, addr string) (net.Conn, error) {
	conn, err := net.Dial("tcp", addr)
	if err == nil {
		_, err = conn.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	}
	return conn, err
}
