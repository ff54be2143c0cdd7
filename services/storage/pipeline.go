package storage

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/framed"
	"github.com/cairn-kv/cairn/internal/storageclient"
)

// pipelineMaxWorkers bounds the worker goroutines a pipeline keeps. A call that finds no idle worker starts a new
// one, which stays, so the pool grows to the pipeline's concurrency (bounded by its frontend) and calls run on
// stacks already grown: a fresh goroutine per call grew its stack every time, about 5% of a leader storage's CPU
// under 1000 concurrent puts.
const pipelineMaxWorkers = 4096

// servePipeline serves the calls of one connection concurrently, each as its unary RPC would be served, and sends
// each answer as it is ready. The receiving goroutine starts each call itself: a serializable read of one key
// (which waits for nothing) is answered on the spot, anything else runs on a worker. When storage stops, the
// pipeline takes no more calls, answers those it has, then ends with an id-0 Unavailable answer ("cairn storage
// unavailable: stopping"), so the frontend knows the calls left unanswered were not started and sends them
// elsewhere.
func (s *Storage) servePipeline(conn *framed.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &pipeline{s: s, ctx: ctx, conn: conn, calls: map[uint64]context.CancelFunc{}, work: make(chan func())}
	ended := make(chan struct{})
	go func() { defer close(ended); p.receive() }()
	select {
	case <-ended:
	case <-s.stopping:
		p.mu.Lock()
		p.stopped = true // from here on no call starts, so every unanswered one was not started
		p.mu.Unlock()
		p.wait()
		p.send(p.marshal(&storagepb.PipelineResponse{Result: &storagepb.PipelineResponse_Error{
			Error: status.Convert(unavailable("stopping")).Proto()}}))
		// receive drops what still comes until the frontend, having read the end, closes its side.
		conn.CloseWrite(pipelineLinger)
		<-ended
	}
	cancel()
	p.stop()
	_ = conn.Close()
}

// pipelineLinger bounds how long a stopping storage waits for a frontend to close a pipeline it ended.
const pipelineLinger = 2 * time.Second

// pipeline is the state of one pipeline connection.
type pipeline struct {
	s    *Storage
	ctx  context.Context // ends with the connection
	conn *framed.Conn
	work chan func()

	mu      sync.Mutex
	calls   map[uint64]context.CancelFunc
	stopped bool // set by stop: no call starts after it
	active  sync.WaitGroup
	running atomic.Int64 // calls on workers not yet answered
	workers atomic.Int64 // worker goroutines kept
}

// receive starts each call of the connection until it ends; once storage is stopping, calls are no longer
// started (the frontend sends them elsewhere). The answers it gives itself wait, while more calls have
// already arrived, for the write that carries the last one's.
func (p *pipeline) receive() {
	for {
		if p.conn.Buffered() == 0 {
			_ = p.conn.Flush()
		}
		frame, err := p.conn.Receive()
		if err != nil {
			return
		}
		req := &storagepb.PipelineRequest{}
		if err := proto.Unmarshal(frame, req); err != nil {
			p.s.logger.Warn("pipeline call not decodable; closing the connection", "err", err)
			return
		}
		select {
		case <-p.s.stopping:
			continue
		default:
		}
		switch {
		case req.GetCancel():
			p.cancel(req.Id)
		case answersAtOnce(req):
			a := p.serve(p.ctx, req)
			_ = p.conn.Queue(a.release, a.parts...)
		default:
			p.start(req)
		}
	}
}

// answersAtOnce reports whether req is a serializable Range of one key without a trace: it waits for nothing
// and reads little, so the receiving goroutine answers it itself rather than hand it to a worker.
func answersAtOnce(req *storagepb.PipelineRequest) bool {
	r := req.GetRange()
	return r != nil && r.Serializable && len(r.RangeEnd) == 0 && len(req.Trace) == 0
}

func (p *pipeline) worker() {
	for f := range p.work {
		f()
	}
}

// start runs req on a worker, under a context bounded by the caller's remaining deadline and by storage's
// request timeout (so Submit and Range need no timer of their own).
func (p *pipeline) start(req *storagepb.PipelineRequest) {
	ctx := p.s.tel.Extract(p.ctx, req.Trace)
	timeout := p.s.cfg.RequestTimeout
	if req.TimeoutMicros > 0 {
		timeout = min(timeout, time.Duration(req.TimeoutMicros)*time.Microsecond)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		cancel()
		return
	}
	p.calls[req.Id] = cancel
	p.active.Add(1)
	p.mu.Unlock()
	p.running.Add(1)
	run := func() {
		defer p.active.Done()
		answer := p.serve(ctx, req)
		p.mu.Lock()
		delete(p.calls, req.Id)
		p.mu.Unlock()
		cancel()
		p.send(answer)
		p.running.Add(-1)
	}
	select {
	case p.work <- run:
	default:
		go p.newWorker(run)
	}
}

// newWorker runs first, then stays as a worker unless the pipeline already keeps pipelineMaxWorkers.
func (p *pipeline) newWorker(first func()) {
	first()
	if p.workers.Add(1) > pipelineMaxWorkers {
		p.workers.Add(-1)
		return
	}
	p.worker()
}

// answer is one call's answer as it goes on the wire: parts of one frame, and what to do once they are written.
type answer struct {
	parts   [][]byte
	release func()
}

// send sends one answer, sharing the write with others when calls are still running or waiting to be read;
// a broken connection ends receive too, which ends the pipeline.
func (p *pipeline) send(a answer) {
	if p.running.Load() > 1 || p.conn.Buffered() > 0 {
		_ = p.conn.SendBatched(a.release, a.parts...)
		return
	}
	_ = p.conn.Send(a.release, a.parts...)
}

// serve answers one call as the unary Submit or Range would.
func (p *pipeline) serve(ctx context.Context, req *storagepb.PipelineRequest) answer {
	resp := &storagepb.PipelineResponse{Id: req.Id}
	var err error
	switch call := req.Call.(type) {
	case *storagepb.PipelineRequest_Submit:
		var out *storagepb.SubmitResponse
		if out, err = (&server{s: p.s}).Submit(ctx, call.Submit); err == nil {
			resp.Result = &storagepb.PipelineResponse_Submit{Submit: out}
		}
	case *storagepb.PipelineRequest_Range:
		var a answer
		if a, err = p.rangeAnswer(ctx, req.Id, call.Range); err == nil {
			return a
		}
	default:
		err = status.Error(codes.InvalidArgument, "cairn storage: pipeline call without submit or range")
	}
	if err != nil {
		resp.Result = &storagepb.PipelineResponse_Error{Error: status.Convert(err).Proto()}
	}
	return p.marshal(resp)
}

// marshal encodes resp as an answer.
func (p *pipeline) marshal(resp *storagepb.PipelineResponse) answer {
	frame, err := proto.Marshal(resp)
	if err != nil {
		frame, _ = proto.Marshal(&storagepb.PipelineResponse{Id: resp.Id, Result: &storagepb.PipelineResponse_Error{
			Error: status.Newf(codes.Internal, "cairn storage: encode answer: %v", err).Proto()}})
	}
	return answer{parts: [][]byte{frame}}
}

// rangeAnswer is the answer to range call id: a PipelineAnswer (the same message on the wire as a
// PipelineResponse) whose range is the RangeResponse as Storage.RangeEncoded wrote it, right after the answer's
// own fields, into one pooled buffer that goes back to the pool once it has been sent.
func (p *pipeline) rangeAnswer(ctx context.Context, id uint64, r *pb.RangeRequest) (answer, error) {
	var buf *[]byte
	encoded, err := p.s.RangeEncoded(ctx, r, func(n int) []byte {
		head := storageclient.AppendRangeAnswerHead(nil, id, n)
		buf = p.s.answerBuffers.Get(len(head) + n)
		return append((*buf)[:0], head...)
	})
	if err != nil {
		if buf != nil {
			p.s.answerBuffers.Put(buf)
		}
		return answer{}, err
	}
	*buf = encoded
	return answer{parts: [][]byte{encoded}, release: func() { p.s.answerBuffers.Put(buf) }}, nil
}

func (p *pipeline) cancel(id uint64) {
	p.mu.Lock()
	cancel := p.calls[id]
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// wait returns once every started call has sent its answer.
func (p *pipeline) wait() { p.active.Wait() }

// stop cancels the calls still running and releases the workers once they finish.
func (p *pipeline) stop() {
	p.mu.Lock()
	p.stopped = true
	for _, cancel := range p.calls {
		cancel()
	}
	p.mu.Unlock()
	p.active.Wait()
	close(p.work)
}
