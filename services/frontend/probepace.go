package frontend

import (
	"slices"
	"time"

	"github.com/cairn-kv/cairn/internal/pace"
)

// idleProbeFactor bounds how far the probe interval stretches while nothing changes: ProbeInterval times this.
const idleProbeFactor = 4

// probeMark is what one replica's probe said that routing, health and the auth copy depend on. Two probe rounds
// with equal marks saw the same cluster.
type probeMark struct {
	healthy       bool
	member        uint64
	leader, term  uint64
	index         uint64 // raft commit index (consensus) or applied index (storage)
	revision      int64
	authRevision  uint64
	authEnabled   bool
	unhealthy     string
	alarms        int
	members       int
	consensusMark bool
}

// marks returns the marks of every replica as their last probes left them.
func (p *pool) marks() []probeMark {
	p.mu.Lock()
	storages, consensus := slices.Clone(p.storages), slices.Clone(p.consensus)
	p.mu.Unlock()
	marks := make([]probeMark, 0, len(storages)+len(consensus))
	for _, c := range consensus {
		m := probeMark{healthy: c.healthy.Load(), consensusMark: true}
		if st := c.status.Load(); st != nil {
			m.member, m.leader, m.term, m.index, m.members = st.MemberID, st.Leader, st.Term, st.CommitIndex, len(st.Members)
		}
		marks = append(marks, m)
	}
	for _, r := range storages {
		m := probeMark{healthy: r.healthy.Load()}
		if st := r.status.Load(); st != nil {
			m.member, m.leader, m.term, m.index, m.revision = st.MemberId, st.Leader, st.RaftTerm, st.AppliedIndex, st.Revision
			m.authRevision, m.authEnabled, m.unhealthy, m.alarms = st.AuthRevision, st.AuthEnabled, st.Unhealthy, len(st.Alarms)
		}
		marks = append(marks, m)
	}
	return marks
}

// probePace decides when the next probe round runs (internal/pace's rule): ProbeInterval after a round that saw
// a change or was asked for (a replica failed a call), and otherwise twice the last wait, up to idleProbeFactor
// times ProbeInterval. An idle cluster is so probed every 2 s instead of every 500 ms, while a busy one (whose
// applied index moves) and one that changes are probed as often as before. Stale routing costs a hop, never a
// wrong answer (a write or linearizable read on a follower's storage goes through its member), and a stale auth
// copy is fenced by storage (see the storage package's doc).
type probePace struct {
	stretch *pace.Stretch
	last    []probeMark
}

func newProbePace(base time.Duration) *probePace {
	return &probePace{stretch: pace.New(base, idleProbeFactor*base)}
}

// next returns the wait before the next round, given what the last round saw and whether it was asked for.
func (pp *probePace) next(marks []probeMark, asked bool) time.Duration {
	steady := !asked && slices.Equal(marks, pp.last)
	pp.last = marks
	return pp.stretch.Next(steady)
}
