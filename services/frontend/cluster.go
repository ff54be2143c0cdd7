package frontend

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errNoConsensus is returned when no consensus endpoint is configured.
var errNoConsensus = status.Error(codes.Unavailable, "cairn frontend: no consensus endpoint is configured")

// clusterServer is etcd's Cluster service, served by consensus (which answers with etcd's messages, headers
// and errors). MemberList is tried on every consensus in turn; changes go to the leader's consensus first
// and move on only when the request certainly was not sent.
type clusterServer struct {
	pb.UnimplementedClusterServer
	f *Frontend
}

// onConsensus calls op on the consensus replicas, the leader's first. A read (idempotent) moves on at any
// unavailability, a change only when it was not sent.
func onConsensus[T any](f *Frontend, ctx context.Context, idempotent bool, op func(context.Context, *consensusReplica) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.RequestTimeout)
	defer cancel()
	var zero T
	order := f.pool.view().consensusLeaderFirst
	if len(order) == 0 {
		return zero, errNoConsensus
	}
	var err error
	for _, c := range order {
		var resp T
		if resp, err = op(ctx, c); err == nil {
			return resp, nil
		}
		if isConnectionFailure(err) {
			c.healthy.Store(false)
			f.pool.refresh()
		}
		if ctx.Err() != nil || (idempotent && !retryRead(ctx, err)) || (!idempotent && classify(err) != failedNotSent) {
			break
		}
	}
	if !idempotent {
		return zero, writeError(ctx, err)
	}
	return zero, replyError(ctx, err)
}

func (s *clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	return onConsensus(s.f, ctx, true, func(ctx context.Context, c *consensusReplica) (*pb.MemberListResponse, error) {
		return c.client.MemberList(ctx, r)
	})
}

func (s *clusterServer) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	resp, err := onConsensus(s.f, ctx, false, func(ctx context.Context, c *consensusReplica) (*pb.MemberAddResponse, error) {
		return c.client.MemberAdd(ctx, r)
	})
	s.f.pool.refresh() // discover the new member's storage soon
	return resp, err
}

func (s *clusterServer) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	resp, err := onConsensus(s.f, ctx, false, func(ctx context.Context, c *consensusReplica) (*pb.MemberRemoveResponse, error) {
		return c.client.MemberRemove(ctx, r)
	})
	s.f.pool.refresh()
	return resp, err
}

func (s *clusterServer) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	return onConsensus(s.f, ctx, false, func(ctx context.Context, c *consensusReplica) (*pb.MemberUpdateResponse, error) {
		return c.client.MemberUpdate(ctx, r)
	})
}

func (s *clusterServer) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	return onConsensus(s.f, ctx, false, func(ctx context.Context, c *consensusReplica) (*pb.MemberPromoteResponse, error) {
		return c.client.MemberPromote(ctx, r)
	})
}

// moveLeader hands leadership to r.TargetID through the leader's consensus, whichever member this frontend
// speaks for: a frontend is no member of its own, so it forwards instead of answering "not leader". A stale
// idea of the leader is corrected by one fresh probe.
func (f *Frontend) moveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	var resp *pb.MoveLeaderResponse
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		resp, err = onConsensus(f, ctx, false, func(ctx context.Context, c *consensusReplica) (*pb.MoveLeaderResponse, error) {
			return c.client.MoveLeader(ctx, r)
		})
		if status.Code(err) != status.Code(rpctypes.ErrGRPCNotLeader) || rpctypes.ErrorDesc(err) != rpctypes.ErrorDesc(rpctypes.ErrGRPCNotLeader) {
			break
		}
		f.pool.probe(ctx)
	}
	return resp, err
}
