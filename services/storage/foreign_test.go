package storage

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/cairn-kv/cairn/internal/testing/waittest"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// TestDatabaseAheadOfItsLogSaysWhy: a database copied in by hand (applied index 80) on a fresh log wedges no
// one silently: storage reports it on /health, naming cairn snapshot restore.
func TestDatabaseAheadOfItsLogSaysWhy(t *testing.T) {
	cfg := testConfig(t, 1)
	st, err := mvcc.Open(mvcc.Config{Path: filepath.Join(cfg.DataDir, DBFileName), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply(80, 2, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	m := startMember(t, cfg, newMemlog(t, 1), nil)
	waittest.Until(t, 10*time.Second, 5*time.Millisecond, "storage to report its database ahead of its log", func() bool {
		err := m.Health(ctxT(t))
		return err != nil && strings.Contains(err.Error(), "ahead of its consensus log") &&
			strings.Contains(err.Error(), "cairn snapshot restore")
	})
}

// TestForeignCheckStretchesWhileInLog: checks that find the database within its led log come ever less often
// (a Status call to consensus each), up to foreignCheckIdleInterval; any other check brings back the 1 s pace.
func TestForeignCheckStretchesWhileInLog(t *testing.T) {
	tests := []struct {
		name   string
		wait   time.Duration
		passed bool
		want   time.Duration
	}{
		{"first pass", foreignCheckInterval, true, 2 * foreignCheckInterval},
		{"passes keep doubling", 8 * time.Second, true, 16 * time.Second},
		{"capped", 16 * time.Second, true, foreignCheckIdleInterval},
		{"stays capped", foreignCheckIdleInterval, true, foreignCheckIdleInterval},
		{"ahead, no leader or no answer", foreignCheckIdleInterval, false, foreignCheckInterval},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextForeignCheck(tt.wait, tt.passed); got != tt.want {
				t.Fatalf("nextForeignCheck(%v, %v) = %v, want %v", tt.wait, tt.passed, got, tt.want)
			}
		})
	}
}
