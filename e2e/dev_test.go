package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/cairn-kv/cairn/internal/eventbus"
	"github.com/cairn-kv/cairn/internal/testing/etcdreftest"
	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/internal/tlsconfig/certtest"
	"github.com/cairn-kv/cairn/internal/tools/supervisor"
)

// startDev runs `cairn dev` on free ports with its data in dir and waits until etcdctl reaches it.
func startDev(t *testing.T, etcdctl, dir string, ports []int) (endpoint string, stop func()) {
	return startDevWith(t, etcdctl, dir, ports, devTLS{})
}

// devTLS is how a `cairn dev` serves TLS: its flags and the flags etcdctl reaches it with (none: plain http).
type devTLS struct{ devArgs, etcdctlArgs []string }

// startDevWith is startDev serving https when tls has flags.
func startDevWith(t *testing.T, etcdctl, dir string, ports []int, tls devTLS) (endpoint string, stop func()) {
	t.Helper()
	endpoint, stop, _ = startDevLogged(t, etcdctl, dir, ports, tls)
	return endpoint, stop
}

// startDevLogged is startDevWith that also returns what cairn dev writes (its JSON log).
func startDevLogged(t *testing.T, etcdctl, dir string, ports []int, tls devTLS) (endpoint string, stop func(), logs *syncBuffer) {
	t.Helper()
	logs = &syncBuffer{}
	scheme := "http"
	if len(tls.devArgs) > 0 {
		scheme = "https"
	}
	endpoint = fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[0])
	cmd := exec.Command(cairnBinary, append([]string{"dev", "--data-dir", dir, "--listen-client-urls", endpoint,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		"--listen-metrics-urls", fmt.Sprintf("http://127.0.0.1:%d", ports[2])}, tls.devArgs...)...)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("cairn dev exited with %v after SIGTERM\n%s", err, tail(logs.String()))
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("cairn dev did not stop within 30s of SIGTERM")
		}
	}
	waittest.Until(t, time.Minute, 100*time.Millisecond, "cairn dev to answer endpoint health", func() bool {
		return runEtcdctl(t, etcdctl, []string{endpoint}, "", append(tls.etcdctlArgs, "endpoint", "health")...).ExitCode == 0
	})
	return endpoint, stop, logs
}

func tail(text string) string {
	if len(text) > 4000 {
		return text[len(text)-4000:]
	}
	return text
}

func TestDevKeepsDataAcrossRestarts(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	dir := t.TempDir()
	ports, err := supervisor.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	endpoint, stop := startDev(t, etcdctl, dir, ports)
	for _, kv := range [][2]string{{"dev/a", "1"}, {"dev/b", "2"}, {"dev/a", "3"}} {
		if res := runEtcdctl(t, etcdctl, []string{endpoint}, "", "put", kv[0], kv[1]); res.Stdout != "OK\n" {
			t.Fatalf("put %v: %+v", kv, res)
		}
	}
	before := runEtcdctl(t, etcdctl, []string{endpoint}, "", "get", "--prefix", "dev/", "-w", "json")
	stop()

	endpoint, stop = startDev(t, etcdctl, dir, ports)
	defer stop()
	after := runEtcdctl(t, etcdctl, []string{endpoint}, "", "get", "--prefix", "dev/", "-w", "json")
	step := etcdctlStep{args: []string{"get"}}
	if normalize(step, after.Stdout) != normalize(step, before.Stdout) || !bytes.Contains([]byte(after.Stdout), []byte(`"count":2`)) {
		t.Fatalf("after a restart of cairn dev:\n%s\nbefore:\n%s", after.Stdout, before.Stdout)
	}
	if res := runEtcdctl(t, etcdctl, []string{endpoint}, "", "get", "dev/a", "--rev", "2", "--print-value-only"); res.Stdout != "1\n" {
		t.Errorf("time travel after restart: %+v", res)
	}
}

// TestDevTLSWithEtcdctl: `cairn dev` on an https client URL with --client-cert-auth serves the real etcdctl
// that presents a certificate the trusted CA signed, and refuses one that presents none.
func TestDevTLSWithEtcdctl(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	certs := certtest.Write(t)
	ports, err := supervisor.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	withCert := []string{"--cacert", certs.CA, "--cert", certs.ClientCert, "--key", certs.ClientKey}
	endpoint, stop := startDevWith(t, etcdctl, t.TempDir(), ports, devTLS{
		devArgs: []string{"--cert-file", certs.ServerCert, "--key-file", certs.ServerKey,
			"--trusted-ca-file", certs.CA, "--client-cert-auth"},
		etcdctlArgs: withCert,
	})
	defer stop()
	if res := runEtcdctl(t, etcdctl, []string{endpoint}, "", append(withCert, "put", "tls/a", "1")...); res.Stdout != "OK\n" {
		t.Fatalf("put over TLS: %+v", res)
	}
	if res := runEtcdctl(t, etcdctl, []string{endpoint}, "", append(withCert, "get", "tls/", "--prefix", "--print-value-only")...); res.Stdout != "1\n" {
		t.Fatalf("get over TLS: %+v", res)
	}
	noCert := []string{"--cacert", certs.CA, "--dial-timeout", "2s", "--command-timeout", "3s", "get", "tls/a"}
	if res := runEtcdctl(t, etcdctl, []string{endpoint}, "", noCert...); res.ExitCode == 0 {
		t.Fatalf("etcdctl without a client certificate was answered: %+v", res)
	}
}

// TestDevWithTLSFlag: `cairn dev --tls` creates its CA and certificates in the data dir, serves etcdctl with
// the flags it prints, keeps the same CA across a restart, and a data dir first run plain refuses --tls.
func TestDevWithTLSFlag(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	dir := t.TempDir()
	ports, err := supervisor.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	pki := filepath.Join(dir, "pki")
	flags := []string{"--cacert", filepath.Join(pki, "ca.pem"), "--cert", filepath.Join(pki, "client.pem"), "--key", filepath.Join(pki, "client-key.pem")}
	endpoint, stop := startDevWith(t, etcdctl, dir, ports, devTLS{devArgs: []string{"--tls"}, etcdctlArgs: flags})
	if res := runEtcdctl(t, etcdctl, []string{endpoint}, "", append(flags, "put", "tls/a", "1")...); res.Stdout != "OK\n" {
		t.Fatalf("put: %+v", res)
	}
	ca, err := os.ReadFile(filepath.Join(pki, "ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	stop()
	endpoint, stop = startDevWith(t, etcdctl, dir, ports, devTLS{devArgs: []string{"--tls"}, etcdctlArgs: flags})
	defer stop()
	if res := runEtcdctl(t, etcdctl, []string{endpoint}, "", append(flags, "get", "tls/a", "--print-value-only")...); res.Stdout != "1\n" {
		t.Fatalf("get after a restart: %+v", res)
	}
	if again, _ := os.ReadFile(filepath.Join(pki, "ca.pem")); !bytes.Equal(again, ca) {
		t.Error("the CA changed across a restart")
	}

	plain := t.TempDir()
	plainPorts, err := supervisor.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	_, stopPlain := startDev(t, etcdctl, plain, plainPorts)
	stopPlain()
	out, err := exec.Command(cairnBinary, "dev", "--tls", "--data-dir", plain,
		"--listen-client-urls", fmt.Sprintf("https://127.0.0.1:%d", plainPorts[0]),
		"--listen-metrics-urls", fmt.Sprintf("http://127.0.0.1:%d", plainPorts[2])).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "new --data-dir") {
		t.Fatalf("cairn dev --tls on a plain data dir: %v\n%s", err, out)
	}
}

// TestDevWithOwnCertificates: `cairn dev` with the operator's certificates (--internal-* for every link
// between its components, etcd's client flags for the client port) runs every link on them; the bus is TLS
// and the components prove their roles on it with the nkeys dev keeps in DATA-DIR/nats, so a watcher gets
// its events.
func TestDevWithOwnCertificates(t *testing.T) {
	etcdctl := etcdreftest.Etcdctl(t)
	ca, err := tlsconfig.LoadOrCreateCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Issue(tlsconfig.Identity{Name: "dev", Hosts: []string{"127.0.0.1", "localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(tlsconfig.Identity{Name: "client", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	ports, err := supervisor.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	endpoint, stop := startDevWith(t, etcdctl, dir, ports, devTLS{
		devArgs: []string{"--cert-file", server.CertFile, "--key-file", server.KeyFile,
			"--trusted-ca-file", server.TrustedCAFile, "--client-cert-auth",
			"--internal-cert-file", server.CertFile, "--internal-key-file", server.KeyFile,
			"--internal-trusted-ca-file", server.TrustedCAFile},
		etcdctlArgs: []string{"--cacert", client.TrustedCAFile, "--cert", client.CertFile, "--key", client.KeyFile},
	})
	defer stop()
	for _, role := range eventbus.Roles() {
		if _, err := os.Stat(eventbus.SeedFile(filepath.Join(dir, "nats"), role)); err != nil {
			t.Errorf("%s's nkey seed: %v", role, err)
		}
	}
	tlsConfig, err := client.ClientConfig(tlsconfig.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	c := newClientTLS(t, []string{endpoint}, tlsConfig)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	events := c.Watch(ctx, "own/", clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	// The put waits for the created response: one applied before the hub creates the watch is not its event.
	if resp := <-events; !resp.Created || resp.Canceled {
		t.Fatalf("watch on own/: %+v (err %v), want created", resp, resp.Err())
	}
	if _, err := c.Put(ctx, "own/a", "1"); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-events:
		if len(resp.Events) != 1 || string(resp.Events[0].Kv.Key) != "own/a" {
			t.Fatalf("watch got %+v (err %v), want the put of own/a", resp.Events, resp.Err())
		}
	case <-ctx.Done():
		t.Fatal("no watch event: the watchhub does not follow the bus")
	}
}
