package storage

import (
	"context"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/storagepb"
	"github.com/cairn-kv/cairn/internal/framed"
	"github.com/cairn-kv/cairn/internal/link"
)

// servePipeline serves the calls of one frontend pipeline (a link, see storagepb.PipelinePreamble)
// concurrently, each as its unary RPC would be served. A serializable read of one key (which waits for nothing)
// is answered on the link's receiving goroutine, anything else runs on one of the link's reused workers (a fresh
// goroutine per call grew its stack every time: about 5% of a leader storage's CPU under 1000 concurrent puts).
// When storage stops, the link takes no more calls, answers those it has, then ends with storage's "stopping"
// refusal, so the frontend knows the calls left unanswered were not started and sends them elsewhere.
func (s *Storage) servePipeline(conn *framed.Conn) {
	srv := link.NewServer(link.ServerConfig{
		Bound:     s.cfg.RequestTimeout,
		End:       unavailable("stopping"),
		Telemetry: s.tel, Name: "storage.pipeline", MethodNames: storagepb.PipelineMethodNames,
		Logger: s.logger,
	})
	srv.Handle(storagepb.PipelineSubmit, s.pipelineSubmit)
	srv.Handle(storagepb.PipelineRange, s.pipelineRange)
	srv.Handle(storagepb.PipelineRangeChecked, s.pipelineRangeChecked)
	srv.Serve(conn, s.stopping)
}

// pipelineSubmit serves a Submit call. A write whose answer needs nothing but its apply (answersFromApply) is
// proposed by one of the link's brief workers and answered by the apply loop: nothing waits for it, and a burst
// of writes grows no goroutine per write. Anything else runs on a worker of its own, which may wait (a write
// past the quota too: raising the NOSPACE alarm waits for its apply).
func (s *Storage) pipelineSubmit(call *link.Call) {
	s.served.pipeline.Add(1)
	req := &storagepb.SubmitRequest{}
	if err := proto.Unmarshal(call.Body, req); err != nil {
		call.Fail(status.Errorf(codes.InvalidArgument, "cairn storage: pipeline submit not decodable: %v", err))
		return
	}
	if req.KeeperClaim == nil && s.answersFromApply(req.Request) {
		if _, over := s.overQuota(req.Request); !over {
			call.GoBrief(func(ctx context.Context) {
				s.startSubmit(ctx, req.Request, req.KeeperEpoch, func(resp *storagepb.SubmitResponse, err error) {
					answerSubmit(call, resp, err)
				})
			})
			return
		}
	}
	call.Go(func(ctx context.Context) {
		resp, err := s.submitRequest(ctx, req)
		answerSubmit(call, resp, err)
	})
}

// answerSubmit answers a Submit call with resp, or err.
func answerSubmit(call *link.Call, resp *storagepb.SubmitResponse, err error) {
	if err != nil {
		call.Fail(err)
		return
	}
	answer, err := proto.Marshal(resp)
	if err != nil {
		call.Fail(status.Errorf(codes.Internal, "cairn storage: encode submit answer: %v", err))
		return
	}
	call.Reply(nil, answer)
}

// pipelineRange serves a Range call.
func (s *Storage) pipelineRange(call *link.Call) {
	s.served.pipeline.Add(1)
	req := &pb.RangeRequest{}
	if err := proto.Unmarshal(call.Body, req); err != nil {
		call.Fail(status.Errorf(codes.InvalidArgument, "cairn storage: pipeline range not decodable: %v", err))
		return
	}
	s.serveRange(call, req, 0)
}

// pipelineRangeChecked serves a RangeChecked call: a Range the frontend checked against its copy of the auth
// store whose read fence the request's header carries as its auth revision (see authFence).
func (s *Storage) pipelineRangeChecked(call *link.Call) {
	s.served.pipeline.Add(1)
	req := &pb.InternalRaftRequest{}
	if err := proto.Unmarshal(call.Body, req); err != nil || req.Range == nil {
		call.Fail(status.Errorf(codes.InvalidArgument, "cairn storage: pipeline checked range not decodable (%v)", err))
		return
	}
	s.serveRange(call, req.Range, req.Header.GetAuthRevision())
}

// serveRange answers a Range call on the spot when it answersAtOnce, else on a worker.
func (s *Storage) serveRange(call *link.Call, req *pb.RangeRequest, authFence uint64) {
	if answersAtOnce(req) {
		s.answerRange(call.ConnContext(), call, req, authFence)
		return
	}
	call.Go(func(ctx context.Context) { s.answerRange(ctx, call, req, authFence) })
}

// answersAtOnce reports whether r is a serializable Range of one key: it waits for nothing and reads little, so
// the receiving goroutine answers it itself rather than hand it to a worker. Traced or not, the same call takes
// the same path (TestTracingKeepsTheTransport).
func answersAtOnce(r *pb.RangeRequest) bool {
	return r.Serializable && len(r.RangeEnd) == 0
}

// answerRange answers call with the RangeResponse as Storage.RangeEncoded writes it, into one pooled buffer that
// goes back to the pool once it has been sent.
func (s *Storage) answerRange(ctx context.Context, call *link.Call, r *pb.RangeRequest, authFence uint64) {
	var buf *[]byte
	encoded, err := s.rangeEncoded(ctx, r, authFence, func(n int) []byte {
		buf = s.answerBuffers.Get(n)
		return (*buf)[:0]
	})
	if err != nil {
		if buf != nil {
			s.answerBuffers.Put(buf)
		}
		call.Fail(err)
		return
	}
	*buf = encoded
	call.Reply(func() { s.answerBuffers.Put(buf) }, encoded)
}

// servedCalls counts the Submit and Range calls served, by transport.
type servedCalls struct{ pipeline, grpc atomic.Uint64 }

// CallsServed reports how many Submit and Range calls storage has served over pipeline links and over gRPC:
// the frontend's go over its pipelines, traced or not (TestTracingKeepsTheTransport).
func (s *Storage) CallsServed() (pipeline, grpc uint64) {
	return s.served.pipeline.Load(), s.served.grpc.Load()
}
