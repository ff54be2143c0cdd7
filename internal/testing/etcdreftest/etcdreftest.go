// Package etcdreftest runs the reference etcd (internal/tools/etcdref) from tests: binaries built on first use,
// clusters stopped when the test ends, etcdctl output read line by line.
package etcdreftest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/cairn-kv/cairn/internal/tools/etcdref"
)

// buildTimeout bounds a first build inside a test (two module downloads and two large links).
const buildTimeout = 15 * time.Minute

// TestBinaries returns the reference binaries for t, building them on first use; it fails t on error.
func TestBinaries(t testing.TB) etcdref.Binaries {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	bins, err := etcdref.Build(ctx, testLogger(t))
	if err != nil {
		t.Fatalf("build reference etcd %s: %v", etcdref.Version, err)
	}
	return bins
}

// Etcdutl returns the path of the reference etcdutl for t, building it on first use.
func Etcdutl(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	path, err := etcdref.BuildEtcdutl(ctx, testLogger(t))
	if err != nil {
		t.Fatalf("build reference etcdutl %s: %v", etcdref.Version, err)
	}
	return path
}

// EtcdBinary returns the path of the reference etcd server for t.
func EtcdBinary(t testing.TB) string { t.Helper(); return TestBinaries(t).Etcd }

// Etcdctl returns the path of the reference etcdctl for t, so e2e tests can run the real client.
func Etcdctl(t testing.TB) string { t.Helper(); return TestBinaries(t).Etcdctl }

// StartCluster starts a healthy reference etcd cluster of the given size for t, with extraArgs on every
// member's command line (e.g. "--auth-token-ttl=2"), and stops it when t ends. If t failed, the end of every
// member's log is written to the test log.
func StartCluster(t testing.TB, members int, extraArgs ...string) *etcdref.Cluster {
	t.Helper()
	bins := TestBinaries(t)
	cluster, err := etcdref.New(etcdref.Config{Members: members, Binaries: bins, Dir: t.TempDir(), Logger: testLogger(t),
		ExtraArgs: extraArgs})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cluster.Start(ctx); err != nil {
		logMemberTails(t, cluster)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logMemberTails(t, cluster)
		}
		if err := cluster.Stop(context.Background()); err != nil {
			t.Errorf("stop reference etcd: %v", err)
		}
	})
	return cluster
}

func logMemberTails(t testing.TB, cluster *etcdref.Cluster) {
	for _, m := range cluster.Members() {
		if text, err := os.ReadFile(m.LogFile); err == nil {
			t.Logf("--- last lines of %s (%s):\n%s", m.Name, m.LogFile, etcdref.Tail(text, 3000))
		}
	}
}

// testLogger sends log records to t.Log, so they appear with the test that caused them.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testLogWriter struct{ t testing.TB }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
