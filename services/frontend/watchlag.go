package frontend

import (
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/internal/wiremsg"
)

// The lag bound through a relay. A hub cancels a watcher that falls more than --max-watch-lag behind, but it
// checks when it writes a response; through a frontend, a response then waits in the relay's buffers (the
// hub's write quota and the relay's window, 64 KiB each per stream), which drain at the frontend's pace. When
// the frontend is the bottleneck that added seconds past the bound. So a
// hub stamps each event response of a relayed stream with when its watcher's lag started (wiremsg stamps, on
// the hub's monotonic clock) and says its bound, and the relay checks each response again just before it
// sends it to the client: one past the bound is not sent, and its watch is canceled here as the hub would
// have canceled it (wiremsg.LagCancelReason); the relay asks the hub to cancel it too, and drops what the hub
// still sends for it up to and including the hub's "canceled" that removes it (the answer to the cancel, or the
// hub's own cancel for lag; one for compaction leaves the watch registered, and the answer still comes). The
// client sees one cancel, as from the hub.
//
// What the relay has sent then waits in the frontend's own write quota toward the client (64 KiB per stream)
// until gRPC's writer writes it, which takes as long as the client stream drains that much: seconds, when the
// frontend is the bottleneck. So while frames it relayed are still unwritten, the relay checks a response's lag
// plus that wait, as measured for its last frame written (from the end of its relay to gRPC's freeing its last
// response, wiremsg.Lender.SplitHeldBatch's written), against the bound: a response that would be written past it is
// not sent. With nothing unwritten the new response waits behind nothing, however long the last one waited (a
// client that paused and caught up). What waits after the write, in the client's flow-control window, is the
// client's own pace, as straight from a hub.
//
// The two clocks are compared without being synchronized: the relay's clock minus a stamp is the hub clock's
// offset plus the response's age, and the smallest such difference seen over the last minutes is taken as the
// offset (the quickest delivery, at or near no lag). So a response's lag is measured from that quickest
// delivery, the clocks' epochs and wall time do not matter, and an estimate made while every delivery was late
// errs towards sending, as a relay without stamps does.

// lagOffsetWindow is how long an observed offset counts: the estimate is the smallest of the last one or two
// windows, so it follows a drift of the clocks' rates.
const lagOffsetWindow = 5 * time.Minute

// relayLag holds a hub's lag bound on one relayed stream. The relay goroutine owns it.
type relayLag struct {
	bound  time.Duration
	reason string
	// clock reads the relay's clock (monotonic).
	clock func() time.Duration
	// offset is the smallest (relay clock when the frame was received - stamp) of the current window (cur)
	// and the one before (prev); the window ends at until.
	cur, prev int64
	until     time.Duration
	// frameLag is the largest lag of the responses sent from the frame being relayed (observed per frame), if
	// frameSent.
	frameLag  time.Duration
	frameSent bool
	// writeWait is how long the last frame written waited, from the end of its relay until gRPC had written
	// all of it (nanoseconds; set on gRPC's writer); unwritten counts the frames relayed and not yet written.
	writeWait atomic.Int64
	unwritten atomic.Int64
	// dropping are the watches canceled here that the hub has not yet said it removed.
	dropping map[int64]struct{}
	upstream *upstreamSends
	server   *watchServer
}

func newRelayLag(s *watchServer, bound time.Duration, upstream *upstreamSends) *relayLag {
	epoch := time.Now()
	return &relayLag{bound: bound, reason: wiremsg.LagCancelReason(bound), clock: func() time.Duration { return time.Since(epoch) },
		cur: math.MaxInt64, prev: math.MaxInt64, upstream: upstream, server: s}
}

// observe counts a response stamped stamp in a frame received at receivedAt in the offset estimate.
func (l *relayLag) observe(stamp uint64, receivedAt time.Duration) {
	if receivedAt >= l.until {
		l.prev = l.cur
		if receivedAt >= l.until+lagOffsetWindow { // a whole window without a stamp
			l.prev = math.MaxInt64
		}
		l.cur, l.until = math.MaxInt64, receivedAt+lagOffsetWindow
	}
	l.cur = min(l.cur, int64(receivedAt)-int64(stamp))
}

// lagOf is the lag at which a response stamped stamp and sent now would be written to the client: its lag
// now plus, while frames are unwritten, the last frame's write wait. observe has counted it.
func (l *relayLag) lagOf(stamp uint64) time.Duration {
	lag := int64(l.clock()) - int64(stamp) - min(l.cur, l.prev)
	if l.unwritten.Load() > 0 {
		lag += l.writeWait.Load()
	}
	return time.Duration(lag)
}

// relayedFrame is a frame between the end of its relay and its last response written.
type relayedFrame struct {
	relayedAt atomic.Int64 // the relay's clock when it had sent all of the frame; 0 before
}

// frameWritten records the write wait of a frame gRPC has written all of; a frame written before its relay
// ended waited for nothing.
func (l *relayLag) frameWritten(f *relayedFrame) {
	wait := int64(0)
	if at := f.relayedAt.Load(); at != 0 {
		wait = max(int64(l.clock())-at, 0)
	}
	l.writeWait.Store(wait)
	l.unwritten.Add(-1)
}

// relay sends the client msg, stamped stamp, from a frame received at receivedAt, unless its watch is
// canceled here or it is past the bound; it consumes msg's reference.
func (l *relayLag) relay(r *watchRelay, msg mem.Buffer, stamp uint64, receivedAt time.Duration, send func(any) error) error {
	if len(l.dropping) > 0 {
		if f := readWatchFields(msg.ReadOnlyData()); l.isDropping(f.id) {
			if f.removed {
				delete(l.dropping, f.id)
			}
			msg.Free()
			return nil
		}
	}
	if stamp != 0 {
		l.observe(stamp, receivedAt)
		lag := l.lagOf(stamp)
		if lag > l.bound {
			return l.cancelWatch(msg, send)
		}
		l.frameLag, l.frameSent = max(l.frameLag, lag), true
	}
	return r.relayOne(msg, send)
}

func (l *relayLag) isDropping(id int64) bool {
	_, ok := l.dropping[id]
	return ok
}

// cancelWatch cancels the watch of a late response: the client gets a cancel with the reason and the
// response's header, the hub a cancel request, and the watch's responses are dropped from now on.
func (l *relayLag) cancelWatch(late mem.Buffer, send func(any) error) error {
	f := readWatchFields(late.ReadOnlyData())
	header := new(pb.ResponseHeader)
	err := proto.Unmarshal(f.header, header) // only the header: a late response may carry 1000 revisions
	late.Free()
	if err != nil {
		return status.Errorf(codes.Internal, "cairn frontend: watch relay: response header: %v", err)
	}
	if l.dropping == nil {
		l.dropping = map[int64]struct{}{}
	}
	l.dropping[f.id] = struct{}{}
	l.upstream.cancel(f.id)
	l.server.lagCanceled(l.bound)
	return send(&pb.WatchResponse{Header: header, WatchId: f.id, Canceled: true, CancelReason: l.reason})
}

// watchFields are the fields of a WatchResponse the relay reads: its header (encoded), watch ID, and
// whether it says the hub removed the watch: canceled, and not for compaction (a hub keeps a watch it
// canceled for compaction until the client cancels it).
type watchFields struct {
	header  []byte
	id      int64
	removed bool
}

// readWatchFields reads them from a WatchResponse's encoding without decoding the rest (events are skipped
// whole); a malformed response reads as far as it is whole.
func readWatchFields(data []byte) watchFields {
	var f watchFields
	var canceled, compacted bool
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			break
		}
		data = data[n:]
		switch {
		case num == 1 && typ == protowire.BytesType: // header
			v, m := protowire.ConsumeBytes(data)
			if m < 0 {
				return f
			}
			f.header, data = v, data[m:]
			continue
		case typ != protowire.VarintType || num != 2 && num != 4 && num != 5: // watch_id, canceled, compact_revision
			m := protowire.ConsumeFieldValue(num, typ, data)
			if m < 0 {
				return f
			}
			data = data[m:]
			continue
		}
		v, m := protowire.ConsumeVarint(data)
		if m < 0 {
			break
		}
		data = data[m:]
		switch num {
		case 2:
			f.id = int64(v)
		case 4:
			canceled = v != 0
		case 5:
			compacted = v != 0
		}
	}
	f.removed = canceled && !compacted
	return f
}

// upstreamSends makes the sends on a relayed stream's upstream safe from two goroutines (gRPC's are not):
// proxyStream's, which forwards the client's requests, and the relay's cancel requests for the watches it
// canceled and acknowledgments of the batches written (wiremsg.RelayAck). The relay queues them without
// waiting (the hub's stream may be waiting on the relay, and the hub on its flow control; an acknowledgment is
// queued from gRPC's writer), and a goroutine of its own sends them; any client request goes after the cancels
// queued before it, so a client that re-creates a watch ID the relay canceled reaches the hub after the cancel.
// Acknowledgments are counts: only the latest queued is sent.
type upstreamSends struct {
	grpc.ClientStream
	sending sync.Mutex // held for each send
	mu      sync.Mutex // cancels, acks and flushing
	cancels []int64
	// ackTo is the latest acknowledgment queued, ackSent the latest sent; none is queued once the send side
	// is closed (the hub then expects none).
	ackTo, ackSent uint64
	sendClosed     bool
	// flushing: a goroutine is on its way to send what is queued.
	flushing bool
}

func (u *upstreamSends) SendMsg(m any) error {
	u.sending.Lock()
	defer u.sending.Unlock()
	if err := u.sendQueued(); err != nil {
		return err
	}
	return u.ClientStream.SendMsg(m)
}

func (u *upstreamSends) CloseSend() error {
	u.sending.Lock()
	defer u.sending.Unlock()
	u.mu.Lock()
	u.sendClosed = true
	u.mu.Unlock()
	_ = u.sendQueued() // the stream's error, if any, comes from its Recv
	return u.ClientStream.CloseSend()
}

// cancel queues a cancel request for watch id, and sees that it is sent.
func (u *upstreamSends) cancel(id int64) {
	u.mu.Lock()
	u.cancels = append(u.cancels, id)
	u.flushLocked()
}

// ack queues an acknowledgment of the first n batches, and sees that it is sent; it never waits for a send.
func (u *upstreamSends) ack(n uint64) {
	u.mu.Lock()
	if u.sendClosed {
		u.mu.Unlock()
		return
	}
	u.ackTo = max(u.ackTo, n)
	u.flushLocked()
}

// flushLocked starts a goroutine to send what is queued unless one is on its way; it unlocks u.mu.
func (u *upstreamSends) flushLocked() {
	start := !u.flushing
	u.flushing = true
	u.mu.Unlock()
	if start {
		go func() {
			u.sending.Lock()
			defer u.sending.Unlock()
			_ = u.sendQueued() // an error ends the stream, and the relay with it
		}()
	}
}

// sendQueued sends what is queued: the cancel requests, in order, and the latest acknowledgment; u.sending
// is held.
func (u *upstreamSends) sendQueued() error {
	for {
		u.mu.Lock()
		ids := u.cancels
		u.cancels = nil
		ack := u.ackTo
		sendAck := ack != u.ackSent
		if len(ids) == 0 && !sendAck {
			u.flushing = false
			u.mu.Unlock()
			return nil
		}
		u.ackSent = ack
		u.mu.Unlock()
		for _, id := range ids {
			if err := u.ClientStream.SendMsg(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{
				CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}); err != nil {
				return err
			}
		}
		if sendAck {
			if err := u.ClientStream.SendMsg(wiremsg.RelayAck(ack)); err != nil {
				return err
			}
		}
	}
}

// lagWarnings logs the watches a frontend cancels for lag, at most once a second.
type lagWarnings struct {
	logger *slog.Logger
	last   atomic.Int64 // unix nanoseconds of the last warning
	count  atomic.Int64 // canceled since
}

func (w *lagWarnings) canceled(bound time.Duration) {
	w.count.Add(1)
	now, last := time.Now().UnixNano(), w.last.Load()
	if now-last < int64(time.Second) || !w.last.CompareAndSwap(last, now) {
		return
	}
	w.logger.Warn("relayed watchers canceled: more than --max-watch-lag behind the head when relayed",
		"watchers", w.count.Swap(0), "max_watch_lag", bound)
}

// frameRelayed marks the end of a frame's relay, and observes the largest lag of the responses it sent, if any.
func (l *relayLag) frameRelayed(f *relayedFrame) {
	l.unwritten.Add(1) // written may have come first: the count is right once both have
	f.relayedAt.Store(max(int64(l.clock()), 1))
	if l.frameSent {
		l.server.relayLag.Observe(l.frameLag.Seconds())
		l.frameLag, l.frameSent = 0, false
	}
}

// lagCanceled counts a watch the relay canceled for lag.
func (s *watchServer) lagCanceled(bound time.Duration) {
	s.canceledForLag.Inc()
	s.lagWarnings.canceled(bound)
}
