package mvcc

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"io"
	"sort"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// HistoryQuery asks for the events of a key range in a revision interval.
type HistoryQuery struct {
	// Key and RangeEnd as in etcd (RangeEnd empty: one key; "\x00": every key from Key on).
	Key, RangeEnd []byte
	// From is the first (main, sub) revision included: FromSub lets a caller resume inside a revision.
	From, FromSub int64
	// To is the last main revision included.
	To int64
	// PrevKV fills each event's PrevKv with the key's previous version when there is one.
	PrevKV bool
	// Limit bounds the events returned (0: no bound).
	Limit int
}

// HistoryPage is one page of a history query.
type HistoryPage struct {
	Events []*mvccpb.Event
	// More is true when events remain; NextFrom/NextSub is where the next page starts.
	More              bool
	NextFrom, NextSub int64
	// Revision and CompactRev are the store's when the page was read.
	Revision, CompactRev int64
}

// History returns the events of q in revision order. A From below the compact revision fails with
// ErrGRPCCompacted, a To above the current revision with ErrGRPCFutureRev.
func (s *Store) History(q HistoryQuery) (*HistoryPage, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.usableLocked(); err != nil {
		return nil, err
	}
	page := &HistoryPage{Revision: s.currentRev, CompactRev: s.compactRev}
	switch {
	case q.From < s.compactRev:
		return page, rpctypes.ErrGRPCCompacted
	case q.To > s.currentRev:
		return page, rpctypes.ErrGRPCFutureRev
	case q.From > q.To:
		return page, nil
	}
	kr := keyRange{key: q.Key, end: q.RangeEnd}
	v := &readView{s: s}
	defer v.close()
	from := revision{main: q.From, sub: q.FromSub}
	visit := func(rev revision, tombstone bool, data []byte) (bool, error) {
		if q.Limit > 0 && len(page.Events) == q.Limit {
			page.More, page.NextFrom, page.NextSub = true, rev.main, rev.sub
			return false, nil
		}
		kv, err := decodeKV(rev, data)
		if err != nil {
			return false, err
		}
		if !kr.contains(kv.Key) {
			return true, nil
		}
		ev := &mvccpb.Event{Type: mvccpb.Event_PUT, Kv: kv}
		if tombstone {
			ev.Type = mvccpb.Event_DELETE
			kv.ModRevision = rev.main
		}
		if q.PrevKV {
			if ev.PrevKv, err = s.prevVersion(kv.Key, rev, v); err != nil {
				return false, err
			}
		}
		page.Events = append(page.Events, ev)
		return true, nil
	}
	if err := s.scanRevisions(v, from, q.To, visit); err != nil {
		return nil, err
	}
	return page, nil
}

// scanRevisions visits the key bucket from rev from to main revision to, committed revisions first, then pending.
func (s *Store) scanRevisions(v *readView, from revision, to int64,
	visit func(rev revision, tombstone bool, data []byte) (bool, error)) error {
	if from.main <= s.committedRev {
		if err := v.begin(); err != nil {
			return err
		}
		end := mainRevPrefix(min(to, s.committedRev) + 1)
		cur := v.tx.Bucket(bucketKey).Cursor() // its own: the visits load through the view's cursor
		for k, val := cur.Seek(revKey(from, false)); k != nil && bytes.Compare(k, end) < 0; k, val = cur.Next() {
			rev, tombstone, err := parseRevKey(k)
			if err != nil {
				return err
			}
			if ok, err := visit(rev, tombstone, val); err != nil || !ok {
				return err
			}
		}
	}
	p := s.pending
	i := sort.Search(len(p), func(i int) bool { return !from.greaterThan(p[i].rev) })
	for ; i < len(p) && p[i].rev.main <= to; i++ {
		_, tombstone, _ := parseRevKey(p[i].key)
		if ok, err := visit(p[i].rev, tombstone, p[i].value); err != nil || !ok {
			return err
		}
	}
	return nil
}

// prevVersion loads the version of key before rev, nil if the key did not exist just before.
func (s *Store) prevVersion(key []byte, rev revision, v valueReader) (*mvccpb.KeyValue, error) {
	h := s.index.get(key)
	if h == nil {
		return nil, nil
	}
	prev, ok := h.before(func(kv keyVersion) bool { return !rev.greaterThan(kv.rev) })
	if !ok {
		return nil, nil
	}
	return v.load(prev.rev)
}

// Hash is etcd's HashKV: a CRC-32C of the key bucket up to rev (0: the current revision), counting of the
// revisions at or below the compact revision only those the compaction keeps, so it does not depend on how far
// the physical removal has gone. Members that applied the same log have the same hash. As in etcd, a rev that a
// recorded compaction hashed is answered with that hash (CompactHash: its CompactRevision is the compaction
// before), which is what the leader's compaction hash check asks its peers for.
func (s *Store) Hash(rev int64) (*pb.HashKVResponse, error) {
	tx, keep, cur, compactRev, err := s.consistentReadTx()
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	if recorded, ok := s.hashes.byRevision(rev); ok && rev > 0 {
		return &pb.HashKVResponse{Header: &pb.ResponseHeader{Revision: cur}, Hash: recorded.Hash,
			CompactRevision: recorded.CompactRevision, HashRevision: rev}, nil
	}
	switch {
	case rev > 0 && rev < compactRev:
		return nil, rpctypes.ErrGRPCCompacted
	case rev > cur:
		return nil, rpctypes.ErrGRPCFutureRev
	case rev == 0:
		rev = cur
	}
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	h.Write(bucketKey)
	end := mainRevPrefix(rev + 1)
	c := tx.Bucket(bucketKey).Cursor()
	for k, v := c.First(); k != nil && bytes.Compare(k, end) < 0; k, v = c.Next() {
		r, _, err := parseRevKey(k)
		if err != nil {
			return nil, err
		}
		if _, kept := keep[r]; r.main <= compactRev && !kept {
			continue
		}
		h.Write(k)
		h.Write(v)
	}
	return &pb.HashKVResponse{Header: &pb.ResponseHeader{Revision: cur}, Hash: h.Sum32(),
		CompactRevision: compactRev, HashRevision: rev}, nil
}

// BackendHash is etcd's Maintenance.Hash: a CRC-32C of the whole committed bbolt database, bucket by bucket in
// cursor order, each bucket's name followed by its keys and values. As etcd leaves out the consistent index and
// term, it leaves out what each member writes on its own schedule (see inBackendHash), so members that applied
// the same entries have the same hash, and any applied change to keys, leases, alarms, the compact revision or
// the leasekeeper claim changes it. The header carries the revision hashed.
func (s *Store) BackendHash() (*pb.HashResponse, error) {
	tx, keep, cur, compactRev, err := s.consistentReadTx()
	if err != nil {
		return nil, err
	}
	defer func() { _ = tx.Rollback() }()
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	err = tx.ForEach(func(bucket []byte, b *bolt.Bucket) error {
		h.Write(bucket)
		return b.ForEach(func(k, v []byte) error {
			in, err := inBackendHash(bucket, k, keep, compactRev)
			if in {
				h.Write(k)
				h.Write(v)
			}
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("backend hash at revision %d: %w", cur, err)
	}
	return &pb.HashResponse{Header: &pb.ResponseHeader{Revision: cur}, Hash: h.Sum32()}, nil
}

// inBackendHash reports whether BackendHash counts key k of bucket. It leaves out the meta keys a member
// writes by itself: the consistent index and term (etcd's DefaultIgnores; an empty leader entry advances them
// without changing data) and the finished compact revision, which records how far this member's background
// compaction has got. For the same reason, of the key bucket's revisions at or below the compact revision it
// counts only those the compaction keeps (as Hash does), so the hash does not depend on how many of the others
// have been removed yet.
func inBackendHash(bucket, k []byte, keep map[revision]struct{}, compactRev int64) (bool, error) {
	switch {
	case bytes.Equal(bucket, bucketMeta):
		return !bytes.Equal(k, metaConsistentIndex) && !bytes.Equal(k, metaTerm) &&
			!bytes.Equal(k, metaFinishedCompact), nil
	case bytes.Equal(bucket, bucketKey):
		rev, _, err := parseRevKey(k)
		if err != nil {
			return false, err
		}
		_, kept := keep[rev]
		return rev.main > compactRev || kept, nil
	}
	return true, nil
}

// consistentReadTx commits what was applied and opens a read transaction on exactly that state, with the
// revisions at or below the compact revision the index still holds. Applies resume as soon as it returns.
func (s *Store) consistentReadTx() (*bolt.Tx, map[revision]struct{}, int64, int64, error) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	if err := s.commitLocked(); err != nil {
		return nil, nil, 0, 0, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	tx, err := s.db.Begin(false)
	if err != nil {
		return nil, nil, 0, 0, fmt.Errorf("begin bbolt read tx: %w", err)
	}
	keep := make(map[revision]struct{})
	s.index.tree.Ascend(func(h *keyHistory) bool {
		h.revs.each(func(kv keyVersion) bool {
			if kv.rev.main > s.compactRev {
				return false
			}
			keep[kv.rev] = struct{}{}
			return true
		})
		return true
	})
	return tx, keep, s.currentRev, s.compactRev, nil
}

// SnapshotInfo describes a snapshot written by WriteSnapshot.
type SnapshotInfo struct {
	AppliedIndex uint64
	AppliedTerm  uint64
	Revision     int64
	Size         int64
}

// WriteSnapshot commits what was applied and writes a consistent copy of the whole bbolt database to w; info is
// known before the copy starts and is passed to start, which may write a header first.
func (s *Store) WriteSnapshot(w io.Writer, start func(SnapshotInfo) error) error {
	tx, info, err := s.snapshotTx()
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if start != nil {
		if err := start(info); err != nil {
			return err
		}
	}
	if _, err := tx.WriteTo(w); err != nil {
		return fmt.Errorf("write snapshot at index %d: %w", info.AppliedIndex, err)
	}
	return nil
}

func (s *Store) snapshotTx() (*bolt.Tx, SnapshotInfo, error) {
	s.batchMu.Lock()
	defer s.batchMu.Unlock()
	if err := s.commitLocked(); err != nil {
		return nil, SnapshotInfo{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	tx, err := s.db.Begin(false)
	if err != nil {
		return nil, SnapshotInfo{}, fmt.Errorf("begin bbolt read tx: %w", err)
	}
	return tx, SnapshotInfo{AppliedIndex: s.appliedIndex, AppliedTerm: s.appliedTerm, Revision: s.currentRev,
		Size: tx.Size()}, nil
}
