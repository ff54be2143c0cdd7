package storage

import (
	"context"
	"errors"
	"strconv"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/cairn-kv/cairn/internal/config"
)

// Auto-compaction is etcd's v3compactor: every storage runs the compactor, but only the storage co-located with
// the raft leader proposes (etcd pauses the compactor on followers), so a compaction is proposed once, as a normal
// Compaction entry that every member applies at the same index. Following the leader needs no election of its
// own, and the leader's member never forwards the proposal. During a leader change two storages may both
// propose; the later one is refused with ErrCompacted (or compacts further), which both modes treat as done.

// autoCompaction returns the configured mode and retention (a duration for periodic, a revision count for
// revision), with etcd's parsing: an integer is hours in periodic mode; retention 0 disables auto-compaction.
func (c Config) autoCompaction() (mode string, retention time.Duration, err error) {
	mode = c.AutoCompactionMode
	if mode != AutoCompactionPeriodic && mode != AutoCompactionRevision {
		return "", 0, config.Invalid("--auto-compaction-mode", "unknown auto-compaction-mode %q (want periodic or revision)", mode)
	}
	if n, err := strconv.Atoi(c.AutoCompactionRetention); err == nil && n >= 0 {
		if mode == AutoCompactionPeriodic {
			return mode, time.Duration(n) * time.Hour, nil
		}
		return mode, time.Duration(n), nil
	}
	if mode == AutoCompactionRevision {
		return "", 0, config.Invalid("--auto-compaction-retention", "revision retention %q is not a non-negative integer", c.AutoCompactionRetention)
	}
	retention, err = time.ParseDuration(c.AutoCompactionRetention)
	if err != nil || retention < 0 {
		return "", 0, config.Invalid("--auto-compaction-retention", "error parsing CompactionRetention %q: want a duration or hours", c.AutoCompactionRetention)
	}
	return mode, retention, nil
}

// runAutoCompaction runs the configured compactor until ctx ends; nothing when auto-compaction is off.
func (s *Storage) runAutoCompaction(ctx context.Context) {
	mode, retention, _ := s.cfg.autoCompaction() // validated by New
	switch {
	case retention == 0:
		return
	case mode == AutoCompactionPeriodic:
		s.logger.Info("auto periodic compaction enabled", "compact_period", retention)
		s.runPeriodicCompaction(ctx, newPeriodicCompactor(retention, time.Now()))
	default:
		s.logger.Info("auto revision compaction enabled", "revision_retention", int64(retention),
			"interval", s.cfg.AutoCompactionRevisionInterval)
		s.runRevisionCompaction(ctx, int64(retention))
	}
}

// periodicCompactor is etcd's Periodic without its clock and goroutine: the revision is sampled every
// retryInterval (a tenth of the period, the period capped at an hour), and once a whole period has passed since
// the start (or the last success) it compacts to the oldest sample kept, the revision seen one period ago; after
// the first compaction it compacts every compactInterval (the period, at most an hour).
type periodicCompactor struct {
	period          time.Duration
	compactInterval time.Duration
	retentions      int
	revs            []int64 // revs[0] is the revision seen a period ago
	lastRevision    int64
	lastSuccess     time.Time
	baseInterval    time.Duration
}

func newPeriodicCompactor(period time.Duration, now time.Time) *periodicCompactor {
	p := &periodicCompactor{period: period, compactInterval: min(period, time.Hour), lastSuccess: now, baseInterval: period}
	p.retentions = int(period/p.retryInterval()) + 1
	return p
}

func (p *periodicCompactor) retryInterval() time.Duration { return min(p.period, time.Hour) / 10 }

// sample records the current revision, at the start of each retry interval.
func (p *periodicCompactor) sample(rev int64) {
	p.revs = append(p.revs, rev)
	if len(p.revs) > p.retentions {
		p.revs = p.revs[1:]
	}
}

// due returns the revision to compact to at now, if it is time.
func (p *periodicCompactor) due(now time.Time) (int64, bool) {
	rev := p.revs[0]
	if now.Sub(p.lastSuccess) < p.baseInterval || rev == p.lastRevision {
		return 0, false
	}
	if p.baseInterval == p.period {
		p.baseInterval = p.compactInterval
	}
	return rev, true
}

// compacted records a compaction to rev that succeeded (or was already done) at now.
func (p *periodicCompactor) compacted(rev int64, now time.Time) {
	p.lastRevision, p.lastSuccess = rev, now
}

func (s *Storage) runPeriodicCompaction(ctx context.Context, p *periodicCompactor) {
	for {
		p.sample(s.currentStore().Position().Revision)
		pause(ctx, p.retryInterval())
		if ctx.Err() != nil {
			return
		}
		if !s.isLeader(ctx) {
			continue
		}
		rev, ok := p.due(time.Now())
		if !ok {
			continue
		}
		if s.autoCompact(ctx, rev, "periodic", "compact_period", p.period) {
			p.compacted(rev, time.Now())
		}
	}
}

// runRevisionCompaction is etcd's Revision: every interval, the leader's storage compacts to the current
// revision minus retention, unless that is not positive or was the last compaction.
func (s *Storage) runRevisionCompaction(ctx context.Context, retention int64) {
	var prev int64
	for {
		pause(ctx, s.cfg.AutoCompactionRevisionInterval)
		if ctx.Err() != nil {
			return
		}
		if !s.isLeader(ctx) {
			continue
		}
		rev := s.currentStore().Position().Revision - retention
		if rev <= 0 || rev == prev {
			continue
		}
		if s.autoCompact(ctx, rev, "revision", "revision_retention", retention) {
			prev = rev
		}
	}
}

// autoCompact proposes a compaction to rev through the log and reports whether it is done: applied, or
// refused because the store is already compacted at or past rev.
func (s *Storage) autoCompact(ctx context.Context, rev int64, mode, retentionKey string, retention any) bool {
	start := time.Now()
	s.logger.Info("starting auto "+mode+" compaction", "revision", rev, retentionKey, retention)
	_, err := s.Submit(ctx, &pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: rev}})
	if err == nil || errors.Is(err, rpctypes.ErrGRPCCompacted) {
		s.logger.Info("completed auto "+mode+" compaction", "revision", rev, retentionKey, retention,
			"took", time.Since(start))
		return true
	}
	if ctx.Err() == nil {
		s.logger.Warn("failed auto "+mode+" compaction", "revision", rev, retentionKey, retention, "err", err)
	}
	return false
}

// isLeader reports whether this storage's member is the raft leader (the log's status, asked now).
func (s *Storage) isLeader(ctx context.Context) bool {
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := s.log.Status(sctx)
	return err == nil && st.Leader != 0 && st.Leader == s.cfg.MemberID
}
