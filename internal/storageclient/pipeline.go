package storageclient

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/framed"
)

// PipelinePreamble opens a pipeline connection on a storage's port (the storage tells it from gRPC by it).
const PipelinePreamble = "CAIRN-STORAGE-PIPELINE/1\n"

// pipelineLanes is how many connections a Pipeline spreads its calls over, so that one large answer holds up only
// the calls on its own connection.
const pipelineLanes = 2

// dialTimeout bounds the opening of a pipeline connection.
const dialTimeout = time.Second

// Pipeline sends Submit and Range calls to one storage over a few long-lived connections of framed messages
// (internal/framed; see storagepb.PipelineRequest) instead of a gRPC call each. Each call answers exactly as the unary
// RPC would, errors included: a call that could not be sent fails as a unary call without a connection would
// (codes.Unavailable, "connection error: ..."), a call in flight when its connection breaks fails with
// codes.Unavailable, and a call whose context ends is abandoned at storage.
//
// A call waits at most Bound (or until its context's earlier deadline) without a timer of its own: storage is
// told the deadline and answers by then with etcd's timeout error, and should it not, one sweep per
// Pipeline fails the call with rpctypes.ErrGRPCTimeout sweepGrace later.
type Pipeline struct {
	addr   string
	inject func(context.Context) map[string]string
	bound  time.Duration
	next   atomic.Uint64
	lanes  [pipelineLanes]lane

	sweepOnce, closeOnce sync.Once
	closed               chan struct{}
}

// NewPipeline returns a pipeline to the storage at addr (host:port) whose calls wait at most bound; inject, when
// not nil, gives the trace context each call carries. Its connections open in the background, so the first
// calls need not pay for them.
func NewPipeline(addr string, bound time.Duration, inject func(context.Context) map[string]string) *Pipeline {
	p := &Pipeline{addr: addr, inject: inject, bound: bound, closed: make(chan struct{})}
	for i := range p.lanes {
		p.lanes[i].addr = addr
		go func() { _, _ = p.lanes[i].connection() }()
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
// on undecoded: the bytes of the frame it arrived in (no copy is made), which the caller owns.
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

// Close ends the pipeline's connections; calls in flight fail with Canceled.
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

// answer is what a waiting call receives: the response, or the error that broke its connection.
type answer struct {
	resp *wireAnswer
	err  error
}

// waiting is a call sent and not yet answered: where its answer goes, and its deadline (Unix nanoseconds).
type waiting struct {
	answer   chan answer
	deadline int64
}

// lane is one pipeline connection, opened on first use and again after it breaks.
type lane struct {
	addr string

	dialMu  sync.Mutex // one dial at a time
	mu      sync.Mutex // guards the fields below
	conn    *framed.Conn
	pending map[uint64]waiting
	closed  bool
}

// connection returns the lane's connection, opening one if there is none (or it broke).
func (l *lane) connection() (*framed.Conn, error) {
	l.mu.Lock()
	conn, closed := l.conn, l.closed
	l.mu.Unlock()
	if closed {
		return nil, status.Error(codes.Canceled, "cairn storage pipeline: closed")
	}
	if conn != nil {
		return conn, nil
	}
	l.dialMu.Lock()
	defer l.dialMu.Unlock()
	l.mu.Lock()
	conn = l.conn
	l.mu.Unlock()
	if conn != nil {
		return conn, nil
	}
	conn, err := framed.Dial(l.addr, PipelinePreamble, dialTimeout)
	if err != nil {
		// Worded as gRPC words a failed dial, so the caller knows nothing was sent.
		return nil, status.Errorf(codes.Unavailable, "connection error: cairn storage pipeline to %s: %v", l.addr, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = conn.Close()
		return nil, status.Error(codes.Canceled, "cairn storage pipeline: closed")
	}
	l.conn, l.pending = conn, map[uint64]waiting{}
	go l.receive(conn, l.pending)
	return conn, nil
}

// send registers req (answered by deadline, in Unix nanoseconds) and sends it, opening the connection if needed;
// it returns where the answer will come.
func (l *lane) send(req *storagepb.PipelineRequest, deadline int64) (<-chan answer, error) {
	frame, err := proto.Marshal(req)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "cairn storage pipeline: encode call: %v", err)
	}
	conn, err := l.connection()
	if err != nil {
		return nil, err
	}
	ch := make(chan answer, 1)
	l.mu.Lock()
	if l.conn != conn { // it broke meanwhile: its receiver has failed what it had; this call was not sent
		l.mu.Unlock()
		return nil, status.Errorf(codes.Unavailable, "connection error: cairn storage pipeline to %s broke", l.addr)
	}
	pending := l.pending
	pending[req.Id] = waiting{answer: ch, deadline: deadline}
	others := len(pending) > 1
	l.mu.Unlock()
	send := conn.Send
	if others { // calls are coming thick: let the ones about to be sent share the write
		send = conn.SendBatched
	}
	if err := send(nil, frame); err != nil {
		l.mu.Lock()
		_, stillPending := pending[req.Id]
		delete(pending, req.Id)
		l.mu.Unlock()
		if !stillPending {
			return ch, nil // the receiver failed it already
		}
		return nil, status.Errorf(codes.Unavailable, "cairn storage pipeline: connection broke while sending: %v", err)
	}
	return ch, nil
}

// receive hands each answer to its caller until the connection ends, then fails the calls still waiting: with
// the error storage ended the pipeline with (calls it did not start), or as broken in flight.
func (l *lane) receive(conn *framed.Conn, pending map[uint64]waiting) {
	for {
		frame, err := conn.Receive()
		resp := &wireAnswer{}
		if err == nil {
			err = resp.decode(mem.BufferSlice{mem.SliceBuffer(frame)})
			if err == nil && resp.id == 0 && resp.answer.GetError() != nil {
				err = status.ErrorProto(resp.answer.GetError()) // storage is stopping
			} else if err != nil {
				err = status.Errorf(codes.Internal, "cairn storage pipeline: decode answer: %v", err)
			}
		}
		l.mu.Lock()
		if err != nil {
			if l.conn == conn {
				l.conn = nil
			}
			_ = conn.Close()
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
	conn := l.conn
	_, pending := l.pending[id]
	delete(l.pending, id)
	l.mu.Unlock()
	if pending && conn != nil {
		cancelAt(conn, id)
	}
}

// expire fails, with etcd's timeout, the calls whose deadline is before limit (Unix nanoseconds), and tells
// storage to cancel them.
func (l *lane) expire(limit int64) {
	l.mu.Lock()
	conn := l.conn
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
		if conn != nil {
			cancelAt(conn, id)
		}
	}
}

// cancelAt tells storage to cancel call id on conn; a broken connection shows in receive.
func cancelAt(conn *framed.Conn, id uint64) {
	frame, err := proto.Marshal(&storagepb.PipelineRequest{Id: id, Call: &storagepb.PipelineRequest_Cancel{Cancel: true}})
	if err == nil {
		_ = conn.Send(nil, frame)
	}
}

func (l *lane) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	if l.conn != nil {
		_ = l.conn.Close()
		l.conn = nil
	}
}
