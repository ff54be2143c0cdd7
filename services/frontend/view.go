package frontend

import (
	"cmp"
	"slices"

	"github.com/cairn-kv/cairn/internal/commitlog"
	"github.com/cairn-kv/cairn/internal/config"
)

// lagEntries is how far behind its log's commit index a storage may be and still count as caught up;
// further behind (a storage installing a snapshot or replaying) it is used only after the caught-up ones.
const lagEntries = 1000

// rebuild publishes a new view from the replicas' last known states.
func (p *pool) rebuild() {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := &view{}
	p.clusterState(v)
	leaderStorage := p.storageOfMember(v, v.leader)
	v.home = p.homeStorage(v)
	v.leaderFirst = orderStorages(p.storages, leaderStorage)
	v.nearestFirst = orderStorages(p.storages, v.home)
	v.consensusLeaderFirst = orderConsensus(p.consensus, v.leader)
	p.current.Store(v)
	if p.published != nil {
		p.published(v)
	}
}

// clusterState fills the cluster ID, leader, term and membership from the consensus status with the highest
// term (the most recent knowledge), falling back to what storages' logs reported.
func (p *pool) clusterState(v *view) {
	var best *commitlog.Status
	for _, c := range p.consensus {
		st := c.status.Load()
		if st == nil || !c.healthy.Load() {
			continue
		}
		if best == nil || st.Term > best.Term || (st.Term == best.Term && best.Leader == 0 && st.Leader != 0) {
			best = st
		}
	}
	if best != nil {
		v.clusterID, v.leader, v.term, v.members = best.ClusterID, best.Leader, best.Term, best.Members
		return
	}
	for _, c := range p.consensus { // none healthy now: keep the last known membership and cluster ID
		if st := c.status.Load(); st != nil {
			v.clusterID, v.members = st.ClusterID, st.Members
			break
		}
	}
	for _, r := range p.storages {
		st := r.status.Load()
		if st == nil || !r.healthy.Load() {
			continue
		}
		if st.RaftTerm > v.term || (st.RaftTerm == v.term && v.leader == 0) {
			v.term, v.leader = st.RaftTerm, st.Leader
		}
	}
}

// storageOfMember returns the storage of member id, by the member ID it reported or the URL consensus lists.
func (p *pool) storageOfMember(v *view, id uint64) *storageReplica {
	if id == 0 {
		return nil
	}
	for _, r := range p.storages {
		if r.memberID.Load() == id {
			return r
		}
	}
	if m, ok := v.memberOf(id); ok {
		if target, err := config.HostPort(m.StorageURL); err == nil {
			for _, r := range p.storages {
				if r.url == "http://"+target {
					return r
				}
			}
		}
	}
	return nil
}

// homeStorage picks the storage this frontend speaks for: that of the member named like the frontend, else
// the one chosen before while it stays healthy, else the healthy one with the shortest round trip.
func (p *pool) homeStorage(v *view) *storageReplica {
	for _, m := range v.members {
		if m.Name == p.cfg.Name {
			if r := p.storageOfMember(v, m.ID); r != nil {
				return r
			}
		}
	}
	var best *storageReplica
	for _, r := range p.storages {
		if r.url == p.homeURL && r.healthy.Load() {
			return r
		}
		if r.healthy.Load() && (best == nil || r.rtt.Load() < best.rtt.Load()) {
			best = r
		}
	}
	if best != nil {
		p.homeURL = best.url
	}
	return best
}

// tier ranks a storage for routing: 0 healthy and caught up, 1 healthy but lagging, 2 unhealthy.
func tier(r *storageReplica) int {
	if !r.healthy.Load() {
		return 2
	}
	if st := r.status.Load(); st != nil && st.RaftIndex > st.AppliedIndex+lagEntries {
		return 1
	}
	return 0
}

// orderStorages returns every storage, preferred first (when it is healthy and caught up), then by tier
// and round trip.
func orderStorages(all []*storageReplica, preferred *storageReplica) []*storageReplica {
	out := slices.Clone(all)
	slices.SortStableFunc(out, func(a, b *storageReplica) int {
		ta, tb := tier(a), tier(b)
		if a == preferred && ta == 0 {
			ta = -1
		}
		if b == preferred && tb == 0 {
			tb = -1
		}
		if c := cmp.Compare(ta, tb); c != 0 {
			return c
		}
		return cmp.Compare(a.rtt.Load(), b.rtt.Load())
	})
	return out
}

// orderConsensus returns every consensus replica: the leader's first, then the healthy, then the others.
func orderConsensus(all []*consensusReplica, leader uint64) []*consensusReplica {
	rank := func(c *consensusReplica) int {
		st := c.status.Load()
		switch {
		case !c.healthy.Load() || st == nil:
			return 2
		case leader != 0 && st.MemberID == leader:
			return 0
		default:
			return 1
		}
	}
	out := slices.Clone(all)
	slices.SortStableFunc(out, func(a, b *consensusReplica) int { return cmp.Compare(rank(a), rank(b)) })
	return out
}
