package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/internal/tools/localstack"
)

// TestClusterTLS runs `cairn up --tls`: every link refuses who has no valid certificate, etcdctl prints what
// etcd prints, watches and leases work over the locked-down bus, every certificate is replaced under a write
// loop without a restart or a lost write, and the kill -9 tests pass.
func TestClusterTLS(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	s := startUp(t, t.TempDir(), "--tls")
	if !strings.Contains(s.outputText(), "--cacert "+s.clientTLS.TrustedCAFile) || !strings.HasPrefix(s.endpoints[0], "https://") {
		t.Fatalf("cairn up --tls printed no etcdctl flags or no https endpoint:\n%s", s.outputText())
	}
	t.Run("every link refuses a client without a valid certificate", func(t *testing.T) { testLinksRefuseStrangers(t, s) })
	t.Run("etcdctl prints what etcd prints", func(t *testing.T) {
		checkKVScript(t, etcdctl, etcdreftest.StartCluster(t, 1).Endpoints()[:1], s)
	})
	t.Run("watch and lease over the locked-down bus", func(t *testing.T) { testWatchAndLeaseTLS(t, s) })
	t.Run("certificate rotation under load", func(t *testing.T) { testRotationUnderLoad(t, s) })
	t.Run("crashes during writes", func(t *testing.T) { testCrashesDuringWrites(t, s, etcdctl) })
}

// testLinksRefuseStrangers goes over every port of every process of the stack and dials it as a client with
// the cluster's certificate, without one, with one of another CA, and in plain text: only the first gets a
// connection the server keeps (the client port, not mutual, takes any TLS client), and each refusal is counted
// by the refusing process.
func testLinksRefuseStrangers(t *testing.T, s *upStack) {
	valid := clientTLSConfig(t, s.clientTLS)
	other, err := tlsconfig.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	foreignFiles, err := other.Issue(tlsconfig.Identity{Name: "stranger", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	foreign := clientTLSConfig(t, foreignFiles)
	foreign.RootCAs = valid.RootCAs // it trusts the cluster; the cluster must not trust it
	anonymous := valid.Clone()
	anonymous.GetClientCertificate = nil
	clients := []struct {
		name  string
		tls   *tls.Config // nil: plain text
		valid bool
	}{
		{"the cluster's certificate", valid, true},
		{"no certificate", anonymous, false},
		{"a certificate of another CA", foreign, false},
		{"plain text", nil, false},
	}
	type link struct{ child, port, kind string }
	var links []link
	for _, child := range s.stack(t).Children {
		kind, _, _ := strings.Cut(child.Name, "-")
		switch kind {
		case "consensus":
			links = append(links, link{child.Name, "peer", tlsconfig.KindPeer}, link{child.Name, "api", tlsconfig.KindInternal})
		case "storage", "leasekeeper", "watchhub":
			links = append(links, link{child.Name, "api", tlsconfig.KindInternal})
		case "frontend":
			links = append(links, link{child.Name, "client", "client"})
		}
	}
	for _, l := range links {
		t.Run(l.child+" "+l.port, func(t *testing.T) {
			addr := fmt.Sprintf("127.0.0.1:%d", s.child(t, l.child).Ports[l.port])
			series := fmt.Sprintf(`cairn_tls_handshake_failures_total{link=%q,side="server"}`, l.kind)
			before, _ := s.metric(t, l.child, series)
			refused := 0
			for _, c := range clients {
				accepted, detail := probe(addr, c.tls)
				want := c.valid || (l.kind == "client" && c.tls != nil) // the client port asks for no certificate
				if accepted != want {
					t.Errorf("%s: accepted %v (%s), want %v", c.name, accepted, detail, want)
				}
				if !accepted {
					refused++
				}
			}
			if l.kind == "client" {
				return
			}
			waittest.Until(t, 5*time.Second, 20*time.Millisecond, fmt.Sprintf("%d refusals counted by %s", refused, l.child), func() bool {
				now, _ := s.metric(t, l.child, series)
				return now-before == float64(refused)
			})
		})
	}
	t.Run("nats", func(t *testing.T) {
		url := fmt.Sprintf("nats://127.0.0.1:%d", s.child(t, "nats").Ports["client"])
		storage := clientTLSConfig(t, tlsFiles(s, "storage-1"))
		for _, c := range []struct {
			name  string
			tls   *tls.Config
			valid bool
		}{
			{"a storage's certificate", storage, true},
			{"a certificate of the CA naming no role", valid, false},
			{"a certificate of another CA", foreign, false},
			{"no certificate", anonymous, false},
			{"plain text", nil, false},
		} {
			opts := []nats.Option{nats.MaxReconnects(0), nats.Timeout(3 * time.Second)}
			if c.tls != nil {
				opts = append(opts, nats.Secure(c.tls))
			}
			nc, err := nats.Connect(url, opts...)
			if (err == nil) != c.valid {
				t.Errorf("%s: connect error %v, want accepted %v", c.name, err, c.valid)
			}
			if err == nil {
				nc.Close()
			}
		}
	})
}

// probe dials addr (with TLS when cfg is set, else sending an HTTP/2 preface in plain text) and reports
// whether the server kept the connection: it reads whatever the server sends until the server ends the
// connection (refused) or a second passes with the connection open (accepted).
func probe(addr string, cfg *tls.Config) (accepted bool, detail string) {
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return false, err.Error()
	}
	defer nc.Close()
	conn := nc
	if cfg == nil {
		if _, err := nc.Write([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")); err != nil {
			return false, err.Error()
		}
	} else {
		cfg = cfg.Clone()
		cfg.ServerName = "127.0.0.1"
		tc := tls.Client(nc, cfg)
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			return false, "handshake: " + err.Error()
		}
		conn = tc
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 4096)
	for {
		if _, err := conn.Read(buf); err != nil {
			var netErr net.Error
			if errors.As(err, &netErr) && netErr.Timeout() {
				return true, "open"
			}
			return false, err.Error()
		}
	}
}

func clientTLSConfig(t *testing.T, files tlsconfig.Files) *tls.Config {
	t.Helper()
	cfg, err := files.ClientConfig(tlsconfig.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// tlsFiles are a child's certificate files in a TLS stack.
func tlsFiles(s *upStack, child string) tlsconfig.Files {
	pki := filepath.Join(s.dir, "pki")
	return tlsconfig.Files{CertFile: filepath.Join(pki, child+".pem"), KeyFile: filepath.Join(pki, child+"-key.pem"),
		TrustedCAFile: tlsconfig.CAFile(pki)}
}

// testWatchAndLeaseTLS: a watcher sees a put (the hubs follow the store on the locked-down bus), and a lease
// granted with a short TTL expires (the keepers learn leases from it).
func testWatchAndLeaseTLS(t *testing.T, s *upStack) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.client(t)
	events := c.Watch(ctx, "tls/watched", clientv3.WithCreatedNotify())
	// The put waits for the created response: one applied before the hub creates the watch is not its event.
	if resp := <-events; !resp.Created || resp.Canceled {
		t.Fatalf("watch on tls/watched: %+v (err %v), want created", resp, resp.Err())
	}
	if _, err := c.Put(ctx, "tls/watched", "v1"); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-events:
		if len(resp.Events) != 1 || string(resp.Events[0].Kv.Value) != "v1" {
			t.Fatalf("watch response %+v", resp)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
	lease, err := c.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "tls/leased", "v", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	waittest.Until(t, 20*time.Second, 100*time.Millisecond, "the leased key gone after its TTL", func() bool {
		resp, err := c.Get(ctx, "tls/leased")
		return err == nil && resp.Count == 0
	})
}

// testRotationUnderLoad replaces every certificate of the stack (and the client's) while writes go on, then
// checks that new connections to every link present the new certificates, no process restarted and every
// acknowledged write reads back.
func testRotationUnderLoad(t *testing.T, s *upStack) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := s.client(t)
	before := s.stack(t)
	acked := &ackedWrites{values: map[string]string{}}
	stop := make(chan struct{})
	writers := writeLoop(c, "rotate/", 8, 20000, stop, acked)
	stopWriters := sync.OnceFunc(func() { close(stop); writers.Wait() })
	defer stopWriters()
	waittest.Until(t, time.Minute, 100*time.Millisecond, "300 acknowledged writes before the rotation", func() bool {
		return acked.count.Load() >= 300
	})
	ca, err := tlsconfig.LoadOrCreateCA(filepath.Join(s.dir, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	serials := map[string]string{}
	names := []string{localstack.ClientCertName}
	for _, child := range before.Children {
		names = append(names, child.Name)
	}
	for _, name := range names {
		files, err := ca.Reissue(localstack.CertIdentity("127.0.0.1", name))
		if err != nil {
			t.Fatal(err)
		}
		serials[name] = serialOf(t, files.CertFile)
	}
	atRotation := acked.count.Load()
	waittest.Until(t, time.Minute, 100*time.Millisecond, "300 more acknowledged writes after the rotation", func() bool {
		return acked.count.Load() >= atRotation+300
	})
	// New connections (a new client, new links) run on the new certificates.
	c2 := s.client(t)
	if _, err := c2.Put(ctx, "rotate/after", "v"); err != nil {
		t.Fatalf("a put on a new client after the rotation: %v", err)
	}
	valid := clientTLSConfig(t, s.clientTLS)
	for _, child := range before.Children {
		for port, number := range child.Ports {
			if port == "metrics" || child.Name == "nats" {
				continue
			}
			cfg := valid.Clone()
			cfg.ServerName = "127.0.0.1"
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", fmt.Sprintf("127.0.0.1:%d", number), cfg)
			if err != nil {
				t.Errorf("%s %s after the rotation: %v", child.Name, port, err)
				continue
			}
			got := conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
			conn.Close()
			if got != serials[child.Name] {
				t.Errorf("%s %s presents certificate %s, not the new %s", child.Name, port, got, serials[child.Name])
			}
		}
	}
	stopWriters()
	checkAcknowledged(t, ctx, c, "rotate/", acked)
	for _, child := range before.Children {
		if now := s.child(t, child.Name); now.Restarts != child.Restarts || now.PID != child.PID {
			t.Errorf("%s restarted during the rotation: %+v", child.Name, now)
		}
	}
	t.Logf("%d writes acknowledged, %d failed, across the rotation of %d certificates", acked.count.Load(), acked.failed.Load(), len(names))
}

func serialOf(t *testing.T, certFile string) string {
	t.Helper()
	raw, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		t.Fatalf("%s holds no PEM block", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber.String()
}
