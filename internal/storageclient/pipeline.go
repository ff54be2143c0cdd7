package storageclient

import (
	"context"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/link"
	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/tlsconfig"
)

// pipelineLanes is how many connections a Pipeline spreads its calls over, so that one large answer holds up only
// the calls on its own connection.
const pipelineLanes = 2

// Pipeline sends Submit and Range calls to one storage over a link (internal/link; see storagepb.PipelinePreamble)
// instead of a gRPC call each. Each call answers as the unary RPC would, errors included; a call that certainly
// did not reach storage (no connection, storage refusing before it starts, storage stopping) fails with an error
// marked link.ErrNotSent, so the caller may send it elsewhere.
//
// A call waits at most the pipeline's bound (or until its context's earlier deadline) without a timer of its
// own: storage is told the deadline and answers by then with etcd's timeout error, and should it not, the link's
// sweep fails the call with rpctypes.ErrGRPCTimeout.
type Pipeline struct{ link *link.Client }

// NewPipeline returns a pipeline to the storage at addr (host:port) whose calls wait at most bound; tel, when
// not nil, carries each call's trace context to storage (and records a span per call while spans are recorded).
// Its connections open in the background, so the first calls need not pay for them.
func NewPipeline(addr string, bound time.Duration, tel *obs.Telemetry, secure *tlsconfig.Link) *Pipeline {
	return &Pipeline{link: link.NewClient(link.ClientConfig{
		Addr: addr, Preamble: storagepb.PipelinePreamble, Lanes: pipelineLanes, Bound: bound, TLS: secure,
		Expired: rpctypes.ErrGRPCTimeout, DialAhead: true,
		Telemetry: tel, Name: "storage.pipeline", MethodNames: storagepb.PipelineMethodNames,
	})}
}

// Submit is Client.Submit over the pipeline.
func (p *Pipeline) Submit(ctx context.Context, req *pb.InternalRaftRequest) (*storagepb.SubmitResponse, error) {
	body, err := encodeSubmit(req)
	if err != nil {
		return nil, link.NotSent(status.Errorf(codes.Internal, "cairn storage pipeline: encode submit: %v", err))
	}
	answer, err := p.link.Call(ctx, storagepb.PipelineSubmit, body)
	if err != nil {
		return nil, err
	}
	resp := &storagepb.SubmitResponse{}
	if err := proto.Unmarshal(answer, resp); err != nil {
		return nil, status.Errorf(codes.Internal, "cairn storage pipeline: decode submit answer: %v", err)
	}
	return resp, nil
}

// submitRequestField is storagepb.SubmitRequest's request field.
const submitRequestField protowire.Number = 1

// encodeSubmit is the encoding of storagepb.SubmitRequest{Request: req}, written without building that
// message (one allocation less per write): the request field, then req's own encoding.
func encodeSubmit(req *pb.InternalRaftRequest) ([]byte, error) {
	size := proto.Size(req)
	body := make([]byte, 0, protowire.SizeTag(submitRequestField)+protowire.SizeBytes(size))
	body = protowire.AppendTag(body, submitRequestField, protowire.BytesType)
	body = protowire.AppendVarint(body, uint64(size))
	return proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(body, req) // Size just cached the sizes
}

// Range is Client.Range over the pipeline. authFence, when not 0, is the read fence (authstate.State.ReadFence)
// of the auth store the caller checked the read against: storage refuses the read with
// rpctypes.ErrGRPCAuthOldRevision when its own fence is higher once it has read (for a linearizable read: once
// it has applied the read index).
func (p *Pipeline) Range(ctx context.Context, req *pb.RangeRequest, authFence uint64) (*pb.RangeResponse, error) {
	encoded, err := p.RangeEncoded(ctx, req, authFence)
	if err != nil {
		return nil, err
	}
	defer encoded.Free()
	resp := &pb.RangeResponse{}
	if err := proto.Unmarshal(encoded.Materialize(), resp); err != nil {
		return nil, status.Errorf(codes.Internal, "cairn storage pipeline: decode range answer: %v", err)
	}
	return resp, nil
}

// RangeEncoded is Range answered with the RangeResponse in its wire encoding, as storage sent it, for passing
// on undecoded: the bytes of the frame it arrived in (no copy is made), which the caller owns.
func (p *Pipeline) RangeEncoded(ctx context.Context, req *pb.RangeRequest, authFence uint64) (mem.BufferSlice, error) {
	method, msg := storagepb.PipelineRange, proto.Message(req)
	if authFence != 0 {
		method = storagepb.PipelineRangeChecked
		msg = &pb.InternalRaftRequest{Header: &pb.RequestHeader{AuthRevision: authFence}, Range: req}
	}
	body, err := proto.Marshal(msg)
	if err != nil {
		return nil, link.NotSent(status.Errorf(codes.Internal, "cairn storage pipeline: encode range: %v", err))
	}
	answer, err := p.link.Call(ctx, method, body)
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(answer)}, nil
}

// Close ends the pipeline's connections; calls in flight fail.
func (p *Pipeline) Close() { p.link.Close() }
