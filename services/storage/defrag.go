package storage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/datadir"
)

// defragTxMaxSize bounds the bytes copied in one bbolt transaction while defragmenting.
const defragTxMaxSize = 64 << 20

// Defragment is etcd's defragmentation for this member: between two applied batches it commits and closes
// the database, copies every bucket into a new file (bbolt.Compact, which leaves the free pages behind),
// fsyncs it, renames it over the database and reopens. Reads and writes wait meanwhile, as in etcd. A failure
// before the rename leaves the old file in place and reopens it.
func (s *Storage) Defragment(ctx context.Context) (*storagepb.DefragmentResponse, error) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.storeMu.Lock()
	defer s.storeMu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, ctxError(ctx)
	}
	if reason := s.unhealthyReason(); reason != "" {
		return nil, unavailable(reason)
	}
	start := time.Now()
	before, _ := s.store.Size()
	if err := s.store.Close(); err != nil {
		return nil, fmt.Errorf("defragment: close store: %w", err)
	}
	compactErr := compactFile(s.dbPath(), filepath.Join(s.cfg.DataDir, dbFileName+".defrag.tmp"))
	st, err := s.openStore()
	if err != nil {
		// The apply loop finds the store closed and recovers it; report why.
		return nil, fmt.Errorf("defragment: reopen %s: %w", s.dbPath(), err)
	}
	s.store = st
	s.setDurable(st.Position().DurableIndex)
	if compactErr != nil {
		s.logger.Warn("defragment failed; kept the database as it was", "err", compactErr)
		return nil, compactErr
	}
	after, _ := st.Size()
	s.metrics.backendDefrag.Observe(time.Since(start).Seconds())
	s.logger.Info("defragmented", "db_size_before", before, "db_size_after", after, "took", time.Since(start))
	return &storagepb.DefragmentResponse{DbSize: after}, nil
}

// compactFile rewrites the bbolt file at path compactly through tmp, replacing path only once tmp is
// complete and fsynced.
func compactFile(path, tmp string) error {
	_ = os.Remove(tmp)
	src, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return fmt.Errorf("defragment: open %s: %w", path, err)
	}
	defer src.Close()
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: 5 * time.Second, FreelistType: bolt.FreelistMapType,
		NoFreelistSync: true})
	if err != nil {
		return fmt.Errorf("defragment: create %s: %w", tmp, err)
	}
	if err := bolt.Compact(dst, src, defragTxMaxSize); err != nil {
		_ = dst.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("defragment: copy %s into %s: %w", path, tmp, err)
	}
	if err := dst.Sync(); err != nil {
		_ = dst.Close()
		_ = os.Remove(tmp)
		return fmt.Errorf("defragment: fsync %s: %w", tmp, err)
	}
	if err := dst.Close(); err != nil {
		return fmt.Errorf("defragment: close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("defragment: rename %s over %s: %w", tmp, path, err)
	}
	return datadir.SyncDir(filepath.Dir(path))
}
