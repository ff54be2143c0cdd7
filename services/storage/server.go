package storage

import (
	"context"
	"strconv"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// server is the gRPC face of a Storage: each RPC calls the method of the same name.
type server struct {
	storagepb.UnimplementedStorageServer
	s *Storage
}

func (g *server) Submit(ctx context.Context, r *storagepb.SubmitRequest) (*storagepb.SubmitResponse, error) {
	g.s.served.grpc.Add(1)
	return g.s.submitRequest(ctx, r)
}

// submitRequest serves a SubmitRequest, from gRPC or a pipeline.
func (s *Storage) submitRequest(ctx context.Context, r *storagepb.SubmitRequest) (*storagepb.SubmitResponse, error) {
	g := &server{s: s}
	if r.KeeperClaim != nil {
		return g.s.ClaimKeeper(ctx, r.KeeperClaim)
	}
	return g.s.SubmitFenced(ctx, r.Request, r.KeeperEpoch)
}

func (g *server) KeeperStatus(ctx context.Context, _ *storagepb.KeeperStatusRequest) (*storagepb.KeeperState, error) {
	return g.s.KeeperStatus(ctx)
}

func (g *server) AuthState(ctx context.Context, r *storagepb.AuthStateRequest) (*storagepb.AuthStateResponse, error) {
	return g.s.AuthState(ctx, r)
}

func (g *server) AuthToken(ctx context.Context, r *storagepb.AuthTokenRequest) (*storagepb.AuthTokenResponse, error) {
	return g.s.AuthToken(ctx, r)
}

func (g *server) LeaseRecords(r *storagepb.LeaseRecordsRequest, stream grpc.ServerStreamingServer[storagepb.LeaseRecordsResponse]) error {
	return g.s.LeaseRecords(stream.Context(), r, stream.Send)
}

func (g *server) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	g.s.served.grpc.Add(1)
	return g.s.Range(ctx, r)
}

func (g *server) History(r *storagepb.HistoryRequest, stream grpc.ServerStreamingServer[storagepb.HistoryResponse]) error {
	err := g.s.History(stream.Context(), r, stream.Send)
	if err != nil && storageclient.IsCompacted(err) {
		rev := g.s.currentStore().Position().CompactRev
		stream.SetTrailer(metadata.Pairs(storageclient.CompactRevisionTrailer, strconv.FormatInt(rev, 10)))
		return rpctypes.ErrGRPCCompacted
	}
	return err
}

func (g *server) Hash(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	return g.s.Hash(ctx, r)
}

func (g *server) BackendHash(ctx context.Context, r *pb.HashRequest) (*pb.HashResponse, error) {
	return g.s.BackendHash(ctx, r)
}

func (g *server) Snapshot(_ *storagepb.SnapshotRequest, stream grpc.ServerStreamingServer[storagepb.SnapshotChunk]) error {
	return g.s.Snapshot(stream.Context(), stream.Send)
}

func (g *server) Status(ctx context.Context, _ *storagepb.StatusRequest) (*storagepb.StatusResponse, error) {
	return g.s.Status(ctx)
}

func (g *server) Defragment(ctx context.Context, _ *storagepb.DefragmentRequest) (*storagepb.DefragmentResponse, error) {
	return g.s.Defragment(ctx)
}

func (g *server) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	return g.s.LeaseTimeToLive(ctx, r)
}

func (g *server) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	return g.s.LeaseLeases(ctx, r)
}
