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
	s.compactRev = r.Revision
	keep := s.index.compact(r.Revision)
	done := make(chan struct{})
	s.compactor.schedule(r.Revision, keep, done)
	return &pb.CompactionResponse{Header: &pb.ResponseHeader{Revision: s.currentRev}}, done, nil, nil
}

// compactor removes compacted revisions from bbolt in batches, each in the shared write transaction under
// batchMu, pausing between batches so applies are not stalled. A newer compaction supersedes a running one: its
// keep set covers everything the older one would have removed.
type compactor struct {
	s       *Store
	mu      sync.Mutex
	rev     int64
	keep    map[revision]struct{}
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

func (c *compactor) schedule(rev int64, keep map[revision]struct{}, done chan struct{}) {
	c.mu.Lock()
	c.rev, c.keep = rev, keep
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
			rev, keep := c.rev, c.keep
			c.mu.Unlock()
			if keep == nil {
				break
			}
			if !c.compactOnce(rev, keep) {
				return
			}
			c.mu.Lock()
			if c.rev == rev {
				for _, w := range c.waiters {
					close(w)
				}
				c.waiters, c.keep = nil, nil
			}
			c.mu.Unlock()
		}
	}
}

// compactOnce removes every revision at or below rev that is not in keep; false if stopped first.
func (c *compactor) compactOnce(rev int64, keep map[revision]struct{}) bool {
	start := time.Now()
	end := mainRevPrefix(rev + 1)
	var from []byte
	removed := 0
	for {
		select {
		case <-c.quit:
			return false
		default:
		}
		next, n, ok := c.compactBatch(from, end, keep)
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
	c.s.dirty = true
	c.s.log.Info("finished compaction", "compact_revision", rev, "removed_revisions", removed, "took", time.Since(start))
	return true
}

// compactBatch removes up to CompactionBatchLimit revisions from from (inclusive) below end; it returns where to
// continue, or nil when done.
func (c *compactor) compactBatch(from, end []byte, keep map[revision]struct{}) (next []byte, removed int, ok bool) {
	c.s.batchMu.Lock()
	defer c.s.batchMu.Unlock()
	if c.s.usable() != nil {
		return nil, 0, false
	}
	defer func() {
		if removed > 0 {
			c.s.dirty = true
		}
	}()
	cur := c.s.wtx.Bucket(bucketKey).Cursor()
	k, _ := cur.First()
	if from != nil {
		k, _ = cur.Seek(from)
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
		if _, kept := keep[rev]; !kept {
			at := bytes.Clone(k)
			if err := cur.Delete(); err != nil {
				_ = c.s.fail(err)
				return nil, removed, false
			}
			removed++
			k, _ = cur.Seek(at)
			continue
		}
		k, _ = cur.Next()
	}
	return nil, removed, true
}
