package consensus

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/cairn-kv/cairn/services/consensus/wal"
)

// logStore is raft's Storage for a member. The newest entries, from a little below the applied index on, are
// in memory (the embedded raft.MemoryStorage, whose Compact trims only the memory); the older ones of the
// catch-up window are read back from the WAL, which locates them (wal.Entries) until the window moves past
// them (forget). So a follower or a storage that is up to --snapshot-catchup-entries behind still catches up
// from entries, as in etcd, while the log's memory stays that of Config.LogEntriesInMemory entries.
type logStore struct {
	*raft.MemoryStorage
	wal      *wal.WAL
	log      *slog.Logger
	readBack prometheus.Counter // entries read back from the WAL
}

func newLogStore(w *wal.WAL, log *slog.Logger, m *metrics) *logStore {
	return &logStore{MemoryStorage: raft.NewMemoryStorage(), wal: w, log: log, readBack: m.logReadBack}
}

// FirstIndex is the first entry that Entries can return, from memory or from the WAL.
func (s *logStore) FirstIndex() (uint64, error) {
	first, err := s.MemoryStorage.FirstIndex()
	if err != nil {
		return 0, err
	}
	return min(first, s.wal.FirstReadable()), nil
}

// Term is the term of entry i, from memory or from the WAL's index.
func (s *logStore) Term(i uint64) (uint64, error) {
	term, err := s.MemoryStorage.Term(i)
	if err != raft.ErrCompacted { //nolint:errorlint // raft compares its sentinel errors with ==
		return term, err
	}
	if term, err := s.wal.Term(i); err == nil {
		return term, nil
	}
	return 0, raft.ErrCompacted
}

// Entries is raft's read of the log: what memory holds, or else what the WAL reads back. A read back that
// fails (the WAL's file damaged after it was written) is logged and answered raft.ErrCompacted, so that the
// leader sends a snapshot instead of raft panicking on the error.
func (s *logStore) Entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	ents, err := s.entries(lo, hi, maxSize)
	if err != nil && err != raft.ErrCompacted { //nolint:errorlint // raft compares its sentinel errors with ==
		s.log.Error("reading entries back from the WAL failed; answering as if compacted", "lo", lo, "hi", hi,
			"err", err)
		return nil, raft.ErrCompacted
	}
	return ents, err
}

// entries is Entries with the WAL's own errors (Committed reports them): raft.ErrCompacted when lo is below
// what is readable. Entries from the WAL stop where memory begins: a shorter answer is a size-limited one to
// every reader.
func (s *logStore) entries(lo, hi, maxSize uint64) ([]*raftpb.Entry, error) {
	ents, err := s.MemoryStorage.Entries(lo, hi, maxSize)
	if err != raft.ErrCompacted { //nolint:errorlint // raft compares its sentinel errors with ==
		return ents, err
	}
	memFirst, err := s.MemoryStorage.FirstIndex()
	if err != nil {
		return nil, err
	}
	ents, err = s.wal.Entries(lo, min(hi, memFirst), maxSize)
	if errors.Is(err, wal.ErrNotReadable) {
		return nil, raft.ErrCompacted
	}
	if err != nil {
		return nil, fmt.Errorf("consensus: read entries %d..%d back from the WAL: %w", lo, min(hi, memFirst)-1, err)
	}
	s.readBack.Add(float64(len(ents)))
	return ents, nil
}

// forget moves the catch-up window's start to index: entries below it are no longer read back from the WAL
// (and its segments holding only them may go). A raft snapshot at or above index-1 must exist.
func (s *logStore) forget(index uint64) { s.wal.Forget(index) }

// trimMemory drops from memory the entries up to index, which the WAL still reads back.
func (s *logStore) trimMemory(index uint64) error {
	if err := s.MemoryStorage.Compact(index); err != nil && !errors.Is(err, raft.ErrCompacted) {
		return fmt.Errorf("consensus: trim the log in memory to %d: %w", index, err)
	}
	return nil
}

// memoryFirst is the first entry held in memory.
func (s *logStore) memoryFirst() uint64 {
	first, _ := s.MemoryStorage.FirstIndex() // MemoryStorage never fails it
	return first
}
