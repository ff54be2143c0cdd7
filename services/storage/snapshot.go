package storage

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/datadir"
	"github.com/cairn-kv/cairn/internal/storageclient"
	"github.com/cairn-kv/cairn/services/storage/mvcc"
)

// snapshotChunkBytes is the blob size of one SnapshotChunk.
const snapshotChunkBytes = 1 << 20

// Snapshot streams a consistent copy of the database: the first chunk carries its applied index, revision and
// size, the last its SHA-256.
func (s *Storage) Snapshot(ctx context.Context, send func(*storagepb.SnapshotChunk) error) error {
	w := &chunkWriter{send: send, sum: sha256.New(), first: &storagepb.SnapshotChunk{}}
	err := s.withStore(func(st *mvcc.Store) error {
		return st.WriteSnapshot(w, func(info mvcc.SnapshotInfo) error {
			w.first.AppliedIndex, w.first.Revision, w.first.TotalSize = info.AppliedIndex, info.Revision, uint64(info.Size)
			s.logger.Info("sending snapshot", "applied_index", info.AppliedIndex, "revision", info.Revision, "size", info.Size)
			return ctx.Err()
		})
	})
	if err != nil {
		return err
	}
	return w.finish()
}

// chunkWriter cuts a byte stream into SnapshotChunks.
type chunkWriter struct {
	send  func(*storagepb.SnapshotChunk) error
	sum   hash.Hash
	buf   []byte
	first *storagepb.SnapshotChunk // sent with the first blob; nil afterwards
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	w.sum.Write(p)
	n := len(p)
	for len(p) > 0 {
		take := min(len(p), snapshotChunkBytes-len(w.buf))
		w.buf = append(w.buf, p[:take]...)
		p = p[take:]
		if len(w.buf) == snapshotChunkBytes {
			if err := w.flush(nil); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (w *chunkWriter) flush(sum []byte) error {
	c := w.first
	if c == nil {
		c = &storagepb.SnapshotChunk{}
	}
	w.first = nil
	c.Blob, c.Sha256 = w.buf, sum
	w.buf = make([]byte, 0, snapshotChunkBytes)
	return w.send(c)
}

func (w *chunkWriter) finish() error { return w.flush(w.sum.Sum(nil)) }

// installSnapshot replaces the store with the snapshot ref names: it downloads the source storage's database
// to a temp file, fsyncs it, renames it over the database and reopens. The apply loop then carries on after the
// snapshot's applied index (entries up to it are skipped on apply).
func (s *Storage) installSnapshot(ctx context.Context, ref *commitlog.SnapshotRef) error {
	sources := s.snapshotSources(ctx, ref)
	if len(sources) == 0 {
		return fmt.Errorf("snapshot at index %d names member %x at %q and no other member's storage is known",
			ref.Index, ref.SourceMemberID, ref.SourceStorageURL)
	}
	tmp := filepath.Join(s.cfg.DataDir, dbFileName+".snapshot.tmp")
	var info *storagepb.SnapshotChunk
	var errs []error
	for _, url := range sources {
		s.logger.Info("installing snapshot", "index", ref.Index, "source_url", url)
		var err error
		if info, err = s.downloadSnapshot(ctx, ref, url, tmp); err == nil {
			break
		}
		_ = os.Remove(tmp)
		errs = append(errs, err)
	}
	if info == nil {
		return errors.Join(errs...)
	}
	s.storeMu.Lock()
	defer s.storeMu.Unlock()
	if err := s.store.Close(); err != nil {
		s.logger.Warn("closing the store before a snapshot install", "err", err)
	}
	if err := os.Rename(tmp, s.dbPath()); err != nil {
		return fmt.Errorf("rename snapshot %s over %s: %w", tmp, s.dbPath(), err)
	}
	if err := datadir.SyncDir(s.cfg.DataDir); err != nil {
		return err
	}
	st, err := s.openStore()
	if err != nil {
		return fmt.Errorf("open installed snapshot (index %d): %w", info.AppliedIndex, err)
	}
	s.store = st
	s.reported.Store(0) // report the new durable index at the next tick (setDurable wakes the reporter)
	s.setDurable(st.Position().DurableIndex)
	s.logger.Info("snapshot installed", "applied_index", info.AppliedIndex, "revision", info.Revision)
	return nil
}

// snapshotSources lists the storages to fetch ref's state from: the member it names, then every other member
// whose storage URL consensus knows, since the named one may be down, or be this very storage when it lost its
// data after consensus compacted its log.
func (s *Storage) snapshotSources(ctx context.Context, ref *commitlog.SnapshotRef) []string {
	var urls []string
	if ref.SourceMemberID != s.cfg.MemberID && ref.SourceStorageURL != "" {
		urls = append(urls, ref.SourceStorageURL)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := s.log.Status(sctx)
	if err != nil {
		return urls
	}
	for _, m := range st.Members {
		if m.ID != s.cfg.MemberID && m.StorageURL != "" && !slices.Contains(urls, m.StorageURL) {
			urls = append(urls, m.StorageURL)
		}
	}
	return urls
}

func (s *Storage) downloadSnapshot(ctx context.Context, ref *commitlog.SnapshotRef, url, path string) (*storagepb.SnapshotChunk, error) {
	client, err := storageclient.Dial(url, append(s.tel.DialOptions(), s.deps.Internal.DialOption())...)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	defer f.Close()
	info, err := client.Snapshot(ctx, f)
	if err != nil {
		return nil, fmt.Errorf("fetch snapshot from %s: %w", url, err)
	}
	if info.AppliedIndex < ref.Index {
		return nil, fmt.Errorf("snapshot from %s is at index %d, below the %d asked for", url,
			info.AppliedIndex, ref.Index)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("fsync %s: %w", path, err)
	}
	return info, nil
}
