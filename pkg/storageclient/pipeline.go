package storageclient

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/pkg/cairnpb/storagepb"
)

// pipelineLanes is how many Pipeline streams a Pipeline spreads its calls over, so that one large answer
// (a stream's flow-control window is shared by its calls) holds up only the calls on its own lane.
const pipelineLanes = 4

// Pipeline sends Submit and Range calls to one storage over a few long-lived Pipeline streams instead of a
// gRPC stream per call. Each call answers exactly as the unary RPC would, errors included: a call that could
// not be sent fails as the unary call would without a connection, a call in flight when its stream breaks
// fails with the stream's (Unavailable) error, and a call whose context ends is abandoned at storage.
type Pipeline struct {
	rpc    storagepb.StorageClient
	inject func(context.Context) map[string]string
	next   atomic.Uint64
	lanes  [pipelineLanes]lane
}

// NewPipeline returns a pipeline on conn; inject, when not nil, gives the trace context each call carries.
func NewPipeline(conn grpc.ClientConnInterface, inject func(context.Context) map[string]string) *Pipeline {
	p := &Pipeline{rpc: storagepb.NewStorageClient(conn), inject: inject}
	for i := range p.lanes {
		p.lanes[i].rpc = p.rpc
	}
	return p
}

// Submit is Client.Submit over the pipeline.
func (p *Pipeline) Submit(ctx context.Context, req *pb.InternalRaftRequest) (*storagepb.SubmitResponse, error) {
	resp, err := p.call(ctx, &storagepb.PipelineRequest{Call: &storagepb.PipelineRequest_Submit{Submit: &storagepb.SubmitRequest{Request: req}}})
	if err != nil {
		return nil, err
	}
	if submit := resp.answer.GetSubmit(); submit != nil {
		return submit, nil
	}
	resp.free()
	return nil, status.Error(codes.Internal, "cairn storage pipeline: a submit answered without its response")
}

// Range is Client.Range over the pipeline.
func (p *Pipeline) Range(ctx context.Context, req *pb.RangeRequest) (*pb.RangeResponse, error) {
	encoded, err := p.RangeEncoded(ctx, req)
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
// on undecoded: references to the gRPC buffers it arrived in (no copy is made), which the caller owns and
// frees, or hands to gRPC as (part of) a message it sends, which frees them once written.
func (p *Pipeline) RangeEncoded(ctx context.Context, req *pb.RangeRequest) (mem.BufferSlice, error) {
	resp, err := p.call(ctx, &storagepb.PipelineRequest{Call: &storagepb.PipelineRequest_Range{Range: req}})
	if err != nil {
		return nil, err
	}
	if resp.answer != nil && resp.answer.GetResult() == nil {
		return nil, status.Error(codes.Internal, "cairn storage pipeline: a range answered without its response")
	}
	data := resp.rangeData
	resp.rangeData = nil
	return data, nil
}

// Close ends the pipeline's streams; calls in flight fail with Canceled.
func (p *Pipeline) Close() {
	for i := range p.lanes {
		p.lanes[i].close()
	}
}

func (p *Pipeline) call(ctx context.Context, req *storagepb.PipelineRequest) (*wireAnswer, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	if deadline, ok := ctx.Deadline(); ok {
		req.TimeoutMicros = max(time.Until(deadline).Microseconds(), 1)
	}
	if p.inject != nil {
		req.Trace = p.inject(ctx)
	}
	req.Id = p.next.Add(1)
	l := &p.lanes[req.Id%pipelineLanes]
	answer, err := l.send(req)
	if err != nil {
		return nil, err
	}
	select {
	case r := <-answer:
		if r.err != nil {
			return nil, r.err
		}
		if e := r.resp.answer.GetError(); e != nil {
			return nil, status.ErrorProto(e)
		}
		return r.resp, nil
	case <-ctx.Done():
		l.abandon(req.Id)
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// answer is what a waiting call receives: the response, or the error that broke its stream.
type answer struct {
	resp *wireAnswer
	err  error
}

// lane is one Pipeline stream, opened on first use and again after it breaks.
type lane struct {
	rpc storagepb.StorageClient

	sendMu  sync.Mutex // serializes Send (not safe for concurrent use)
	mu      sync.Mutex // guards the fields below
	stream  storagepb.Storage_PipelineClient
	cancel  context.CancelFunc
	pending map[uint64]chan answer
	closed  bool
}

// send registers req and sends it, opening the stream if needed; it returns where the answer will come.
func (l *lane) send(req *storagepb.PipelineRequest) (<-chan answer, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, status.Error(codes.Canceled, "cairn storage pipeline: closed")
	}
	if l.stream == nil {
		ctx, cancel := context.WithCancel(context.Background())
		stream, err := l.rpc.Pipeline(ctx, grpc.ForceCodecV2(newAnswerCodec()))
		if err != nil {
			cancel()
			l.mu.Unlock()
			return nil, err // not sent: the unary call would have failed the same way
		}
		l.stream, l.cancel, l.pending = stream, cancel, map[uint64]chan answer{}
		go l.receive(stream, l.pending)
	}
	stream, pending := l.stream, l.pending
	ch := make(chan answer, 1)
	pending[req.Id] = ch
	l.mu.Unlock()

	l.sendMu.Lock()
	err := stream.Send(req)
	l.sendMu.Unlock()
	if err != nil {
		l.mu.Lock()
		delete(pending, req.Id)
		if l.stream == stream {
			l.breakLocked()
		}
		l.mu.Unlock()
		return nil, status.Errorf(codes.Unavailable, "cairn storage pipeline: stream broke while sending: %v", err)
	}
	return ch, nil
}

// receive hands each answer to its caller until the stream ends, then fails the calls still waiting.
func (l *lane) receive(stream storagepb.Storage_PipelineClient, pending map[uint64]chan answer) {
	for {
		resp := &wireAnswer{} // a range answer stays encoded, in the received buffers
		err := stream.RecvMsg(resp)
		l.mu.Lock()
		if err != nil {
			if l.stream == stream {
				l.breakLocked()
			}
			if _, ok := status.FromError(err); !ok {
				err = status.Errorf(codes.Unavailable, "cairn storage pipeline: %v", err)
			}
			for id, ch := range pending {
				ch <- answer{err: err}
				delete(pending, id)
			}
			l.mu.Unlock()
			return
		}
		ch := pending[resp.id]
		delete(pending, resp.id)
		l.mu.Unlock()
		if ch != nil {
			ch <- answer{resp: resp}
		} else {
			resp.free() // its caller gave up
		}
	}
}

// abandon forgets a call whose caller stopped waiting and tells storage to cancel it.
func (l *lane) abandon(id uint64) {
	l.mu.Lock()
	stream := l.stream
	_, waiting := l.pending[id]
	delete(l.pending, id)
	l.mu.Unlock()
	if !waiting || stream == nil {
		return
	}
	l.sendMu.Lock()
	defer l.sendMu.Unlock()
	_ = stream.Send(&storagepb.PipelineRequest{Id: id, Call: &storagepb.PipelineRequest_Cancel{Cancel: true}}) // a broken stream shows in receive
}

// breakLocked drops the current stream (its receiver fails what still waits on it); l.mu is held.
func (l *lane) breakLocked() {
	if l.cancel != nil {
		l.cancel()
	}
	l.stream, l.cancel = nil, nil
}

func (l *lane) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.breakLocked()
}
