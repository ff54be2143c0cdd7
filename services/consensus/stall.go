package consensus

import (
	"errors"
	"fmt"
	"time"
)

// stallReportAfter is how long a member may be without a leader before it says so, and how often it repeats.
const stallReportAfter = 3 * time.Second

// noLeaderError says why this member has no leader, for /health and the stall log.
func (n *Node) noLeaderError() error {
	members := n.sortedMembers()
	if len(members) == 0 {
		return errors.New("no leader: this member knows no cluster members (its log holds no membership yet; " +
			"a joining member waits for the leader, check --initial-cluster)")
	}
	var peers []string
	for _, m := range members {
		if m.GetId() != n.memberID {
			peers = append(peers, fmt.Sprintf("%s=%v", m.GetName(), m.GetPeerUrls()))
		}
	}
	if len(peers) == 0 {
		return errors.New("no leader yet (single member, electing)")
	}
	return fmt.Errorf("no leader: %d of %d members needed for a quorum; check that these peers run and are reachable: %v",
		len(members)/2+1, len(members), peers)
}

// reportStalls logs, every stallReportAfter while the member has no leader, why it cannot make progress, so a
// start that cannot elect a leader says so within seconds. It returns when the member stops.
func (n *Node) reportStalls() {
	tick := time.NewTicker(stallReportAfter)
	defer tick.Stop()
	lastLeader := time.Now()
	for {
		select {
		case <-n.stopping:
			return
		case <-tick.C:
		}
		if n.lead.Load() != 0 {
			lastLeader = time.Now()
			continue
		}
		if since := time.Since(lastLeader); since >= stallReportAfter {
			n.log.Warn("cannot make progress", "member-id", fmt.Sprintf("%x", n.memberID),
				"without-leader-for", since.Round(time.Second).String(), "reason", n.noLeaderError().Error())
		}
	}
}
