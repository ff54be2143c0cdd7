package transport

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-kv/cairn/api/consensuspb"
	"github.com/cairn-kv/cairn/internal/framed"
	"github.com/cairn-kv/cairn/internal/rpctune"
)

// class is a kind of traffic with its own stream and queue.
type class int

const (
	classControl class = iota // heartbeats, votes, responses, read index
	classAppend               // MsgApp
	numClasses
)

func (c class) String() string {
	if c == classAppend {
		return "append"
	}
	return "control"
}

// peer sends to one remote member.
type peer struct {
	t       *Transport
	id      uint64
	target  string
	conn    *grpc.ClientConn
	client  consensuspb.PeerClient
	metrics *peerMetrics

	queues    [numClasses]chan outbound
	snapshots chan []byte

	// activeNanos is when the control stream last became healthy (unix nanoseconds), 0 when it is down.
	activeNanos atomic.Int64
	// rttNanos is how long the control link last took to open (connect, TLS, preamble): the prober's rtt.
	rttNanos atomic.Int64
	// lastErr is why the control link last failed (nil before any failure).
	lastErr atomic.Pointer[error]

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startPeer(t *Transport, id uint64, target string) (*peer, error) {
	opts := append([]grpc.DialOption{
		t.cfg.TLS.DialOption(),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff: backoff.Config{
				BaseDelay: t.cfg.MinBackoff, Multiplier: 1.6, Jitter: 0.2, MaxDelay: t.cfg.MaxBackoff,
			},
			MinConnectTimeout: time.Second,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxRecvMsgSize), grpc.MaxCallSendMsgSize(MaxRecvMsgSize)),
	}, append(rpctune.DialOptions(), t.cfg.DialOptions...)...)
	if t.cfg.Dialer != nil {
		opts = append(opts, grpc.WithContextDialer(t.cfg.Dialer))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("transport: dial peer %x at %s: %w", id, target, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &peer{
		t: t, id: id, target: target, conn: conn, client: consensuspb.NewPeerClient(conn), metrics: t.series.of(id),
		snapshots: make(chan []byte, 4), ctx: ctx, cancel: cancel,
	}
	for c := range p.queues {
		p.queues[c] = make(chan outbound, t.cfg.QueueSize)
		p.wg.Add(1)
		go p.streamLoop(class(c))
	}
	p.wg.Add(1)
	go p.snapshotLoop()
	p.wg.Go(p.probeLoop)
	return p, nil
}

// probeLoop reports the peer unhealthy every ProbeInterval while its control link is down, as etcd's
// rafthttp prober does, so an operator sees which peer this member cannot reach, not only raft's pre-votes.
func (p *peer) probeLoop() {
	ticker := time.NewTicker(p.t.cfg.ProbeInterval)
	defer ticker.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-ticker.C:
		}
		if p.activeNanos.Load() != 0 {
			continue
		}
		var err error
		if last := p.lastErr.Load(); last != nil {
			err = *last
		}
		p.t.cfg.Logger.Warn("prober detected unhealthy status", "peer", fmt.Sprintf("%x", p.id), "target", p.target,
			"rtt", time.Duration(p.rttNanos.Load()), "err", err)
	}
}

func (p *peer) stop() {
	p.cancel()
	p.wg.Wait()
	_ = p.conn.Close()
}

func (p *peer) activeSince() time.Time {
	if n := p.activeNanos.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// outbound is an encoded message waiting for its link: head, then entries (see encodeMessage); a snapshot's is
// the marshalled message, in head. It is as small as it can be: a queue holds thousands, allocated with the
// queue. An append without entries only moves the follower's commit index (commitOnly): it may wait up to
// Config.CommitHold for the next append to ride with, when the last two appends with entries went out within
// CommitHold of each other and of now (writes are flowing that fast).
type outbound struct {
	head    []byte
	entries *encodedEntries
}

func (o outbound) size() int {
	if o.entries == nil {
		return len(o.head)
	}
	return len(o.head) + o.entries.size
}

// commitOnly reports whether o, queued in class c, is an append without entries.
func (o outbound) commitOnly(c class) bool { return c == classAppend && o.entries == nil }

// enqueue queues an encoded message; false means the queue was full.
func (p *peer) enqueue(m *raftpb.Message, out outbound) bool {
	if m.GetType() == raftpb.MsgSnap {
		select {
		case p.snapshots <- out.head:
			return true
		default:
			return false
		}
	}
	c := classControl
	if m.GetType() == raftpb.MsgApp {
		c = classAppend
	}
	select {
	case p.queues[c] <- out:
		return true
	default:
		return false
	}
}

// streamLoop keeps one stream of class c open, whether or not there is traffic (so ActiveSince says
// whether the peer is reachable), and sends the queue's messages on it in batches.
func (p *peer) streamLoop(c class) {
	defer p.wg.Done()
	log := p.t.cfg.Logger.With("peer", fmt.Sprintf("%x", p.id), "stream", c.String())
	wait := p.t.cfg.MinBackoff
	for p.ctx.Err() == nil {
		sent, err := p.runStream(c)
		if p.ctx.Err() != nil {
			return
		}
		if sent {
			wait = p.t.cfg.MinBackoff
		}
		wait = p.failed(c, log, err, wait)
	}
}

// dial opens a messages link to the peer, through Config.Dialer when set, over TLS when Config.TLS is.
func (p *peer) dial() (*framed.Conn, error) {
	if p.t.cfg.Dialer == nil {
		return framed.Dial(p.target, MessagesPreamble, dialTimeout, p.t.cfg.TLS)
	}
	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
	defer cancel()
	nc, err := p.t.cfg.Dialer(ctx, p.target)
	if err != nil {
		return nil, err
	}
	if nc, err = p.t.cfg.TLS.Client(nc, p.target); err != nil {
		return nil, err
	}
	return framed.Open(nc, MessagesPreamble, dialTimeout)
}

// runStream opens one messages link and sends on it until it breaks; sent says whether anything went through
// (then the backoff starts over).
func (p *peer) runStream(c class) (sent bool, err error) {
	dialStart := time.Now()
	conn, err := p.dial()
	if err != nil {
		return false, status.Errorf(codes.Unavailable, "transport: dial peer %x at %s: %v", p.id, p.target, err)
	}
	defer conn.Close()
	if c == classControl {
		now := time.Now()
		p.rttNanos.Store(int64(now.Sub(dialStart)))
		p.activeNanos.Store(now.UnixNano())
	}
	// The receiver answers only when it refuses the sender, so a pending receive reports a broken link (and
	// why) even when nothing is being sent.
	ended := make(chan error, 1)
	go func() { ended <- linkEnd(conn) }()
	var msgs []outbound      // the batch being gathered
	var parts [][]byte       // the frame of a batch: its head, then each message's head and entries
	var batchHead []byte     // always far below framed's copy limit, so Send copies it and it can be reused
	held := time.NewTimer(0) // running while msgs holds only commit-only appends
	held.Stop()
	defer held.Stop()
	var heldC <-chan time.Time
	var lastEntries time.Time              // when an append with entries last went out
	entriesGap := time.Duration(1<<63 - 1) // and how long after the one before
	for {
		flush := false
		select {
		case first := <-p.queues[c]:
			var onlyCommits bool
			msgs, onlyCommits = p.drain(c, msgs, first)
			now := time.Now()
			switch {
			case !onlyCommits:
				flush, entriesGap, lastEntries = true, now.Sub(lastEntries), now
			case heldC != nil:
			case entriesGap > p.t.cfg.CommitHold || now.Sub(lastEntries) > p.t.cfg.CommitHold:
				flush = true // writes are not flowing that fast: the next append may be far off
			default:
				held.Reset(p.t.cfg.CommitHold)
				heldC = held.C
			}
		case <-heldC:
			flush = true
		case err := <-ended:
			return sent, err
		case <-p.ctx.Done():
			return sent, p.ctx.Err()
		}
		if !flush {
			continue
		}
		if heldC != nil {
			held.Stop()
			heldC = nil
		}
		batchHead = appendBatchHead(batchHead[:0], p.t.cfg.MemberID, p.t.clusterID())
		parts = append(parts[:0], batchHead)
		size := len(batchHead)
		for _, m := range msgs {
			parts = append(parts, m.head)
			if m.entries != nil {
				parts = append(parts, m.entries.parts...)
			}
			size += m.size()
		}
		err := conn.Send(nil, parts...)
		clear(msgs)
		clear(parts)
		msgs = msgs[:0]
		if err != nil {
			_ = conn.Close()
			return sent, <-ended // the receive says why the link ended
		}
		p.metrics.sentBytes.Add(float64(size))
		sent = true
	}
}

// linkEnd waits for a messages link to end and says why: the receiver's refusal, or the broken connection.
func linkEnd(conn *framed.Conn) error {
	frame, err := conn.Receive()
	if err != nil {
		return status.Errorf(codes.Unavailable, "transport: messages link broke: %v", err)
	}
	result := &consensuspb.MessagesResult{}
	if err := proto.Unmarshal(frame, result); err != nil || result.GetError() == nil {
		return status.Errorf(codes.Unavailable, "transport: messages link ended without a reason")
	}
	return status.ErrorProto(result.GetError())
}

// drain appends first and whatever else is queued to msgs, up to maxBatchBytes; onlyCommits says whether every
// message taken was a commit-only append.
func (p *peer) drain(c class, msgs []outbound, first outbound) (_ []outbound, onlyCommits bool) {
	onlyCommits = first.commitOnly(c)
	msgs = append(msgs, first)
	size := 0
	for _, m := range msgs {
		size += m.size()
	}
	for size < maxBatchBytes {
		select {
		case next := <-p.queues[c]:
			msgs = append(msgs, next)
			size += next.size()
			onlyCommits = onlyCommits && next.commitOnly(c)
		default:
			return msgs, onlyCommits
		}
	}
	return msgs, onlyCommits
}

// failed handles a broken or unopenable stream: it tells raft, drops the queued messages (raft resends what
// matters) and waits out the backoff. It returns the next backoff.
func (p *peer) failed(c class, log interface{ Debug(string, ...any) }, err error, wait time.Duration) time.Duration {
	if c == classControl {
		p.activeNanos.Store(0)
		p.lastErr.Store(&err)
	}
	if isRemoved(err) {
		p.t.cfg.Raft.ReportRemoved()
	}
	if p.ctx.Err() == nil {
		log.Debug("peer stream failed", "err", err, "retry-in", wait)
	}
	p.t.cfg.Raft.ReportUnreachable(p.id)
	dropped := 0
	for draining := true; draining; {
		select {
		case <-p.queues[c]:
			dropped++
		default:
			draining = false
		}
	}
	p.metrics.linkFailed(dropped)
	jittered := wait/2 + rand.N(wait/2+1)
	select {
	case <-time.After(jittered):
	case <-p.ctx.Done():
	}
	return min(2*wait, p.t.cfg.MaxBackoff)
}

// snapshotLoop sends each snapshot message as its own call and reports the outcome to raft.
func (p *peer) snapshotLoop() {
	defer p.wg.Done()
	for {
		var body []byte
		select {
		case body = <-p.snapshots:
		case <-p.ctx.Done():
			return
		}
		ctx, cancel := context.WithTimeout(p.ctx, p.t.cfg.SnapshotTimeout)
		_, err := p.client.Snapshot(ctx, &consensuspb.SnapshotMessage{
			From: p.t.cfg.MemberID, ClusterId: p.t.clusterID(), Message: body,
		})
		cancel()
		if err != nil {
			p.metrics.sentFailures.Inc()
			p.t.cfg.Logger.Warn("sending snapshot failed", "peer", fmt.Sprintf("%x", p.id), "err", err)
			if isRemoved(err) {
				p.t.cfg.Raft.ReportRemoved()
			}
			p.t.cfg.Raft.ReportSnapshot(p.id, raft.SnapshotFailure)
			p.t.cfg.Raft.ReportUnreachable(p.id)
			continue
		}
		p.metrics.sentBytes.Add(float64(len(body)))
		p.t.cfg.Raft.ReportSnapshot(p.id, raft.SnapshotFinish)
	}
}

func isRemoved(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.PermissionDenied && s.Message() == status.Convert(ErrRemoved).Message()
}
