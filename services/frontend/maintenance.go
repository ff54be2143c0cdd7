package frontend

import (
	"context"

	"github.com/coreos/go-semver/semver"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// Versions Cairn reports: the etcd API version it implements (clients gate features on it), the cluster
// version (major.minor) Downgrade answers with, and the storage version Status reports (etcd v3.7.3's:
// etcdctl endpoint status shows it as STORAGE VERSION).
const (
	ServerVersion  = "3.7.3"
	ClusterVersion = "3.7"
	StorageVersion = "3.7.0"
)

var errUnknownMethod = status.Error(codes.Unknown, "etcdserver: unknown method")

// maintenanceServer is etcd's Maintenance service. Status, Hash, HashKV, Snapshot and Defragment speak for the
// home member (see Config.Name); Alarm goes through storage like a write (GET like a read); MoveLeader to
// the leader's consensus.
type maintenanceServer struct {
	pb.UnimplementedMaintenanceServer
	f *Frontend
}

// home returns the view and the home member's storage, or fails when none is reachable.
func (f *Frontend) home() (*view, *storageReplica, error) {
	v := f.pool.view()
	if v.home == nil {
		f.pool.refresh()
		return v, nil, status.Error(codes.Unavailable, "cairn frontend: no reachable storage to speak for")
	}
	return v, v.home, nil
}

func (s *maintenanceServer) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	v, home, err := s.f.home()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.f.cfg.RequestTimeout)
	defer cancel()
	st, err := home.clients[0].Status(ctx)
	if err != nil {
		if isConnectionFailure(err) {
			s.f.pool.markDown(home, err)
		}
		return nil, replyError(ctx, err)
	}
	resp := &pb.StatusResponse{
		Header: &pb.ResponseHeader{Revision: st.Revision}, Version: ServerVersion,
		DbSize: st.DbSize, DbSizeInUse: st.DbSizeInUse, Leader: st.Leader, RaftIndex: st.RaftIndex,
		RaftTerm: st.RaftTerm, RaftAppliedIndex: st.AppliedIndex, DbSizeQuota: st.DbSizeQuota,
		DowngradeInfo: &pb.DowngradeInfo{}, StorageVersion: StorageVersion,
	}
	if m, ok := v.memberOf(st.MemberId); ok {
		resp.IsLearner = m.IsLearner
	}
	v.fillHeader(resp.Header, home)
	resp.Header.MemberId = st.MemberId
	if st.RaftTerm > 0 {
		resp.Header.RaftTerm = st.RaftTerm
	}
	if st.Leader == 0 {
		resp.Errors = append(resp.Errors, rpctypes.ErrorDesc(rpctypes.ErrGRPCNoLeader))
	}
	for _, a := range st.Alarms {
		resp.Errors = append(resp.Errors, a.String())
	}
	return resp, nil
}

// Hash is the home member's hash of its whole backend (storage's BackendHash). Its value is Cairn's own (the
// bbolt layout is not etcd's), equal on members that applied the same entries.
func (s *maintenanceServer) Hash(ctx context.Context, _ *pb.HashRequest) (*pb.HashResponse, error) {
	return askHome(ctx, s.f, func(ctx context.Context, c *storageclient.Client) (*pb.HashResponse, error) {
		return c.BackendHash(ctx)
	})
}

func (s *maintenanceServer) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	return askHome(ctx, s.f, func(ctx context.Context, c *storageclient.Client) (*pb.HashKVResponse, error) {
		return c.Hash(ctx, r.Revision)
	})
}

// askHome calls the home member's storage, bounded by the request timeout, and completes the answer's header
// (storage sets its revision).
func askHome[R interface{ GetHeader() *pb.ResponseHeader }](ctx context.Context, f *Frontend,
	call func(context.Context, *storageclient.Client) (R, error)) (R, error) {
	var none R
	v, home, err := f.home()
	if err != nil {
		return none, err
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.RequestTimeout)
	defer cancel()
	resp, err := call(ctx, home.client())
	if err != nil {
		return none, replyError(ctx, err)
	}
	v.fillHeader(resp.GetHeader(), home)
	return resp, nil
}

func (s *maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	resp, err := s.f.submit(ctx, &pb.InternalRaftRequest{Alarm: r}, nil)
	if err != nil {
		return nil, err
	}
	return resp.GetAlarm(), nil
}

// Defragment defragments the home member's storage, as etcd defragments the member it is asked on. Like
// etcd's, the answer carries no header.
func (s *maintenanceServer) Defragment(ctx context.Context, _ *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	_, home, err := s.f.home()
	if err != nil {
		return nil, err
	}
	if _, err := home.clients[0].Defragment(ctx); err != nil {
		return nil, replyError(ctx, err)
	}
	return &pb.DefragmentResponse{}, nil
}

func (s *maintenanceServer) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	return s.f.moveLeader(ctx, r)
}

// Downgrade answers as etcd does when a downgrade is impossible: Cairn runs one version, so no target is
// valid (after etcd's format check), and there is never a downgrade job to cancel, which etcd answers with
// success and the cluster version.
func (s *maintenanceServer) Downgrade(_ context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	switch r.Action {
	case pb.DowngradeRequest_VALIDATE, pb.DowngradeRequest_ENABLE:
		if _, err := semver.NewVersion(r.Version); err != nil {
			if _, err := semver.NewVersion(r.Version + ".0"); err != nil {
				return nil, rpctypes.ErrGRPCWrongDowngradeVersionFormat
			}
		}
		return nil, rpctypes.ErrGRPCInvalidDowngradeTargetVersion
	case pb.DowngradeRequest_CANCEL:
		v := s.f.pool.view()
		resp := &pb.DowngradeResponse{Header: &pb.ResponseHeader{}, Version: ClusterVersion}
		v.fillHeader(resp.Header, v.home)
		if v.home != nil {
			if st := v.home.status.Load(); st != nil {
				resp.Header.Revision = st.Revision
			}
		}
		return resp, nil
	default:
		return nil, errUnknownMethod
	}
}

// Snapshot streams the home member's storage database as etcd does: blobs with the bytes remaining, then one
// message whose blob is the SHA-256 of everything sent (which etcdctl's snapshot save expects at the end). The
// storage's own checksum is verified on the way.
func (s *maintenanceServer) Snapshot(_ *pb.SnapshotRequest, stream pb.Maintenance_SnapshotServer) error {
	_, home, err := s.f.home()
	if err != nil {
		return err
	}
	ctx := stream.Context()
	w := &snapshotRelay{stream: stream}
	if err := home.clients[0].SnapshotChunks(ctx, w.relay); err != nil {
		return replyError(ctx, err)
	}
	return stream.Send(&pb.SnapshotResponse{Blob: w.sum})
}

// snapshotRelay turns storage SnapshotChunks into etcd SnapshotResponses.
type snapshotRelay struct {
	stream pb.Maintenance_SnapshotServer
	total  uint64
	sent   uint64
	sum    []byte
}

func (w *snapshotRelay) relay(chunk *storagepb.SnapshotChunk) error {
	if chunk.TotalSize > 0 {
		w.total = chunk.TotalSize
	}
	w.sent += uint64(len(chunk.Blob))
	if chunk.Sha256 != nil {
		w.sum = chunk.Sha256
	}
	if len(chunk.Blob) == 0 {
		return nil
	}
	return w.stream.Send(&pb.SnapshotResponse{RemainingBytes: w.total - min(w.sent, w.total), Blob: chunk.Blob})
}
