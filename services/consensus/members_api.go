package consensus

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/commitlog"
)

// errTimeoutLeaderTransfer is etcd's error for a leader transfer that did not finish in time (etcd passes
// it to clients as codes.Unknown with this message).
var errTimeoutLeaderTransfer = status.Error(codes.Unknown, "etcdserver: request timed out, leader transfer took too long")

// learnerReadyPercent is how close to the leader's log a learner must be to be promoted (etcd's 90%).
const learnerReadyPercent = 0.9

func (n *Node) header() *etcdserverpb.ResponseHeader {
	return &etcdserverpb.ResponseHeader{ClusterId: n.clusterID, MemberId: n.memberID, RaftTerm: n.term.Load()}
}

// Status implements commitlog.Log.
func (n *Node) Status(context.Context) (commitlog.Status, error) {
	members := n.sortedMembers()
	st := commitlog.Status{
		MemberID: n.memberID, ClusterID: n.clusterID, Term: n.term.Load(), Leader: n.lead.Load(),
		CommitIndex: n.commitIndex.Load(), AppliedIndex: n.deliver.index(), IsLearner: n.isLearner.Load(),
		Members: make([]commitlog.Member, len(members)),
	}
	for i, m := range members {
		st.Members[i] = toCommitlogMember(m)
	}
	return st, nil
}

// MemberList is etcd's Cluster.MemberList; a linearizable list first waits for a read index.
func (n *Node) MemberList(ctx context.Context, req *etcdserverpb.MemberListRequest) (*etcdserverpb.MemberListResponse, error) {
	if req.GetLinearizable() {
		if err := n.waitApplied(ctx); err != nil {
			return nil, err
		}
	}
	return &etcdserverpb.MemberListResponse{Header: n.header(), Members: toEtcdMembers(n.sortedMembers())}, nil
}

// waitApplied waits until consensus has applied up to a fresh read index.
func (n *Node) waitApplied(ctx context.Context) error {
	index, err := n.ReadIndex(ctx)
	if err != nil {
		return err
	}
	return n.deliver.wait(ctx, index, n.stopping)
}

// MemberAdd is etcd's Cluster.MemberAdd: the new member's ID derives from its peer URLs and the time.
func (n *Node) MemberAdd(ctx context.Context, req *etcdserverpb.MemberAddRequest) (*etcdserverpb.MemberAddResponse, error) {
	if len(req.GetPeerURLs()) == 0 || validateURLs(req.GetPeerURLs()) != nil {
		return nil, rpctypes.ErrGRPCMemberBadURLs
	}
	now := time.Now()
	urls := slices.Sorted(slices.Values(req.GetPeerURLs()))
	m := &consensuspb.Member{Id: memberID(urls, "", &now), PeerUrls: urls, IsLearner: req.GetIsLearner()}
	if err := n.mayAddMember(m); err != nil {
		return nil, err
	}
	members, err := n.configure(ctx, &consensuspb.MemberChange{Kind: consensuspb.MemberChange_ADD, Member: m})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.MemberAddResponse{Header: n.header(), Member: toEtcdMember(m), Members: members}, nil
}

// MemberRemove is etcd's Cluster.MemberRemove. A removed member stops itself once it learns.
func (n *Node) MemberRemove(ctx context.Context, req *etcdserverpb.MemberRemoveRequest) (*etcdserverpb.MemberRemoveResponse, error) {
	if err := n.mayRemoveMember(req.GetID()); err != nil {
		return nil, err
	}
	members, err := n.configure(ctx, &consensuspb.MemberChange{Kind: consensuspb.MemberChange_REMOVE,
		Member: &consensuspb.Member{Id: req.GetID()}})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.MemberRemoveResponse{Header: n.header(), Members: members}, nil
}

// MemberUpdate is etcd's Cluster.MemberUpdate: it changes a member's peer URLs.
func (n *Node) MemberUpdate(ctx context.Context, req *etcdserverpb.MemberUpdateRequest) (*etcdserverpb.MemberUpdateResponse, error) {
	if len(req.GetPeerURLs()) == 0 || validateURLs(req.GetPeerURLs()) != nil {
		return nil, rpctypes.ErrGRPCMemberBadURLs
	}
	members, err := n.configure(ctx, &consensuspb.MemberChange{Kind: consensuspb.MemberChange_UPDATE_PEER_URLS,
		Member: &consensuspb.Member{Id: req.GetID(), PeerUrls: slices.Sorted(slices.Values(req.GetPeerURLs()))}})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.MemberUpdateResponse{Header: n.header(), Members: members}, nil
}

// MemberPromote is etcd's Cluster.MemberPromote. Only the leader knows how far a learner got, so a
// follower forwards the call to it.
func (n *Node) MemberPromote(ctx context.Context, req *etcdserverpb.MemberPromoteRequest) (*etcdserverpb.MemberPromoteResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.requestTimeout())
	defer cancel()
	for {
		resp, err := n.promoteAsLeader(ctx, req.GetID())
		if !errors.Is(err, rpctypes.ErrGRPCNotLeader) {
			return resp, err
		}
		if resp, err = n.forwardPromote(ctx, req); err == nil || isFinalPromoteError(err) {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return nil, rpctypes.ErrGRPCTimeout
		case <-n.stopping:
			return nil, n.stopped()
		case <-time.After(n.cfg.HeartbeatInterval):
		}
	}
}

func isFinalPromoteError(err error) bool {
	for _, final := range []error{rpctypes.ErrGRPCLearnerNotReady, rpctypes.ErrGRPCMemberNotFound,
		rpctypes.ErrGRPCMemberNotLearner, rpctypes.ErrGRPCMemberNotEnoughStarted} {
		if errors.Is(err, final) {
			return true
		}
	}
	return false
}

// promoteAsLeader promotes a learner that is close enough to the leader's log; it fails with
// ErrGRPCNotLeader when this member is not the leader.
func (n *Node) promoteAsLeader(ctx context.Context, id uint64) (*etcdserverpb.MemberPromoteResponse, error) {
	if err := n.isLearnerReady(ctx, id); err != nil {
		return nil, err
	}
	if err := n.mayPromoteMember(); err != nil {
		return nil, err
	}
	members, err := n.configure(ctx, &consensuspb.MemberChange{Kind: consensuspb.MemberChange_PROMOTE,
		Member: &consensuspb.Member{Id: id}})
	if err != nil {
		return nil, err
	}
	return &etcdserverpb.MemberPromoteResponse{Header: n.header(), Members: members}, nil
}

// isLearnerReady checks, on the leader, that the learner's log matches at least 90% of the leader's.
func (n *Node) isLearnerReady(ctx context.Context, id uint64) error {
	type progress struct {
		leader         bool
		found          bool
		learner, match uint64
	}
	result := make(chan progress, 1)
	if err := n.control(ctx, func() {
		st := n.loop.rn.Status()
		p := progress{leader: st.RaftState == raft.StateLeader}
		if pr, ok := st.Progress[id]; ok {
			p.found, p.learner = true, pr.Match
		}
		p.match = st.Progress[st.ID].Match
		result <- p
	}); err != nil {
		return err
	}
	var p progress
	select {
	case p = <-result:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopping:
		return n.stopped()
	}
	switch {
	case !p.leader:
		return rpctypes.ErrGRPCNotLeader
	case !p.found:
		return rpctypes.ErrGRPCMemberNotFound
	case p.match > 0 && float64(p.learner)/float64(p.match) < learnerReadyPercent:
		n.log.Warn("rejecting promote: learner is not ready", "learner-id", fmt.Sprintf("%x", id),
			"learner-match", p.learner, "leader-match", p.match)
		return rpctypes.ErrGRPCLearnerNotReady
	}
	return nil
}

// MoveLeader is etcd's Maintenance.MoveLeader: on the leader, it hands leadership to a voting member and
// waits until that member leads.
func (n *Node) MoveLeader(ctx context.Context, req *etcdserverpb.MoveLeaderRequest) (*etcdserverpb.MoveLeaderResponse, error) {
	if !n.isLeader.Load() {
		return nil, rpctypes.ErrGRPCNotLeader
	}
	target := req.GetTargetID()
	n.mu.RLock()
	m := n.members.members[target]
	n.mu.RUnlock()
	if m == nil || m.GetIsLearner() {
		return nil, rpctypes.ErrGRPCBadLeaderTransferee
	}
	n.log.Info("leadership transfer starting", "member-id", fmt.Sprintf("%x", n.memberID), "transferee-member-id", fmt.Sprintf("%x", target))
	if err := n.control(ctx, func() { n.loop.rn.TransferLeader(target) }); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.requestTimeout())
	defer cancel()
	tick := time.NewTicker(n.cfg.HeartbeatInterval)
	defer tick.Stop()
	for n.lead.Load() != target {
		select {
		case <-ctx.Done():
			return nil, errTimeoutLeaderTransfer
		case <-n.stopping:
			return nil, n.stopped()
		case <-tick.C:
		}
	}
	return &etcdserverpb.MoveLeaderResponse{Header: n.header()}, nil
}

// configure proposes a member change and waits until it is applied here. Raft silently drops a conf
// change proposed while another is pending (or before a new leader applied its log), so the change is
// proposed again, with the same request ID, until it is applied or the request times out; a duplicate
// that commits after the first is refused when applied and changes nothing.
func (n *Node) configure(ctx context.Context, change *consensuspb.MemberChange) ([]*etcdserverpb.Member, error) {
	n.configMu.Lock()
	defer n.configMu.Unlock()
	n.mu.RLock()
	err := n.members.validate(change, n.cfg.MaxLearners)
	n.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	change.RequestId = rand.Uint64() | 1
	cc, err := confChangeFor(change)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.requestTimeout())
	defer cancel()
	done := n.changes.register(change.RequestId)
	defer n.changes.cancel(change.RequestId)
	retry := time.NewTicker(2 * n.cfg.ElectionTimeout)
	defer retry.Stop()
	for {
		if err := n.proposeConfChange(ctx, cc); err != nil {
			return nil, err
		}
		select {
		case res := <-done:
			return res.members, res.err
		case <-retry.C:
		case <-ctx.Done():
			return nil, contextError(ctx)
		case <-n.stopping:
			return nil, n.stopped()
		}
	}
}

// proposeConfChange hands a conf change to raft and returns raft's immediate answer.
func (n *Node) proposeConfChange(ctx context.Context, cc *raftpb.ConfChange) error {
	proposed := make(chan error, 1)
	if err := n.control(ctx, func() {
		st := n.loop.rn.BasicStatus()
		if st.Lead == raft.None {
			proposed <- rpctypes.ErrGRPCNoLeader
			return
		}
		if err := n.loop.rn.ProposeConfChange(cc); err != nil {
			proposed <- proposeError(err, st)
			return
		}
		proposed <- nil
	}); err != nil {
		return err
	}
	select {
	case err := <-proposed:
		return err
	case <-ctx.Done():
		return contextError(ctx)
	case <-n.stopping:
		return n.stopped()
	}
}

func contextError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return rpctypes.ErrGRPCTimeout
	}
	return ctx.Err()
}

// handOverLeadership transfers leadership away before a leader stops, waiting at most two election
// timeouts; when there is no connected voter to take over it does nothing.
func (n *Node) handOverLeadership(ctx context.Context) {
	if !n.isLeader.Load() {
		return
	}
	picked := make(chan uint64, 1)
	if err := n.control(ctx, func() {
		st := n.loop.rn.Status()
		var best, bestMatch uint64
		for id, pr := range st.Progress {
			if id == n.memberID || pr.IsLearner || n.transport.ActiveSince(id).IsZero() {
				continue
			}
			if best == 0 || pr.Match > bestMatch {
				best, bestMatch = id, pr.Match
			}
		}
		if best != 0 {
			n.loop.rn.TransferLeader(best)
		}
		picked <- best
	}); err != nil {
		return
	}
	var target uint64
	select {
	case target = <-picked:
	case <-ctx.Done():
		return
	case <-n.stopping:
		return
	}
	if target == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*n.cfg.ElectionTimeout)
	defer cancel()
	tick := time.NewTicker(n.cfg.HeartbeatInterval)
	defer tick.Stop()
	for n.isLeader.Load() {
		select {
		case <-ctx.Done():
			n.log.Warn("leadership transfer on stop did not finish", "member-id", fmt.Sprintf("%x", n.memberID), "transferee-member-id", fmt.Sprintf("%x", target))
			return
		case <-n.stopping:
			return
		case <-tick.C:
		}
	}
	n.log.Info("handed over leadership before stopping", "member-id", fmt.Sprintf("%x", n.memberID), "new-leader", fmt.Sprintf("%x", n.lead.Load()))
}
