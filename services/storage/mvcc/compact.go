package mvcc

import (
	"bytes"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// applyCompaction schedules a compaction at r.Revision: reads below it fail from now on, the index forgets what
// it no longer needs, and the compactor removes those revisions from bbolt in the background. The scheduled
// revision is written in the same transaction as the entry's consistent index.
func (s *Store) applyCompaction(r *pb.CompactionRequest) (*pb.CompactionResponse, <-chan struct{}, error, error) {
	switch {
	case r.Revision <= s.compactRev:
		return nil, nil, rpctypes.ErrGRPCCompacted, nil
	case r.Revision > s.currentRev:
		return nil, nil, rpctypes.ErrGRPCFutureRev, nil
	}
	if err := s.wtx.Bucket(bucketMeta).Put(metaScheduledCompact, uint64Bytes(uint64(r.Revision))); err != nil {
		return nil, nil, nil, err
	}
	prevCompactRev := s.compactRev
	s.compactRev = r.Revision
	keep := s.index.compact(r.Revision)
	done := make(chan struct{})
	s.compactor.schedule(compaction{rev: r.Revision, prevRev: prevCompactRev, keep: keep, recordHash: true}, done)
	return &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: s.currentRev}}, done, nil, nil
}

// compaction is one scheduled physical compaction.
type compaction struct {
	rev     int64
	prevRev int64 // the compact revision before this one
	keep    map[revision]struct{}
	// recordHash says the pass sees every revision above prevRev (none was removed yet), so the hash it
	// computes on the way is recorded (see CompactHash); false when a compaction interrupted by a restart resumes.
	recordHash bool
}

// compactor removes compacted revisions from bbolt in batches, each in the shared write transaction under
// batchMu, pausing between batches so applies are not stalled. A newer compaction supersedes a scheduled one: its
// keep set covers everything the older one would have removed.
type compactor struct {
	s       *Store
	mu      sync.Mutex
	next    compaction // keep is nil when nothing is scheduled
	waiters []chan struct{}
	wake    chan struct{}
	quit    chan struct{}
	done    chan struct{}
}

func newCompactor(s *Store) *compactor {
	c := &compactor{s: s, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

func (c *compactor) schedule(next compaction, done chan struct{}) {
	c.mu.Lock()
	c.next = next
	if done != nil {
		c.waiters = append(c.waiters, done)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *compactor) stop() {
	select {
	case <-c.quit:
	default:
		close(c.quit)
	}
	<-c.done
}

func (c *compactor) run() {
	defer close(c.done)
	for {
		select {
		case <-c.quit:
			return
		case <-c.wake:
		}
		for {
			c.mu.Lock()
			next := c.next
			c.mu.Unlock()
			if next.keep == nil {
				break
			}
			if !c.compactOnce(next) {
				return
			}
			c.mu.Lock()
			if c.next.rev == next.rev {
				for _, w := range c.waiters {
					close(w)
				}
				c.waiters, c.next = nil, compaction{}
			}
			c.mu.Unlock()
		}
	}
}

// compactOnce removes every revision at or below the compaction's that it does not keep, hashing them first;
// false if stopped first.
func (c *compactor) compactOnce(cp compaction) bool {
	start := time.Now()
	rev, keep := cp.rev, cp.keep
	hasher := newKVHasher(cp.prevRev, rev, keep)
	end := mainRevPrefix(rev + 1)
	var from []byte
	removed := 0
	for {
		select {
		case <-c.quit:
			return false
		default:
		}
		next, n, ok := c.compactBatch(from, end, hasher)
		if !ok {
			return false
		}
		removed += n
		if next == nil {
			break
		}
		from = next
		select {
		case <-c.quit:
			return false
		case <-time.After(c.s.cfg.CompactionSleepInterval):
		}
	}
	c.s.batchMu.Lock()
	defer c.s.batchMu.Unlock()
	if c.s.usable() != nil {
		return false
	}
	if err := c.s.wtx.Bucket(bucketMeta).Put(metaFinishedCompact, uint64Bytes(uint64(rev))); err != nil {
		_ = c.s.fail(err)
		return false
	}
	c.s.markDirtyLocked()
	attrs := []any{"compact_revision", rev, "removed_revisions", removed, "took", time.Since(start)}
	if cp.recordHash {
		h := hasher.sum()
		c.s.hashes.store(h)
		attrs = append(attrs, "hash", h.Hash, "previous_compact_revision", h.CompactRevision)
	}
	c.s.log.Info("finished compaction", attrs...)
	return true
}

// compactBatch removes up to CompactionBatchLimit revisions from from (inclusive) below end, hashing every
// revision it visits before removing any; it returns where to continue, or nil when done.
func (c *compactor) compactBatch(from, end []byte, hasher *kvHasher) (next []byte, removed int, ok bool) {
	c.s.batchMu.Lock()
	defer c.s.batchMu.Unlock()
	if c.s.usable() != nil {
		return nil, 0, false
	}
	defer func() {
		if removed > 0 {
			c.s.markDirtyLocked()
		}
	}()
	cur := c.s.wtx.Bucket(bucketKey).Cursor()
	k, v := cur.First()
	if from != nil {
		k, v = cur.Seek(from)
	}
	for visited := 0; k != nil && bytes.Compare(k, end) < 0; visited++ {
		if visited == c.s.cfg.CompactionBatchLimit {
			return bytes.Clone(k), removed, true
		}
		rev, _, err := parseRevKey(k)
		if err != nil {
			_ = c.s.fail(err)
			return nil, removed, false
		}
		hasher.write(rev, k, v)
		if _, kept := hasher.keep[rev]; !kept {
			at := bytes.Clone(k)
			if err := cur.Delete(); err != nil {
				_ = c.s.fail(err)
				return nil, removed, false
			}
			removed++
			k, v = cur.Seek(at)
			continue
		}
		k, v = cur.Next()
	}
	return nil, removed, true
}
