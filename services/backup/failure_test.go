package backup

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/internal/tlsconfig/certtest"
)

// snapshotOf returns a whole snapshot of a one-member cluster holding n keys of size bytes each.
func snapshotOf(t *testing.T, n, size int) []byte {
	t.Helper()
	c := clustertest.Start(t, clustertest.Options{Members: 1})
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range n {
		if _, err := cli.Put(ctx, "/registry/k"+strings.Repeat("x", i%7)+string(rune('a'+i%26)), strings.Repeat("v", size)); err != nil {
			t.Fatal(err)
		}
	}
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// servedSnapshot is a Maintenance server on loopback that answers Status and streams a fixed snapshot.
type servedSnapshot struct {
	pb.UnimplementedMaintenanceServer
	data []byte
}

func (s servedSnapshot) Status(context.Context, *pb.StatusRequest) (*pb.StatusResponse, error) {
	return &pb.StatusResponse{Header: &pb.ResponseHeader{}, Version: "3.7.3"}, nil
}

func (s servedSnapshot) Snapshot(_ *pb.SnapshotRequest, stream pb.Maintenance_SnapshotServer) error {
	for rest := s.data; len(rest) > 0; {
		n := min(len(rest), 32<<10)
		if err := stream.Send(&pb.SnapshotResponse{Header: &pb.ResponseHeader{}, RemainingBytes: uint64(len(rest) - n), Blob: rest[:n]}); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return nil
}

func serveSnapshot(t *testing.T, data []byte) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterMaintenanceServer(srv, servedSnapshot{data: data})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return "http://" + lis.Addr().String()
}

// assertNothingKept fails t if dir holds a kept or a temporary snapshot.
func assertNothingKept(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), snapshotPrefix) || strings.HasPrefix(e.Name(), tempPrefix) {
			t.Errorf("a failed backup left %s", e.Name())
		}
	}
}

// TestBackupRefusesACorruptSnapshot: an endpoint that streams a snapshot with one byte flipped (or cut short)
// gets no file kept; the failure is counted as a verification failure and health reports it.
func TestBackupRefusesACorruptSnapshot(t *testing.T) {
	good := snapshotOf(t, 20, 1024)
	for _, tc := range []struct {
		name   string
		mangle func([]byte) []byte
	}{
		{"flipped byte", func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-100] }},
		{"not a database", func([]byte) []byte { return []byte(strings.Repeat("not bbolt", 1000)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			endpoint := serveSnapshot(t, tc.mangle(append([]byte(nil), good...)))
			svc, _ := newService(t, []string{endpoint}, 2)
			if _, err := svc.TakeOne(context.Background()); err == nil {
				t.Fatal("a corrupt snapshot was kept")
			}
			assertNothingKept(t, svc.cfg.Dir)
			if n := testutil.ToFloat64(svc.metrics.failures.WithLabelValues("verify")); n != 1 {
				t.Errorf("failures{reason=verify} %v, want 1", n)
			}
			if err := svc.Health(context.Background()); err == nil {
				t.Error("health passes after a failed verification")
			}
		})
	}
	// The same server with the snapshot intact: kept, so the failures above were the corruption's.
	svc, _ := newService(t, []string{serveSnapshot(t, good)}, 2)
	if _, err := svc.TakeOne(context.Background()); err != nil {
		t.Fatalf("intact snapshot: %v", err)
	}
}

// TestBackupOnAFullDisk: a backup directory on a filesystem too small for the snapshot (a 64 KiB tmpfs)
// fails with reason "write" and leaves nothing behind, not even the partial temporary file.
func TestBackupOnAFullDisk(t *testing.T) {
	snapshot := snapshotOf(t, 40, 8<<10)
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a small tmpfs here (needs root): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, 0) })
	if len(snapshot) <= 64<<10 {
		t.Fatalf("snapshot of %d bytes fits the 64 KiB filesystem", len(snapshot))
	}
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	cfg.Endpoints, cfg.Dir, cfg.Keep, cfg.Timeout = []string{serveSnapshot(t, snapshot)}, dir, 2, 20*time.Second
	svc, err := New(cfg, Deps{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.TakeOne(context.Background()); err == nil || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("backup onto a full disk: %v, want a no-space error", err)
	}
	assertNothingKept(t, dir)
	if n := testutil.ToFloat64(svc.metrics.failures.WithLabelValues("write")); n != 1 {
		t.Errorf("failures{reason=write} %v, want 1", n)
	}
}

// TestBackupOverClientTLS: frontends that serve https and require a client certificate are backed up with
// --cacert, --cert and --key; without the client certificate the backup fails.
func TestBackupOverClientTLS(t *testing.T) {
	certs := certtest.Write(t)
	c := clustertest.Start(t, clustertest.Options{Members: 1, ConfigureFrontend: clustertest.ServeHTTPS(certs),
		ClientTLS: certs.ClientTLS(t, certs.ClientCert, certs.ClientKey)})
	var endpoints []string
	for _, e := range c.Endpoints() { // the frontends serve https on the URLs the cluster lists as http
		endpoints = append(endpoints, strings.Replace(e, "http://", "https://", 1))
	}
	for _, tc := range []struct {
		name   string
		files  TLSFiles
		wantOK bool
	}{
		{"client certificate", TLSFiles{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}, true},
		{"no client certificate", TLSFiles{CAFile: certs.CA}, false},
		{"untrusted client certificate", TLSFiles{CAFile: certs.CA, CertFile: certs.UntrustedClientCert, KeyFile: certs.UntrustedKey}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Endpoints, cfg.Dir, cfg.Keep, cfg.Timeout = endpoints, filepath.Join(t.TempDir(), "b"), 2, 10*time.Second
			cfg.TLS = tc.files
			svc, err := New(cfg, Deps{Registry: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
			path, err := svc.TakeOne(context.Background())
			if (err == nil) != tc.wantOK {
				t.Fatalf("backup: path %q, err %v; want success %v", path, err, tc.wantOK)
			}
			if !tc.wantOK {
				assertNothingKept(t, cfg.Dir)
			}
		})
	}
}
