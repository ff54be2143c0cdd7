package storage

import (
	"context"
	"fmt"
	"time"
)

// foreignCheckInterval is how often storage compares its applied index with its log while it cannot tell or
// finds the database ahead, and foreignCheckRounds how many checks in a row must find it ahead before it says so.
// Each check that finds the database within its led log doubles the wait to the next, up to
// foreignCheckIdleInterval: entries only ever come from that log, so a database that was not ahead once stays
// so, and the check is a Status call to consensus that an idle stack need not make every second.
const (
	foreignCheckInterval     = time.Second
	foreignCheckIdleInterval = 30 * time.Second
	foreignCheckRounds       = 3
)

// watchForForeignDatabase reports a database that is ahead of its own log: its applied index is above what a
// led log has committed, as when a database was copied in by hand from another cluster (a snapshot, or another
// member's data dir). Such a storage would wait forever for entries its log will not have for a long time; it
// says so in the log and on /health instead, pointing at `cairn snapshot restore`. It returns when ctx ends.
func (s *Storage) watchForForeignDatabase(ctx context.Context) {
	wait := foreignCheckInterval
	next := time.NewTimer(wait)
	defer next.Stop()
	ahead, reason := 0, ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-next.C:
		}
		applied := s.currentStore().Position().AppliedIndex
		sctx, cancel := context.WithTimeout(ctx, foreignCheckInterval)
		st, err := s.log.Status(sctx)
		cancel()
		wait = nextForeignCheck(wait, err == nil && st.Leader != 0 && st.CommitIndex >= applied)
		next.Reset(wait)
		if err != nil || st.Leader == 0 || st.CommitIndex >= applied {
			if reason != "" && s.unhealthyReason() == reason {
				s.setUnhealthy("")
			}
			reason = ""
			ahead = 0
			continue
		}
		ahead++
		if ahead == foreignCheckRounds {
			reason = fmt.Sprintf("the database (applied index %d) is ahead of its consensus log (commit index %d): "+
				"it does not belong to this member's log (copied in from another cluster?); restore a snapshot "+
				"into a new data dir with `cairn snapshot restore` instead", applied, st.CommitIndex)
			s.logger.Error("storage cannot make progress", "applied_index", applied, "commit_index", st.CommitIndex,
				"reason", reason)
			s.setUnhealthy(reason)
		}
	}
}

// nextForeignCheck is the wait after a check that waited wait before it: doubled, up to
// foreignCheckIdleInterval, when the check found the database within its led log (passed), else
// foreignCheckInterval.
func nextForeignCheck(wait time.Duration, passed bool) time.Duration {
	if !passed {
		return foreignCheckInterval
	}
	return min(2*wait, foreignCheckIdleInterval)
}
