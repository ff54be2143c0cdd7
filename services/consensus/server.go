package consensus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/pkg/cairnpb/consensuspb"
	"github.com/cairn-kv/cairn/pkg/commitlog"
	"github.com/cairn-kv/cairn/pkg/consensusclient"
	"github.com/cairn-kv/cairn/pkg/rpctune"
	"github.com/cairn-kv/cairn/services/consensus/transport"
)

// serve starts the peer gRPC server (Peer and PeerCluster services) and, when configured, the Consensus
// API server.
func (n *Node) serve() error {
	peerListeners, err := listenAll(n.cfg.PeerListeners, n.cfg.ListenPeerURLs)
	if err != nil {
		return err
	}
	peer := grpc.NewServer(append(append(n.tel.ServerOptions(), rpctune.ServerOptions()...), grpc.MaxRecvMsgSize(transport.MaxRecvMsgSize))...)
	n.transport.Register(peer)
	consensuspb.RegisterPeerClusterServer(peer, &peerClusterServer{n: n})
	n.servers = append(n.servers, peer)
	for _, lis := range peerListeners {
		go n.serveOn(peer, lis, "peer")
	}
	var apiURLs []string
	if n.cfg.ListenConsensusURL != "" {
		apiURLs = []string{n.cfg.ListenConsensusURL}
	}
	var given []net.Listener
	if n.cfg.ConsensusListener != nil {
		given = []net.Listener{n.cfg.ConsensusListener}
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
		go n.serveOn(api, lis, "consensus")
	}
	return nil
}

func (n *Node) serveOn(s *grpc.Server, lis net.Listener, what string) {
	if err := s.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		n.log.Error("gRPC server stopped", "listener", what, "addr", lis.Addr().String(), "err", err)
	}
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

func (s *consensusServer) Propose(stream grpc.BidiStreamingServer[consensuspb.ProposeRequest, consensuspb.ProposeResponse]) error {
	acks := newAckQueue(s.n.stopping)
	sent := make(chan error, 1)
	go func() { sent <- acks.sendAll(stream) }()
	err := s.receiveProposals(stream, acks)
	acks.close()
	if sendErr := <-sent; err == nil {
		err = sendErr
	}
	return err
}

// receiveProposals submits every proposal of the stream; acks go out as raft takes or refuses them.
func (s *consensusServer) receiveProposals(stream grpc.BidiStreamingServer[consensuspb.ProposeRequest, consensuspb.ProposeResponse], acks *ackQueue) error {
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, p := range req.GetProposals() {
			id := p.GetId()
			acks.expect()
			pctx := s.n.tel.Extract(ctx, p.GetTrace())
			if err := s.n.submit(pctx, p.GetData(), func(err error) { acks.push(id, err) }); err != nil {
				acks.push(id, err)
			}
		}
	}
}

func (s *consensusServer) Committed(req *consensuspb.CommittedRequest, stream grpc.ServerStreamingServer[consensuspb.CommittedResponse]) error {
	return toStatus(s.n.Committed(stream.Context(), req.GetFromIndex(), func(batch []commitlog.Entry) error {
		resp := &consensuspb.CommittedResponse{Entries: make([]*consensuspb.Entry, len(batch))}
		for i, e := range batch {
			resp.Entries[i] = consensusclient.EntryToProto(e)
		}
		return stream.Send(resp)
	}))
}

func (s *consensusServer) ReadIndex(ctx context.Context, _ *consensuspb.ReadIndexRequest) (*consensuspb.ReadIndexResponse, error) {
	index, err := s.n.ReadIndex(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	return &consensuspb.ReadIndexResponse{Index: index}, nil
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
	conn, err := grpc.NewClient(target, append(n.tel.DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return consensuspb.NewPeerClusterClient(conn).PromoteMember(ctx, req)
}

// ackQueue collects proposal acknowledgements of one Propose stream for its sending goroutine.
type ackQueue struct {
	mu      sync.Mutex
	acks    []*consensuspb.ProposeAck
	pending int // proposals submitted but not yet acknowledged
	closed  bool
	ready   chan struct{}
	// stopping ends the wait for pending acks: a stopping member may never answer them.
	stopping <-chan struct{}
}

func newAckQueue(stopping <-chan struct{}) *ackQueue {
	return &ackQueue{ready: make(chan struct{}, 1), stopping: stopping}
}

func (q *ackQueue) expect() {
	q.mu.Lock()
	q.pending++
	q.mu.Unlock()
}

func (q *ackQueue) push(id uint64, err error) {
	ack := &consensuspb.ProposeAck{Id: id}
	if err != nil {
		st := status.Convert(toStatus(err))
		ack.Code, ack.Message = uint32(st.Code()), st.Message()
	}
	q.mu.Lock()
	q.acks = append(q.acks, ack)
	q.pending--
	q.mu.Unlock()
	q.signal()
}

// close says no more proposals will come; sendAll returns once every expected ack is sent.
func (q *ackQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

func (q *ackQueue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// sendAll sends acknowledgements in batches until the queue is closed and drained.
func (q *ackQueue) sendAll(stream grpc.BidiStreamingServer[consensuspb.ProposeRequest, consensuspb.ProposeResponse]) error {
	for {
		stopping := false
		select {
		case <-q.ready:
		case <-q.stopping:
			stopping = true
		}
		q.mu.Lock()
		acks, done := q.acks, stopping || (q.closed && q.pending == 0)
		q.acks = nil
		q.mu.Unlock()
		if len(acks) > 0 {
			if err := stream.Send(&consensuspb.ProposeResponse{Acks: acks}); err != nil {
				return err
			}
		}
		if done {
			return nil
		}
	}
}
