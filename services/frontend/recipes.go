package frontend

import (
	"context"
	"errors"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-kv/cairn/api/v3electionpb"
	"github.com/cairn-kv/cairn/api/v3lockpb"
)

// errMissingLeaderKey is etcd's answer to a Proclaim or Resign without a leader key.
var errMissingLeaderKey = errors.New(`"leader" field must be provided`)

// newSelfClient is an etcd client of this frontend's own gRPC server over conn (its in-memory connection), as
// etcd's v3lock and v3election use an embedded client of their own server: the recipes go through the same
// checks, routing and auth as any client's calls.
func newSelfClient(ctx context.Context, conn *grpc.ClientConn) *clientv3.Client {
	c := clientv3.NewCtxClient(ctx)
	c.KV = clientv3.NewKVFromKVClient(pb.NewKVClient(conn), c)
	c.Lease = clientv3.NewLeaseFromLeaseClient(pb.NewLeaseClient(conn), c, 0)
	c.Watcher = clientv3.NewWatchFromWatchClient(pb.NewWatchClient(conn), c)
	return c
}

// asCaller carries the caller's auth token (gRPC metadata "token", or the gateway's "authorization") into
// the recipe's own calls, so they are checked as the caller's. A caller known by its client certificate has
// no token, and the recipe's calls travel without TLS: it gets one from this frontend (mint).
func asCaller(ctx context.Context, mint func(context.Context) string) context.Context {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, key := range []string{rpctypes.TokenFieldNameGRPC, rpctypes.TokenFieldNameSwagger} {
		if v := md.Get(key); len(v) > 0 {
			return metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, v[0])
		}
	}
	if token := mint(ctx); token != "" {
		return metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, token)
	}
	return ctx
}

// recipes serves etcd's Lock and Election services with etcd's server-side recipes (client/v3's concurrency
// package) over this frontend's own KV, Lease and Watch.
type recipes struct {
	v3lockpb.UnsafeLockServer
	v3electionpb.UnsafeElectionServer
	// client is set by Start, before anything is served.
	client func() *clientv3.Client
	// mint issues a token for a caller known without one (by its certificate); "" when there is none.
	mint func(context.Context) string
}

// session is a concurrency session on lease (a new one when 0), orphaned at once, as etcd's: the lease is
// the caller's to keep alive or revoke.
func (s *recipes) session(ctx context.Context, lease int64) (*concurrency.Session, error) {
	sess, err := concurrency.NewSession(s.client(), concurrency.WithLease(clientv3.LeaseID(lease)),
		concurrency.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	sess.Orphan()
	return sess, nil
}

// Lock acquires the named lock under req.Lease (etcd's v3lock).
func (s *recipes) Lock(ctx context.Context, req *v3lockpb.LockRequest) (*v3lockpb.LockResponse, error) {
	ctx = asCaller(ctx, s.mint)
	sess, err := s.session(ctx, req.Lease)
	if err != nil {
		return nil, err
	}
	m := concurrency.NewMutex(sess, string(req.Name))
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return &v3lockpb.LockResponse{Header: m.Header(), Key: []byte(m.Key())}, nil
}

// Unlock deletes the key Lock returned.
func (s *recipes) Unlock(ctx context.Context, req *v3lockpb.UnlockRequest) (*v3lockpb.UnlockResponse, error) {
	resp, err := s.client().Delete(asCaller(ctx, s.mint), string(req.Key))
	if err != nil {
		return nil, err
	}
	return &v3lockpb.UnlockResponse{Header: resp.Header}, nil
}

// Campaign waits until the caller leads the named election, under req.Lease.
func (s *recipes) Campaign(ctx context.Context, req *v3electionpb.CampaignRequest) (*v3electionpb.CampaignResponse, error) {
	ctx = asCaller(ctx, s.mint)
	sess, err := s.session(ctx, req.Lease)
	if err != nil {
		return nil, err
	}
	e := concurrency.NewElection(sess, string(req.Name))
	if err := e.Campaign(ctx, string(req.Value)); err != nil {
		return nil, err
	}
	return &v3electionpb.CampaignResponse{Header: e.Header(), Leader: &v3electionpb.LeaderKey{
		Name: req.Name, Key: []byte(e.Key()), Rev: e.Rev(), Lease: int64(sess.Lease()),
	}}, nil
}

// Proclaim sets the leader's value, if the caller still leads.
func (s *recipes) Proclaim(ctx context.Context, req *v3electionpb.ProclaimRequest) (*v3electionpb.ProclaimResponse, error) {
	if req.Leader == nil {
		return nil, errMissingLeaderKey
	}
	ctx = asCaller(ctx, s.mint)
	sess, err := s.session(ctx, req.Leader.Lease)
	if err != nil {
		return nil, err
	}
	e := concurrency.ResumeElection(sess, string(req.Leader.Name), string(req.Leader.Key), req.Leader.Rev)
	if err := e.Proclaim(ctx, string(req.Value)); err != nil {
		return nil, err
	}
	return &v3electionpb.ProclaimResponse{Header: e.Header()}, nil
}

// Observe streams the election's leaders as they change.
func (s *recipes) Observe(req *v3electionpb.LeaderRequest, stream v3electionpb.Election_ObserveServer) error {
	ctx := asCaller(stream.Context(), s.mint)
	sess, err := s.session(ctx, -1)
	if err != nil {
		return err
	}
	leaders := concurrency.NewElection(sess, string(req.Name)).Observe(ctx)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case resp, ok := <-leaders:
			if !ok {
				return nil
			}
			if err := stream.Send(&v3electionpb.LeaderResponse{Header: resp.Header, Kv: resp.Kvs[0]}); err != nil {
				return err
			}
		}
	}
}

// Leader answers the election's current leader.
func (s *recipes) Leader(ctx context.Context, req *v3electionpb.LeaderRequest) (*v3electionpb.LeaderResponse, error) {
	ctx = asCaller(ctx, s.mint)
	sess, err := s.session(ctx, -1)
	if err != nil {
		return nil, err
	}
	l, err := concurrency.NewElection(sess, string(req.Name)).Leader(ctx)
	if err != nil {
		return nil, err
	}
	return &v3electionpb.LeaderResponse{Header: l.Header, Kv: l.Kvs[0]}, nil
}

// Resign gives up leadership, if the caller leads.
func (s *recipes) Resign(ctx context.Context, req *v3electionpb.ResignRequest) (*v3electionpb.ResignResponse, error) {
	if req.Leader == nil {
		return nil, errMissingLeaderKey
	}
	ctx = asCaller(ctx, s.mint)
	sess, err := s.session(ctx, req.Leader.Lease)
	if err != nil {
		return nil, err
	}
	e := concurrency.ResumeElection(sess, string(req.Leader.Name), string(req.Leader.Key), req.Leader.Rev)
	if err := e.Resign(ctx); err != nil {
		return nil, err
	}
	return &v3electionpb.ResignResponse{Header: e.Header()}, nil
}
