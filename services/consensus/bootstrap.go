package consensus

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
	"github.com/cairn-kv/cairn/services/consensus/transport"
	"github.com/cairn-kv/cairn/services/consensus/wal"
)

// Raft tuning: message size and inflight window as etcd sets them; the uncommitted tail is bounded so a
// leader without a quorum refuses proposals (too many requests) instead of buffering without limit. etcd sets
// no bound; 1 GiB holds what 1000 clients' puts of up to 1 MiB have in flight (64 MiB refused 1000 clients'
// 100 KiB puts on a healthy cluster, a fifth of them under load).
const (
	maxSizePerMsg             = 1 << 20
	maxInflightMsgs           = 512
	maxUncommittedEntriesSize = 1 << 30
)

// walMetadata is what every WAL segment records about its member: member ID and cluster ID.
func walMetadata(memberID, clusterID uint64) []byte {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b[0:8], memberID)
	binary.BigEndian.PutUint64(b[8:16], clusterID)
	return b
}

func parseWALMetadata(b []byte) (memberID, clusterID uint64, err error) {
	if len(b) != 16 {
		return 0, 0, fmt.Errorf("WAL metadata of %d bytes, want 16", len(b))
	}
	return binary.BigEndian.Uint64(b[0:8]), binary.BigEndian.Uint64(b[8:16]), nil
}

func (n *Node) walDir() string { return filepath.Join(n.cfg.DataDir, "wal") }

func (n *Node) walOptions() wal.Options {
	return wal.Options{SegmentSize: n.cfg.WALSegmentSize, Logger: n.log}
}

// bootstrap brings up raft from the WAL if there is one, else bootstraps a new cluster or joins an
// existing one as configured. It sets the member and cluster IDs, the WAL, raft's storage and the
// transport, and returns the RawNode with the configuration its log starts from.
func (n *Node) bootstrap(ctx context.Context) (*raft.RawNode, confPoint, error) {
	if wal.Exists(n.walDir()) {
		w, st, err := wal.Open(n.walDir(), n.walOptions())
		if err != nil {
			return nil, confPoint{}, fmt.Errorf("consensus: %w", err)
		}
		if !unfinishedBootstrap(st) || n.cfg.InitialClusterState != ClusterStateNew {
			return n.restart(ctx, w, st)
		}
		// A first start that failed before raft persisted anything (a peer port in use, say) left a WAL with
		// only its metadata: this member never voted nor accepted an entry, so bootstrapping again is safe,
		// where restarting from it would wait forever for a cluster it does not know.
		_ = w.Close()
		n.log.Warn("the WAL is that of a bootstrap that never completed; bootstrapping again", "wal-dir", n.walDir())
		if err := os.RemoveAll(n.walDir()); err != nil {
			return nil, confPoint{}, fmt.Errorf("consensus: remove the WAL of an unfinished bootstrap: %w", err)
		}
	}
	if err := n.cfg.verifyBootstrap(); err != nil {
		return nil, confPoint{}, fmt.Errorf("consensus: %w", err)
	}
	switch {
	case n.cfg.InitialClusterState == ClusterStateNew:
		return n.bootstrapNew()
	default:
		return n.join(ctx)
	}
}

func (n *Node) raftConfig(storage raft.Storage, applied uint64) *raft.Config {
	return &raft.Config{
		ID:                        n.memberID,
		ElectionTick:              n.cfg.electionTicks(),
		HeartbeatTick:             1,
		Storage:                   storage,
		Applied:                   applied,
		MaxSizePerMsg:             maxSizePerMsg,
		MaxInflightMsgs:           maxInflightMsgs,
		MaxUncommittedEntriesSize: maxUncommittedEntriesSize,
		CheckQuorum:               true,
		PreVote:                   true,
		ReadOnlyOption:            raft.ReadOnlySafe,
		StepDownOnRemoval:         true,
		Logger:                    newRaftLogger(n.log),
	}
}

func (n *Node) newTransport() error {
	t, err := transport.New(transport.Config{
		MemberID: n.memberID, ClusterID: n.clusterID, Raft: n, Logger: n.log,
		DialOptions: n.tel.DialOptions(), Faults: n.deps.Faults, Dialer: n.deps.Dialer, TLS: n.deps.Peer,
		MaxBackoff: min(time.Second, n.cfg.ElectionTimeout), Metrics: n.metrics.transport,
		HeartbeatInterval: n.cfg.HeartbeatInterval,
	})
	n.transport = t
	return err
}

// bootstrapNew starts a new cluster from --initial-cluster: every member gets etcd's ID from its peer URLs
// and the cluster token, and the log starts with one AddNode per member.
func (n *Node) bootstrapNew() (*raft.RawNode, confPoint, error) {
	cluster, err := parseInitialCluster(n.cfg.InitialCluster)
	if err != nil {
		return nil, confPoint{}, err
	}
	var ids []uint64
	var peers []raft.Peer
	for _, name := range slices.Sorted(maps.Keys(cluster)) {
		id := memberID(cluster[name], n.cfg.InitialClusterToken, nil)
		ids = append(ids, id)
		change := &consensuspb.MemberChange{Kind: consensuspb.MemberChange_ADD,
			Member: &consensuspb.Member{Id: id, Name: name, PeerUrls: cluster[name]}}
		ctx, err := proto.Marshal(change)
		if err != nil {
			return nil, confPoint{}, fmt.Errorf("consensus: marshal bootstrap member %s: %w", name, err)
		}
		peers = append(peers, raft.Peer{ID: id, Context: ctx})
	}
	n.memberID = memberID(n.cfg.InitialAdvertisePeerURLs, n.cfg.InitialClusterToken, nil)
	n.clusterID = clusterID(ids)
	rn, err := n.startEmpty()
	if err != nil {
		return nil, confPoint{}, err
	}
	if err := rn.Bootstrap(peers); err != nil {
		return nil, confPoint{}, fmt.Errorf("consensus: bootstrap raft: %w", err)
	}
	n.log.Info("bootstrapping a new cluster", "member-id", fmt.Sprintf("%x", n.memberID),
		"cluster-id", fmt.Sprintf("%x", n.clusterID), "initial-cluster", n.cfg.InitialCluster)
	return rn, confPoint{confState: &raftpb.ConfState{}, members: newMembership()}, n.newTransport()
}

// findSelf asks the cluster for its members until one of them lists this member's peer URLs (a member
// that has not applied the MemberAdd yet does not), and sets the member ID from it.
func (n *Node) findSelf(ctx context.Context) (*consensuspb.MembersResponse, error) {
	own := slices.Sorted(slices.Values(n.cfg.InitialAdvertisePeerURLs))
	for {
		resp, err := n.fetchMembers(ctx)
		if err != nil {
			return nil, err
		}
		for _, m := range resp.GetMembers() {
			if slices.Equal(slices.Sorted(slices.Values(m.GetPeerUrls())), own) {
				n.memberID = m.GetId()
				return resp, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("consensus: no member of cluster %x has peer URLs %v; add this member with MemberAdd first",
				resp.GetClusterId(), own)
		case <-time.After(n.cfg.HeartbeatInterval):
		}
	}
}

// startEmpty creates the WAL of a new member and a raft node with an empty log.
func (n *Node) startEmpty() (*raft.RawNode, error) {
	w, err := wal.Create(n.walDir(), walMetadata(n.memberID, n.clusterID), n.walOptions())
	if err != nil {
		return nil, fmt.Errorf("consensus: %w", err)
	}
	n.wal = w
	n.storage = newLogStore(w, n.log, n.metrics)
	rn, err := raft.NewRawNode(n.raftConfig(n.storage, 0))
	if err != nil {
		return nil, fmt.Errorf("consensus: start raft: %w", err)
	}
	return rn, nil
}

// join starts a member that MemberAdd announced: it asks the cluster for its members, finds itself by its
// peer URLs, and waits for the leader to send it the log.
func (n *Node) join(ctx context.Context) (*raft.RawNode, confPoint, error) {
	resp, err := n.findSelf(ctx)
	if err != nil {
		return nil, confPoint{}, err
	}
	n.clusterID = resp.GetClusterId()
	rn, err := n.startEmpty()
	if err != nil {
		return nil, confPoint{}, err
	}
	if err := n.newTransport(); err != nil {
		return nil, confPoint{}, err
	}
	n.seedPeers(resp.GetMembers())
	n.log.Info("joining an existing cluster", "member-id", fmt.Sprintf("%x", n.memberID),
		"cluster-id", fmt.Sprintf("%x", n.clusterID))
	return rn, confPoint{confState: &raftpb.ConfState{}, members: newMembership()}, nil
}

// restart rebuilds raft's storage from the WAL: the snapshot, the HardState and the entries after the
// snapshot. Raft then hands the committed entries after the snapshot out again, which re-applies the
// membership changes among them.
func (n *Node) restart(ctx context.Context, w *wal.WAL, st *wal.State) (*raft.RawNode, confPoint, error) {
	n.wal = w
	var err error
	if n.memberID, n.clusterID, err = parseWALMetadata(st.Metadata); err != nil {
		return nil, confPoint{}, fmt.Errorf("consensus: %s: %w", n.walDir(), err)
	}
	n.storage = newLogStore(w, n.log, n.metrics)
	point := confPoint{confState: &raftpb.ConfState{}, members: newMembership()}
	snapIndex := st.Snapshot.GetMetadata().GetIndex()
	if snapIndex > 0 {
		if err := n.storage.ApplySnapshot(st.Snapshot); err != nil {
			return nil, confPoint{}, fmt.Errorf("consensus: restore snapshot at %d: %w", snapIndex, err)
		}
		members, err := membershipOfSnapshot(st.Snapshot)
		if err != nil {
			return nil, confPoint{}, err
		}
		point = confPoint{index: snapIndex, confState: st.Snapshot.GetMetadata().GetConfState(), members: members}
		n.members = members.clone()
		n.deliver.reset(snapIndex)
	}
	if err := n.storage.SetHardState(st.HardState); err != nil {
		return nil, confPoint{}, fmt.Errorf("consensus: restore hard state: %w", err)
	}
	if err := n.storage.Append(st.Entries); err != nil {
		return nil, confPoint{}, fmt.Errorf("consensus: restore %d entries: %w", len(st.Entries), err)
	}
	rn, err := raft.NewRawNode(n.raftConfig(n.storage, snapIndex))
	if err != nil {
		return nil, confPoint{}, fmt.Errorf("consensus: restart raft: %w", err)
	}
	if err := n.newTransport(); err != nil {
		return nil, confPoint{}, err
	}
	n.seedPeers(n.members.sorted())
	if len(n.members.members) == 0 && n.cfg.InitialClusterState == ClusterStateExisting {
		// A joiner that stopped before receiving any log knows its peers only from them.
		if resp, err := n.fetchMembers(ctx); err == nil {
			n.seedPeers(resp.GetMembers())
		}
	}
	n.log.Info("restarted from the WAL", "member-id", fmt.Sprintf("%x", n.memberID), "snapshot-index", snapIndex,
		"entries", len(st.Entries), "term", st.HardState.GetTerm(), "commit-index", st.HardState.GetCommit())
	return rn, point, nil
}

// unfinishedBootstrap reports whether a WAL holds nothing raft ever persisted: no HardState, no entry, no
// snapshot.
func unfinishedBootstrap(st *wal.State) bool {
	hs := st.HardState
	return hs.GetTerm() == 0 && hs.GetVote() == 0 && hs.GetCommit() == 0 && len(st.Entries) == 0 &&
		st.Snapshot.GetMetadata().GetIndex() == 0
}

// seedPeers points the transport at members before the log says who they are.
func (n *Node) seedPeers(members []*consensuspb.Member) {
	for _, m := range members {
		if err := n.transport.AddPeer(m.GetId(), m.GetPeerUrls()); err != nil {
			n.log.Warn("cannot reach peer", "peer", fmt.Sprintf("%x", m.GetId()), "err", err)
		}
	}
}

// fetchMembers asks the other members named in --initial-cluster for the cluster's members.
func (n *Node) fetchMembers(ctx context.Context) (*consensuspb.MembersResponse, error) {
	cluster, err := parseInitialCluster(n.cfg.InitialCluster)
	if err != nil {
		return nil, err
	}
	var errs []error
	for name, urls := range cluster {
		if name == n.cfg.Name {
			continue
		}
		resp, err := askMembers(ctx, urls, n.deps.Peer)
		if err == nil {
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	return nil, fmt.Errorf("consensus: cannot fetch the cluster's members from --initial-cluster: %w", errors.Join(errs...))
}

func askMembers(ctx context.Context, urls []string, peerTLS *tlsconfig.Link) (*consensuspb.MembersResponse, error) {
	target, err := transport.Target(urls)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(target, peerTLS.DialOption())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return consensuspb.NewPeerClusterClient(conn).Members(ctx, &consensuspb.MembersRequest{})
}
