package storage

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/cairn-kv/cairn/pkg/cairnpb/storagepb"
	"github.com/cairn-kv/cairn/pkg/storageclient"
	"github.com/cairn-kv/cairn/pkg/wiremsg"
)

// pipelineWorkers is how many goroutines a Pipeline stream keeps for its calls (more are started when all
// are busy), so that calls run on stacks already grown.
const pipelineWorkers = 64

// Pipeline serves the calls of one stream concurrently, each as its unary RPC would be served, and sends
// each answer as it is ready. The receiving goroutine starts each call itself: a serializable read of one key
// (which waits for nothing) is answered on the spot, anything else runs on a worker. When storage stops, the
// stream takes no more calls, answers those it has and ends with Unavailable, so the frontend sends the next
// ones elsewhere.
func (g *server) Pipeline(stream grpc.BidiStreamingServer[storagepb.PipelineRequest, storagepb.PipelineResponse]) error {
	p := &pipeline{s: g.s, stream: stream, calls: map[uint64]context.CancelFunc{}, work: make(chan func())}
	defer p.stop()
	for range pipelineWorkers {
		go p.worker()
	}
	ended := make(chan error, 1)
	go func() { ended <- p.receive() }()
	select {
	case err := <-ended:
		if errors.Is(err, io.EOF) {
			p.wait()
			return nil
		}
		return err
	case <-g.s.stopping:
		p.wait()
		return status.Error(codes.Unavailable, "cairn storage unavailable: stopping")
	}
}

// receive starts each call of the stream until it ends; once storage is stopping, calls are no longer
// started (the stream's end fails them at the caller, which tries another storage).
func (p *pipeline) receive() error {
	for {
		req, err := p.stream.Recv()
		if err != nil {
			return err
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
			p.send(p.serve(p.stream.Context(), req))
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

// pipeline is the state of one Pipeline stream.
type pipeline struct {
	s      *Storage
	stream grpc.BidiStreamingServer[storagepb.PipelineRequest, storagepb.PipelineResponse]
	work   chan func()

	sendMu  sync.Mutex // stream.Send is not safe for concurrent use
	mu      sync.Mutex
	calls   map[uint64]context.CancelFunc
	stopped bool // set by stop: no call starts after it
	active  sync.WaitGroup
}

func (p *pipeline) worker() {
	for f := range p.work {
		f()
	}
}

// start runs req on a worker, under a context bounded by the caller's remaining deadline and by storage's
// request timeout (so Submit and Range need no timer of their own).
func (p *pipeline) start(req *storagepb.PipelineRequest) {
	ctx := p.s.tel.Extract(p.stream.Context(), req.Trace)
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
	run := func() {
		defer p.active.Done()
		resp := p.serve(ctx, req)
		p.mu.Lock()
		delete(p.calls, req.Id)
		p.mu.Unlock()
		cancel()
		p.send(resp)
	}
	select {
	case p.work <- run:
	default:
		go run()
	}
}

// send sends one answer; a broken stream ends Recv too, which ends the stream.
func (p *pipeline) send(answer any) {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	_ = p.stream.SendMsg(answer)
}

// serve answers one call as the unary Submit or Range would.
func (p *pipeline) serve(ctx context.Context, req *storagepb.PipelineRequest) any {
	resp := &storagepb.PipelineResponse{Id: req.Id}
	var err error
	switch call := req.Call.(type) {
	case *storagepb.PipelineRequest_Submit:
		var out *storagepb.SubmitResponse
		if out, err = (&server{s: p.s}).Submit(ctx, call.Submit); err == nil {
			resp.Result = &storagepb.PipelineResponse_Submit{Submit: out}
		}
	case *storagepb.PipelineRequest_Range:
		var answer any
		if answer, err = p.rangeAnswer(ctx, req.Id, call.Range); err == nil {
			return answer
		}
	default:
		err = status.Error(codes.InvalidArgument, "cairn storage: pipeline call without submit or range")
	}
	if err != nil {
		resp.Result = &storagepb.PipelineResponse_Error{Error: status.Convert(err).Proto()}
	}
	return resp
}

// rangeAnswer is the answer to range call id: a PipelineAnswer (the same message on the wire as a
// PipelineResponse) whose range is the RangeResponse as Storage.RangeEncoded wrote it, right after the answer's
// own fields, into one pooled buffer that gRPC returns to the pool once it has sent it (wiremsg.Encoded).
func (p *pipeline) rangeAnswer(ctx context.Context, id uint64, r *pb.RangeRequest) (any, error) {
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
		return nil, err
	}
	*buf = encoded
	return &wiremsg.Encoded{Parts: mem.BufferSlice{mem.NewBuffer(buf, &p.s.answerBuffers)}}, nil
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
