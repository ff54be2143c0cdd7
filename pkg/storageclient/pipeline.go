package storageclient

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
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
//
// A call waits at most Bound (or until its context's earlier deadline) without a timer of its own: storage is
// told the deadline and answers by then with etcd's timeout error, and should it not, one sweep per
// Pipeline fails the call with rpctypes.ErrGRPCTimeout sweepGrace later.
type Pipeline struct {
	rpc    storagepb.StorageClient
	inject func(context.Context) map[string]string
	bound  time.Duration
	next   atomic.Uint64
	lanes  [pipelineLanes]lane

	sweepOnce, closeOnce sync.Once
	closed               chan struct{}
}

// NewPipeline returns a pipeline on conn whose calls wait at most bound; inject, when not nil, gives the
// trace context each call carries.
func NewPipeline(conn grpc.ClientConnInterface, bound time.Duration, inject func(context.Context) map[string]string) *Pipeline {
	p := &Pipeline{rpc: storagepb.NewStorageClient(conn), inject: inject, bound: bound, closed: make(chan struct{})}
	for i := range p.lanes {
		p.lanes[i].rpc = p.rpc
	}
	return p
}

// sweepGrace is how long past its deadline a call waits for storage's own timeout answer before the sweep
// fails it; sweepInterval is how often the sweep looks.
const (
	sweepGrace    = time.Second
	sweepInterval = 250 * time.Millisecond
)

// sweep fails the calls storage left unanswered past their deadline, until the pipeline closes.
func (p *Pipeline) sweep() {
	tick := time.NewTicker(sweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.closed:
			return
		case now := <-tick.C:
			for i := range p.lanes {
				p.lanes[i].expire(now.Add(-sweepGrace).UnixNano())
			}
		}
	}
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
	p.sweepOnce.Do(func() {}) // no sweep starts after this
	p.closeOnce.Do(func() { close(p.closed) })
	for i := range p.lanes {
		p.lanes[i].close()
	}
}

func (p *Pipeline) call(ctx context.Context, req *storagepb.PipelineRequest) (*wireAnswer, error) {
	if err := ctx.Err(); err != nil {
		return nil, status.FromContextError(err).Err()
	}
	now := time.Now()
	deadline := now.Add(p.bound)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	req.TimeoutMicros = max(deadline.Sub(now).Microseconds(), 1)
	if p.inject != nil {
		req.Trace = p.inject(ctx)
	}
	p.sweepOnce.Do(func() { go p.sweep() })
	req.Id = p.next.Add(1)
	l := &p.lanes[req.Id%pipelineLanes]
	answer, err := l.send(req, deadline.UnixNano())
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

// waiting is a call sent and not yet answered: where its answer goes, and its deadline (Unix nanoseconds).
type waiting struct {
	answer   chan answer
	deadline int64
}

// lane is one Pipeline stream, opened on first use and again after it breaks.
type lane struct {
	rpc storagepb.StorageClient

	sendMu  sync.Mutex // serializes Send (not safe for concurrent use)
	mu      sync.Mutex // guards the fields below
	stream  storagepb.Storage_PipelineClient
	cancel  context.CancelFunc
	pending map[uint64]waiting
	closed  bool
}

// send registers req (answered by deadline, in Unix nanoseconds) and sends it, opening the stream if needed;
// it returns where the answer will come.
func (l *lane) send(req *storagepb.PipelineRequest, deadline int64) (<-chan answer, error) {
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
		l.stream, l.cancel, l.pending = stream, cancel, map[uint64]waiting{}
		go l.receive(stream, l.pending)
	}
	stream, pending := l.stream, l.pending
	ch := make(chan answer, 1)
	pending[req.Id] = waiting{answer: ch, deadline: deadline}
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
func (l *lane) receive(stream storagepb.Storage_PipelineClient, pending map[uint64]waiting) {
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
			for id, w := range pending {
				w.answer <- answer{err: err}
				delete(pending, id)
			}
			l.mu.Unlock()
			return
		}
		w, ok := pending[resp.id]
		delete(pending, resp.id)
		l.mu.Unlock()
		if ok {
			w.answer <- answer{resp: resp}
		} else {
			resp.free() // its caller gave up
		}
	}
}

// abandon forgets a call whose caller stopped waiting and tells storage to cancel it.
func (l *lane) abandon(id uint64) {
	l.mu.Lock()
	stream := l.stream
	_, pending := l.pending[id]
	delete(l.pending, id)
	l.mu.Unlock()
	if pending && stream != nil {
		l.cancelAt(stream, id)
	}
}

// expire fails, with etcd's timeout, the calls whose deadline is before limit (Unix nanoseconds), and tells
// storage to cancel them.
func (l *lane) expire(limit int64) {
	l.mu.Lock()
	stream := l.stream
	var expired []uint64
	for id, w := range l.pending {
		if w.deadline < limit {
			w.answer <- answer{err: rpctypes.ErrGRPCTimeout}
			delete(l.pending, id)
			expired = append(expired, id)
		}
	}
	l.mu.Unlock()
	for _, id := range expired {
		if stream != nil {
			l.cancelAt(stream, id)
		}
	}
}

// cancelAt tells storage to cancel call id on stream.
func (l *lane) cancelAt(stream storagepb.Storage_PipelineClient, id uint64) {
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
