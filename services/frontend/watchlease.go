package frontend

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cairn-kv/cairn/internal/obs"
	"github.com/cairn-kv/cairn/internal/wiremsg"
	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

var (
	errNoWatchhub    = status.Error(codes.Unimplemented, "cairn frontend: Watch is not available: no --watch-endpoints configured")
	errNoLeasekeeper = status.Error(codes.Unimplemented, "cairn frontend: Lease is not available: no --lease-endpoints configured")
)

// watchRelayWindow is the flow-control window of each relayed Watch stream from its hub (HTTP/2's default,
// fixed). A relay that falls behind its client should stop its hub soon: then the hub's stream backs up and the
// hub merges each watcher's waiting revisions into one response (the hub's merge.go), so the relay catches up
// with fewer messages. rpctune's 1 MiB window let a slow relay hold about 15,000 unread one-event responses per
// stream (seconds of lag at 100 watchers per stream) that could only be relayed one by one, and the lag came and
// went with the relay's luck (issue 23, finding 3). The connection's window stays rpctune's.
const watchRelayWindow = 64<<10 - 1

// watchServer forwards each Watch stream to one watchhub, spreading streams across hubs. Frames are relayed
// as bytes, never decoded. While spans are recorded it asks the hub for the trace carrier of sampled events
// (obs.RelayTraceHeader) and spans their relay, frontend.relay, from the hub's frame to its send to the client.
type watchServer struct {
	pb.UnimplementedWatchServer
	// frames are the buffers the hubs' frames are received into (wiremsg.Held): each goes back once the client
	// streams have written the last response it carries.
	frames wiremsg.Pool
	// lender lends out the responses of the hubs' frames to the client streams (wiremsg.Lender).
	lender   wiremsg.Lender
	hubs     *rotation
	stopping <-chan struct{}
	auth     *authGate
	stages   obs.StageTracer
	// canceledForLag and lagWarnings count and log the watches relays cancel for lag, relayLag observes the
	// largest lag relayed from each frame (watchlag.go).
	canceledForLag prometheus.Counter
	lagWarnings    *lagWarnings
	relayLag       prometheus.Observer
}

func (s *watchServer) Watch(stream pb.Watch_WatchServer) error {
	if len(s.hubs.backends) == 0 {
		return errNoWatchhub
	}
	ctx, cancel := context.WithCancel(forwardedContext(stream.Context()))
	defer cancel()
	go func() {
		select {
		case <-s.stopping: // the frontend stops: end the relay, the client resumes on another frontend
			cancel()
		case <-ctx.Done():
		}
	}()
	// upCtx, not ctx: the goroutine above reads ctx.
	upCtx := metadata.AppendToOutgoingContext(ctx, wiremsg.RelayBatchHeader, wiremsg.RelayBatchStamped,
		wiremsg.RelayBatchHeader, wiremsg.RelayBatchAcked)
	tracing := s.stages.Recording()
	if tracing {
		upCtx = metadata.AppendToOutgoingContext(upCtx, obs.RelayTraceHeader, "1")
	}
	var err error
	for _, hub := range s.hubs.order() {
		var upstream grpc.ClientStream
		if upstream, err = hub.conn.NewStream(upCtx, &pb.Watch_ServiceDesc.Streams[0], pb.Watch_Watch_FullMethodName,
			grpc.ForceCodecV2(wiremsg.NewCodec().WithPool(&s.frames))); err == nil {
			up := &upstreamSends{ClientStream: upstream}
			r := &watchRelay{server: s, upstream: up, tracing: tracing}
			return proxyStream("watch", stream, up, wiremsg.NewRaw, wiremsg.NewHeld, r.relay,
				s.auth.screenWatch(stream.Context()))
		}
		if stream.Context().Err() != nil {
			break
		}
	}
	return errBackendLost("watch", err)
}

// watchRelay relays one hub stream's frames to the client. A hub that promised relay batches
// (wiremsg.RelayBatchHeader in its response header) sends several responses per frame; each goes to the client
// as its own message, as the hub would have sent it unbatched, so the client sees the same messages either way.
// A frame is received into a pooled buffer (wiremsg.Held) and each response goes to gRPC as a reference to its
// part of it, uncopied; the buffer returns to the pool once every response is written. A hub that stamps its
// batches has the relay hold its lag bound too (relayLag).
type watchRelay struct {
	server   *watchServer
	upstream *upstreamSends
	tracing  bool
	batched  bool
	checked  bool      // batched and lag are known: the hub's header came with its first frame
	lag      *relayLag // nil unless the hub stamps its batches
	// acks: the hub waits for batches to be acknowledged once written (wiremsg.RelayBatchAcked), and every
	// wiremsg.RelayAckEvery are; written counts the batches written, from gRPC's writer.
	acks    bool
	written atomic.Uint64
	msg     wiremsg.Encoded
	lists   wiremsg.BufferLists // each response's list of buffers, for gRPC; released after each frame
}

// relay sends the client the response or responses a hub's frame carries.
func (r *watchRelay) relay(frame any, send func(any) error) error {
	if !r.checked {
		r.readHeader()
	}
	held := frame.(*wiremsg.Held)
	defer r.lists.Release() // a relay waiting for its next frame holds no array
	if !r.batched {
		return r.relayOne(held.Buf, send)
	}
	each := func(msg mem.Buffer, _ uint64) error { return r.relayOne(msg, send) }
	var written func()
	var relayed *relayedFrame
	if r.lag != nil {
		receivedAt := r.lag.clock()
		each = func(msg mem.Buffer, stamp uint64) error { return r.lag.relay(r, msg, stamp, receivedAt, send) }
		relayed = new(relayedFrame)
		written = func() {
			r.lag.frameWritten(relayed)
			if r.acks {
				if n := r.written.Add(1); n%wiremsg.RelayAckEvery == 0 {
					r.upstream.ack(n)
				}
			}
		}
	}
	err := r.server.lender.SplitHeldBatch(held.Buf, each, written)
	if r.lag != nil {
		r.lag.frameRelayed(relayed)
	}
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.Errorf(codes.Internal, "cairn frontend: watch relay: %v", err)
	}
	return nil
}

// readHeader reads what the hub's response header promised: batches, and stamps with a lag bound. The header
// is at hand before the first frame.
func (r *watchRelay) readHeader() {
	header, _ := r.upstream.Header()
	r.batched, r.checked = wiremsg.RelayBatchPromised(header), true
	r.acks = r.batched && wiremsg.RelayAcksPromised(header)
	if bound, ok := wiremsg.RelayStampsPromised(header); ok && r.batched {
		r.lag = newRelayLag(r.server, bound, r.upstream)
	}
}

// relayOne sends one response, and with it msg's reference: gRPC frees it once the response is written (or, if
// the send fails before gRPC takes it, relayOne does).
func (r *watchRelay) relayOne(msg mem.Buffer, send func(any) error) error {
	var relayed func()
	if r.tracing {
		var cut int
		cut, relayed = r.server.traceRelay(msg.ReadOnlyData())
		if cut > 0 {
			msg = wiremsg.TrimFront(msg, cut)
		}
	}
	r.msg.Parts = append(r.lists.Take(1), msg)
	err := send(&r.msg)
	if r.msg.Parts != nil { // the codec never took it
		r.msg.Parts.Free()
		r.msg.Parts = nil
	}
	if relayed != nil {
		relayed()
	}
	return err
}

// traceRelay finds the trace carrier on a hub's response of a sampled event, which the relay cuts off (the
// first cut bytes) so the client gets the response the hub would have sent without it, and spans the relay
// until it is sent (relayed nil for a response without a carrier).
func (s *watchServer) traceRelay(msg []byte) (cut int, relayed func()) {
	sc, rest, ok := obs.CutRelayTrace(msg)
	if !ok {
		return 0, nil
	}
	cut = len(msg) - len(rest)
	span := s.stages.StartRelay("frontend.relay", sc)
	if !span.IsRecording() {
		return cut, nil
	}
	span.SetAttributes(obs.AttrBytes.Int(len(rest)))
	return cut, func() { span.End() }
}

// leaseServer forwards Lease calls to the active leasekeeper: the last one that answered, else each in turn.
// A keeper that is unreachable or says it is not the active one is passed over.
type leaseServer struct {
	pb.UnimplementedLeaseServer
	keepers *rotation
	active  atomic.Int32 // index of the keeper that answered last
	// completeHeader fills what a keeper cannot know of a response header (cluster, member, raft term).
	completeHeader func(*pb.ResponseHeader)
	auth           *authGate
	// handoverWait bounds how long a call waits for a keeper to be active when none is (--request-timeout).
	handoverWait time.Duration
}

// withHeader is every etcd response.
type withHeader interface{ GetHeader() *pb.ResponseHeader }

// notActiveKeeper is how a standby leasekeeper refuses (codes.FailedPrecondition).
const notActiveKeeper = "not the active leasekeeper"

// nextKeeper reports whether err means another keeper should be asked.
func nextKeeper(err error) bool {
	s := status.Convert(err)
	return s.Code() == codes.Unavailable ||
		(s.Code() == codes.FailedPrecondition && strings.Contains(s.Message(), notActiveKeeper))
}

// onKeeper calls op on the keepers, the active one first. When none is active (a standby refused, or a keeper
// was unreachable, at every one), it is a handover: the old keeper stepped down or died and a standby has not
// claimed yet, which takes up to the keepers' --takeover-timeout. op is tried on them all again, after a pause,
// until one answers or handoverWait has passed, as etcd holds a proposal through a leader election rather than
// failing it; then the last keeper's error is returned. A refusal means the keeper did nothing, so asking again is
// safe.
func onKeeper[T any](s *leaseServer, ctx context.Context, op func(pb.LeaseClient) (T, error)) (T, error) {
	var zero T
	n := len(s.keepers.backends)
	if n == 0 {
		return zero, errNoLeasekeeper
	}
	ctx = forwardedContext(ctx)
	var giveUp <-chan time.Time
	pause := handoverPauseFirst
	for {
		err := errNoLeasekeeper
		start := int(s.active.Load())
		for i := range n {
			k := (start + i) % n
			var resp T
			if resp, err = op(pb.NewLeaseClient(s.keepers.backends[k].conn)); err == nil {
				s.active.Store(int32(k))
				if r, ok := any(resp).(withHeader); ok {
					s.completeHeader(r.GetHeader())
				}
				return resp, nil
			}
			if !nextKeeper(err) || ctx.Err() != nil {
				return zero, err
			}
		}
		if giveUp == nil {
			timer := time.NewTimer(s.handoverWait)
			defer timer.Stop()
			giveUp = timer.C
		}
		select {
		case <-time.After(pause):
			pause = min(2*pause, handoverPauseMost)
		case <-giveUp:
			return zero, err
		case <-ctx.Done():
			return zero, err
		}
	}
}

// The pauses between rounds of a call waiting out a keeper handover: the first, doubling up to the longest.
const (
	handoverPauseFirst = 25 * time.Millisecond
	handoverPauseMost  = 200 * time.Millisecond
)

// LeaseGrant and LeaseRevoke carry the auth fence they were checked at (fencedLeaseContext), so storage refuses
// the keeper's entry if the auth store changed since.
func (s *leaseServer) LeaseGrant(ctx context.Context, r *pb.LeaseGrantRequest) (*pb.LeaseGrantResponse, error) {
	ctx = fencedLeaseContext(ctx)
	return onKeeper(s, ctx, func(c pb.LeaseClient) (*pb.LeaseGrantResponse, error) { return c.LeaseGrant(ctx, r) })
}

func (s *leaseServer) LeaseRevoke(ctx context.Context, r *pb.LeaseRevokeRequest) (*pb.LeaseRevokeResponse, error) {
	ctx = fencedLeaseContext(ctx)
	return onKeeper(s, ctx, func(c pb.LeaseClient) (*pb.LeaseRevokeResponse, error) { return c.LeaseRevoke(ctx, r) })
}

func (s *leaseServer) LeaseTimeToLive(ctx context.Context, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	return onKeeper(s, ctx, func(c pb.LeaseClient) (*pb.LeaseTimeToLiveResponse, error) { return c.LeaseTimeToLive(ctx, r) })
}

func (s *leaseServer) LeaseLeases(ctx context.Context, r *pb.LeaseLeasesRequest) (*pb.LeaseLeasesResponse, error) {
	return onKeeper(s, ctx, func(c pb.LeaseClient) (*pb.LeaseLeasesResponse, error) { return c.LeaseLeases(ctx, r) })
}

// LeaseKeepAlive relays the stream to the active keeper. When that keeper fails the client stream ends with
// codes.Unavailable; client/v3 opens a new one, which goes to the next keeper.
func (s *leaseServer) LeaseKeepAlive(stream pb.Lease_LeaseKeepAliveServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	upstream, err := onKeeper(s, ctx, func(c pb.LeaseClient) (pb.Lease_LeaseKeepAliveClient, error) {
		return c.LeaseKeepAlive(ctx)
	})
	if err != nil {
		return err
	}
	err = proxyStream("lease keep-alive", stream, upstream,
		func() any { return new(pb.LeaseKeepAliveRequest) }, func() any { return new(pb.LeaseKeepAliveResponse) },
		func(r any, send func(any) error) error {
			s.completeHeader(r.(*pb.LeaseKeepAliveResponse).GetHeader())
			return send(r)
		},
		s.auth.screenKeepAlive(stream.Context()))
	if err != nil && nextKeeper(err) {
		s.active.Store((s.active.Load() + 1) % int32(len(s.keepers.backends)))
		return errBackendLost("lease keep-alive", err)
	}
	return err
}
