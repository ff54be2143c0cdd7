package consensus

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/services/consensus/wal"
)

// RestoredMember is one member of a new cluster bootstrapped from a snapshot, named as etcdutl snapshot restore
// names it: --name, --initial-cluster, --initial-cluster-token and --initial-advertise-peer-urls.
type RestoredMember struct {
	// Name is this member's name in InitialCluster; PeerURLs its URLs there.
	Name                string
	InitialCluster      string
	InitialClusterToken string
	PeerURLs            []string
}

// RestoredLog says where the log of a restored member starts: its storage's consistent index and term must be
// set to Index and Term, so that it asks for the entries after Index.
type RestoredLog struct {
	// Index and Term are the log's first position: the snapshot of the membership.
	Index uint64
	Term  uint64
	// MemberID and ClusterID are etcd's IDs of the member and the new cluster.
	MemberID  uint64
	ClusterID uint64
}

// CheckRestoredMember checks m as etcd's VerifyBootstrap does: --initial-cluster names m with its peer URLs.
func CheckRestoredMember(m RestoredMember) error {
	cfg := Config{Name: m.Name, InitialCluster: m.InitialCluster, InitialAdvertisePeerURLs: m.PeerURLs}
	if err := validateURLs(m.PeerURLs); err != nil {
		return fmt.Errorf("--initial-advertise-peer-urls: %w", err)
	}
	return cfg.verifyBootstrap()
}

// WriteRestoredWAL creates the WAL of member m of a new cluster in dataDir (a consensus --data-dir), as
// etcdutl snapshot restore writes etcd's: the log is taken to hold one AddNode per member at term 1, so it
// starts with a snapshot at index len(members), term 1, carrying the membership, and a HardState committing it.
// Member and cluster IDs are etcd's, derived from the peer URLs and the token. Everything is fsynced.
func WriteRestoredWAL(dataDir string, m RestoredMember) (RestoredLog, error) {
	if err := CheckRestoredMember(m); err != nil {
		return RestoredLog{}, fmt.Errorf("consensus: %w", err)
	}
	cluster, err := parseInitialCluster(m.InitialCluster)
	if err != nil {
		return RestoredLog{}, err
	}
	ms := newMembership()
	var ids []uint64
	for _, name := range slices.Sorted(maps.Keys(cluster)) {
		id := memberID(cluster[name], m.InitialClusterToken, nil)
		ids = append(ids, id)
		ms.members[id] = &consensuspb.Member{Id: id, Name: name, PeerUrls: cluster[name]}
	}
	self := memberID(m.PeerURLs, m.InitialClusterToken, nil)
	log := RestoredLog{Index: uint64(len(ids)), Term: 1, MemberID: self, ClusterID: clusterID(ids)}
	data, err := encodeSnapshotData(self, "", ms)
	if err != nil {
		return RestoredLog{}, fmt.Errorf("consensus: encode restored membership: %w", err)
	}
	snap := &raftpb.Snapshot{Data: data, Metadata: &raftpb.SnapshotMetadata{
		Index: &log.Index, Term: &log.Term, ConfState: &raftpb.ConfState{Voters: slices.Sorted(slices.Values(ids))},
	}}
	hs := &raftpb.HardState{Term: &log.Term, Commit: &log.Index}
	w, err := wal.Create(filepath.Join(dataDir, "wal"), walMetadata(self, log.ClusterID), wal.Options{NoPreallocate: true})
	if err != nil {
		return RestoredLog{}, fmt.Errorf("consensus: %w", err)
	}
	if err := w.Save(snap, hs, nil, true); err != nil {
		_ = w.Close()
		return RestoredLog{}, fmt.Errorf("consensus: write restored WAL in %s: %w", dataDir, err)
	}
	if err := w.Close(); err != nil {
		return RestoredLog{}, fmt.Errorf("consensus: close restored WAL in %s: %w", dataDir, err)
	}
	return log, nil
}
