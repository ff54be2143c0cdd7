package consensus

import (
	"context"
	"errors"
	"fmt"
	"net"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/consensusclient"
	"github.com/cairn-kv/cairn/internal/rpctune"
	"github.com/cairn-kv/cairn/services/consensus/transport"
)

// serve starts the peer gRPC server (Peer and PeerCluster services) and, when configured, the Consensus
// API server.
func (n *Node) serve() error {
	peerListeners, err := listenAll(n.deps.PeerListeners, n.cfg.ListenPeerURLs)
	if err != nil {
		return err
	}
	peer := grpc.NewServer(append(append(n.tel.ServerOptions(), rpctune.ServerOptions()...), grpc.MaxRecvMsgSize(transport.MaxRecvMsgSize))...)
	n.transport.Register(peer)
	consensuspb.RegisterPeerClusterServer(peer, &peerClusterServer{n: n})
	n.servers = append(n.servers, peer)
	for _, lis := range peerListeners {
		n.servePeer(peer, lis)
	}
	var apiURLs []string
	if n.cfg.ListenConsensusURL != "" {
		apiURLs = []string{n.cfg.ListenConsensusURL}
	}
	var given []net.Listener
	if n.deps.ConsensusListener != nil {
		given = []net.Listener{n.deps.ConsensusListener}
	}
	apiListeners, err := listenAll(given, apiURLs)
	if err != nil {
		return err
	}
	if len(apiListeners) == 0 {
		return nil
	}
	api := grpc.NewServer(append(append(n.tel.ServerOptions(), rpctune.ServerOptions()...), grpc.MaxRecvMsgSize(transport.MaxRecvMsgSize))...)
	n.RegisterConsensus(api)
	n.servers = append(n.servers, api)
	for _, lis := range apiListeners {
		n.serveAPI(api, lis)
	}
	return nil
}

// listenAll returns the given listeners, or listens on the hosts of urls.
func listenAll(given []net.Listener, urls []string) ([]net.Listener, error) {
	if len(given) > 0 {
		return given, nil
	}
	var out []net.Listener
	for _, u := range urls {
		target, err := transport.Target([]string{u})
		if err == nil {
			var lis net.Listener
			if lis, err = net.Listen("tcp", target); err == nil {
				out = append(out, lis)
				continue
			}
		}
		for _, l := range out {
			l.Close()
		}
		return nil, fmt.Errorf("consensus: listen on %s: %w", u, err)
	}
	return out, nil
}

// RegisterConsensus adds the Consensus service of this node to s (Start does so on ListenConsensusURL).
func (n *Node) RegisterConsensus(s grpc.ServiceRegistrar) {
	consensuspb.RegisterConsensusServer(s, &consensusServer{n: n})
}

// consensusServer is the Consensus gRPC service over a Node.
type consensusServer struct {
	consensuspb.UnimplementedConsensusServer
	n *Node
}

func (s *consensusServer) Compact(ctx context.Context, req *consensuspb.CompactRequest) (*consensuspb.CompactResponse, error) {
	if err := s.n.Compact(ctx, req.GetAppliedIndex()); err != nil {
		return nil, toStatus(err)
	}
	return &consensuspb.CompactResponse{}, nil
}

func (s *consensusServer) Status(ctx context.Context, _ *consensuspb.StatusRequest) (*consensuspb.StatusResponse, error) {
	st, err := s.n.Status(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return consensusclient.StatusToProto(st), nil
}

func (s *consensusServer) MemberList(ctx context.Context, req *etcdserverpb.MemberListRequest) (*etcdserverpb.MemberListResponse, error) {
	resp, err := s.n.MemberList(ctx, req)
	return resp, toStatus(err)
}

func (s *consensusServer) MemberAdd(ctx context.Context, req *etcdserverpb.MemberAddRequest) (*etcdserverpb.MemberAddResponse, error) {
	resp, err := s.n.MemberAdd(ctx, req)
	return resp, toStatus(err)
}

func (s *consensusServer) MemberRemove(ctx context.Context, req *etcdserverpb.MemberRemoveRequest) (*etcdserverpb.MemberRemoveResponse, error) {
	resp, err := s.n.MemberRemove(ctx, req)
	return resp, toStatus(err)
}

func (s *consensusServer) MemberUpdate(ctx context.Context, req *etcdserverpb.MemberUpdateRequest) (*etcdserverpb.MemberUpdateResponse, error) {
	resp, err := s.n.MemberUpdate(ctx, req)
	return resp, toStatus(err)
}

func (s *consensusServer) MemberPromote(ctx context.Context, req *etcdserverpb.MemberPromoteRequest) (*etcdserverpb.MemberPromoteResponse, error) {
	resp, err := s.n.MemberPromote(ctx, req)
	return resp, toStatus(err)
}

func (s *consensusServer) MoveLeader(ctx context.Context, req *etcdserverpb.MoveLeaderRequest) (*etcdserverpb.MoveLeaderResponse, error) {
	resp, err := s.n.MoveLeader(ctx, req)
	return resp, toStatus(err)
}

// toStatus passes etcd's status errors through and turns context errors into their gRPC codes.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return status.FromContextError(err).Err()
	}
	return status.Convert(err).Err()
}

// peerClusterServer is the PeerCluster service: what members ask each other outside raft.
type peerClusterServer struct {
	consensuspb.UnimplementedPeerClusterServer
	n *Node
}

func (s *peerClusterServer) Members(context.Context, *consensuspb.MembersRequest) (*consensuspb.MembersResponse, error) {
	return &consensuspb.MembersResponse{ClusterId: s.n.clusterID, Members: s.n.sortedMembers()}, nil
}

func (s *peerClusterServer) PromoteMember(ctx context.Context, req *etcdserverpb.MemberPromoteRequest) (*etcdserverpb.MemberPromoteResponse, error) {
	resp, err := s.n.promoteAsLeader(ctx, req.GetID())
	return resp, toStatus(err)
}

// forwardPromote asks the leader to promote a learner.
func (n *Node) forwardPromote(ctx context.Context, req *etcdserverpb.MemberPromoteRequest) (*etcdserverpb.MemberPromoteResponse, error) {
	lead := n.lead.Load()
	if lead == 0 || lead == n.memberID {
		return nil, rpctypes.ErrGRPCNoLeader
	}
	n.mu.RLock()
	leader := n.members.members[lead]
	n.mu.RUnlock()
	target, err := transport.Target(leader.GetPeerUrls())
	if err != nil {
		return nil, rpctypes.ErrGRPCNoLeader
	}
	conn, err := grpc.NewClient(target, append(n.tel.DialOptions(), n.deps.Peer.DialOption())...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return consensuspb.NewPeerClusterClient(conn).PromoteMember(ctx, req)
}
