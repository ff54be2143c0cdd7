package frontend

import (
	"context"
	"errors"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/etcdcheck"
	"github.com/cairn-kv/cairn/internal/wiremsg"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
)

// kvServer is etcd's KV service: requests are checked as etcd's API layer checks them, then writes go to a
// storage's Submit and reads to a storage's Range.
type kvServer struct {
	pb.UnimplementedKVServer
	f *Frontend
	// writes holds *writeRequest values for reuse: a write's InternalRaftRequest is a 300-byte message that
	// lives only until its Submit is encoded and answered.
	writes sync.Pool
}

// writeRequest is a KV write as it is submitted to storage, with room for its header.
type writeRequest struct {
	raft   pb.InternalRaftRequest
	header pb.RequestHeader
}

// submitWrite submits the write set on a reused request by set (one of its fields), and gives the request
// back once storage has answered: nothing keeps it after submit returns (its encoding is what was sent).
func (s *kvServer) submitWrite(ctx context.Context, set func(*pb.InternalRaftRequest)) (*storagepb.SubmitResponse, error) {
	w, _ := s.writes.Get().(*writeRequest)
	if w == nil {
		w = &writeRequest{}
	}
	set(&w.raft)
	resp, err := s.f.submit(ctx, &w.raft, &w.header)
	w.raft.Reset()
	w.header.Reset()
	s.writes.Put(w)
	return resp, err
}

func (s *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	var resp *pb.RangeResponse
	v, served, err := s.readRange(ctx, r, func(ctx context.Context, rep *storageReplica, authFence uint64) (err error) {
		resp, err = rep.kv().Range(ctx, r, authFence)
		return err
	})
	if err != nil {
		return nil, err
	}
	v.fillHeader(resp.Header, served)
	return resp, nil
}

// rangeMethod is KV.Range's full gRPC method name.
const rangeMethod = "/etcdserverpb.KV/Range"

// relayRange is the innermost unary interceptor of the client server. It answers KV.Range with storage's own
// encoding of the response, after the frontend's header fields, instead of decoding the response and encoding it
// again (a Kubernetes LIST is megabytes); the client decodes the same message. Other calls go to their handler.
func (s *kvServer) relayRange(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	r, ok := req.(*pb.RangeRequest)
	if !ok || info.FullMethod != rangeMethod {
		return handler(ctx, req)
	}
	var encoded mem.BufferSlice
	v, served, err := s.readRange(ctx, r, func(ctx context.Context, rep *storageReplica, authFence uint64) (err error) {
		encoded, err = rep.rangeEncoded(ctx, r, authFence)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &wiremsg.Encoded{Parts: append(mem.BufferSlice{mem.SliceBuffer(v.headerField(served))}, encoded...)}, nil
}

// readRange checks r as etcd does, its permission included (fencedRead), and runs read on the storages, in
// the order r's consistency asks for, until one answers; it returns the view it used and the storage that
// answered.
func (s *kvServer) readRange(ctx context.Context, r *pb.RangeRequest,
	read func(context.Context, *storageReplica, uint64) error) (v *view, served *storageReplica, err error) {
	if err := etcdcheck.Range(r); err != nil {
		return nil, nil, err
	}
	err = s.f.auth.fencedRead(ctx, func(st *gateState, c caller) error { return checkRange(st, c, r) },
		func(ctx context.Context, authFence uint64) (err error) {
			// The pipeline bounds its calls itself (storage's timeout answer, or the link's sweep), without a
			// timer per call.
			v = s.f.pool.view()
			served, err = s.f.readOn(ctx, v.rangeOrder(r), func(rep *storageReplica) error {
				return read(ctx, rep, authFence)
			})
			return err
		})
	return v, served, err
}

// readOrder is where a read goes: serializable reads to the nearest storage, linearizable ones to the
// leader's (its read index needs no forwarding).
func (v *view) readOrder(serializable bool) []*storageReplica {
	if serializable {
		return v.nearestFirst
	}
	return v.leaderFirst
}

// rangeOrder is where a Range goes: as readOrder says, except that a linearizable range that may return many
// keys goes to the nearest storage too. Every storage answers a linearizable read after a ReadIndex of its
// own, so large reads (a Kubernetes LIST) spread over the members' storages as they spread over etcd's
// members; a point read is cheaper on the leader's storage, whose ReadIndex is not forwarded.
func (v *view) rangeOrder(r *pb.RangeRequest) []*storageReplica {
	manyKeys := len(r.RangeEnd) > 0 && !r.CountOnly && r.Limit != 1
	return v.readOrder(r.Serializable || manyKeys)
}

func (s *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	resp, err := s.submitWrite(ctx, func(req *pb.InternalRaftRequest) { req.Put = r })
	if err != nil {
		return nil, err
	}
	return resp.GetPut(), nil
}

func (s *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	resp, err := s.submitWrite(ctx, func(req *pb.InternalRaftRequest) { req.DeleteRange = r })
	if err != nil {
		return nil, err
	}
	return resp.GetDeleteRange(), nil
}

func (s *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	resp, err := s.submitWrite(ctx, func(req *pb.InternalRaftRequest) { req.Txn = r })
	if err != nil {
		return nil, err
	}
	return resp.GetTxn(), nil
}

func (s *kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	resp, err := s.submitWrite(ctx, func(req *pb.InternalRaftRequest) { req.Compaction = r })
	if err != nil {
		return nil, err
	}
	return resp.GetCompaction(), nil
}

// submit checks req as etcd does and sends it to a storage's Submit: writes to the leader's storage, never
// retried once they may have been proposed; read-only requests (a Txn of ranges, an Alarm GET) as reads,
// retried on another storage when one is unavailable. The answer's header is completed. A req without a header
// gets one (authGate.requestHeader), in spareHeader when it is not nil.
func (f *Frontend) submit(ctx context.Context, req *pb.InternalRaftRequest, spareHeader *pb.RequestHeader) (*storagepb.SubmitResponse, error) {
	if err := etcdcheck.Write(req, f.cfg.limits()); err != nil {
		return nil, err
	}
	readOnly, serializable := readOnlyRequest(req)
	if req.Header == nil {
		req.Header = f.auth.requestHeader(ctx, readOnly, spareHeader)
	}
	// Storage bounds a write by its own request timeout and answers with etcd's error; the pipeline's bound
	// (storageCallBound) is a little longer so that answer arrives first.
	v := f.pool.view()
	var resp *storagepb.SubmitResponse
	call := func(rep *storageReplica) (err error) {
		resp, err = rep.kv().Submit(ctx, req)
		return err
	}
	var served *storageReplica
	var err error
	if readOnly {
		served, err = f.readOn(ctx, v.readOrder(serializable), call)
	} else {
		served, err = f.writeOn(ctx, v.leaderFirst, call)
	}
	if err != nil {
		if errors.Is(err, rpctypes.ErrGRPCAuthOldRevision) {
			f.auth.kickRefresh()
		}
		return nil, err
	}
	v.fillHeader(resp.ResponseHeader(), served)
	return resp, nil
}

// readOnlyRequest reports whether storage answers req without the log (a Txn of ranges only, an Alarm GET),
// and whether it reads serializably.
func readOnlyRequest(req *pb.InternalRaftRequest) (readOnly, serializable bool) {
	switch {
	case req.Txn != nil:
		serializable = true
		for _, ops := range [][]*pb.RequestOp{req.Txn.Success, req.Txn.Failure} {
			for _, op := range ops {
				rr := op.GetRequestRange()
				if rr == nil {
					return false, false
				}
				serializable = serializable && rr.Serializable
			}
		}
		return true, serializable
	case req.Alarm != nil:
		return req.Alarm.Action == pb.AlarmRequest_GET, true
	}
	return false, false
}
