package consensus

import (
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/commitlog"
)

// memberID derives a member ID as etcd does: the first 8 bytes of SHA-1 over the sorted peer URLs, the
// cluster token and, for members added at run time, the time of adding.
func memberID(peerURLs []string, token string, now *time.Time) uint64 {
	b := []byte(strings.Join(slices.Sorted(slices.Values(peerURLs)), ""))
	b = append(b, token...)
	if now != nil {
		b = append(b, fmt.Sprintf("%d", now.Unix())...)
	}
	hash := sha1.Sum(b)
	return binary.BigEndian.Uint64(hash[:8])
}

// clusterID derives the cluster ID as etcd does, from the sorted IDs of the bootstrap members.
func clusterID(memberIDs []uint64) uint64 {
	ids := slices.Sorted(slices.Values(memberIDs))
	b := make([]byte, 8*len(ids))
	for i, id := range ids {
		binary.BigEndian.PutUint64(b[8*i:], id)
	}
	hash := sha1.Sum(b)
	return binary.BigEndian.Uint64(hash[:8])
}

// membership is the cluster's members as the applied log says. It is changed only by the raft loop.
type membership struct {
	members map[uint64]*consensuspb.Member
	removed map[uint64]bool
}

func newMembership() *membership {
	return &membership{members: map[uint64]*consensuspb.Member{}, removed: map[uint64]bool{}}
}

func (ms *membership) clone() *membership {
	c := newMembership()
	for id, m := range ms.members {
		c.members[id] = proto.Clone(m).(*consensuspb.Member)
	}
	for id := range ms.removed {
		c.removed[id] = true
	}
	return c
}

// sorted returns the members in ID order.
func (ms *membership) sorted() []*consensuspb.Member {
	out := make([]*consensuspb.Member, 0, len(ms.members))
	for _, m := range ms.members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *consensuspb.Member) int { return compareUint64(a.GetId(), b.GetId()) })
	return out
}

func compareUint64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (ms *membership) learners() int {
	n := 0
	for _, m := range ms.members {
		if m.GetIsLearner() {
			n++
		}
	}
	return n
}

// peerURLTaken reports whether a member other than except already uses one of urls.
func (ms *membership) peerURLTaken(urls []string, except uint64) bool {
	for id, m := range ms.members {
		if id == except {
			continue
		}
		for _, u := range m.GetPeerUrls() {
			if slices.Contains(urls, u) {
				return true
			}
		}
	}
	return false
}

// Errors of membership changes, as etcd returns them.
var (
	errMemberNotFound = rpctypes.ErrGRPCMemberNotFound
	errMemberExist    = rpctypes.ErrGRPCMemberExist
	errPeerURLExist   = rpctypes.ErrGRPCPeerURLExist
	errNotLearner     = rpctypes.ErrGRPCMemberNotLearner
	errTooManyLearner = rpctypes.ErrGRPCTooManyLearners
)

// validate checks a change against the membership as etcd's ValidateConfigurationChange does; it runs
// before proposing (to fail fast) and again when the change is applied (where it decides).
func (ms *membership) validate(change *consensuspb.MemberChange, maxLearners int) error {
	m := change.GetMember()
	id := m.GetId()
	if ms.removed[id] {
		return errMemberNotFound
	}
	existing := ms.members[id]
	switch change.GetKind() {
	case consensuspb.MemberChange_ADD:
		if existing != nil {
			return errMemberExist
		}
		if ms.peerURLTaken(m.GetPeerUrls(), 0) {
			return errPeerURLExist
		}
		if m.GetIsLearner() && ms.learners()+1 > maxLearners {
			return errTooManyLearner
		}
	case consensuspb.MemberChange_PROMOTE:
		if existing == nil {
			return errMemberNotFound
		}
		if !existing.GetIsLearner() {
			return errNotLearner
		}
	case consensuspb.MemberChange_REMOVE, consensuspb.MemberChange_PUBLISH:
		if existing == nil {
			return errMemberNotFound
		}
	case consensuspb.MemberChange_UPDATE_PEER_URLS:
		if existing == nil {
			return errMemberNotFound
		}
		if ms.peerURLTaken(m.GetPeerUrls(), id) {
			return errPeerURLExist
		}
	default:
		return fmt.Errorf("unknown member change kind %v", change.GetKind())
	}
	return nil
}

// apply changes the membership; the change must have passed validate.
func (ms *membership) apply(change *consensuspb.MemberChange) {
	m := change.GetMember()
	id := m.GetId()
	switch change.GetKind() {
	case consensuspb.MemberChange_ADD:
		ms.members[id] = proto.Clone(m).(*consensuspb.Member)
	case consensuspb.MemberChange_PROMOTE:
		ms.members[id].IsLearner = false
	case consensuspb.MemberChange_REMOVE:
		delete(ms.members, id)
		ms.removed[id] = true
	case consensuspb.MemberChange_UPDATE_PEER_URLS:
		ms.members[id].PeerUrls = slices.Clone(m.GetPeerUrls())
	case consensuspb.MemberChange_PUBLISH:
		existing := ms.members[id]
		existing.Name, existing.ClientUrls, existing.StorageUrl = m.GetName(), slices.Clone(m.GetClientUrls()), m.GetStorageUrl()
	}
}

// confChangeFor builds the raft conf change that carries a member change.
func confChangeFor(change *consensuspb.MemberChange) (*raftpb.ConfChange, error) {
	ctx, err := proto.Marshal(change)
	if err != nil {
		return nil, fmt.Errorf("marshal member change: %w", err)
	}
	typ := raftpb.ConfChangeUpdateNode
	switch change.GetKind() {
	case consensuspb.MemberChange_ADD:
		typ = raftpb.ConfChangeAddNode
		if change.GetMember().GetIsLearner() {
			typ = raftpb.ConfChangeAddLearnerNode
		}
	case consensuspb.MemberChange_PROMOTE:
		typ = raftpb.ConfChangeAddNode
	case consensuspb.MemberChange_REMOVE:
		typ = raftpb.ConfChangeRemoveNode
	}
	return &raftpb.ConfChange{
		Id: new(change.GetRequestId()), Type: typ.Enum(), NodeId: new(change.GetMember().GetId()), Context: ctx,
	}, nil
}

// memberChangeOf reads the member change a conf change carries. Conf changes that raft itself makes (none
// today) or that carry no context are reported as errors and applied as no-ops.
func memberChangeOf(cc *raftpb.ConfChange) (*consensuspb.MemberChange, error) {
	change := &consensuspb.MemberChange{}
	if err := proto.Unmarshal(cc.GetContext(), change); err != nil {
		return nil, fmt.Errorf("conf change %d: bad member change context: %w", cc.GetId(), err)
	}
	if change.GetMember().GetId() != cc.GetNodeId() {
		return nil, errors.New("conf change node ID differs from its member change")
	}
	return change, nil
}

func toEtcdMember(m *consensuspb.Member) *etcdserverpb.Member {
	return &etcdserverpb.Member{
		ID: m.GetId(), Name: m.GetName(), PeerURLs: slices.Clone(m.GetPeerUrls()),
		ClientURLs: slices.Clone(m.GetClientUrls()), IsLearner: m.GetIsLearner(),
	}
}

func toEtcdMembers(ms []*consensuspb.Member) []*etcdserverpb.Member {
	out := make([]*etcdserverpb.Member, len(ms))
	for i, m := range ms {
		out[i] = toEtcdMember(m)
	}
	return out
}

func toCommitlogMember(m *consensuspb.Member) commitlog.Member {
	return commitlog.Member{
		ID: m.GetId(), Name: m.GetName(), PeerURLs: slices.Clone(m.GetPeerUrls()),
		ClientURLs: slices.Clone(m.GetClientUrls()), StorageURL: m.GetStorageUrl(), IsLearner: m.GetIsLearner(),
	}
}
