package consensus

import (
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/cairn-kv/cairn/api/consensuspb"
)

// The checks --strict-reconfig-check adds, as etcd makes them: a change must not leave fewer started (or
// connected) voting members than a quorum.

// healthInterval is how long a peer must have been connected to count as active (etcd's 5 s, shorter
// when the election timeout is short, as in tests).
func (n *Node) healthInterval() time.Duration { return min(5*time.Second, 5*n.cfg.ElectionTimeout) }

func (n *Node) votingMembers() []*consensuspb.Member {
	var voters []*consensuspb.Member
	for _, m := range n.sortedMembers() {
		if !m.GetIsLearner() {
			voters = append(voters, m)
		}
	}
	return voters
}

// connectedSince counts the members among ms connected since before since; this member always counts.
func (n *Node) connectedSince(since time.Time, ms []*consensuspb.Member) int {
	connected := 0
	for _, m := range ms {
		if m.GetId() == n.memberID {
			connected++
			continue
		}
		if t := n.transport.ActiveSince(m.GetId()); !t.IsZero() && !t.After(since) {
			connected++
		}
	}
	return connected
}

func started(ms []*consensuspb.Member, except uint64) (members, startedMembers int) {
	for _, m := range ms {
		if m.GetId() == except {
			continue
		}
		members++
		if m.GetName() != "" {
			startedMembers++
		}
	}
	return members, startedMembers
}

func (n *Node) mayAddMember(m *consensuspb.Member) error {
	if !n.cfg.StrictReconfigCheck {
		return nil
	}
	voters := n.votingMembers()
	if !m.GetIsLearner() {
		members, up := started(voters, 0)
		members++
		if !(up == 1 && members == 2) && up < members/2+1 {
			return rpctypes.ErrGRPCMemberNotEnoughStarted
		}
	}
	// The new member counts as not connected. A single member may always grow (etcd's
	// isConnectedToQuorumAfterAddingNewMemberSince): it has no peer to be connected to.
	if len(voters) > 1 && n.connectedSince(time.Now().Add(-n.healthInterval()), voters) < (len(voters)+1)/2+1 {
		return rpctypes.ErrGRPCUnhealthy
	}
	return nil
}

func (n *Node) mayRemoveMember(id uint64) error {
	if !n.cfg.StrictReconfigCheck {
		return nil
	}
	n.mu.RLock()
	m := n.members.members[id]
	n.mu.RUnlock()
	if m != nil && m.GetIsLearner() {
		return nil
	}
	voters := n.votingMembers()
	if members, up := started(voters, id); up < members/2+1 {
		return rpctypes.ErrGRPCMemberNotEnoughStarted
	}
	// A member that is down is not part of the active quorum and is safe to remove.
	if id != n.memberID && n.transport.ActiveSince(id).IsZero() {
		return nil
	}
	if active := n.connectedSince(time.Now().Add(-n.healthInterval()), voters); active-1 < 1+(len(voters)-1)/2 {
		return rpctypes.ErrGRPCUnhealthy
	}
	return nil
}

func (n *Node) mayPromoteMember() error {
	if !n.cfg.StrictReconfigCheck {
		return nil
	}
	members, up := started(n.votingMembers(), 0)
	// The learner counts as a started member of the future quorum.
	if up+1 < (members+1)/2+1 {
		return rpctypes.ErrGRPCMemberNotEnoughStarted
	}
	return nil
}

// PeerActiveSince returns when this member's stream to peer id last became healthy, or the zero time when
// it is down. --strict-reconfig-check counts a peer as active once this is HealthInterval in the past.
func (n *Node) PeerActiveSince(id uint64) time.Time { return n.transport.ActiveSince(id) }

// HealthInterval is how long a peer must have been connected to count as active for
// --strict-reconfig-check (etcd's 5 s, or five election timeouts when that is shorter).
func (n *Node) HealthInterval() time.Duration { return n.healthInterval() }
