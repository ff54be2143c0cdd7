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
