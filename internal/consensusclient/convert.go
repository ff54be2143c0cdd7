package consensusclient

import (
	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/commitlog"
)

// EntryToProto converts a committed entry for the wire.
func EntryToProto(e commitlog.Entry) *consensuspb.Entry {
	out := &consensuspb.Entry{Index: e.Index, Term: e.Term, Kind: consensuspb.EntryKind(e.Kind), Data: e.Data}
	if e.Snapshot != nil {
		out.Snapshot = &consensuspb.SnapshotRef{
			Index: e.Snapshot.Index, Term: e.Snapshot.Term,
			SourceMemberId: e.Snapshot.SourceMemberID, SourceStorageUrl: e.Snapshot.SourceStorageURL,
		}
	}
	return out
}

// EntryFromProto converts a committed entry from the wire.
func EntryFromProto(e *consensuspb.Entry) commitlog.Entry {
	out := commitlog.Entry{Index: e.GetIndex(), Term: e.GetTerm(), Kind: commitlog.Kind(e.GetKind()), Data: e.GetData()}
	if ref := e.GetSnapshot(); ref != nil {
		out.Snapshot = &commitlog.SnapshotRef{
			Index: ref.GetIndex(), Term: ref.GetTerm(),
			SourceMemberID: ref.GetSourceMemberId(), SourceStorageURL: ref.GetSourceStorageUrl(),
		}
	}
	return out
}

// MemberToProto converts a member for the wire.
func MemberToProto(m commitlog.Member) *consensuspb.Member {
	return &consensuspb.Member{
		Id: m.ID, Name: m.Name, PeerUrls: m.PeerURLs, ClientUrls: m.ClientURLs, StorageUrl: m.StorageURL,
		IsLearner: m.IsLearner,
	}
}

// MemberFromProto converts a member from the wire.
func MemberFromProto(m *consensuspb.Member) commitlog.Member {
	return commitlog.Member{
		ID: m.GetId(), Name: m.GetName(), PeerURLs: m.GetPeerUrls(), ClientURLs: m.GetClientUrls(),
		StorageURL: m.GetStorageUrl(), IsLearner: m.GetIsLearner(),
	}
}

// StatusToProto converts a status for the wire.
func StatusToProto(st commitlog.Status) *consensuspb.StatusResponse {
	out := &consensuspb.StatusResponse{
		MemberId: st.MemberID, ClusterId: st.ClusterID, Term: st.Term, Leader: st.Leader,
		CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex, IsLearner: st.IsLearner,
	}
	for _, m := range st.Members {
		out.Members = append(out.Members, MemberToProto(m))
	}
	return out
}

// StatusFromProto converts a status from the wire.
func StatusFromProto(st *consensuspb.StatusResponse) commitlog.Status {
	out := commitlog.Status{
		MemberID: st.GetMemberId(), ClusterID: st.GetClusterId(), Term: st.GetTerm(), Leader: st.GetLeader(),
		CommitIndex: st.GetCommitIndex(), AppliedIndex: st.GetAppliedIndex(), IsLearner: st.GetIsLearner(),
	}
	for _, m := range st.GetMembers() {
		out.Members = append(out.Members, MemberFromProto(m))
	}
	return out
}
