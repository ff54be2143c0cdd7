package leasekeeper

import (
	"context"
	"errors"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.opentelemetry.io/otel/trace"
)

// server is the gRPC face of a Keeper: etcd's Lease service.
type server struct {
	pb.UnimplementedLeaseServer
	k *Keeper
}

func (s *server) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	return s.k.Grant(ctx, r)
}

func (s *server) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	return s.k.Revoke(ctx, r)
}

func (s *server) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	return s.k.TimeToLive(ctx, r)
}

func (s *server) LeaseLeases(ctx context.Context, _ *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	return s.k.Leases(ctx)
}

// LeaseKeepAlive answers each request on the stream in order, as etcd: the lease's granted TTL, or 0 when it
// does not exist. A keeper that is not (or no longer) active ends the stream with keeperclaim.ErrNotActive, so
// the client (or the frontend) goes to the active one.
func (s *server) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	ctx := stream.Context()
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		renewCtx, span := s.k.stages.StartRoot(ctx, "leasekeeper.keepalive", "lease.keepalive", trace.SpanContextFromContext(ctx))
		ttl, err := s.k.Renew(renewCtx, req.ID)
		if err != nil {
			span.End()
			return err
		}
		err = stream.Send(&pb.LeaseKeepAliveResponse{Header: s.k.header(), ID: req.ID, TTL: ttl})
		span.End()
		if err != nil {
			return err
		}
	}
}
