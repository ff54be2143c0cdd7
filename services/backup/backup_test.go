package backup

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cairn-kv/cairn/internal/testing/clustertest"
	"github.com/cairn-kv/cairn/services/storage/restore"
)

func newService(t *testing.T, endpoints []string, keep int) (*Service, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := DefaultConfig()
	cfg.Endpoints, cfg.Dir, cfg.Keep = endpoints, filepath.Join(t.TempDir(), "backups"), keep
	cfg.Timeout = 20 * time.Second
	svc, err := New(cfg, Deps{Registry: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return svc, reg
}

func TestBackupKeepsVerifiedSnapshotsAndPrunes(t *testing.T) {
	c := clustertest.Start(t, clustertest.Options{Members: 1})
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	// A dead endpoint first: each backup falls through to the live one.
	svc, reg := newService(t, append([]string{"http://127.0.0.1:1"}, c.Endpoints()...), 2)
	stale := filepath.Join(svc.cfg.Dir, tempPrefix+"left-by-a-crash.db")
	if err := os.WriteFile(stale, []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		path, err := svc.TakeOne(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st, err := restore.Verify(path)
		if err != nil || st.TotalKey < 1 || st.Version != "3.6.0" {
			t.Fatalf("kept snapshot %s: %+v %v", path, st, err)
		}
		time.Sleep(2 * time.Millisecond) // names carry milliseconds
	}
	if kept := svc.Snapshots(); len(kept) != 2 {
		t.Errorf("kept %v, want the newest 2", kept)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("leftover temporary file not removed: %v", err)
	}
	if n := testutil.ToFloat64(svc.metrics.taken); n != 3 {
		t.Errorf("cairn_backup_snapshots_total %v, want 3", n)
	}
	if ts := testutil.ToFloat64(svc.metrics.lastSuccess); time.Since(time.Unix(int64(ts), 0)) > time.Minute {
		t.Errorf("last success timestamp %v", ts)
	}
	if n, err := testutil.GatherAndCount(reg, "cairn_backup_last_size_bytes"); err != nil || n != 1 {
		t.Errorf("size gauge: %d %v", n, err)
	}
	if err := svc.Health(ctx); err != nil {
		t.Errorf("health after good backups: %v", err)
	}
}

func TestBackupFailureLeavesNoSnapshot(t *testing.T) {
	svc, _ := newService(t, []string{"http://127.0.0.1:1"}, 2)
	svc.cfg.Timeout = 3 * time.Second
	if _, err := svc.TakeOne(context.Background()); err == nil {
		t.Fatal("backup from a dead endpoint succeeded")
	}
	entries, _ := os.ReadDir(svc.cfg.Dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), snapshotPrefix) || strings.HasPrefix(e.Name(), tempPrefix) {
			t.Errorf("a failed backup left %s", e.Name())
		}
	}
	if n := testutil.ToFloat64(svc.metrics.failures.WithLabelValues("endpoints")); n != 1 {
		t.Errorf("failures{reason=endpoints} %v, want 1", n)
	}
	if err := svc.Health(context.Background()); err == nil {
		t.Error("health passes after a failed backup")
	}
}
