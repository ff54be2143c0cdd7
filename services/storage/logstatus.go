package storage

import (
	"context"
	"sync"
	"time"

	"github.com/cairn-kv/cairn/internal/commitlog"
)

// logStatusMaxAge is how long Status reuses its consensus member's raft fields while nothing has been applied
// since they were read: no more than raft's election timeout (1 s by default), so a leader change is seen no
// later than raft itself notices a lost leader. A new leader's first entry (raft appends an empty one) is applied
// here and so ends the reuse at once.
const logStatusMaxAge = time.Second

// logStatusCache holds the last raft fields Status read from the log, so that the frontends' probes and the hubs'
// polls of an idle storage (about 2.5 a second between them) do not each cost its consensus member a call.
type logStatusCache struct {
	mu      sync.Mutex
	status  commitlog.Status
	applied uint64    // the store's applied index when status was read
	readAt  time.Time // zero: nothing held
}

// get returns the held status when it was read less than logStatusMaxAge before now at the same applied index.
func (c *logStatusCache) get(applied uint64, now time.Time) (commitlog.Status, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readAt.IsZero() || c.applied != applied || now.Sub(c.readAt) >= logStatusMaxAge || now.Before(c.readAt) {
		return commitlog.Status{}, false
	}
	return c.status, true
}

// put holds st, read at now when the store had applied up to applied.
func (c *logStatusCache) put(st commitlog.Status, applied uint64, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.status, c.applied, c.readAt = st, applied, now
}

// raftStatus is the log's status for Status: the held one while it is fresh (see logStatusCache), else asked
// of the log within a second. It reports false when the log did not answer.
func (s *Storage) raftStatus(ctx context.Context, applied uint64) (commitlog.Status, bool) {
	if st, ok := s.logStatus.get(applied, time.Now()); ok {
		return st, true
	}
	asked := time.Now()
	lctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := s.log.Status(lctx)
	if err != nil {
		return commitlog.Status{}, false
	}
	s.logStatus.put(st, applied, asked)
	return st, true
}
