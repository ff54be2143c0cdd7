package consensus

import (
	"fmt"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/cairn-kv/cairn/api/consensuspb"
)

// applyMemberChange validates and applies the member change a committed conf change carries. It is
// called by the raft loop only, so the check and the change see the same membership.
func (n *Node) applyMemberChange(cc *raftpb.ConfChange) (*consensuspb.MemberChange, error) {
	change, err := memberChangeOf(cc)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.members.validate(change, n.cfg.MaxLearners); err != nil {
		return change, err
	}
	n.members.apply(change)
	return change, nil
}

// afterMemberChange brings the transport and this member's own state in line with an applied change.
func (n *Node) afterMemberChange(change *consensuspb.MemberChange) {
	id := change.GetMember().GetId()
	n.log.Info("applied membership change", "member-id", fmt.Sprintf("%x", n.memberID),
		"change", change.GetKind().String(), "changed-member-id", fmt.Sprintf("%x", id))
	n.mu.RLock()
	m := n.members.members[id]
	n.mu.RUnlock()
	switch change.GetKind() {
	case consensuspb.MemberChange_ADD, consensuspb.MemberChange_UPDATE_PEER_URLS:
		if err := n.transport.AddPeer(id, m.GetPeerUrls()); err != nil {
			n.log.Warn("cannot reach new peer", "peer", fmt.Sprintf("%x", id), "err", err)
		}
	case consensuspb.MemberChange_REMOVE:
		n.transport.RemovePeer(id)
		if id == n.memberID {
			n.log.Warn("this member was removed from the cluster; stopping", "member-id", fmt.Sprintf("%x", id))
			go n.shutdown(ErrRemoved, false)
		}
	}
	n.updateSelf()
}

// syncPeers points the transport at the members of a new membership (after a snapshot).
func (n *Node) syncPeers(old, now *membership) {
	for id := range old.members {
		if _, ok := now.members[id]; !ok {
			n.transport.RemovePeer(id)
		}
	}
	n.seedPeers(now.sorted())
	n.updateSelf()
	if now.removed[n.memberID] {
		go n.shutdown(ErrRemoved, false)
	}
}

// updateSelf publishes whether this member is a learner.
func (n *Node) updateSelf() {
	n.mu.RLock()
	self := n.members.members[n.memberID]
	n.mu.RUnlock()
	n.isLearner.Store(self.GetIsLearner())
}

// sortedMembers returns a copy of the members in ID order.
func (n *Node) sortedMembers() []*consensuspb.Member {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.members.clone().sorted()
}

// changeWaiters are the callers waiting for their membership change to be applied.
type changeWaiters struct {
	mu      sync.Mutex
	waiting map[uint64]chan changeResult
}

type changeResult struct {
	members []*etcdserverpb.Member
	err     error
}

func newChangeWaiters() *changeWaiters {
	return &changeWaiters{waiting: map[uint64]chan changeResult{}}
}

func (w *changeWaiters) register(id uint64) <-chan changeResult {
	ch := make(chan changeResult, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waiting[id] = ch
	return ch
}

func (w *changeWaiters) cancel(id uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waiting, id)
}

// finish tells the waiter for request id, if any, how its change ended; members is read only then.
func (w *changeWaiters) finish(id uint64, err error, members func() []*consensuspb.Member) {
	if id == 0 {
		return
	}
	w.mu.Lock()
	ch, ok := w.waiting[id]
	delete(w.waiting, id)
	w.mu.Unlock()
	if !ok {
		return
	}
	res := changeResult{err: err}
	if err == nil {
		res.members = toEtcdMembers(members())
	}
	ch <- res
}
